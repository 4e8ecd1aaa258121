// The on-disk cache of compiled OpenCL programs: one file per key (a SHA-256 over the source,
// build options, device and driver), holding the driver's program binary (CL_PROGRAM_BINARIES)
// behind a header with the key and a checksum. Files are written to a unique temporary name and
// renamed (hcr::files), so a reader never sees half a file, and two processes storing the same key
// both succeed. Its binaries are run: the directory must be trusted (owned by the user or root,
// writable by nobody else, nor any directory above it unless sticky), and an entry is used only
// if it is a regular file of the user or root that nobody else may write
// (support/files/safe_file.hpp).
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
  /// Why the directory cannot hold the cache; empty when it can, or does not exist yet (it is
  /// created, mode 0700, with the first entry).
  std::string check() const;
  const std::filesystem::path& dir() const noexcept { return dir_; }
  /// The file that holds `key` (64 hex digits).
  std::filesystem::path file(const std::string& key) const;

  /// `refused`: the entry (or the directory) cannot be trusted, or is not a regular file.
  enum class Status { missing, hit, corrupt, refused };
  struct Entry {
    Status status = Status::missing;
    std::vector<unsigned char> binary;  // for hit
    std::string why;                    // for corrupt and refused: what was wrong with it
  };
  /// The largest entry read (a program binary; FPGA images run to hundreds of MiB).
  static constexpr size_t kMaxEntryBytes = size_t{1} << 30;
  /// Reads the entry for `key`. Never throws: a damaged file is `corrupt`, one that cannot be
  /// trusted or read `refused`.
  Entry load(const std::string& key) const noexcept;
  /// Stores `binary` under `key` atomically. Returns an empty string, or why it failed.
  std::string store(const std::string& key, const std::vector<unsigned char>& binary) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace hcr::opencl
