// Safe file operations for everything hcr writes and reads back (cost and link models, program
// caches, traces, plots): a directory is checked before its files are trusted, a file is replaced
// whole and atomically, and a read refuses what is not a regular file and caps the size.
//
// The rules (backed by tests/core/safe_file_test.cpp):
// - A trusted directory: every directory on its path, and every symbolic link followed to reach
//   it, is owned by the effective user or by root; every directory above it is writable by
//   nobody else (group/others), or sticky (as /tmp: others cannot replace our entries there); the
//   directory itself is writable by nobody else, sticky or not. Each component is opened with
//   openat(O_DIRECTORY | O_NOFOLLOW) from its checked parent, so a directory cannot be swapped for
//   a link between the check and the use. Missing components are created 0700 when asked.
// - An entry of a trusted directory is read only if it is a regular file (checked with lstat
//   before opening: a FIFO or a device is never opened), owned by the user or root, not writable
//   by group or others, and no larger than the caller's cap.
// - A write goes to a fresh temporary name (O_CREAT | O_EXCL | O_NOFOLLOW: a link planted there
//   is never followed) in the same directory, is fsynced and closed with every error checked, then
//   renamed over the file and the directory fsynced. On any error the temporary goes and the old
//   file stays as it was.
//
// Thread safety: a TrustedDir may be used from several threads at once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hcr::files {

/// A file operation that failed or was refused. The message names the path and says why (the
/// system's reason where there is one).
class FileError : public std::runtime_error {
 public:
  FileError(const std::string& what, int error) : std::runtime_error(what), error_(error) {}
  /// The errno value behind it; 0 for a refusal of hcr's own (an untrusted owner or mode, not a
  /// regular file, too large).
  int error() const noexcept { return error_; }

 private:
  int error_;
};

/// A file descriptor, closed with its owner.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

/// An exclusive advisory lock (flock) on a lock file, held while this object lives. Locks of one
/// file exclude each other across processes and within one (each holds its own open file).
class Lock {
 public:
  Lock() = default;
  explicit Lock(Fd fd) noexcept : fd_(std::move(fd)) {}
  bool held() const noexcept { return static_cast<bool>(fd_); }

 private:
  Fd fd_;
};

/// A directory whose files hcr may trust (the rules above), held open: its files are reached
/// through the descriptor, never through its path again.
class TrustedDir {
 public:
  /// Opens `dir` (absolute) after checking it; nullopt when it or a directory above it does not
  /// exist. Throws FileError naming the component at fault and why it is not trusted.
  static std::optional<TrustedDir> open(const std::filesystem::path& dir);
  /// The same, creating missing directories (mode 0700) on the way.
  static TrustedDir make(const std::filesystem::path& dir);

  const std::filesystem::path& path() const noexcept { return path_; }
  int fd() const noexcept { return fd_.get(); }
  /// The path of an entry, for messages.
  std::filesystem::path file(std::string_view name) const { return path_ / name; }

  /// The whole of entry `name`; nullopt when there is none. Throws FileError when it is a link,
  /// not a regular file, not owned by the user or root, writable by group or others, larger than
  /// `max_bytes`, or unreadable.
  std::optional<std::string> read(std::string_view name, size_t max_bytes) const;
  /// Replaces entry `name` with `data` atomically (readers see the old file or the whole new
  /// one). Throws FileError naming the file and the failing step; the old file is then intact.
  void write(std::string_view name, std::string_view data, mode_t mode = 0600) const;
  /// Removes entry `name` (not a directory); false when there was none or it could not go.
  bool remove(std::string_view name) const noexcept;
  /// The names of its entries, sorted (without "." and "..").
  std::vector<std::string> list() const;
  /// Takes an exclusive lock on entry `name` (created 0600 if missing), waiting up to `wait` for
  /// another holder. Throws FileError when it is not a regular file of ours, or still held.
  Lock lock(std::string_view name, std::chrono::milliseconds wait) const;

 private:
  TrustedDir(Fd fd, std::filesystem::path path) : fd_(std::move(fd)), path_(std::move(path)) {}
  static std::optional<TrustedDir> walk(const std::filesystem::path& dir, bool create);
  Fd fd_;
  std::filesystem::path path_;
};

/// Replaces the file at `path`, a path the user named (a trace, a plot), with `data` atomically,
/// through a temporary in the same directory as TrustedDir::write does (the directory itself is
/// not checked: the user chose it). A symbolic link, a directory or another non-regular file at
/// `path` is refused (a link planted there is never followed). Throws FileError.
void write_file(const std::filesystem::path& path, std::string_view data);

/// The whole of the regular file at `path`, a path the user named (symbolic links followed).
/// Anything else (a FIFO, a device, a directory) is refused without being opened for reading, as
/// is a file larger than `max_bytes`. Throws FileError.
std::string read_file(const std::filesystem::path& path, size_t max_bytes);

}  // namespace hcr::files
