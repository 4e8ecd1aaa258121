// The arbiter's socket loop: one thread, poll() over the listening socket, the tenants and a wake
// pipe. A peer's bad message drops that peer (logged), never the server; so does a join not
// finished in time. Connections are capped, and running out of descriptors turns peers away
// (logged once) rather than spinning on accept.
#include <hcr/arbiter/protocol.hpp>
#include <hcr/arbiter/server.hpp>

#include "peer.hpp"
#include "safe_file.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>

namespace hcr::arbiter {

using Clock = std::chrono::steady_clock;

struct Server::Conn {
  int fd = -1;
  uid_t uid = 0;
  pid_t pid = 0;
  Clock::time_point since;  // connected
  std::string in;
  TenantId tenant = 0;  // 0 until JOINED
  bool hello = false;
  double weight = 1;
  std::vector<DeviceReport> devices;
  bool dead = false;
  std::string name() const {
    return "tenant " + (tenant ? std::to_string(tenant) : std::string("(joining)")) + " (pid " +
           std::to_string(pid) + ", uid " + std::to_string(uid) + ")";
  }
};

namespace {

sockaddr_un address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a.sun_path)
    throw std::runtime_error("arbiter socket path '" + path + "' is empty or longer than " +
                             std::to_string(sizeof a.sun_path - 1) + " bytes");
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // a tenant that does not read its grants is dropped
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g s", s);
  return b;
}

std::string octal(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

[[noreturn]] void refuse(const std::string& why) { throw std::runtime_error(why); }

// A POSIX access ACL in the kernel's xattr form (linux/posix_acl_xattr.h: version 2, then
// entries of tag, permissions and id, sorted by tag and id): the owner and each named user and
// group may read and write; the owning group and others nothing.
bool set_access_acl(const std::string& path, std::vector<uid_t> users, std::vector<gid_t> groups) {
  std::sort(users.begin(), users.end());
  users.erase(std::unique(users.begin(), users.end()), users.end());
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  std::string x;
  auto le = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) x += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  auto entry = [&](uint16_t tag, uint16_t perm, uint32_t id) {
    le(tag, 2);
    le(perm, 2);
    le(id, 4);
  };
  constexpr uint32_t kNoId = UINT32_MAX;
  le(2, 4);
  entry(0x01, 6, kNoId);                     // ACL_USER_OBJ
  for (uid_t u : users) entry(0x02, 6, u);   // ACL_USER
  entry(0x04, 0, kNoId);                     // ACL_GROUP_OBJ
  for (gid_t g : groups) entry(0x08, 6, g);  // ACL_GROUP
  entry(0x10, 6, kNoId);                     // ACL_MASK
  entry(0x20, 0, kNoId);                     // ACL_OTHER
  return ::lsetxattr(path.c_str(), "system.posix_acl_access", x.data(), x.size(), 0) == 0;
}

}  // namespace

Server::Server(ServerOptions options) : options_(std::move(options)) {
  if (!options_.log)
    options_.log = [](const std::string& s) { std::cerr << "hcr serve: " << s << "\n"; };
  if (options_.users.empty() && options_.groups.empty()) options_.users.push_back(::geteuid());
  if (options_.max_connections == 0) options_.max_connections = 1;
  listen_fd_ = options_.listen_fd;
  try {
    if (listen_fd_ >= 0) adopt_socket();
    else bind_socket();
  } catch (...) {
    for (int fd : {listen_fd_, wake_[0], wake_[1], dir_fd_})
      if (fd >= 0) ::close(fd);
    throw;
  }
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
      options_.max_connections + 16 > nofile.rlim_cur)
    say("the open-file limit (" + std::to_string(nofile.rlim_cur) + ") is below max_connections (" +
        std::to_string(options_.max_connections) +
        ") + 16: peers beyond what it allows are turned away (raise it: ulimit -n, LimitNOFILE=)");
}

// The socket's path made absolute, its name, and its directory opened once checked: nobody but
// this user and root may be able to replace the socket in it (or put their own there before it):
// the rule of the model directory and the plugin paths.
void Server::check_directory(const std::string& socket) {
  namespace fs = std::filesystem;
  const fs::path path = fs::absolute(socket).lexically_normal();
  options_.socket = path.string();
  name_ = path.filename().string();
  if (name_.empty() || name_ == "." || name_ == "..")
    refuse("arbiter socket path '" + options_.socket + "' does not name a file");
  try {
    const std::optional<files::TrustedDir> dir = files::TrustedDir::open(path.parent_path());
    if (!dir)
      refuse("arbiter socket '" + options_.socket + "': its directory '" +
             path.parent_path().string() + "' does not exist");
    dir_fd_ = ::fcntl(dir->fd(), F_DUPFD_CLOEXEC, 0);
    if (dir_fd_ < 0) refuse(std::string("dup: ") + std::strerror(errno));
  } catch (const files::FileError& e) {
    refuse("arbiter socket '" + options_.socket +
           "' refused: its directory is not trusted: " + e.what());
  }
}

// The checks, then the socket bound, opened to the allowed, listening.
void Server::bind_socket() {
  check_directory(options_.socket);
  const sockaddr_un a = address(options_.socket);
  struct stat st {};
  if (::fstatat(dir_fd_, name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISSOCK(st.st_mode))
      refuse("'" + options_.socket + "' exists and is not a socket: refused");
    // Something listening answers at once, or says its backlog is full (a stopped server).
    const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const int r =
        probe < 0 ? -1 : ::connect(probe, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    const bool live = r == 0 || (probe >= 0 && (errno == EAGAIN || errno == EINPROGRESS));
    ucred cred{};
    const bool known = r == 0 && detail::peer_credentials(probe, cred);
    if (probe >= 0) ::close(probe);
    const std::string owner = "its socket file belongs to " + detail::user_text(st.st_uid);
    if (live)
      refuse("an arbiter already answers on '" + options_.socket + "' (" +
             (known ? "pid " + std::to_string(cred.pid) + ", " + detail::user_text(cred.uid) + "; "
                    : std::string()) +
             owner + "): refused");
    if (st.st_uid != ::geteuid())
      refuse("'" + options_.socket + "' is a socket nobody answers on, but " + owner +
             ", not this user (" + detail::user_text(::geteuid()) +
             "): refused (remove it if it is stale)");
    ::unlinkat(dir_fd_, name_.c_str(), 0);  // stale: its server is gone
    options_.log("replaced the stale socket file '" + options_.socket + "'");
  }
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) refuse(std::string("socket: ") + std::strerror(errno));
  // Nobody can connect before listen(), after the access is set.
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0)
    refuse("cannot bind '" + options_.socket + "': " + std::strerror(errno));
  try {
    if (::fstatat(dir_fd_, name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(st.st_mode))
      refuse("'" + options_.socket + "' is not the socket just bound");
    inode_ = st.st_ino;
    open_access();
    if (::listen(listen_fd_, 64) != 0 || ::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
      refuse("cannot listen on '" + options_.socket + "': " + std::strerror(errno));
  } catch (...) {
    ::unlinkat(dir_fd_, name_.c_str(), 0);
    throw;
  }
}

// A listening socket someone else bound (systemd): what it is and where, checked as a socket
// of our own would be, then opened to the allowed. Its file stays when the server ends.
void Server::adopt_socket() {
  handed_over_ = true;
  const std::string fd = "the socket handed over (descriptor " + std::to_string(listen_fd_) + ")";
  int domain = 0, type = 0, listening = 0;
  socklen_t n = sizeof domain;
  if (::getsockopt(listen_fd_, SOL_SOCKET, SO_DOMAIN, &domain, &n) != 0)
    refuse(fd + " is not a socket: " + std::strerror(errno));
  n = sizeof type;
  ::getsockopt(listen_fd_, SOL_SOCKET, SO_TYPE, &type, &n);
  n = sizeof listening;
  ::getsockopt(listen_fd_, SOL_SOCKET, SO_ACCEPTCONN, &listening, &n);
  if (domain != AF_UNIX || type != SOCK_STREAM || listening == 0)
    refuse(fd + " is not a listening Unix stream socket (ListenStream= with a path in the "
                "socket unit)");
  sockaddr_un a{};
  n = sizeof a;
  if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &n) != 0)
    refuse(fd + ": getsockname: " + std::strerror(errno));
  const size_t len = n > offsetof(sockaddr_un, sun_path) ? n - offsetof(sockaddr_un, sun_path) : 0;
  const std::string bound = len > 0 && a.sun_path[0] != '\0'
                                ? std::string(a.sun_path, ::strnlen(a.sun_path, len))
                                : std::string();
  if (bound.empty()) refuse(fd + " is not bound to a file (an abstract or unnamed socket)");
  namespace fs = std::filesystem;
  const std::string want =
      options_.socket.empty() ? bound : fs::absolute(options_.socket).lexically_normal().string();
  if (fs::path(bound).lexically_normal().string() != want)
    refuse(fd + " is bound to '" + bound + "', not to '" + want + "' (--socket)");
  check_directory(bound);
  struct stat st {};
  if (::fstatat(dir_fd_, name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(st.st_mode))
    refuse(fd + ": '" + options_.socket + "' is not a socket file");
  if (st.st_uid != ::geteuid())
    refuse(fd + ": its file '" + options_.socket + "' belongs to " + detail::user_text(st.st_uid) +
           ", not this user (" + detail::user_text(::geteuid()) + "): refused");
  const int flags = ::fcntl(listen_fd_, F_GETFL);
  if (flags < 0 || ::fcntl(listen_fd_, F_SETFL, flags | O_NONBLOCK) != 0 ||
      ::fcntl(listen_fd_, F_SETFD, FD_CLOEXEC) != 0)
    refuse(fd + ": fcntl: " + std::strerror(errno));
  open_access();
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    refuse(std::string("pipe: ") + std::strerror(errno));
}

// Who may connect: the file's permissions let the allowed in (the credentials check on accept
// is the gate either way); nobody else gets as far as connect().
void Server::open_access() {
  std::vector<uid_t> others;
  for (uid_t u : options_.users)
    if (u != ::geteuid()) others.push_back(u);
  const auto fail = [&](const char* what) {
    refuse("cannot " + std::string(what) + " '" + options_.socket + "': " + std::strerror(errno));
  };
  if (others.empty() && options_.groups.empty()) {
    if (::fchmodat(dir_fd_, name_.c_str(), 0600, 0) != 0) fail("chmod");
    return;
  }
  if (others.empty() && options_.groups.size() == 1 &&
      ::fchownat(dir_fd_, name_.c_str(), static_cast<uid_t>(-1), options_.groups[0],
                 AT_SYMLINK_NOFOLLOW) == 0) {
    if (::fchmodat(dir_fd_, name_.c_str(), 0660, 0) != 0) fail("chmod");
  } else if (!set_access_acl(options_.socket, others, options_.groups)) {
    const int e = errno;
    if (e != ENOTSUP && e != EOPNOTSUPP) {
      errno = e;
      fail("set the access ACL of");
    }
    if (::fchmodat(dir_fd_, name_.c_str(), 0666, 0) != 0) fail("chmod");
    say("'" + options_.socket + "': its file system keeps no ACLs, so the socket is mode 0666: " +
        "the credentials check on accept alone admits only the allowed users and groups");
  }
  // The allowed reach the socket only through directories they may search.
  namespace fs = std::filesystem;
  for (fs::path d = fs::path(options_.socket).parent_path();; d = d.parent_path()) {
    struct stat st {};
    if (::stat(d.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0 &&
        !((st.st_mode & S_IXGRP) != 0 && std::find(options_.groups.begin(), options_.groups.end(),
                                                   st.st_gid) != options_.groups.end()))
      say("'" + d.string() + "' (mode " + octal(st.st_mode) + ", " + detail::user_text(st.st_uid) +
          ", " + detail::group_text(st.st_gid) +
          ") is not searchable by others: allowed users and groups may not reach the socket");
    if (d == d.root_path() || d.empty()) break;
  }
}

Server::~Server() {
  stop();
  for (auto& c : conns_)
    if (c->fd >= 0) ::close(c->fd);
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    // Only the file it bound: another server may have replaced a socket of its own there since.
    struct stat st {};
    if (!handed_over_ && ::fstatat(dir_fd_, name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        st.st_ino == inode_)
      ::unlinkat(dir_fd_, name_.c_str(), 0);
  }
  for (int fd : {wake_[0], wake_[1], spare_fd_, dir_fd_})
    if (fd >= 0) ::close(fd);
}

void Server::stop() noexcept {
  stop_.store(true);
  if (wake_[1] >= 0) {
    const char b = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_[1], &b, 1);
  }
}

ServerCounters Server::counters() const {
  std::lock_guard<std::mutex> g(counters_mutex_);
  return counters_;
}

void Server::say(const std::string& line) { options_.log(line); }

void Server::run() {
  std::vector<pollfd> fds;
  char buf[4096];
  const auto join_timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::max(0.0, options_.join_timeout)));
  while (!stop_.load()) {
    // Sleep until something comes, a join's time is up, or accepting resumes; at most 1 s (a
    // quarter of the release timeout, when there is one).
    Clock::time_point now = Clock::now();
    int wait_ms = options_.release_timeout > 0
                      ? std::clamp(static_cast<int>(options_.release_timeout * 250), 1, 1000)
                      : 1000;
    const auto until = [&](Clock::time_point t) {
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - now).count();
      wait_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, wait_ms));
    };
    const bool accepting = now >= accept_paused_until_;
    if (!accepting) until(accept_paused_until_);
    fds.clear();
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});  // -1: left out
    fds.push_back({wake_[0], POLLIN, 0});
    for (auto& c : conns_) {
      fds.push_back({c->fd, POLLIN, 0});
      if (c->tenant == 0) until(c->since + join_timeout);
    }
    if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      say(std::string("poll: ") + std::strerror(errno));
      break;
    }
    if (fds[1].revents & POLLIN)
      while (::read(wake_[0], buf, sizeof buf) > 0) {
      }
    if (fds[0].revents & POLLIN) accept_one();
    for (size_t i = 2; i < fds.size(); ++i) {
      Conn& c = *conns_[i - 2];
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {  // EOF: the tenant ended or died
        c.dead = true;
        continue;
      }
      c.in.append(buf, static_cast<size_t>(n));
      size_t nl;
      while (!c.dead && (nl = c.in.find('\n')) != std::string::npos) {
        const std::string line = c.in.substr(0, nl);
        c.in.erase(0, nl + 1);
        handle(c, line);
      }
      if (!c.dead && c.in.size() >= kMaxLine)
        drop(c, "a line longer than " + std::to_string(kMaxLine - 1) + " bytes");
    }
    // Joins not finished in time hold a connection for nothing: dropped.
    now = Clock::now();
    for (auto& c : conns_)
      if (!c->dead && c->tenant == 0 && now - c->since >= join_timeout)
        drop(*c, "did not finish joining (HELLO, DEVICE..., JOINED) within " +
                     seconds_text(options_.join_timeout));
    // The gone leave: their devices return to the pool at once.
    for (auto& c : conns_)
      if (c->dead) {
        if (c->tenant) {
          say(c->name() + " left; its devices return to the pool");
          arb_.leave(c->tenant);
          std::lock_guard<std::mutex> g(counters_mutex_);
          ++counters_.left;
        }
        ::close(c->fd);
        c->fd = -1;
      }
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](auto& c) { return c->fd < 0; }),
                 conns_.end());
    // Revokes not answered in time: that tenant is dropped (it leaves on the next turn).
    arb_.tick(std::chrono::duration<double>(Clock::now().time_since_epoch()).count());
    if (options_.release_timeout > 0)
      for (TenantId t : arb_.overdue(options_.release_timeout))
        for (auto& c : conns_)
          if (c->tenant == t && !c->dead)
            drop(*c,
                 "a revoked device not released within " + seconds_text(options_.release_timeout));
    send_changes();
    std::lock_guard<std::mutex> g(counters_mutex_);
    counters_.tenants = conns_.size();
    counters_.arbitration = arb_.counters();
  }
}

void Server::turn_away(int fd, const std::string& why) {
  {  // counted before the peer can see it
    std::lock_guard<std::mutex> g(counters_mutex_);
    ++counters_.turned_away;
  }
  ++away_count_;
  if (why != away_) {  // once per episode, not once per peer
    say(why + "; turning new peers away until that changes");
    away_ = why;
  }
  send_all(fd, format(msg::Error{why}));
  ::close(fd);
}

void Server::accept_failed(int e) {
  if (e == EINTR || e == EAGAIN || e == EWOULDBLOCK || e == ECONNABORTED || e == EPROTO) return;
  if ((e == EMFILE || e == ENFILE) && spare_fd_ >= 0) {
    // The spare descriptor makes room for one accept: that peer is told why and closed, and the
    // listening socket is not left readable (poll() would report it again at once, for ever).
    ::close(spare_fd_);
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      rlimit nofile{};
      ::getrlimit(RLIMIT_NOFILE, &nofile);
      turn_away(fd, std::string("the arbiter is out of file descriptors (") + std::strerror(e) +
                        "; open-file limit " + std::to_string(nofile.rlim_cur) + ", " +
                        std::to_string(conns_.size()) + " connections): refused");
    }
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && spare_fd_ >= 0) return;
  }
  // Nothing accepted, so the listening socket stays readable: it is left out of poll() for a
  // while rather than spun on.
  accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
  const std::string why = std::string("accept: ") + std::strerror(e) + " (" +
                          std::to_string(conns_.size()) + " connections)";
  if (why != away_) {
    say(why + "; accepting again in 100 ms");
    away_ = why;
  }
}

void Server::accept_one() {
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return accept_failed(errno);
  if (conns_.size() >= options_.max_connections)
    return turn_away(fd, "the arbiter serves at most " + std::to_string(options_.max_connections) +
                             " connections at once: refused");
  if (!away_.empty()) {
    say("accepting peers again (" + std::to_string(away_count_) + " turned away meanwhile)");
    away_.clear();
    away_count_ = 0;
  }
  ucred cred{};
  if (!detail::peer_credentials(fd, cred)) {
    say(std::string("SO_PEERCRED: ") + std::strerror(errno) + "; peer refused");
    ::close(fd);
    return;
  }
  const auto in = [](const auto& v, auto x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  bool ok = in(options_.users, cred.uid) || in(options_.groups, cred.gid);
  if (!ok && !options_.groups.empty())
    for (gid_t g : detail::peer_groups(fd)) ok = ok || in(options_.groups, g);
  if (!ok) {
    const std::string why = detail::user_text(cred.uid) + ", " + detail::group_text(cred.gid) +
                            " (pid " + std::to_string(cred.pid) +
                            ") is not an allowed user or group: refused";
    {
      std::lock_guard<std::mutex> g(counters_mutex_);
      ++counters_.refused;
    }
    say("peer " + why);
    send_all(fd, format(msg::Error{why}));
    ::close(fd);
    return;
  }
  auto c = std::make_unique<Conn>();
  c->fd = fd;
  c->uid = cred.uid;
  c->pid = cred.pid;
  c->since = Clock::now();
  conns_.push_back(std::move(c));
}

void Server::drop(Conn& c, const std::string& why) {
  say(c.name() + " dropped: " + why);
  send_all(c.fd, format(msg::Error{why}));
  c.dead = true;
  std::lock_guard<std::mutex> g(counters_mutex_);
  ++counters_.dropped;
}

void Server::handle(Conn& c, std::string_view line) {
  std::string why;
  const std::optional<Message> m = parse(line, why);
  if (!m) return drop(c, why);
  if (!c.hello) {
    const auto* h = std::get_if<msg::Hello>(&*m);
    if (h == nullptr) return drop(c, "expected HELLO first");
    if (h->version != kProtocolVersion)
      return drop(c, "protocol version " + std::to_string(h->version) + " (this arbiter speaks " +
                         std::to_string(kProtocolVersion) + ")");
    c.hello = true;
    c.weight = h->weight;
    return;
  }
  if (c.tenant == 0) {
    if (const auto* d = std::get_if<msg::Device>(&*m)) {
      if (c.devices.size() >= kMaxDevicesPerTenant)
        return drop(c, "more than " + std::to_string(kMaxDevicesPerTenant) + " devices");
      for (const DeviceReport& x : c.devices)
        if (x.key == d->report.key) return drop(c, "device key '" + x.key + "' reported twice");
      c.devices.push_back(d->report);
      return;
    }
    if (!std::holds_alternative<msg::Joined>(*m)) return drop(c, "expected DEVICE or JOINED");
    c.tenant = arb_.join(c.weight, c.devices);
    {
      std::lock_guard<std::mutex> g(counters_mutex_);
      ++counters_.joined;
    }
    say(c.name() + " joined: weight " + std::to_string(c.weight) + ", " +
        std::to_string(c.devices.size()) + " device(s)");
    if (!send_all(c.fd, format(msg::Welcome{kProtocolVersion, c.tenant}))) c.dead = true;
    return;
  }
  if (std::holds_alternative<msg::Busy>(*m)) return arb_.demand(c.tenant, true);
  if (std::holds_alternative<msg::Idle>(*m)) return arb_.demand(c.tenant, false);
  if (const auto* r = std::get_if<msg::Released>(&*m)) {
    arb_.released(c.tenant, r->index, r->seq);  // a stale release is ignored (seq)
    return;
  }
  drop(c, "unexpected message '" + std::string(line.substr(0, 32)) + "' after JOINED");
}

void Server::send_changes() {
  for (const Grant& g : arb_.take_changes())
    for (auto& c : conns_)
      if (c->tenant == g.tenant && !c->dead &&
          !send_all(c->fd, format(msg::GrantMsg{g.seq, g.held, g.own}))) {
        say(c->name() + " does not read its grants: dropped");
        c->dead = true;
      }
  // The dead found while sending leave on the next turn; make sure there is one soon.
  for (auto& c : conns_)
    if (c->dead) {
      const char b = 0;
      [[maybe_unused]] ssize_t n = ::write(wake_[1], &b, 1);
      break;
    }
}

}  // namespace hcr::arbiter
