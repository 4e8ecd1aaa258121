// Programs for the OpenCL devices: OpenCL C built once per device and build options (in memory, and
// on disk through the ProgramCache), and prebuilt binaries loaded, FPGA bitstreams or offline
// builds. What a kernel is made from (opencl_kernels.hpp).
#pragma once

#include "cl_handle.hpp"
#include "opencl_device.hpp"
#include "program_cache.hpp"

#include <hcr/sdk/backend.hpp>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>

namespace hcr::opencl {

/// Source programs are built with -cl-kernel-arg-info: `options` with it added where missing.
std::string with_arg_info(std::string options);

/// The programs of every device and the on-disk cache of their binaries. Thread-safe: a device's
/// builds are serialized by its build_mutex, different devices build at once.
class Programs {
 public:
  /// A cache in `cache_dir` (empty: none). A directory that cannot be trusted disables it, with a
  /// warning through `host`.
  Programs(const std::filesystem::path& cache_dir, const sdk::Host& host);
  /// Says (debug) how many programs came from the cache and how many were built.
  ~Programs();
  Programs(const Programs&) = delete;
  Programs& operator=(const Programs&) = delete;

  /// `source` built for `d` (of platform `p`) with `options`: the device's build of the same key if
  /// there is one, else the cached binary, else a build from source (then cached). Throws
  /// HCR_ERROR_BACKEND with the compiler's log; `what` names the kernel in messages.
  Program from_source(Device& d, const Platform& p, const std::string& source,
                      const std::string& options, const std::string& what);
  /// The program binary at `path` (a regular file of at most the cache's largest entry) built for
  /// `d` with `options`, once per device, path and options. Throws HCR_ERROR_BACKEND naming the
  /// file when it is unreadable, empty or not a binary for the device.
  Program from_binary(Device& d, const std::filesystem::path& path, const std::string& options,
                      const std::string& what);

 private:
  sdk::Host host_;
  ProgramCache cache_;
  std::atomic<uint64_t> cache_hits_{0}, cache_misses_{0};
};

}  // namespace hcr::opencl
