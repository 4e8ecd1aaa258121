// CUDA C++ source kernels: compiled with NVRTC for one device architecture, kept in memory for the
// plugin's life and on disk across runs.
#pragma once

#include <hcr/sdk/backend.hpp>

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace hcr::cuda {

/// A compiled program: a cubin (or PTX, when NVRTC does not know the device's architecture and
/// the driver must finish the job) and the lowered name of its entry.
struct CompiledProgram {
  std::string image;    ///< cubin bytes, or NUL-terminated PTX text
  std::string lowered;  ///< the entry's symbol name (mangled unless declared extern "C")
  std::string target;   ///< "sm_90", or "compute_90" for PTX
  std::string origin;   ///< "compiled", "memory" or the cache file it was read from
};

/// Thread-safe. The disk cache is keyed by a hash of the source, the build options, the entry, the
/// target architecture and the NVRTC version; the file repeats the whole key and is used only if it
/// matches byte for byte, so a hash collision or a truncated file is a miss, never a wrong kernel.
/// Files are written to a temporary name and renamed, so concurrent processes never read half a file.
class NvrtcCache {
 public:
  /// `dir` empty: no disk cache. `host` must outlive the cache (it logs through it).
  NvrtcCache(std::filesystem::path dir, const sdk::Host& host);

  /// The program for `source` on a device of compute capability major.minor. Throws sdk::Error:
  /// BACKEND with the NVRTC log when the source does not compile, UNSUPPORTED when NVRTC is
  /// missing or knows no architecture the device can run.
  std::shared_ptr<const CompiledProgram> get(const std::string& kernel_name,
                                             const std::string& source,
                                             const std::string& build_options,
                                             const std::string& entry, int cc_major, int cc_minor);

  const std::filesystem::path& dir() const noexcept { return dir_; }

  /// The file a program with this key is cached in (for tests and diagnostics).
  static std::string key_hash(const std::string& key);

 private:
  std::shared_ptr<const CompiledProgram> read_file(const std::filesystem::path& file,
                                                   const std::string& key) const;
  void write_file(const std::filesystem::path& file, const std::string& key,
                  const CompiledProgram& p) const;
  bool usable_dir(const std::filesystem::path& d) const;

  std::filesystem::path dir_;
  const sdk::Host& host_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::pair<std::string, std::shared_ptr<const CompiledProgram>>>
      memory_;  // hash -> (key, program)
};

/// Splits build options at blanks; double quotes group ("-DNAME=\"a b\"" stays one option).
std::vector<std::string> split_options(const std::string& text);

}  // namespace hcr::cuda
