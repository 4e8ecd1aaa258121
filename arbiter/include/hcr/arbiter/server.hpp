/// \file server.hpp
/// The node arbiter's socket side (`hcr serve`): accepts tenants on an AF_UNIX stream socket,
/// checks each peer's credentials, feeds their messages to an Arbitration and sends the grants.
///
/// \code
/// hcr::arbiter::Server server({.socket = "/run/hcr/arbiter.sock"});  // binds, or throws
/// std::thread t([&] { server.run(); });
/// ...
/// server.stop();  // any thread; run() returns; the socket file is removed by the destructor
/// \endcode
///
/// Thread safety: run() on one thread; stop() and counters() from any.
#pragma once

#include <hcr/arbiter/arbitration.hpp>

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hcr::arbiter {

struct ServerOptions {
  std::string socket;  ///< the socket file's path (made absolute)
  /// A listening socket handed over already bound (systemd's socket activation: `hcr serve` takes
  /// fd 3 when LISTEN_PID and LISTEN_FDS say so), or -1: the server binds `socket` itself. A
  /// handed-over socket must be a listening AF_UNIX stream socket whose file is `socket` (empty:
  /// whatever file it is bound to), in a trusted directory and owned by this user; the server sets
  /// its access as for its own and closes it at the end, but never removes its file (the one who
  /// bound it does). The server owns the descriptor from construction, even when it refuses it.
  int listen_fd = -1;
  std::vector<uid_t> users;   ///< peers allowed by uid (with groups empty too: our own uid)
  std::vector<gid_t> groups;  ///< peers allowed by group (primary or supplementary)
  /// A tenant that has not released a revoked device this many seconds after the revoke is
  /// dropped (its devices return to the pool; it falls back to its own share). 0: never. Set it
  /// above the longest task the tenants run: a release waits for the running task.
  double release_timeout = 0;
  /// Connections at once, tenants and peers still joining. A peer beyond is told so (ERROR) and
  /// closed, and the server logs it; so is one accepted while out of file descriptors.
  size_t max_connections = 256;
  /// A peer that has not finished joining (HELLO, DEVICE..., JOINED) this many seconds after it
  /// connected is dropped: a runtime sends all of it at once.
  double join_timeout = 5;
  /// Diagnostics (a tenant joined, left, was refused or dropped, and why). Default: stderr.
  std::function<void(const std::string&)> log;
};

struct ServerCounters {
  uint64_t joined = 0, left = 0, refused = 0;
  uint64_t dropped = 0;      ///< for a bad message, a join not finished or a release overdue
  uint64_t turned_away = 0;  ///< at max_connections, or out of file descriptors
  size_t tenants = 0;        ///< connected now (joined or joining)
  ArbitrationCounters arbitration;
};

class Server {
 public:
  /// Binds the socket and opens it to the allowed users and groups only (below). Throws
  /// std::runtime_error naming the path and the reason when its directory is not trusted (it or
  /// a directory above it belongs to, or can be written by, a user other than this one and root:
  /// hcr::files' rule), when a live server answers there, when a socket file of another user is
  /// there, or when it cannot bind; a stale socket file of this user (nobody answers) is replaced.
  ///
  /// Access: mode 0600 when only this user is allowed; otherwise an access ACL names each allowed
  /// user and group (one group and no other user: that group owns it, mode 0660), or, on a file
  /// system without ACLs, mode 0666 with a log line. Either way each peer's credentials
  /// (SO_PEERCRED: uid, primary and supplementary groups) are checked on accept.
  explicit Server(ServerOptions options);
  ~Server();  ///< stops, closes every connection, removes the socket file (if it bound it)
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  void run();
  void stop() noexcept;
  ServerCounters counters() const;
  const std::string& path() const noexcept { return options_.socket; }

 private:
  struct Conn;
  void bind_socket();
  void adopt_socket();
  void check_directory(const std::string& path);
  void open_access();
  void accept_one();
  void accept_failed(int error);
  void turn_away(int fd, const std::string& why);
  void handle(Conn& c, std::string_view line);
  void drop(Conn& c, const std::string& why);
  void send_changes();
  void say(const std::string& line);

  ServerOptions options_;
  int dir_fd_ = -1;           // the socket's directory, checked (hcr::files::TrustedDir)
  std::string name_;          // the socket's name in it
  ino_t inode_ = 0;           // the socket file bound (removed at the end only if still there)
  bool handed_over_ = false;  // listen_fd_ came bound (ServerOptions::listen_fd): never unlinked
  int listen_fd_ = -1;
  int spare_fd_ = -1;  // closed to accept (and turn away) a peer when out of descriptors
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Conn>> conns_;
  std::chrono::steady_clock::time_point accept_paused_until_{};
  std::string away_;  // why peers are being turned away now ("": they are not)
  uint64_t away_count_ = 0;
  Arbitration arb_;
  mutable std::mutex counters_mutex_;
  ServerCounters counters_;
};

}  // namespace hcr::arbiter
