// The arbiter over its socket, in one process: a server thread and runtimes of simulated devices
// as tenants. Two runtimes share four devices (own shares, lending, reclaim), never both on one
// device; an arbiter that is not there, that refuses the peer, or that dies mid-run; a tenant
// that vanishes holding devices; malformed messages; a socket directory others can write. Bounds:
// a connect (or a new server's probe) to an arbiter that accepts nobody, a join never finished,
// more peers than the server takes, a runtime left with no device.
#include "arbiter_support.hpp"

#include <hcr/arbiter/protocol.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

namespace hcr::test {
namespace {

std::string sock(const TempDir& dir) { return (dir.path() / "arbiter.sock").string(); }

arbiter::ServerOptions options(const std::string& path) {
  arbiter::ServerOptions o;
  o.socket = path;
  return o;
}

TEST(ArbiterSocket, TwoRuntimesShareTheDevicesLendAndReclaim) {
  TempDir dir;
  ServerThread srv(options(sock(dir)));
  Ledger la(1000000), lb(400);
  NodeUse node;
  Runtime a(arbiter_sim(4, sock(dir)));
  Kernel ka = ledger_kernel(a, la, &node, 0);
  EXPECT_TRUE(a.stats().arbiter.joined);
  EXPECT_EQ(a.stats().arbiter.held, 4u) << "alone, it holds every device";
  Runtime b(arbiter_sim(4, sock(dir)));
  Kernel kb = ledger_kernel(b, lb, &node, 1);
  // Both idle: own shares, two each (a releases two, then b gets them).
  ASSERT_TRUE(eventually([&] {
    return a.stats().arbiter.held == 2 && b.stats().arbiter.held == 2;
  })) << "held "
      << a.stats().arbiter.held << " and " << b.stats().arbiter.held;
  EXPECT_EQ(a.stats().arbiter.own, 2u);
  EXPECT_EQ(b.stats().arbiter.own, 2u);

  // a saturating (until b is done), b idle: b's two are lent to a.
  std::atomic<bool> stop_a{false};
  int fed_a = 0;
  std::thread fa([&] { fed_a = feed_until(a, ka, stop_a, 1000000); });
  EXPECT_TRUE(eventually([&] { return a.stats().arbiter.held == 4; }))
      << "a holds " << a.stats().arbiter.held;
  EXPECT_EQ(a.stats().arbiter.borrowed, 2u);
  EXPECT_EQ(b.stats().arbiter.held, 0u);
  for (const DeviceCounters& d : b.stats().devices)
    EXPECT_EQ(d.health, DeviceHealth::withheld) << "lent to a";
  // b has work: a gives them back (after its running tasks there), b runs on them.
  const uint64_t released_before = a.stats().arbiter.released;
  std::thread fb([&] { feed(b, kb, 0, 400); });
  EXPECT_TRUE(eventually([&] { return b.stats().arbiter.held == 2 || lb.all_once(); }));
  fb.join();
  EXPECT_TRUE(lb.all_once()) << "every task of b ran exactly once";
  EXPECT_GE(a.stats().arbiter.released, released_before + 2) << "a released the borrowed two";
  EXPECT_GT(b.stats().devices[0].tasks + b.stats().devices[1].tasks + b.stats().devices[2].tasks +
                b.stats().devices[3].tasks,
            0u);
  stop_a = true;
  fa.join();
  EXPECT_TRUE(la.first_once(static_cast<size_t>(fed_a))) << "every task of a ran exactly once";
  EXPECT_EQ(node.overlaps.load(), 0) << "two runtimes on one device at once";
  const RuntimeStats sa = a.stats();
  EXPECT_EQ(sa.completed, sa.submitted);
  EXPECT_EQ(sa.failed, 0u);
  EXPECT_GT(sa.arbiter.max_release_seconds, 0.0);
  EXPECT_GE(srv.server().counters().arbitration.lends, 2u);
}

TEST(ArbiterSocket, NoArbiterThereRunsOnEveryDevice) {
  TempDir dir;
  LogCapture log(LogLevel::warn);
  Ledger l(200);
  Runtime rt(arbiter_sim(2, sock(dir)));
  Kernel k = ledger_kernel(rt, l);
  feed(rt, k, 0, 200);
  EXPECT_TRUE(l.all_once());
  const RuntimeStats s = rt.stats();
  EXPECT_FALSE(s.arbiter.joined);
  EXPECT_GT(s.devices[0].tasks, 0u);
  EXPECT_GT(s.devices[1].tasks, 0u);
  EXPECT_TRUE(log.contains("does not answer")) << "a warning names the socket";
  EXPECT_TRUE(log.contains(sock(dir)));
}

TEST(ArbiterSocket, TheEnvironmentNamesTheSocket) {
  TempDir dir;
  ServerThread srv(options(sock(dir)));
  Config c = arbiter_sim(2, "");
  c.use_environment = true;
  ::setenv("HCR_ARBITER_SOCKET", sock(dir).c_str(), 1);
  {
    Runtime rt(c);
    EXPECT_TRUE(rt.stats().arbiter.joined);
  }
  ::setenv("HCR_ARBITER_SOCKET", "relative.sock", 1);
  Error e = expect_error([&] { Runtime rt(c); });
  ::unsetenv("HCR_ARBITER_SOCKET");
  EXPECT_EQ(e.code(), ErrorCode::config);
  EXPECT_NE(std::string(e.what()).find("arbiter.socket: 'relative.sock' is not an absolute path"),
            std::string::npos)
      << e.what();
  Runtime plain(c);  // neither: no arbiter at all
  EXPECT_FALSE(plain.stats().arbiter.joined);
  EXPECT_EQ(srv.server().counters().joined, 1u);
}

TEST(ArbiterSocket, APeerNotAllowedIsRefusedWithADiagnostic) {
  TempDir dir;
  arbiter::ServerOptions o = options(sock(dir));
  o.users = {::getuid() + 1};  // somebody else: this process is not allowed
  ServerThread srv(o);
  LogCapture log(LogLevel::warn);
  Ledger l(100);
  Runtime rt(arbiter_sim(2, sock(dir)));
  Kernel k = ledger_kernel(rt, l);
  feed(rt, k, 0, 100);
  EXPECT_TRUE(l.all_once()) << "refused, it runs as without an arbiter";
  EXPECT_FALSE(rt.stats().arbiter.joined);
  EXPECT_EQ(srv.server().counters().refused, 1u);
  EXPECT_TRUE(srv.logged("uid " + std::to_string(::getuid())));
  EXPECT_TRUE(log.contains("refused")) << "the runtime says why";
  EXPECT_TRUE(log.contains("not an allowed user or group"));
}

TEST(ArbiterSocket, TheSocketFileIsOnlyForItsOwner) {
  TempDir dir;
  ServerThread srv(options(sock(dir)));
  struct stat st {};
  ASSERT_EQ(::stat(sock(dir).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A second server on a live socket refuses; a stale socket file is replaced.
  EXPECT_THROW(arbiter::Server(options(sock(dir))), std::runtime_error);
  srv.kill();
  EXPECT_NE(::stat(sock(dir).c_str(), &st), 0) << "the socket file is removed";
}

TEST(ArbiterSocket, AnArbiterThatDiesLeavesEachTenantItsOwnShareAndNothingLost) {
  TempDir dir;
  ServerThread srv(options(sock(dir)));
  LogCapture log(LogLevel::warn);
  Ledger la(1500), lb(1500);
  Runtime a(arbiter_sim(4, sock(dir)));
  Runtime b(arbiter_sim(4, sock(dir)));
  Kernel ka = ledger_kernel(a, la), kb = ledger_kernel(b, lb);
  ASSERT_TRUE(
      eventually([&] { return a.stats().arbiter.held == 2 && b.stats().arbiter.held == 2; }));
  std::thread fa([&] { feed(a, ka, 0, 1500); });
  // a borrows b's devices, then the arbiter dies with them lent.
  EXPECT_TRUE(eventually([&] { return a.stats().arbiter.borrowed == 2; }));
  srv.kill();
  EXPECT_TRUE(
      eventually([&] { return !a.stats().arbiter.connected && !b.stats().arbiter.connected; }));
  // a drops what it borrowed; b has its own share back.
  EXPECT_TRUE(eventually([&] {
    return a.stats().arbiter.held == 2 && b.stats().arbiter.held == 2;
  })) << a.stats().arbiter.held
      << " and " << b.stats().arbiter.held;
  std::thread fb([&] { feed(b, kb, 0, 1500); });
  fa.join();
  fb.join();
  EXPECT_TRUE(la.all_once());
  EXPECT_TRUE(lb.all_once());
  EXPECT_EQ(a.stats().failed + b.stats().failed, 0u);
  EXPECT_TRUE(log.contains("lost")) << "a warning says the arbiter went away";
}

// A raw connection speaking the protocol (or not).
class Raw {
 public:
  explicit Raw(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  ~Raw() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void send(const std::string& s) {
    ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }
  /// Everything until the server closes (or 30 s).
  std::string until_closed() {
    std::string all;
    char buf[512];
    timeval tv{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return all;
      all.append(buf, static_cast<size_t>(n));
    }
  }
  /// One line.
  std::string line() {
    std::string l;
    char c;
    timeval tv{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while (::recv(fd_, &c, 1, 0) == 1 && c != '\n') l += c;
    return l;
  }

 private:
  int fd_ = -1;
};

// A raw peer's HELLO and the keys of arbiter_sim(n)'s devices, as a runtime reports them.
void hello_with_the_sim_devices(Raw& peer, int n = 2) {
  peer.send("HELLO 1 1\n");
  for (const arbiter::DeviceReport& d : FakeHost(n).devices())
    peer.send(arbiter::format(arbiter::msg::Device{d}));
}

TEST(ArbiterSocket, MalformedMessagesDropThatPeerOnly) {
  TempDir dir;
  ServerThread srv(options(sock(dir)));
  struct Case {
    std::string send, error;
  };
  const std::vector<Case> cases = {
      {"DEVICE sim 0 1 k\n", "expected HELLO first"},
      {"HELLO 2 1\n", "protocol version 2"},
      {"HELLO 1 -3\n", "weight '-3'"},
      {"HELLO 1 1\nDEVICE quantum 0 1 k\n", "kind 'quantum'"},
      {"HELLO 1 1\nDEVICE sim lots 1 k\n", "memory 'lots'"},
      {"HELLO 1 1\nDEVICE sim 0 1 k\nDEVICE sim 0 1 k\n", "reported twice"},
      {"HELLO 1 1\nJOINED\nRELEASED x 1\n", "expected RELEASED <index> <seq>"},
      {"HELLO 1 1\nJOINED\nHELLO 1 1\n", "unexpected message"},
      {"FROB\n", "unknown message 'FROB'"},
      {std::string(2000, 'A'), "a line longer than"},
      {"HELLO 1 1\x01\n", "outside printable ASCII"},
  };
  for (const Case& c : cases) {
    Raw r(sock(dir));
    r.send(c.send);
    const std::string got = r.until_closed();
    EXPECT_NE(got.find("ERROR"), std::string::npos) << c.send.substr(0, 40) << " -> " << got;
    EXPECT_NE(got.find(c.error), std::string::npos) << c.send.substr(0, 40) << " -> " << got;
  }
  EXPECT_EQ(srv.server().counters().dropped, cases.size());
  // Still serving: a runtime joins and gets every device.
  Runtime rt(arbiter_sim(2, sock(dir)));
  EXPECT_TRUE(rt.stats().arbiter.joined);
  EXPECT_EQ(rt.stats().arbiter.held, 2u);
}

TEST(ArbiterSocket, ATenantThatVanishesHoldingDevicesReturnsThem) {
  TempDir dir;
  ServerThread srv(options(sock(dir)));
  Runtime rt(arbiter_sim(2, sock(dir)));
  ASSERT_EQ(rt.stats().arbiter.held, 2u);
  // A peer with the same two devices, busy while rt is idle: rt lends it both; then it never
  // gives anything back.
  Raw peer(sock(dir));
  hello_with_the_sim_devices(peer);
  peer.send("JOINED\nBUSY\n");
  EXPECT_EQ(peer.line().rfind("WELCOME 1 ", 0), 0u);
  ASSERT_TRUE(eventually([&] { return rt.stats().arbiter.held == 0; }))
      << "the keys match: rt lends the busy peer its devices";
  // rt has work: its own share is revoked from the peer, which does not answer. The tasks wait
  // (none fails for want of a device) ...
  Ledger l(300);
  Kernel k = ledger_kernel(rt, l);
  std::thread f([&] { feed(rt, k, 0, 300); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(rt.stats().arbiter.held, 0u);
  EXPECT_EQ(rt.stats().failed, 0u);
  peer.close();  // ... until it is gone, as a process killed
  EXPECT_TRUE(eventually([&] { return rt.stats().arbiter.held == 2; })) << "its device came back";
  f.join();
  EXPECT_TRUE(l.all_once());
  EXPECT_GE(srv.server().counters().left, 1u);
}

TEST(ArbiterSocket, ATaskWaitingForALentDeviceThatIsRemovedFailsRatherThanHangs) {
  TempDir dir;
  ServerThread srv(options(sock(dir)));
  Runtime rt(arbiter_sim(2, sock(dir)));
  Raw peer(sock(dir));  // busy while rt is idle: rt lends it both devices, and gets none back
  hello_with_the_sim_devices(peer);
  peer.send("JOINED\nBUSY\n");
  ASSERT_TRUE(eventually([&] { return rt.stats().arbiter.held == 0; }));
  Ledger l(1);
  Kernel k = ledger_kernel(rt, l);
  Event e = rt.submit(Task(k).param(0));  // waits for a device
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(rt.stats().completed, 0u);
  rt.remove_device(0);
  rt.remove_device(1);  // no device will ever take it now
  Error err = expect_error([&] { e.get(); });
  EXPECT_EQ(err.code(), ErrorCode::no_device) << err.what();
  EXPECT_EQ(rt.stats().devices[0].health, DeviceHealth::removed);
}

TEST(ArbiterSocket, ATenantThatKeepsARevokedDeviceIsDroppedAfterTheTimeout) {
  TempDir dir;
  arbiter::ServerOptions o = options(sock(dir));
  o.release_timeout = 0.2;
  ServerThread srv(o);
  // A peer that joins first (both devices are its), then never answers a revoke.
  Raw peer(sock(dir));
  hello_with_the_sim_devices(peer);
  peer.send("JOINED\n");
  EXPECT_EQ(peer.line().rfind("WELCOME 1 ", 0), 0u);
  Runtime rt(arbiter_sim(2, sock(dir)));
  Ledger l(200);
  Kernel k = ledger_kernel(rt, l);
  feed(rt, k, 0, 200);  // its own share arrives once the peer is dropped
  EXPECT_TRUE(l.all_once());
  EXPECT_EQ(rt.stats().failed, 0u);
  EXPECT_TRUE(srv.logged("not released within")) << "the server says why";
  EXPECT_NE(peer.until_closed().find("ERROR a revoked device not released within"),
            std::string::npos);
  EXPECT_TRUE(eventually([&] { return rt.stats().arbiter.held == 2; }));
}

// A socket that listens and never accepts, its backlog full: an arbiter stopped (SIGSTOP) with
// runtimes queued at it, or overwhelmed. A connect to it waits (non-blocking: EAGAIN).
class FullBacklog {
 public:
  explicit FullBacklog(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 0), 0);
    for (int i = 0; i < 64 && !full_; ++i) {
      const int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        queued_.push_back(c);
        continue;
      }
      full_ = errno == EAGAIN;
      ::close(c);
    }
  }
  ~FullBacklog() {
    close_listener();
    for (int c : queued_) ::close(c);
  }
  bool full() const { return full_; }
  /// Ends a connect that waits on it (ECONNREFUSED).
  void close_listener() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool full_ = false;
  std::vector<int> queued_;
};

TEST(ArbiterSocket, AConnectToAnArbiterThatAcceptsNobodyTimesOut) {
  TempDir dir;
  FullBacklog stopped(sock(dir));
  ASSERT_TRUE(stopped.full());
  FakeHost host(2);
  arbiter::ClientOptions o;
  o.socket = sock(dir);
  o.connect_timeout = std::chrono::milliseconds(100);
  o.join_timeout = std::chrono::milliseconds(100);
  arbiter::Client client(host, o);
  auto started = std::async(std::launch::async, [&] { return client.start(); });
  const bool returned = started.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  if (!returned) stopped.close_listener();  // lets the connect end, and the test
  EXPECT_TRUE(returned) << "a runtime's start still waits for the connect after 30 s";
  EXPECT_FALSE(started.get());
  EXPECT_TRUE(host.logged("does not answer (no connection accepted within 100 ms")) << host.text();
  EXPECT_TRUE(host.logged("running on every device")) << host.text();
}

TEST(ArbiterSocket, ANewServerDoesNotWaitOnAStoppedOne) {
  TempDir dir;
  FullBacklog stopped(sock(dir));
  ASSERT_TRUE(stopped.full());
  auto made = std::async(std::launch::async, [&] {
    try {
      arbiter::ServerOptions o = options(sock(dir));
      o.log = [](const std::string&) {};
      arbiter::Server server(o);
      return std::string("bound");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  });
  const bool returned = made.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  if (!returned) stopped.close_listener();
  EXPECT_TRUE(returned) << "the new server's probe still waits after 30 s";
  const std::string what = made.get();
  EXPECT_NE(what.find("an arbiter already answers on '" + sock(dir) + "'"), std::string::npos)
      << what;
}

TEST(ArbiterSocket, ASocketDirectoryOthersCanWriteIsRefused) {
  TempDir dir;
  const std::filesystem::path open = dir.path() / "open";
  std::filesystem::create_directory(open);
  const std::string path = (open / "arbiter.sock").string();
  for (const mode_t mode : {mode_t{0777}, mode_t{01777}, mode_t{0770}}) {
    ASSERT_EQ(::chmod(open.c_str(), mode), 0);
    try {
      arbiter::Server server(options(path));
      ADD_FAILURE() << "bound in a directory of mode " << std::oct << mode;
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("arbiter socket '" + path + "' refused: its directory is not trusted"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find(open.string() + ": writable by its group or others (mode "),
                std::string::npos)
          << what;
    }
    struct stat st {};
    EXPECT_NE(::lstat(path.c_str(), &st), 0) << "nothing is left there";
  }
}

TEST(ArbiterSocket, AJoinThatNeverFinishesIsDropped) {
  TempDir dir;
  arbiter::ServerOptions o = options(sock(dir));
  o.join_timeout = 0.2;
  ServerThread srv(o);
  Raw silent(sock(dir));  // connects and says nothing
  Raw half(sock(dir));    // starts a join and never ends it
  half.send("HELLO 1 1\n");
  for (Raw* peer : {&silent, &half}) {
    const std::string got = peer->until_closed();
    EXPECT_NE(got.find("ERROR did not finish joining (HELLO, DEVICE..., JOINED) within 0.2 s"),
              std::string::npos)
        << got;
  }
  EXPECT_TRUE(eventually([&] { return srv.server().counters().tenants == 0; }));
  EXPECT_EQ(srv.server().counters().dropped, 2u);
  EXPECT_TRUE(srv.logged("did not finish joining"));
  // A runtime sends its whole join at once.
  Runtime rt(arbiter_sim(2, sock(dir)));
  EXPECT_TRUE(rt.stats().arbiter.joined);
}

TEST(ArbiterSocket, PeersBeyondTheConnectionLimitAreTurnedAwayAndTheServerSaysSoOnce) {
  TempDir dir;
  arbiter::ServerOptions o = options(sock(dir));
  o.max_connections = 2;
  o.join_timeout = 600;
  ServerThread srv(o);
  Raw a(sock(dir)), b(sock(dir));  // accepted in their order: the two it takes
  Raw c(sock(dir)), d(sock(dir));
  for (Raw* peer : {&c, &d}) {
    const std::string got = peer->until_closed();
    EXPECT_NE(got.find("ERROR the arbiter serves at most 2 connections at once: refused"),
              std::string::npos)
        << got;
  }
  size_t said = 0;
  for (const std::string& l : srv.lines())
    said += l.find("at most 2 connections") != std::string::npos;
  EXPECT_EQ(said, 1u) << "one line for the episode, not one per peer";
  EXPECT_EQ(srv.server().counters().turned_away, 2u);
  a.close();
  ASSERT_TRUE(eventually([&] { return srv.server().counters().tenants == 1; }));
  Raw e(sock(dir));
  hello_with_the_sim_devices(e);
  e.send("JOINED\n");
  EXPECT_EQ(e.line().rfind("WELCOME 1 ", 0), 0u);
  EXPECT_TRUE(srv.logged("accepting peers again (2 turned away meanwhile)"));
}

TEST(ArbiterSocket, ARuntimeLeftWithNoDeviceSaysSoOnce) {
  TempDir dir;
  ServerThread srv(options(sock(dir)));
  // A busy peer with the runtime's one device, joined first: its own share.
  Raw peer(sock(dir));
  hello_with_the_sim_devices(peer, 1);
  peer.send("JOINED\nBUSY\n");
  EXPECT_EQ(peer.line().rfind("WELCOME 1 ", 0), 0u);
  LogCapture log(LogLevel::warn);
  Runtime rt(arbiter_sim(1, sock(dir)));
  ASSERT_TRUE(rt.stats().arbiter.joined);
  EXPECT_EQ(rt.stats().arbiter.own, 0u) << "one device, two tenants: the first has it";
  Ledger l(1);
  Kernel k = ledger_kernel(rt, l);
  Event e = rt.submit(Task(k).param(0));
  EXPECT_TRUE(eventually([&] { return log.contains("has work and no device"); }))
      << "the task waits without a word";
  EXPECT_TRUE(log.contains("its own share is empty (more tenants than devices)"));
  peer.close();  // the device returns: the task runs
  e.get();
  EXPECT_TRUE(l.all_once());
  size_t said = 0;
  for (const std::string& line : log.lines()) said += line.find("no device") != std::string::npos;
  EXPECT_EQ(said, 1u);
}

}  // namespace
}  // namespace hcr::test
