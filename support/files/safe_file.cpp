// Directory trust checks, atomic whole-file writes, capped reads of regular files and advisory
// locks over POSIX *at() calls (see safe_file.hpp for the rules).
#include "safe_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <system_error>
#include <thread>

namespace hcr::files {

namespace fs = std::filesystem;

namespace {

constexpr int kMaxLinks = 40;  // links followed on one path, as the kernel's own limit

std::string reason(int e) { return std::generic_category().message(e); }

[[noreturn]] void fail(const fs::path& path, const std::string& what, int e) {
  throw FileError(path.string() + ": " + what + (e != 0 ? ": " + reason(e) : std::string()), e);
}

bool trusted_owner(uid_t uid) { return uid == ::geteuid() || uid == 0; }

std::string octal(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// Owned by the user or root: another user could have put anything there.
void check_owner(const struct stat& st, const fs::path& path) {
  if (!trusted_owner(st.st_uid))
    fail(path,
         "owned by uid " + std::to_string(st.st_uid) + ", neither this user (uid " +
             std::to_string(::geteuid()) + ") nor root",
         0);
}

// A directory on the way to a trusted one: another user able to write into it could replace
// the next component, unless it is sticky (entries then go only by their owner's hand).
void check_parent(const struct stat& st, const fs::path& path) {
  check_owner(st, path);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
    fail(path, "writable by its group or others (mode " + octal(st.st_mode) + ")", 0);
}

// The trusted directory itself, or an entry read from it: nobody else may write it.
void check_private(const struct stat& st, const fs::path& path) {
  check_owner(st, path);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    fail(path, "writable by its group or others (mode " + octal(st.st_mode) + ")", 0);
}

struct stat fstat_or_fail(int fd, const fs::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, "cannot stat", errno);
  return st;
}

// A name within a directory: one component.
void check_name(std::string_view name, const fs::path& dir) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos)
    fail(dir, std::string("'").append(name).append("' is not a file name"), 0);
}

// Reads an open regular file of `st` whole, refusing more than `max_bytes` (the file may grow
// while it is read).
std::string read_all(int fd, const struct stat& st, size_t max_bytes, const fs::path& path) {
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    fail(path,
         std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
             " allowed",
         0);
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "cannot read", errno);
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes)
      fail(path, "more than the " + std::to_string(max_bytes) + " bytes allowed", 0);
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

void write_all(int fd, std::string_view data, const fs::path& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "cannot write", errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// Replaces `name` in the directory `dir_fd` (at `dir` for messages) by way of a temporary of a
// name no other writer uses: this process's id and a counter within it (O_EXCL: a leftover of
// a crashed process of the same id is skipped, a planted link never followed).
void replace(int dir_fd, const fs::path& dir, std::string_view name, std::string_view data,
             mode_t mode) {
  static std::atomic<uint64_t> counter{0};
  const fs::path target = dir / name;
  std::string tmp;
  Fd fd;
  for (int attempt = 0; !fd; ++attempt) {
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%llu", static_cast<long>(::getpid()),
                  static_cast<unsigned long long>(counter.fetch_add(1, std::memory_order_relaxed)));
    tmp = name;
    tmp.insert(tmp.begin(), '.');
    tmp += suffix;
    fd = Fd(
        ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!fd && (errno != EEXIST || attempt >= 100))
      fail(dir / tmp, "cannot create a temporary for " + target.string(), errno);
  }
  try {
    write_all(fd.get(), data, dir / tmp);
    // Flushed and closed before the rename: an error of a full disk or a failing server shows
    // here (or at close), not after the old file is gone.
    if (::fsync(fd.get()) != 0) fail(dir / tmp, "cannot write (fsync)", errno);
    if (::close(fd.release()) != 0) fail(dir / tmp, "cannot write (close)", errno);
    if (::renameat(dir_fd, tmp.c_str(), dir_fd, std::string(name).c_str()) != 0)
      fail(target, "cannot rename " + tmp + " to it", errno);
  } catch (...) {
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    throw;
  }
  // The rename itself reaches the disk with the directory.
  if (::fsync(dir_fd) != 0 && errno != EINVAL)
    fail(target, "written, but its directory could not be synced", errno);
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<TrustedDir> TrustedDir::open(const fs::path& dir) { return walk(dir, false); }

TrustedDir TrustedDir::make(const fs::path& dir) { return *walk(dir, true); }

std::optional<TrustedDir> TrustedDir::walk(const fs::path& dir, bool create) {
  if (!dir.is_absolute()) fail(dir, "not an absolute path", 0);
  std::deque<std::string> todo;
  for (const fs::path& part : dir.relative_path()) todo.push_back(part.string());
  // The directories resolved so far, from "/": symlink-free, so that ".." is their parent.
  std::vector<Fd> stack;
  fs::path at = "/";
  stack.emplace_back(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!stack.back()) fail(at, "cannot open", errno);
  int links = 0;
  while (!todo.empty()) {
    const std::string name = std::move(todo.front());
    todo.pop_front();
    if (name.empty() || name == ".") continue;
    if (name == "..") {
      if (stack.size() > 1) {
        stack.pop_back();
        at = at.parent_path();
      }
      continue;
    }
    const int parent = stack.back().get();
    // Its entries are about to be trusted: nobody else may be able to swap them.
    check_parent(fstat_or_fail(parent, at), at);
    const fs::path next = at / name;
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    Fd fd(::openat(parent, name.c_str(), flags));
    if (!fd && errno == ENOENT) {
      if (!create) return std::nullopt;
      if (::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST)
        fail(next, "cannot create the directory", errno);
      fd = Fd(::openat(parent, name.c_str(), flags));
    }
    if (!fd) {
      const int e = errno;
      struct stat st {};
      if ((e == ELOOP || e == ENOTDIR) &&
          ::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
        // A link is followed only if the user or root made it; its target is walked the same way.
        check_owner(st, next);
        if (++links > kMaxLinks) fail(dir, "cannot open", ELOOP);
        std::string target(static_cast<size_t>(std::max<off_t>(st.st_size, 0)) + 1, '\0');
        const ssize_t n = ::readlinkat(parent, name.c_str(), target.data(), target.size());
        if (n < 0) fail(next, "cannot read the link", errno);
        if (static_cast<size_t>(n) >= target.size()) fail(next, "the link changed", 0);
        target.resize(static_cast<size_t>(n));
        const fs::path t(target);
        std::vector<std::string> parts;
        for (const fs::path& part : t.relative_path()) parts.push_back(part.string());
        todo.insert(todo.begin(), parts.begin(), parts.end());
        if (t.is_absolute()) {
          stack.resize(1);
          at = "/";
        }
        continue;
      }
      if (e == ENOTDIR) fail(next, "not a directory", 0);
      fail(next, "cannot open", e);
    }
    stack.push_back(std::move(fd));
    at = next;
  }
  check_private(fstat_or_fail(stack.back().get(), at), at);
  return TrustedDir(std::move(stack.back()), dir.lexically_normal());
}

std::optional<std::string> TrustedDir::read(std::string_view name, size_t max_bytes) const {
  check_name(name, path_);
  const std::string n(name);
  const fs::path path = file(name);
  // Looked at before it is opened: a FIFO would block the open, a device could act on it.
  struct stat st {};
  if (::fstatat(fd_.get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return std::nullopt;
    fail(path, "cannot stat", errno);
  }
  if (!S_ISREG(st.st_mode)) fail(path, kind_of(st.st_mode) + ", not a regular file: refused", 0);
  check_private(st, path);
  Fd fd(::openat(fd_.get(), n.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return std::nullopt;
    fail(path, "cannot open", errno);
  }
  // What was opened is what was looked at (not swapped in between).
  const struct stat now = fstat_or_fail(fd.get(), path);
  if (!S_ISREG(now.st_mode) || now.st_ino != st.st_ino || now.st_dev != st.st_dev)
    fail(path, "replaced while being opened: refused", 0);
  check_private(now, path);
  return read_all(fd.get(), now, max_bytes, path);
}

void TrustedDir::write(std::string_view name, std::string_view data, mode_t mode) const {
  check_name(name, path_);
  replace(fd_.get(), path_, name, data, mode);
}

bool TrustedDir::remove(std::string_view name) const noexcept {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos)
    return false;
  return ::unlinkat(fd_.get(), std::string(name).c_str(), 0) == 0;
}

std::vector<std::string> TrustedDir::list() const {
  // fdopendir takes the descriptor it is given: a duplicate, read from the start.
  Fd dup(::openat(fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dup) fail(path_, "cannot list", errno);
  DIR* d = ::fdopendir(dup.get());
  if (d == nullptr) fail(path_, "cannot list", errno);
  dup.release();
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  const int e = errno;
  ::closedir(d);
  if (e != 0) fail(path_, "cannot list", e);
  std::sort(names.begin(), names.end());
  return names;
}

Lock TrustedDir::lock(std::string_view name, std::chrono::milliseconds wait) const {
  check_name(name, path_);
  const fs::path path = file(name);
  Fd fd(::openat(fd_.get(), std::string(name).c_str(),
                 O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  if (!fd) fail(path, "cannot open the lock file", errno);
  const struct stat st = fstat_or_fail(fd.get(), path);
  if (!S_ISREG(st.st_mode)) fail(path, kind_of(st.st_mode) + ", not a lock file: refused", 0);
  check_owner(st, path);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return Lock(std::move(fd));
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) fail(path, "cannot lock", errno);
    if (std::chrono::steady_clock::now() >= deadline)
      fail(path, "still locked by another writer after " + std::to_string(wait.count()) + " ms",
           EWOULDBLOCK);
    // A save holds it for milliseconds: poll, backing off (flock has no timed wait).
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

void write_file(const fs::path& path, std::string_view data) {
  const fs::path name = path.filename();
  if (name.empty() || name == "." || name == "..") fail(path, "not a file name", 0);
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd) fail(dir, "cannot open the directory", errno);
  struct stat st {};
  if (::fstatat(dir_fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
    fail(path, kind_of(st.st_mode) + ", not a regular file: not replaced", 0);
  // 0666: the user's umask decides, as for any file a program creates.
  replace(dir_fd.get(), dir, name.string(), data, 0666);
}

std::string read_file(const fs::path& path, size_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, "cannot read", errno);
  if (!S_ISREG(st.st_mode)) fail(path, kind_of(st.st_mode) + ", not a regular file", 0);
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) fail(path, "cannot read", errno);
  const struct stat now = fstat_or_fail(fd.get(), path);
  if (!S_ISREG(now.st_mode) || now.st_ino != st.st_ino || now.st_dev != st.st_dev)
    fail(path, "replaced while being opened: refused", 0);
  return read_all(fd.get(), now, max_bytes, path);
}

}  // namespace hcr::files
