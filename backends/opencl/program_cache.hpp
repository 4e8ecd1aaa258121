// The on-disk cache of compiled OpenCL programs: one file per key (a SHA-256 over the source,
// build options, device and driver), holding the driver's program binary (CL_PROGRAM_BINARIES)
// behind a header with the key and a checksum. Files are written to a temporary name and renamed,
// so a reader never sees half a file, and two processes storing the same key both succeed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace hcr::opencl {

/// `$XDG_CACHE_HOME/hcr/opencl`, else `$HOME/.cache/hcr/opencl`; empty when neither is set.
std::filesystem::path default_cache_dir();

class ProgramCache {
 public:
  /// An empty `dir` disables the cache (loads miss, stores do nothing).
  explicit ProgramCache(std::filesystem::path dir = {}) : dir_(std::move(dir)) {}

  bool enabled() const noexcept { return !dir_.empty(); }
  const std::filesystem::path& dir() const noexcept { return dir_; }
  /// The file that holds `key` (64 hex digits).
  std::filesystem::path file(const std::string& key) const;

  enum class Status { missing, hit, corrupt };
  struct Entry {
    Status status = Status::missing;
    std::vector<unsigned char> binary;  // for hit
    std::string why;                    // for corrupt: what was wrong with the file
  };
  /// Reads the entry for `key`. Never throws: an unreadable or damaged file is `corrupt`.
  Entry load(const std::string& key) const noexcept;
  /// Stores `binary` under `key` atomically. Returns an empty string, or why it failed.
  std::string store(const std::string& key, const std::vector<unsigned char>& binary) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace hcr::opencl
