// CUDA C++ source kernels: compiled with NVRTC for one device architecture, kept in memory for the
// plugin's life and on disk across runs.
#pragma once

#include "safe_file.hpp"

#include <hcr/sdk/backend.hpp>

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
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
/// Files are written to a unique temporary name and renamed (hcr::files), so concurrent processes
/// never read half a file. The directory (and each architecture's below it) must be trusted: owned
/// by the user or root, writable by nobody else, nor any directory above it unless sticky; an
/// entry is used only if it is a regular file of the user or root that nobody else may write
/// (support/files/safe_file.hpp). Otherwise kernels are compiled each run, with a warning.
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
  /// The largest cache file read (a cubin of a big kernel is a few MiB).
  static constexpr size_t kMaxEntryBytes = size_t{256} << 20;

  std::optional<files::TrustedDir> open_dir(const std::filesystem::path& d, bool create) const;
  std::shared_ptr<const CompiledProgram> read_file(const files::TrustedDir& dir,
                                                   const std::string& name,
                                                   const std::string& key) const;
  void write_file(const std::filesystem::path& d, const std::string& name, const std::string& key,
                  const CompiledProgram& p) const;

  std::filesystem::path dir_;
  const sdk::Host& host_;
  mutable std::mutex mutex_;
  mutable std::set<std::string> refused_;  // directory warnings given (mutex_)
  std::unordered_map<std::string, std::pair<std::string, std::shared_ptr<const CompiledProgram>>>
      memory_;  // hash -> (key, program)
};

/// Splits build options at blanks; double quotes group ("-DNAME=\"a b\"" stays one option).
std::vector<std::string> split_options(const std::string& text);

}  // namespace hcr::cuda
