// hcr serve: the node arbiter in the foreground (arbiter/server.hpp) until SIGINT or SIGTERM.
#include "cli.hpp"

#include <hcr/arbiter/server.hpp>

#include <grp.h>
#include <pwd.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace hcr::cli {

namespace {

// A user or group by name or number; throws naming the value.
template <class Id, class Lookup>
Id id_of(const std::string& what, const std::string& v, Lookup lookup) {
  if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos)
    return static_cast<Id>(std::stoul(v));
  if (auto id = lookup(v.c_str())) return *id;
  throw Error(ErrorCode::invalid_argument, "--allow-" + what + " '" + v + "': no such " + what);
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
      char* end = nullptr;
      o.release_timeout = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != 0 || !(o.release_timeout >= 0) || o.release_timeout > 1e6)
        throw Error(ErrorCode::invalid_argument,
                    "--release-timeout '" + v + "' is not a number of seconds (0: none)");
    } else {
      throw Error(ErrorCode::invalid_argument, "unknown option " + a);
    }
  }
  if (o.socket.empty())
    throw Error(ErrorCode::invalid_argument, "serve needs --socket PATH");
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
  std::fprintf(stderr, "hcr serve: arbiter on '%s' (%zu user(s), %zu group(s) allowed)\n",
               o.socket.c_str(), o.users.empty() && o.groups.empty() ? size_t{1} : o.users.size(),
               o.groups.size());
  std::thread t([&] { server->run(); });
  int sig = 0;
  sigwait(&set, &sig);
  server->stop();
  t.join();
  const arbiter::ServerCounters c = server->counters();
  server.reset();  // removes the socket file
  std::fprintf(stderr, "hcr serve: stopped by signal %d; %llu tenant(s) joined, %llu refused, "
               "%llu dropped for a bad message\n",
               sig, static_cast<unsigned long long>(c.joined),
               static_cast<unsigned long long>(c.refused),
               static_cast<unsigned long long>(c.dropped));
  return 0;
}

}  // namespace hcr::cli
