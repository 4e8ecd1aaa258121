// The tenant side: joins the arbiter, reports busy/idle (on change, idle after a short quiet),
// applies grants to the runtime's devices and releases revoked ones once nothing runs there.
#include <hcr/arbiter/client.hpp>
#include <hcr/arbiter/protocol.hpp>

#include "peer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hcr::arbiter {

using Clock = std::chrono::steady_clock;

Client::Client(TenantHost& host, ClientOptions options)
    : host_(host), options_(std::move(options)) {}

Client::~Client() { stop(); }

bool Client::send(const std::string& line) {
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

namespace {

timeval timeval_of(std::chrono::milliseconds ms) {
  const int64_t v = std::max<int64_t>(1, ms.count());
  return timeval{static_cast<time_t>(v / 1000), static_cast<suseconds_t>(v % 1000 * 1000)};
}

}  // namespace

bool Client::start() {
  const std::vector<DeviceReport> devices = host_.devices();
  count_ = static_cast<uint32_t>(std::min(devices.size(), kMaxDevicesPerTenant));
  allowed_.assign(count_, true);
  own_.assign(count_, true);
  const std::string where = "arbiter '" + options_.socket + "'";
  const std::string as_without = "; running on every device, as without one";
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (options_.socket.empty() || options_.socket.size() >= sizeof a.sun_path) {
    host_.log(true, where + ": not a socket path (empty or too long)" + as_without);
    return false;
  }
  std::memcpy(a.sun_path, options_.socket.c_str(), options_.socket.size() + 1);
  // Whoever listens on the path learns this process's id on connect and its devices after: a
  // socket file of another user is not even connected to (its process is checked below too).
  struct stat st {};
  if (::lstat(options_.socket.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      host_.log(true, where + " is not a socket: refused" + as_without);
      return false;
    }
    if (!detail::trusted_uid(st.st_uid)) {
      host_.log(true, where + ": the socket file belongs to " + detail::user_text(st.st_uid) +
                          ", neither this user (" + detail::user_text(::geteuid()) +
                          ") nor root: refused" + as_without);
      return false;
    }
  }
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  // On a Unix socket, connect() waits on a full backlog (an arbiter stopped, or overwhelmed) at
  // most the send timeout: the connect timeout. Sends after it wait at most the join timeout.
  const timeval connect_tv = timeval_of(options_.connect_timeout);
  const timeval send_tv = timeval_of(options_.join_timeout);
  int r = -1;
  if (fd_ >= 0 && ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &connect_tv, sizeof connect_tv) == 0) {
    do r = ::connect(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    while (r != 0 && errno == EINTR);
  }
  if (r != 0) {
    const int e = errno;
    host_.log(true, where + " does not answer (" +
                        (e == EAGAIN ? "no connection accepted within " +
                                           std::to_string(options_.connect_timeout.count()) +
                                           " ms: stopped, or its backlog is full"
                                     : std::string(std::strerror(e))) +
                        ")" + as_without);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    return false;
  }
  ucred cred{};
  std::string refusal;
  if (!detail::peer_credentials(fd_, cred))
    refusal = std::string("its credentials cannot be read (") + std::strerror(errno) + ")";
  else if (!detail::trusted_uid(cred.uid))
    refusal = "it runs as " + detail::user_text(cred.uid) + " (pid " + std::to_string(cred.pid) +
              "), neither this user (" + detail::user_text(::geteuid()) + ") nor root";
  else if (::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &send_tv, sizeof send_tv) != 0)
    refusal = std::string("SO_SNDTIMEO: ") + std::strerror(errno);
  if (!refusal.empty()) {
    host_.log(true, where + ": " + refusal + ": refused" + as_without);
    ::close(fd_);
    fd_ = -1;
    return false;
  }
  std::string join = format(msg::Hello{kProtocolVersion, options_.weight});
  for (uint32_t i = 0; i < count_; ++i) join += format(msg::Device{devices[i]});
  // The first grant: until it comes the runtime runs as without an arbiter. (A send that failed
  // still reads what the arbiter said before it closed: a refusal's reason.)
  const auto deadline = Clock::now() + options_.join_timeout;
  send(join + format(msg::Joined{}));
  bool ok = true;
  while (ok && stats().grants == 0 && Clock::now() < deadline)
    ok = read_lines(true,
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  if (!ok || stats().grants == 0) {
    std::string why;
    {
      std::lock_guard<std::mutex> g(stats_mutex_);
      why = error_;
    }
    host_.log(true, where +
                        (why.empty() ? " gave no grant within " +
                                           std::to_string(options_.join_timeout.count()) + " ms"
                                     : " refused: " + why) +
                        as_without);
    for (uint32_t d = 0; d < count_; ++d)
      if (!allowed_[d]) host_.allow(d, true);
    allowed_.assign(count_, true);
    ::close(fd_);
    fd_ = -1;
    return false;
  }
  {
    std::lock_guard<std::mutex> g(stats_mutex_);
    stats_.joined = stats_.connected = true;
  }
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
  thread_ = std::thread([this] { loop(); });
  return true;
}

// Reads what is there (waiting up to `timeout` for something when `wait`) and handles each whole
// line. False when the connection ended or the arbiter said something this side cannot accept.
bool Client::read_lines(bool wait, std::chrono::milliseconds timeout) {
  if (wait) {
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, timeout.count())));
    if (r == 0) return true;
    if (r < 0) return errno == EINTR;
  }
  char buf[4096];
  const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  if (n == 0) return false;
  in_.append(buf, static_cast<size_t>(n));
  size_t nl;
  while ((nl = in_.find('\n')) != std::string::npos) {
    const std::string line = in_.substr(0, nl);
    in_.erase(0, nl + 1);
    std::string why;
    const std::optional<Message> m = parse(line, why);
    if (!m) {
      std::lock_guard<std::mutex> g(stats_mutex_);
      error_ = "a message this runtime cannot read: " + why;
      return false;
    }
    if (const auto* w = std::get_if<msg::Welcome>(&*m)) {
      std::lock_guard<std::mutex> g(stats_mutex_);
      stats_.tenant = w->tenant;
    } else if (const auto* gr = std::get_if<msg::GrantMsg>(&*m)) {
      if ((!gr->held.empty() && gr->held.back() >= count_) ||
          (!gr->own.empty() && gr->own.back() >= count_)) {
        std::lock_guard<std::mutex> g(stats_mutex_);
        error_ = "a grant naming a device this runtime does not have: " + line;
        return false;
      }
      apply(gr->seq, gr->held, gr->own);
    } else if (const auto* e = std::get_if<msg::Error>(&*m)) {
      std::lock_guard<std::mutex> g(stats_mutex_);
      error_ = e->text;
      return false;
    } else {
      std::lock_guard<std::mutex> g(stats_mutex_);
      error_ = "an unexpected message: " + line;
      return false;
    }
  }
  if (in_.size() >= kMaxLine) {
    std::lock_guard<std::mutex> g(stats_mutex_);
    error_ = "a line longer than " + std::to_string(kMaxLine - 1) + " bytes";
    return false;
  }
  return true;
}

void Client::apply(uint64_t seq, const std::vector<uint32_t>& held,
                   const std::vector<uint32_t>& own) {
  std::vector<bool> want(count_, false);
  for (uint32_t d : held) want[d] = true;
  own_.assign(count_, false);
  for (uint32_t d : own) own_[d] = true;
  uint64_t gained = 0, revoked = 0;
  // Allow first, withhold second: the runtime never has fewer devices than both sets share.
  for (uint32_t d = 0; d < count_; ++d)
    if (want[d] && !allowed_[d]) {
      host_.allow(d, true);
      allowed_[d] = true;
      ++gained;
    }
  const auto now = Clock::now();
  for (uint32_t d = 0; d < count_; ++d)
    if (!want[d] && allowed_[d]) {
      host_.allow(d, false);
      allowed_[d] = false;
      pending_.push_back({d, seq, now});
      ++revoked;
    }
  // A revoke called off: the device is ours again, nothing to release.
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const Pending& p) { return allowed_[p.index]; }),
                 pending_.end());
  std::lock_guard<std::mutex> g(stats_mutex_);
  ++stats_.grants;
  stats_.gained += gained;
  stats_.revoked += revoked;
  stats_.held = stats_.own = stats_.borrowed = 0;
  for (uint32_t d = 0; d < count_; ++d) {
    stats_.held += allowed_[d];
    stats_.own += own_[d];
    stats_.borrowed += allowed_[d] && !own_[d];
  }
}

void Client::loop() {
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    const int timeout_ms = static_cast<int>(std::max<int64_t>(1, options_.poll.count() / 1000));
    ::poll(p, wake_[0] >= 0 ? 2 : 1, timeout_ms);
    if (stop_.load()) return;
    if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && !read_lines(false, {})) {
      std::string why;
      {
        std::lock_guard<std::mutex> g(stats_mutex_);
        why = error_.empty() ? "the connection ended" : error_;
      }
      fall_back("arbiter '" + options_.socket + "' lost (" + why + ")");
      return;
    }
    // Demand: busy at once, idle after a quiet spell.
    const auto now = Clock::now();
    bool ok = true;
    const bool has_work = host_.unfinished() > 0;
    if (has_work) {
      idle_since_ = {};
      if (!reported_busy_) {
        ok = send(format(msg::Busy{}));
        reported_busy_ = true;
      }
    } else if (reported_busy_) {
      if (idle_since_ == Clock::time_point{}) {
        idle_since_ = now;
      } else if (now - idle_since_ >= options_.idle_after) {
        ok = send(format(msg::Idle{}));
        reported_busy_ = false;
      }
    }
    // Revoked devices: released once nothing runs there (within one task's time).
    for (size_t i = 0; i < pending_.size() && ok;) {
      if (host_.running(pending_[i].index) != 0) {
        ++i;
        continue;
      }
      ok = send(format(msg::Released{pending_[i].index, pending_[i].seq}));
      const double s = std::chrono::duration<double>(now - pending_[i].since).count();
      {
        std::lock_guard<std::mutex> g(stats_mutex_);
        ++stats_.released;
        stats_.max_release_seconds = std::max(stats_.max_release_seconds, s);
      }
      pending_.erase(pending_.begin() + static_cast<long>(i));
    }
    if (!ok) {
      fall_back("arbiter '" + options_.socket + "' lost (a send failed)");
      return;
    }
    starved(has_work, now);
  }
}

// Work and no device: said once per episode, as a warning the first time (then at info), so that
// tasks that wait for another tenant are not a silent hang. At once when its own share is empty
// (only a tenant going idle lends it a device); after `starved_after` otherwise (a reclaim takes
// one task's time, longer only when a holder does not release).
void Client::starved(bool has_work, Clock::time_point now) {
  const bool none =
      count_ > 0 && std::find(allowed_.begin(), allowed_.end(), true) == allowed_.end();
  if (!has_work || !none) {
    starved_since_ = {};
    starved_said_ = false;
    return;
  }
  if (starved_since_ == Clock::time_point{}) starved_since_ = now;
  if (starved_said_) return;
  const auto own = static_cast<size_t>(std::count(own_.begin(), own_.end(), true));
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - starved_since_);
  if (own > 0 && waited < options_.starved_after) return;
  starved_said_ = true;
  const std::string where =
      "arbiter '" + options_.socket + "': tenant " + std::to_string(stats().tenant);
  host_.log(!starved_warned_,
            own == 0 ? where + " has work and no device: its own share is empty (more tenants "
                               "than devices) and the other tenants hold every device it has; "
                               "its tasks wait until one goes idle and lends it one"
                     : where + " has had work and no device for " + std::to_string(waited.count()) +
                           " ms: the " + std::to_string(own) +
                           " device(s) of its own share are still held by other tenants (not "
                           "released yet); its tasks wait for them");
  starved_warned_ = true;
}

// Without the arbiter: its own share (every device when it has none), borrowed devices withheld
// (what runs there finishes; what is queued goes to the others).
void Client::fall_back(const std::string& why) {
  if (fell_back_) return;
  fell_back_ = true;
  bool any_own = false;
  for (uint32_t d = 0; d < count_; ++d) any_own = any_own || own_[d];
  for (uint32_t d = 0; d < count_; ++d)
    if ((own_[d] || !any_own) && !allowed_[d]) {
      host_.allow(d, true);
      allowed_[d] = true;
    }
  for (uint32_t d = 0; d < count_; ++d)
    if (any_own && !own_[d] && allowed_[d]) {
      host_.allow(d, false);
      allowed_[d] = false;
    }
  pending_.clear();
  if (!why.empty())
    host_.log(true,
              why + "; running on its own share of " +
                  std::to_string(any_own ? std::count(own_.begin(), own_.end(), true) : count_) +
                  " device(s)");
  std::lock_guard<std::mutex> g(stats_mutex_);
  stats_.connected = false;
  stats_.held = stats_.borrowed = 0;
  for (uint32_t d = 0; d < count_; ++d) {
    stats_.held += allowed_[d];
    stats_.borrowed += allowed_[d] && !own_[d];
  }
}

void Client::stop() {
  if (fd_ < 0) return;
  stop_.store(true);
  if (wake_[1] >= 0) {
    const char b = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_[1], &b, 1);
  }
  if (thread_.joinable()) thread_.join();
  fall_back("");
  ::close(fd_);
  fd_ = -1;
  for (int& w : wake_)
    if (w >= 0) {
      ::close(w);
      w = -1;
    }
}

ClientStats Client::stats() const {
  std::lock_guard<std::mutex> g(stats_mutex_);
  return stats_;
}

}  // namespace hcr::arbiter
