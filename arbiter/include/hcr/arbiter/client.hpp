/// \file client.hpp
/// The tenant side of the node arbiter: a runtime joins with its devices and weight, reports
/// busy/idle, and applies the grants it receives by allowing or withholding its own devices.
///
/// \code
/// struct Host : hcr::arbiter::TenantHost { ... };           // the runtime's side
/// hcr::arbiter::Client client(host, {.socket = path, .weight = 2});
/// if (!client.start()) { /* no arbiter: every device stays usable, as without one */ }
/// ...
/// client.stop();  // back to the own share (or every device), the connection closed
/// \endcode
///
/// Thread safety: start() and stop() from one thread; stats() from any. The host's functions are
/// called from the client's thread.
#pragma once

#include <hcr/arbiter/arbitration.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hcr::arbiter {

/// What the client needs from the runtime it speaks for.
class TenantHost {
 public:
  virtual ~TenantHost() = default;
  /// Its devices, in local index order.
  virtual std::vector<DeviceReport> devices() = 0;
  /// Tasks submitted and not finished (0: idle).
  virtual uint64_t unfinished() = 0;
  /// Device `local` may take work (true) or must stop taking it (false: queued work goes to the
  /// other devices, running work finishes).
  virtual void allow(uint32_t local, bool yes) = 0;
  /// Tasks handed to device `local` and not finished.
  virtual uint32_t running(uint32_t local) = 0;
  /// A diagnostic: warn (true) or info (false).
  virtual void log(bool warn, const std::string& text) = 0;
};

struct ClientOptions {
  std::string socket;
  double weight = 1;
  /// How long start() waits for the arbiter to accept the connection (a stopped arbiter, or one
  /// whose backlog is full, accepts nobody).
  std::chrono::milliseconds connect_timeout{1000};
  /// How long start() waits for the arbiter's first grant; also the longest any send to it may
  /// block (an arbiter that stops reading is then taken as gone).
  std::chrono::milliseconds join_timeout{2000};
  /// Idle for this long (nothing unfinished) before the arbiter is told so: a burst's tail and
  /// the next burst's start do not lend the devices away and back.
  std::chrono::milliseconds idle_after{3};
  /// How often the runtime's demand and pending releases are looked at.
  std::chrono::microseconds poll{1000};
  /// With work and no device for this long, the runtime says so (once, as a warning; at once
  /// when its own share is empty: only another tenant going idle lends it one).
  std::chrono::milliseconds starved_after{1000};
};

struct ClientStats {
  bool joined = false;             ///< start() joined an arbiter
  bool connected = false;          ///< and the connection is still up
  uint64_t tenant = 0;             ///< the arbiter's id for it
  uint64_t grants = 0;             ///< GRANT messages applied
  uint64_t gained = 0;             ///< devices allowed by a grant (again)
  uint64_t revoked = 0;            ///< devices a grant took away
  uint64_t released = 0;           ///< of which released (nothing ran on them any more)
  uint32_t held = 0;               ///< devices usable now
  uint32_t own = 0;                ///< devices of its own share
  uint32_t borrowed = 0;           ///< usable now and not its own
  double max_release_seconds = 0;  ///< longest revoke -> release (reclaim latency, this side)
};

class Client {
 public:
  Client(TenantHost& host, ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// Connects, joins and applies the first grant. False (with a warning through the host) when
  /// no arbiter answers in time, it refuses, or it is not to be trusted (its socket file or its
  /// process belongs to a user other than this one and root): nothing is withheld then.
  bool start();
  /// Leaves: the own share is allowed (every device when that is empty), the rest withheld, the
  /// connection closed. Idempotent.
  void stop();
  ClientStats stats() const;

 private:
  void loop();
  bool read_lines(bool wait, std::chrono::milliseconds timeout);
  void apply(uint64_t seq, const std::vector<uint32_t>& held, const std::vector<uint32_t>& own);
  void fall_back(const std::string& why);
  void starved(bool has_work, std::chrono::steady_clock::time_point now);
  bool send(const std::string& line);

  TenantHost& host_;
  ClientOptions options_;
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::string in_;
  uint32_t count_ = 0;
  std::vector<bool> allowed_, own_;
  struct Pending {
    uint32_t index;
    uint64_t seq;
    std::chrono::steady_clock::time_point since;
  };
  std::vector<Pending> pending_;  // revoked, not yet released
  bool reported_busy_ = false;
  std::chrono::steady_clock::time_point idle_since_{};
  std::chrono::steady_clock::time_point starved_since_{};  // with work and no device since
  bool starved_said_ = false;                              // this episode was reported
  bool starved_warned_ = false;  // a warning was given (later episodes: info)
  bool fell_back_ = false;
  mutable std::mutex stats_mutex_;
  ClientStats stats_;
  std::string error_;  // why the arbiter ended the connection, or what it sent that was bad
};

}  // namespace hcr::arbiter
