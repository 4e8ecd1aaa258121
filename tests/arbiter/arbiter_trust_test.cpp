// The arbiter between users. The tests run as root; a child process takes the part of another
// user (nobody, 65534). A runtime refuses an arbiter of another user, says why, and sends it
// nothing; `hcr serve` refuses a socket directory or a socket file of another user, naming them;
// an arbiter run by root lets the allowed users and groups in, and nobody else.
#include "arbiter_support.hpp"

#include <hcr/arbiter/protocol.hpp>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <functional>

namespace hcr::test {
namespace {

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

#define REQUIRE_ROOT()                                                         \
  do {                                                                         \
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (a child changes user)"; \
  } while (false)

void say(int fd, const std::string& s) {
  const std::string l = s + "\n";
  [[maybe_unused]] ssize_t n = ::write(fd, l.data(), l.size());
}

sockaddr_un address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  return a;
}

// A child process that becomes another user: `before` runs as root, then the child takes uid
// `uid`, gid 65534 and the supplementary `groups`, and runs `body`. Each writes what it has to say
// to the descriptor it is given, a line at a time; the test reads them with line().
class AsUser {
 public:
  using Part = std::function<void(int out)>;
  AsUser(uid_t uid, std::vector<gid_t> groups, Part before, Part body) {
    int p[2];
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[0]);
      if (before) before(p[1]);
      if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(kNogroup) != 0 ||
          ::setuid(uid) != 0) {
        say(p[1], std::string("cannot change user: ") + std::strerror(errno));
        ::_exit(1);
      }
      body(p[1]);
      ::_exit(0);
    }
    ::close(p[1]);
    out_ = p[0];
  }
  ~AsUser() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    ::close(out_);
  }
  /// Ends it (its sockets close).
  void end() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  /// Its next line; empty at its end or after 30 s.
  std::string line() {
    std::string l;
    char c;
    for (;;) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 30000) <= 0 || ::read(out_, &c, 1) != 1 || c == '\n') return l;
      l += c;
    }
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

// A peer's whole join with the two devices of arbiter_sim(2); the arbiter's first line, or why
// there is none.
std::string join(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_un a = address(path);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0)
    return std::string("connect: ") + std::strerror(errno);
  std::string msg = "HELLO 1 1\n";
  for (const arbiter::DeviceReport& d : FakeHost(2).devices())
    msg += arbiter::format(arbiter::msg::Device{d});
  msg += "JOINED\n";
  if (::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(msg.size()))
    return std::string("send: ") + std::strerror(errno);
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string l;
  char c;
  while (::recv(fd, &c, 1, 0) == 1 && c != '\n') l += c;
  ::close(fd);
  return l.empty() ? "closed without a word" : l;
}

// A directory under a test directory that others may search (the test directory is 0700).
std::filesystem::path searchable(const TempDir& dir, const std::string& name, uid_t owner = 0) {
  EXPECT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  const std::filesystem::path d = dir.path() / name;
  std::filesystem::create_directory(d);
  EXPECT_EQ(::chmod(d.c_str(), 0755), 0);
  EXPECT_EQ(::chown(d.c_str(), owner, owner == 0 ? 0 : kNogroup), 0);
  return d;
}

arbiter::ClientOptions client_options(const std::string& path) {
  arbiter::ClientOptions o;
  o.socket = path;
  o.connect_timeout = std::chrono::milliseconds(2000);
  o.join_timeout = std::chrono::milliseconds(500);
  return o;
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(ArbiterTrust, ARuntimeRefusesAnArbiterOfAnotherUserAndSendsItNothing) {
  REQUIRE_ROOT();
  TempDir dir;
  const std::string path = (searchable(dir, "theirs", kNobody) / "arbiter.sock").string();
  // Another user listens first on the path the runtimes use, and counts what they send.
  AsUser other(kNobody, {}, nullptr, [&](int out) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const sockaddr_un a = address(path);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 8) != 0)
      return say(out, std::string("cannot listen: ") + std::strerror(errno));
    say(out, "listening");
    for (;;) {
      const int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) return;
      size_t bytes = 0;
      char b[4096];
      for (ssize_t n; (n = ::read(c, b, sizeof b)) > 0;) bytes += static_cast<size_t>(n);
      say(out, "received " + std::to_string(bytes));
      ::close(c);
    }
  });
  ASSERT_EQ(other.line(), "listening");
  {  // Their socket file: not even connected to.
    FakeHost host(2);
    arbiter::Client client(host, client_options(path));
    EXPECT_FALSE(client.start());
    EXPECT_TRUE(host.logged("arbiter '" + path +
                            "': the socket file belongs to uid 65534 (nobody), neither this user "
                            "(uid 0 (root)) nor root: refused; running on every device"))
        << host.text();
  }
  // Their process behind a socket file of root's: its credentials refuse it, before a word.
  ASSERT_EQ(::chown(path.c_str(), 0, 0), 0);
  {
    FakeHost host(2);
    arbiter::Client client(host, client_options(path));
    EXPECT_FALSE(client.start());
    EXPECT_TRUE(host.logged("arbiter '" + path + "': it runs as uid 65534 (nobody) (pid "))
        << host.text();
    EXPECT_TRUE(host.logged("neither this user (uid 0 (root)) nor root: refused")) << host.text();
  }
  EXPECT_EQ(other.line(), "received 0") << "the other user's listener saw the runtime's devices";
}

TEST(ArbiterTrust, ServeRefusesASocketOfAnotherUserNamingThem) {
  REQUIRE_ROOT();
  TempDir dir;
  const std::string path = (searchable(dir, "run") / "arbiter.sock").string();
  {  // A live one: bound as root in a directory of root's, then listening as nobody.
    AsUser other(
        kNobody, {},
        [&](int out) {
          const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);  // kept across the change of user
          const sockaddr_un a = address(path);
          if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
              ::chown(path.c_str(), kNobody, kNogroup) != 0 || ::dup2(fd, 100) != 100)
            say(out, std::string("cannot bind: ") + std::strerror(errno));
        },
        [&](int out) {
          if (::listen(100, 8) != 0)
            return say(out, std::string("listen: ") + std::strerror(errno));
          say(out, "listening");
          ::pause();
        });
    ASSERT_EQ(other.line(), "listening");
    const std::string what = what_of([&] { arbiter::Server s({.socket = path}); });
    EXPECT_NE(what.find("an arbiter already answers on '" + path + "' (pid "), std::string::npos)
        << what;
    EXPECT_NE(what.find(", uid 65534 (nobody); its socket file belongs to uid 65534 (nobody))"),
              std::string::npos)
        << what;
    other.end();
  }
  // Its server gone, the file stays another user's: not removed, named.
  const std::string what = what_of([&] { arbiter::Server s({.socket = path}); });
  EXPECT_NE(what.find("'" + path +
                      "' is a socket nobody answers on, but its socket file belongs "
                      "to uid 65534 (nobody), not this user (uid 0 (root)): refused (remove it "
                      "if it is stale)"),
            std::string::npos)
      << what;
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);
}

TEST(ArbiterTrust, ServeRefusesASocketDirectoryOfAnotherUser) {
  REQUIRE_ROOT();
  TempDir dir;
  const std::filesystem::path theirs = searchable(dir, "theirs", kNobody);
  const std::string what =
      what_of([&] { arbiter::Server s({.socket = (theirs / "arbiter.sock").string()}); });
  EXPECT_NE(what.find("its directory is not trusted: " + theirs.string() +
                      ": owned by uid 65534, neither this user (uid 0) nor root"),
            std::string::npos)
      << what;
}

TEST(ArbiterTrust, ARootArbiterLetsAnAllowedUserIn) {
  REQUIRE_ROOT();
  TempDir dir;
  const std::string path = (searchable(dir, "run") / "arbiter.sock").string();
  arbiter::ServerOptions o;
  o.socket = path;
  o.users = {kNobody};
  ServerThread srv(o);
  AsUser allowed(kNobody, {}, nullptr, [&](int out) { say(out, join(path)); });
  EXPECT_EQ(allowed.line().rfind("WELCOME 1 ", 0), 0u);
  AsUser other(kNobody - 1, {}, nullptr, [&](int out) { say(out, join(path)); });
  const std::string refused = other.line();
  EXPECT_EQ(refused.find("WELCOME"), std::string::npos) << refused;
  EXPECT_FALSE(refused.empty());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0007, 0u) << "others get nothing from the mode bits";
}

TEST(ArbiterTrust, ARootArbiterLetsAnAllowedGroupIn) {
  REQUIRE_ROOT();
  TempDir dir;
  const std::string path = (searchable(dir, "run") / "arbiter.sock").string();
  constexpr gid_t kGroup = 54321;
  arbiter::ServerOptions o;
  o.socket = path;
  o.groups = {kGroup};
  ServerThread srv(o);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, kGroup);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  // A member through a supplementary group (its primary group is nogroup).
  AsUser member(kNobody, {kGroup}, nullptr, [&](int out) { say(out, join(path)); });
  EXPECT_EQ(member.line().rfind("WELCOME 1 ", 0), 0u);
  AsUser outsider(kNobody, {}, nullptr, [&](int out) { say(out, join(path)); });
  const std::string refused = outsider.line();
  EXPECT_EQ(refused.find("WELCOME"), std::string::npos) << refused;
  EXPECT_FALSE(refused.empty());
}

TEST(ArbiterTrust, ARootArbiterLetsSeveralUsersAndGroupsInByAnAcl) {
  REQUIRE_ROOT();
  TempDir dir;
  const std::string path = (searchable(dir, "run") / "arbiter.sock").string();
  constexpr gid_t kGroup = 54321;
  arbiter::ServerOptions o;
  o.socket = path;
  o.users = {0, kNobody - 1, kNobody};
  o.groups = {kGroup, kGroup + 1};
  ServerThread srv(o);
  if (::getxattr(path.c_str(), "system.posix_acl_access", nullptr, 0) < 0) {
    EXPECT_TRUE(srv.logged("keeps no ACLs, so the socket is mode 0666")) << "no ACL, no word";
  }
  for (uid_t u : {kNobody, kNobody - 1}) {
    AsUser allowed(u, {}, nullptr, [&](int out) { say(out, join(path)); });
    EXPECT_EQ(allowed.line().rfind("WELCOME 1 ", 0), 0u) << "uid " << u;
  }
  AsUser member(kNobody - 2, {kGroup + 1}, nullptr, [&](int out) { say(out, join(path)); });
  EXPECT_EQ(member.line().rfind("WELCOME 1 ", 0), 0u);
  AsUser other(kNobody - 2, {}, nullptr, [&](int out) { say(out, join(path)); });
  const std::string refused = other.line();
  EXPECT_EQ(refused.find("WELCOME"), std::string::npos) << refused;
  EXPECT_FALSE(refused.empty());
}

}  // namespace
}  // namespace hcr::test
