// The arbiter across processes: `hcr serve` and tenant processes (tenant_helper.cpp). Two
// processes finish every task through it; killing the arbiter mid-run leaves each tenant its own
// share and loses nothing; killing a tenant (SIGKILL) mid-run gives its devices to the other;
// `hcr serve` stops cleanly on SIGTERM and refuses a socket a live arbiter answers on, and a
// --release-timeout that is not plain seconds; it takes a socket systemd hands over (and refuses
// one it cannot use); at its open-file limit it turns peers away, says
// so once, and does not spin.
#include "arbiter_support.hpp"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

extern char** environ;

namespace hcr::test {
namespace {

// A child process with its stdout (and stderr) on a pipe.
class Child {
 public:
  /// `fd3`: a descriptor the child gets as its descriptor 3 (a socket systemd would hand over).
  explicit Child(std::vector<std::string> args, int fd3 = -1) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (fd3 >= 0) posix_spawn_file_actions_adddup2(&fa, fd3, 3);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ), 0) << args[0];
    posix_spawn_file_actions_destroy(&fa);
    ::close(p[1]);
    out_ = p[0];
  }
  ~Child() {
    if (pid_ > 0 && status_ < 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(out_);
  }
  /// The next output line that contains `needle` (empty after 60 s or at EOF).
  std::string line_with(const std::string& needle) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      size_t nl;
      while ((nl = buf_.find('\n')) != std::string::npos) {
        std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        all_ += l + "\n";
        if (l.find(needle) != std::string::npos) return l;
      }
      if (std::chrono::steady_clock::now() > deadline) return "";
      pollfd pf{out_, POLLIN, 0};
      if (::poll(&pf, 1, 100) <= 0) continue;
      char b[512];
      const ssize_t n = ::read(out_, b, sizeof b);
      if (n <= 0) return "";
      buf_.append(b, static_cast<size_t>(n));
    }
  }
  /// Its exit status (-1 if it has not ended within 120 s).
  int wait() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (status_ < 0 && std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_)
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  const std::string& output() const { return all_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  int status_ = -1;
  std::string buf_, all_;
};

std::string sock(const TempDir& dir) { return (dir.path() / "arbiter.sock").string(); }

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// `hcr serve` on the socket, once it answers.
std::unique_ptr<Child> serve(const std::string& path) {
  auto c = std::make_unique<Child>(std::vector<std::string>{HCR_CLI, "serve", "--socket", path});
  EXPECT_FALSE(c->line_with("arbiter on").empty()) << c->output();
  return c;
}

Child tenant(const std::string& path, int tasks) {
  return Child({HCR_TENANT_HELPER, path, std::to_string(tasks), "4"});
}

TEST(ArbiterProcess, TwoProcessesFinishEveryTaskThroughTheArbiter) {
  TempDir dir;
  auto srv = serve(sock(dir));
  Child a = tenant(sock(dir), 2000), b = tenant(sock(dir), 2000);
  EXPECT_EQ(a.line_with("joined").rfind("joined 1", 0), 0u) << a.output();
  EXPECT_EQ(b.line_with("joined").rfind("joined 1", 0), 0u) << b.output();
  const std::string da = a.line_with("done"), db = b.line_with("done");
  EXPECT_EQ(a.wait(), 0) << a.output();
  EXPECT_EQ(b.wait(), 0) << b.output();
  EXPECT_NE(da.find("ok 1 connected 1"), std::string::npos) << da;
  EXPECT_NE(db.find("ok 1 connected 1"), std::string::npos) << db;
  // SIGTERM: a clean exit that removes the socket file.
  srv->signal(SIGTERM);
  EXPECT_FALSE(srv->line_with("stopped by signal").empty()) << srv->output();
  EXPECT_EQ(srv->wait(), 0);
  EXPECT_NE(srv->output().find("2 tenant(s) joined"), std::string::npos) << srv->output();
  EXPECT_FALSE(exists(sock(dir)));
}

TEST(ArbiterProcess, KillingTheArbiterMidRunLosesNothing) {
  TempDir dir;
  auto srv = serve(sock(dir));
  Child a = tenant(sock(dir), 4000), b = tenant(sock(dir), 4000);
  ASSERT_EQ(a.line_with("joined").rfind("joined 1", 0), 0u) << a.output();
  ASSERT_EQ(b.line_with("joined").rfind("joined 1", 0), 0u) << b.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both running
  srv->signal(SIGKILL);
  EXPECT_EQ(srv->wait(), 128 + SIGKILL);
  const std::string da = a.line_with("done"), db = b.line_with("done");
  EXPECT_EQ(a.wait(), 0) << a.output();
  EXPECT_EQ(b.wait(), 0) << b.output();
  // Each finished every task on its own share, the arbiter gone.
  EXPECT_NE(da.find("ok 1 connected 0 held 2"), std::string::npos) << da;
  EXPECT_NE(db.find("ok 1 connected 0 held 2"), std::string::npos) << db;
  // A socket file left by a killed arbiter is stale: a new one replaces it.
  ASSERT_TRUE(exists(sock(dir)));
  auto again = serve(sock(dir));
  again->signal(SIGTERM);
  EXPECT_EQ(again->wait(), 0);
}

TEST(ArbiterProcess, AKilledTenantsDevicesGoToTheOther) {
  TempDir dir;
  ServerThread srv([&] {
    arbiter::ServerOptions o;
    o.socket = sock(dir);
    return o;
  }());
  Child victim = tenant(sock(dir), 10000000);  // busy until killed
  ASSERT_EQ(victim.line_with("joined").rfind("joined 1", 0), 0u) << victim.output();
  Runtime rt(arbiter_sim(4, sock(dir)));
  Ledger l(3000);
  Kernel k = ledger_kernel(rt, l);
  std::thread f([&] { feed(rt, k, 0, 3000); });
  // Both busy: two devices each (the victim releases rt's two while running).
  EXPECT_TRUE(eventually([&] { return rt.stats().arbiter.held == 2; }))
      << "held " << rt.stats().arbiter.held;
  victim.signal(SIGKILL);
  EXPECT_EQ(victim.wait(), 128 + SIGKILL);
  EXPECT_TRUE(eventually([&] { return rt.stats().arbiter.held == 4 || l.all_once(); }))
      << "held " << rt.stats().arbiter.held;
  f.join();
  EXPECT_TRUE(l.all_once());
  EXPECT_EQ(rt.stats().failed, 0u);
  EXPECT_TRUE(eventually([&] { return srv.server().counters().left == 1; }));
  EXPECT_TRUE(srv.logged("left; its devices return to the pool"));
}

// A listening (or not) Unix socket bound to `path`, as systemd's socket unit makes one.
int bound_socket(const std::string& path, int type, bool listening) {
  const int fd = ::socket(AF_UNIX, type, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  EXPECT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0) << path;
  if (listening) {
    EXPECT_EQ(::listen(fd, 16), 0);
  }
  return fd;
}

// `hcr serve <args>` started as systemd starts a socket-activated service: `fd` as descriptor
// 3, LISTEN_PID its own pid, LISTEN_FDS `count`.
Child activated(int fd, const std::string& count, std::vector<std::string> args = {}) {
  std::vector<std::string> argv{
      "/bin/sh", "-c",    "export LISTEN_PID=$$ LISTEN_FDS=" + count + "; exec \"$@\"",
      "sh",      HCR_CLI, "serve"};
  argv.insert(argv.end(), args.begin(), args.end());
  return Child(argv, fd);
}

TEST(ArbiterProcess, ServeTakesTheSocketSystemdHandsOver) {
  TempDir dir;
  const int fd = bound_socket(sock(dir), SOCK_STREAM, true);
  ::chmod(sock(dir).c_str(), 0666);  // as a socket unit's SocketMode= might leave it
  Child srv = activated(fd, "1");
  ::close(fd);  // the server's copy is the one that listens now
  const std::string on = srv.line_with("arbiter on");
  EXPECT_NE(on.find("'" + sock(dir) + "', handed over by systemd"), std::string::npos)
      << srv.output();
  struct stat st {};
  ASSERT_EQ(::stat(sock(dir).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "only this user is allowed: the access is set as for "
                                         "a socket the server binds";
  Child a = tenant(sock(dir), 200);
  EXPECT_EQ(a.line_with("joined").rfind("joined 1", 0), 0u) << a.output();
  EXPECT_NE(a.line_with("done").find("ok 1 connected 1"), std::string::npos) << a.output();
  EXPECT_EQ(a.wait(), 0) << a.output();
  srv.signal(SIGTERM);
  EXPECT_FALSE(srv.line_with("stopped by signal").empty()) << srv.output();
  EXPECT_EQ(srv.wait(), 0) << srv.output();
  EXPECT_NE(srv.output().find("1 tenant(s) joined"), std::string::npos) << srv.output();
  EXPECT_TRUE(exists(sock(dir))) << "a socket systemd bound stays for systemd to remove";
}

TEST(ArbiterProcess, ServeRefusesAHandoverItCannotUse) {
  TempDir dir;
  struct Case {
    std::string what;
    int type;
    bool listening;
    std::string count;
    std::vector<std::string> args;
    std::string error;
  };
  const std::string other = (dir.path() / "other.sock").string();
  const Case cases[] = {
      {"a datagram socket", SOCK_DGRAM, false, "1", {}, "is not a listening Unix stream socket"},
      {"not listening", SOCK_STREAM, false, "1", {}, "is not a listening Unix stream socket"},
      {"two sockets", SOCK_STREAM, true, "2", {}, "takes exactly one"},
      {"another path",
       SOCK_STREAM,
       true,
       "1",
       {"--socket", other},
       "is bound to '" + sock(dir) + "', not to '" + other + "'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ::unlink(sock(dir).c_str());
    const int fd = bound_socket(sock(dir), c.type, c.listening);
    Child srv = activated(fd, c.count, c.args);
    ::close(fd);
    EXPECT_FALSE(srv.line_with(c.error).empty()) << srv.output();
    EXPECT_EQ(srv.wait(), 1) << srv.output();
    EXPECT_TRUE(exists(sock(dir))) << "a refused handover leaves its file";
  }
  // LISTEN_PID of another process: nothing was handed over to this one.
  Child srv(
      {"/bin/sh", "-c", "export LISTEN_PID=1 LISTEN_FDS=1; exec \"$@\"", "sh", HCR_CLI, "serve"});
  EXPECT_FALSE(srv.line_with("serve needs --socket PATH").empty()) << srv.output();
  EXPECT_EQ(srv.wait(), 1) << srv.output();
}

TEST(ArbiterProcess, ServeRefusesASocketALiveArbiterAnswersOn) {
  TempDir dir;
  auto srv = serve(sock(dir));
  Child second({HCR_CLI, "serve", "--socket", sock(dir)});
  EXPECT_FALSE(second.line_with("already answers").empty()) << second.output();
  EXPECT_EQ(second.wait(), 1);
  EXPECT_TRUE(exists(sock(dir))) << "the live one's socket stays";
  srv->signal(SIGINT);
  EXPECT_EQ(srv->wait(), 0);
}

TEST(ArbiterProcess, ServeTakesOnlyPlainDecimalSecondsForTheReleaseTimeout) {
  TempDir dir;
  struct Case {
    std::string value, error;
  };
  const std::string plain = "is not plain decimal seconds (such as 30 or 2.5): 0 (none), or 0.01 "
                            "to 86400 seconds";
  const std::string range = "is out of range: 0 (none), or 0.01 to 86400 seconds";
  const std::vector<Case> cases = {
      {"0x10", plain},  {"1e-9", plain},  {"1e3", plain},   {"-1", plain},
      {"+5", plain},    {"inf", plain},   {"nan", plain},   {" 5", plain},
      {"5s", plain},    {"", plain},      {".5", plain},    {"5.", plain},
      {"1.2.3", plain}, {"0.001", range}, {"86401", range}, {"99999999999999999999", range}};
  for (const Case& c : cases) {
    Child serve({HCR_CLI, "serve", "--socket", sock(dir), "--release-timeout", c.value});
    const std::string line = serve.line_with("--release-timeout");
    EXPECT_NE(line.find("--release-timeout '" + c.value + "' " + c.error), std::string::npos)
        << "'" << c.value << "': " << serve.output();
    EXPECT_EQ(serve.wait(), 1) << "'" << c.value << "'";
    EXPECT_FALSE(exists(sock(dir))) << "'" << c.value << "': it did not start";
  }
  for (const std::string ok : {"0", "2.5", "86400", "0.01"}) {
    Child serve({HCR_CLI, "serve", "--socket", sock(dir), "--release-timeout", ok});
    EXPECT_FALSE(serve.line_with("arbiter on").empty()) << ok << ": " << serve.output();
    serve.signal(SIGTERM);
    EXPECT_EQ(serve.wait(), 0) << ok;
  }
}

// CPU seconds (user and system) a process has used.
double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(all.substr(all.rfind(')') + 2));  // after "pid (comm) "
  std::string field;
  double ticks = 0;
  for (int i = 3; rest >> field && i <= 15; ++i)
    if (i >= 14) ticks += std::stod(field);  // fields 14 and 15: utime, stime
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

int connect_to(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  return fd;
}

// What the server sent before closing (or within 30 s).
std::string until_closed(int fd) {
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string all;
  char b[512];
  for (ssize_t n; (n = ::recv(fd, b, sizeof b, 0)) > 0;) all.append(b, static_cast<size_t>(n));
  return all;
}

TEST(ArbiterProcess, ServeAtItsOpenFileLimitTurnsPeersAwayWithoutSpinning) {
  TempDir dir;
  constexpr int kLimit = 16;
  Child serve({"/bin/sh", "-c",
               "ulimit -n " + std::to_string(kLimit) + " && exec " + HCR_CLI + " serve --socket " +
                   sock(dir)});
  ASSERT_FALSE(serve.line_with("arbiter on").empty()) << serve.output();
  EXPECT_NE(serve.output().find("the open-file limit (16) is below max_connections (256)"),
            std::string::npos)
      << serve.output();
  // Peers up to the limit are taken (joining); the ones after are told why and closed. (The
  // limit is on descriptor numbers: one inherited above it takes no place.)
  size_t open_now = 0;
  const std::string fds = "/proc/" + std::to_string(serve.pid()) + "/fd";
  for (auto& e : std::filesystem::directory_iterator(fds))
    open_now += std::stoi(e.path().filename().string()) < kLimit;
  ASSERT_LT(open_now, static_cast<size_t>(kLimit));
  const size_t fit = kLimit - open_now;
  std::vector<int> taken;
  for (size_t i = 0; i < fit; ++i) taken.push_back(connect_to(sock(dir)));
  std::vector<std::string> away;
  for (int i = 0; i < 3; ++i) {
    const int fd = connect_to(sock(dir));
    away.push_back(until_closed(fd));
    ::close(fd);
  }
  for (const std::string& got : away)
    EXPECT_NE(got.find("ERROR the arbiter is out of file descriptors (Too many open files; "
                       "open-file limit 16, " +
                       std::to_string(fit) + " connections): refused"),
              std::string::npos)
        << got;
  EXPECT_FALSE(serve.line_with("turning new peers away").empty()) << serve.output();
  // Nothing is left waiting for an accept: the server sleeps. (A loop on accept's EMFILE would
  // take a whole core: about 1 s of CPU here.)
  const double before = cpu_seconds(serve.pid());
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LT(cpu_seconds(serve.pid()) - before, 0.3) << "hcr serve spins";
  for (int fd : taken) ::close(fd);
  // Descriptors free again: a runtime joins.
  Runtime rt(arbiter_sim(2, sock(dir)));
  EXPECT_TRUE(rt.stats().arbiter.joined);
  serve.signal(SIGTERM);
  EXPECT_FALSE(serve.line_with("stopped by signal").empty()) << serve.output();
  EXPECT_EQ(serve.wait(), 0);
  size_t said = 0;
  const std::string& out = serve.output();
  for (size_t at = 0; (at = out.find("out of file descriptors", at)) != std::string::npos; ++at)
    ++said;
  EXPECT_EQ(said, 1u) << "one line for the episode: " << serve.output();
  EXPECT_NE(serve.output().find("accepting peers again (3 turned away meanwhile)"),
            std::string::npos)
      << serve.output();
}

}  // namespace
}  // namespace hcr::test
