// hcr serve: the node arbiter in the foreground (arbiter/server.hpp) until SIGINT or SIGTERM.
#include "cli.hpp"

#include <hcr/arbiter/server.hpp>

#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace hcr::cli {

namespace {

// A user or group by name or number; throws naming the value.
template <class Id, class Lookup>
Id id_of(const std::string& what, const std::string& v, Lookup lookup) {
  if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos) {
    // An id is below 2^32 - 1 ((uid_t)-1 means "none"): anything longer is no id.
    if (v.size() > 10 || std::stoull(v) >= 0xffffffffull)
      throw Error(ErrorCode::invalid_argument,
                  "--allow-" + what + " '" + v + "': not a " + what + " id (0 to 4294967294)");
    return static_cast<Id>(std::stoull(v));
  }
  if (auto id = lookup(v.c_str())) return *id;
  throw Error(ErrorCode::invalid_argument, "--allow-" + what + " '" + v + "': no such " + what);
}

// Plain decimal seconds ("30", "2.5"): no sign, exponent, hexadecimal, inf or nan, where strtod
// takes them all. 0 is `off`; otherwise within [lo, hi]. Throws naming the option and the value.
double seconds_of(const std::string& option, const std::string& v, double lo, double hi) {
  const size_t point = v.find('.');
  const std::string whole = v.substr(0, point);
  const std::string part = point == std::string::npos ? "0" : v.substr(point + 1);
  const auto digits = [](const std::string& d) {
    return !d.empty() && d.find_first_not_of("0123456789") == std::string::npos;
  };
  char range[96];
  std::snprintf(range, sizeof range, "0 (none), or %g to %g seconds", lo, hi);
  if (!digits(whole) || !digits(part))
    throw Error(ErrorCode::invalid_argument,
                option + " '" + v + "' is not plain decimal seconds (such as 30 or 2.5): " + range);
  const double s = std::strtod(v.c_str(), nullptr);
  if (s != 0 && (s < lo || s > hi))
    throw Error(ErrorCode::invalid_argument, option + " '" + v + "' is out of range: " + range);
  return s;
}

// systemd's socket activation (sd_listen_fds(3)): the listening socket it bound, as descriptor 3,
// when LISTEN_PID names this process; -1 when nothing was handed over. The variables are removed
// so that nothing this process starts takes them for its own. Throws when the handover is not
// exactly one socket.
int handed_over_socket() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  if (pid == nullptr || fds == nullptr || std::strtoll(pid, nullptr, 10) != ::getpid()) return -1;
  const std::string count = fds;
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  if (count != "1")
    throw Error(ErrorCode::invalid_argument, "systemd handed over " + count +
                                                 " sockets (LISTEN_FDS): hcr serve takes exactly "
                                                 "one (one ListenStream= in the socket unit)");
  return 3;  // SD_LISTEN_FDS_START
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  arbiter::ServerOptions o;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc)
      throw Error(ErrorCode::invalid_argument, a + " needs a value (or is not an option of serve)");
    const std::string v = argv[++i];
    if (a == "--socket") {
      o.socket = v;
    } else if (a == "--allow-user") {
      o.users.push_back(id_of<uid_t>("user", v, [](const char* n) -> std::optional<uid_t> {
        if (const passwd* p = ::getpwnam(n)) return p->pw_uid;
        return std::nullopt;
      }));
    } else if (a == "--allow-group") {
      o.groups.push_back(id_of<gid_t>("group", v, [](const char* n) -> std::optional<gid_t> {
        if (const group* g = ::getgrnam(n)) return g->gr_gid;
        return std::nullopt;
      }));
    } else if (a == "--release-timeout") {
      o.release_timeout = seconds_of(a, v, 0.01, 86400);
    } else if (a == "--max-connections") {
      if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos ||
          std::stoul(v) < 1 || std::stoul(v) > 100000)
        throw Error(ErrorCode::invalid_argument,
                    "--max-connections '" + v + "' is not a whole number from 1 to 100000");
      o.max_connections = std::stoul(v);
    } else {
      throw Error(ErrorCode::invalid_argument, "unknown option " + a);
    }
  }
  o.listen_fd = handed_over_socket();
  if (o.socket.empty() && o.listen_fd < 0)
    throw Error(ErrorCode::invalid_argument,
                "serve needs --socket PATH (or a socket handed over by systemd)");
  // The signals wait here; every other thread (the server's) has them blocked.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::unique_ptr<arbiter::Server> server;
  try {
    server = std::make_unique<arbiter::Server>(o);
  } catch (const std::runtime_error& e) {
    throw Error(ErrorCode::invalid_argument, e.what());
  }
  std::fprintf(stderr, "hcr serve: arbiter on '%s'%s (%zu user(s), %zu group(s) allowed)\n",
               server->path().c_str(), o.listen_fd >= 0 ? ", handed over by systemd" : "",
               o.users.empty() && o.groups.empty() ? size_t{1} : o.users.size(), o.groups.size());
  std::thread t([&] { server->run(); });
  int sig = 0;
  sigwait(&set, &sig);
  server->stop();
  t.join();
  const arbiter::ServerCounters c = server->counters();
  server.reset();  // removes the socket file (not one systemd handed over)
  std::fprintf(
      stderr,
      "hcr serve: stopped by signal %d; %llu tenant(s) joined, %llu refused, "
      "%llu dropped (a bad message, a join or a release not in time), %llu turned away "
      "(too many connections)\n",
      sig, static_cast<unsigned long long>(c.joined), static_cast<unsigned long long>(c.refused),
      static_cast<unsigned long long>(c.dropped), static_cast<unsigned long long>(c.turned_away));
  return 0;
}

}  // namespace hcr::cli
