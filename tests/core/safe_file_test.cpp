// hcr::files on its own: which directories are trusted (owner, mode, sticky ancestors, links),
// atomic writes that never follow a planted link and keep the old file on a write error, reads
// that refuse FIFOs, devices, links and untrusted entries without blocking, size caps, locks.
// The tests run as root in CI: another user is uid 12345 (chown works as root); where chown is
// not allowed they skip.
#include "../../support/files/safe_file.hpp"
#include "../test_support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace hcr::files {
namespace {

namespace fs = std::filesystem;
constexpr uid_t kOtherUser = 12345;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void put(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

// Gives `p` (no link followed) to another user; false where this process may not.
bool give_away(const fs::path& p) { return ::lchown(p.c_str(), kOtherUser, kOtherUser) == 0; }

#define GIVE_AWAY(p)                                                       \
  do {                                                                     \
    if (!give_away(p)) GTEST_SKIP() << "cannot chown (not root): " << (p); \
  } while (0)

// The message of the FileError `f` throws (empty, with a failure, when it throws none).
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const FileError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no FileError";
  return {};
}

// ---- trusted directories ----------------------------------------------------------------------

TEST(TrustedDir, MakeCreatesMissingDirectoriesForTheUserAlone) {
  test::TempDir tmp;
  const fs::path dir = tmp.path() / "a" / "b" / "c";
  EXPECT_FALSE(TrustedDir::open(dir).has_value()) << "open creates nothing";
  EXPECT_FALSE(fs::exists(tmp.path() / "a"));
  TrustedDir d = TrustedDir::make(dir);
  EXPECT_EQ(d.path(), dir);
  for (const fs::path& p : {tmp.path() / "a", tmp.path() / "a" / "b", dir})
    EXPECT_EQ(mode_of(p), 0700u) << p;
  EXPECT_TRUE(TrustedDir::open(dir).has_value());
}

TEST(TrustedDir, ADirectoryOfAnotherUserIsRefusedNamingIt) {
  test::TempDir tmp;
  const fs::path theirs = tmp.path() / "theirs";
  fs::create_directory(theirs);
  GIVE_AWAY(theirs);
  EXPECT_EQ(refusal([&] { TrustedDir::open(theirs); }),
            theirs.string() + ": owned by uid 12345, neither this user (uid " +
                std::to_string(::geteuid()) + ") nor root");
  // Below it nothing is created: its owner could swap what we would make.
  EXPECT_NE(refusal([&] { TrustedDir::make(theirs / "mine"); }).find("owned by uid 12345"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(theirs / "mine"));
}

TEST(TrustedDir, AGroupOrWorldWritableDirectoryIsRefused) {
  test::TempDir tmp;
  for (auto [name, mode] : {std::pair{"world", 0777}, std::pair{"group", 0770}}) {
    const fs::path dir = tmp.path() / name;
    fs::create_directory(dir);
    ASSERT_EQ(::chmod(dir.c_str(), static_cast<mode_t>(mode)), 0);
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", mode);
    EXPECT_EQ(refusal([&] { TrustedDir::open(dir); }),
              dir.string() + ": writable by its group or others (mode " + octal + ")");
    // Sticky does not make the directory itself private: others could still add files to it.
    ASSERT_EQ(::chmod(dir.c_str(), static_cast<mode_t>(mode | S_ISVTX)), 0);
    EXPECT_NE(refusal([&] { TrustedDir::open(dir); }).find("writable by its group or others"),
              std::string::npos);
  }
}

// A directory above may be writable by others only when sticky (as /tmp, above every TempDir):
// then nobody but its owner can replace our directory in it.
TEST(TrustedDir, AWritableAncestorMustBeSticky) {
  test::TempDir tmp;
  const fs::path open_dir = tmp.path() / "open";
  fs::create_directories(open_dir / "mine");
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  EXPECT_NE(refusal([&] {
              TrustedDir::open(open_dir / "mine");
            }).find(open_dir.string() + ": writable by its group or others (mode 0777)"),
            std::string::npos);
  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);
  EXPECT_TRUE(TrustedDir::open(open_dir / "mine").has_value());
}

TEST(TrustedDir, LinksAreFollowedOnlyWhenTheUserOrRootMadeThem) {
  test::TempDir tmp;
  const fs::path real = tmp.path() / "real";
  fs::create_directory(real);
  fs::create_directory_symlink("real", tmp.path() / "mine");
  auto d = TrustedDir::open(tmp.path() / "mine");
  ASSERT_TRUE(d.has_value());
  d->write("f", "x");
  EXPECT_EQ(slurp(real / "f"), "x") << "through the link";
  // A link to an untrusted directory leads to a refusal of that directory.
  const fs::path open_dir = tmp.path() / "open";
  fs::create_directory(open_dir);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  fs::create_directory_symlink(open_dir, tmp.path() / "to-open");
  EXPECT_NE(refusal([&] { TrustedDir::open(tmp.path() / "to-open"); }).find(open_dir.string()),
            std::string::npos);
  // A link another user made is not followed at all.
  fs::create_directory_symlink("real", tmp.path() / "theirs");
  GIVE_AWAY(tmp.path() / "theirs");
  EXPECT_NE(refusal([&] { TrustedDir::open(tmp.path() / "theirs"); }).find("owned by uid 12345"),
            std::string::npos);
  // Nor a file where a directory is wanted.
  put(tmp.path() / "file", "");
  EXPECT_EQ(refusal([&] { TrustedDir::make(tmp.path() / "file" / "x"); }),
            (tmp.path() / "file").string() + ": not a directory");
}

// ---- writes -----------------------------------------------------------------------------------

TEST(TrustedDir, WriteReplacesTheWholeFileAndLeavesNoTemporary) {
  test::TempDir tmp;
  TrustedDir d = TrustedDir::make(tmp.path());
  d.write("f", "first version, longer");
  d.write("f", "second");
  EXPECT_EQ(slurp(tmp.path() / "f"), "second");
  EXPECT_EQ(mode_of(tmp.path() / "f"), 0600u);
  EXPECT_EQ(d.list(), std::vector<std::string>{"f"});
  EXPECT_EQ(*d.read("f", 100), "second");
}

// The temporaries' names are this process's id and a counter: links planted at the next ones are
// skipped, never followed; so is a link at the file's own name (replaced, not written through).
TEST(TrustedDir, PlantedLinksAreNeverFollowed) {
  test::TempDir tmp, victim_dir;
  const fs::path victim = victim_dir.path() / "victim";
  put(victim, "untouched");
  TrustedDir d = TrustedDir::make(tmp.path());
  for (int k = 0; k < 64; ++k)
    fs::create_symlink(
        victim, tmp.path() / (".f.tmp." + std::to_string(::getpid()) + "." + std::to_string(k)));
  fs::create_symlink(victim, tmp.path() / "f.tmp");  // the name hcr used to write through
  fs::create_symlink(victim, tmp.path() / "f");
  d.write("f", "written");
  EXPECT_EQ(slurp(victim), "untouched");
  EXPECT_FALSE(fs::is_symlink(tmp.path() / "f")) << "the link is replaced by the file";
  EXPECT_EQ(slurp(tmp.path() / "f"), "written");
  EXPECT_TRUE(fs::is_symlink(tmp.path() / (".f.tmp." + std::to_string(::getpid()) + ".0")));
}

// A write that fails (here: the file size limit, as a full disk would) leaves the old file as it
// was, no temporary, and an error naming the file and the system's reason.
TEST(TrustedDir, AFailedWriteKeepsTheOldFile) {
  test::TempDir tmp;
  TrustedDir d = TrustedDir::make(tmp.path());
  d.write("f", "old contents");
  const std::string big(1 << 20, 'x');
  std::string what;
  {
    auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
    rlimit old_limit{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
    rlimit small = old_limit;
    small.rlim_cur = 4096;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    try {
      d.write("f", big);
    } catch (const FileError& e) {
      what = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &old_limit);
    ::signal(SIGXFSZ, old_handler);
  }
  EXPECT_NE(what.find("cannot write"), std::string::npos) << what;
  EXPECT_NE(what.find("File too large"), std::string::npos) << what;
  EXPECT_NE(what.find(tmp.path().string() + "/.f.tmp."), std::string::npos) << what;
  EXPECT_EQ(slurp(tmp.path() / "f"), "old contents");
  EXPECT_EQ(d.list(), std::vector<std::string>{"f"}) << "the temporary is gone";
}

TEST(TrustedDir, ConcurrentWritersNeverMixTheirFiles) {
  test::TempDir tmp;
  TrustedDir d = TrustedDir::make(tmp.path());
  std::vector<std::thread> writers;
  for (char c : {'a', 'b', 'c', 'd'})
    writers.emplace_back([&d, c] {
      for (int i = 0; i < 50; ++i) d.write("f", std::string(10000 + i, c));
    });
  for (auto& t : writers) t.join();
  const std::string text = slurp(tmp.path() / "f");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text, std::string(text.size(), text[0])) << "one writer's whole file";
  EXPECT_EQ(d.list(), std::vector<std::string>{"f"});
}

// ---- reads ------------------------------------------------------------------------------------

TEST(TrustedDir, ReadRefusesWhatIsNotARegularFileWithoutOpeningIt) {
  test::TempDir tmp;
  TrustedDir d = TrustedDir::make(tmp.path());
  EXPECT_FALSE(d.read("missing", 100).has_value());
  // A FIFO opened for reading would block until a writer came: the test would hang.
  ASSERT_EQ(::mkfifo((tmp.path() / "fifo").c_str(), 0600), 0);
  EXPECT_EQ(refusal([&] { d.read("fifo", 100); }),
            (tmp.path() / "fifo").string() + ": a FIFO, not a regular file: refused");
  fs::create_directory(tmp.path() / "dir");
  EXPECT_NE(refusal([&] { d.read("dir", 100); }).find("a directory, not a regular file"),
            std::string::npos);
  put(tmp.path() / "target", "text");
  fs::create_symlink(tmp.path() / "target", tmp.path() / "link");
  EXPECT_NE(refusal([&] { d.read("link", 100); }).find("a symbolic link, not a regular file"),
            std::string::npos);
  if (::mknod((tmp.path() / "zero").c_str(), S_IFCHR | 0600, makedev(1, 5)) == 0) {
    EXPECT_NE(refusal([&] { d.read("zero", 100); }).find("a character device"), std::string::npos);
  }
  EXPECT_NE(refusal([&] { d.read("../x", 100); }).find("is not a file name"), std::string::npos);
}

TEST(TrustedDir, ReadRefusesEntriesOthersWroteOrMayWrite) {
  test::TempDir tmp;
  TrustedDir d = TrustedDir::make(tmp.path());
  put(tmp.path() / "open", "x");
  ASSERT_EQ(::chmod((tmp.path() / "open").c_str(), 0666), 0);
  EXPECT_EQ(refusal([&] { d.read("open", 100); }),
            (tmp.path() / "open").string() + ": writable by its group or others (mode 0666)");
  put(tmp.path() / "theirs", "x");
  GIVE_AWAY(tmp.path() / "theirs");
  EXPECT_NE(refusal([&] { d.read("theirs", 100); }).find("owned by uid 12345"), std::string::npos);
}

TEST(TrustedDir, ReadIsCapped) {
  test::TempDir tmp;
  TrustedDir d = TrustedDir::make(tmp.path());
  put(tmp.path() / "f", std::string(101, 'x'));
  EXPECT_EQ(*d.read("f", 101), std::string(101, 'x'));
  EXPECT_EQ(refusal([&] { d.read("f", 100); }),
            (tmp.path() / "f").string() + ": 101 bytes, more than the 100 allowed");
}

TEST(ReadFile, RefusesDevicesFifosAndDirectoriesAndCapsTheSize) {
  test::TempDir tmp;
  EXPECT_EQ(refusal([] { read_file("/dev/zero", 1 << 20); }),
            "/dev/zero: a character device, not a regular file");
  ASSERT_EQ(::mkfifo((tmp.path() / "fifo").c_str(), 0600), 0);
  EXPECT_NE(refusal([&] { read_file(tmp.path() / "fifo", 100); }).find("a FIFO"),
            std::string::npos);
  EXPECT_NE(refusal([&] { read_file(tmp.path(), 100); }).find("a directory"), std::string::npos);
  EXPECT_NE(refusal([&] { read_file(tmp.path() / "none", 100); }).find("No such file"),
            std::string::npos);
  put(tmp.path() / "f", "12345");
  fs::create_symlink(tmp.path() / "f", tmp.path() / "link");
  EXPECT_EQ(read_file(tmp.path() / "link", 5), "12345") << "the user's own path: links followed";
  EXPECT_NE(refusal([&] { read_file(tmp.path() / "f", 4); }).find("more than the 4 allowed"),
            std::string::npos);
}

TEST(WriteFile, ReplacesAtomicallyAndRefusesLinksAndSpecialFiles) {
  test::TempDir tmp, victim_dir;
  const fs::path victim = victim_dir.path() / "victim";
  put(victim, "untouched");
  const fs::path out = tmp.path() / "trace.json";
  write_file(out, "one");
  write_file(out, "two");
  EXPECT_EQ(slurp(out), "two");
  fs::create_symlink(victim, tmp.path() / "planted.json");
  EXPECT_EQ(refusal([&] { write_file(tmp.path() / "planted.json", "x"); }),
            (tmp.path() / "planted.json").string() +
                ": a symbolic link, not a regular file: not replaced");
  EXPECT_EQ(slurp(victim), "untouched");
  ASSERT_EQ(::mkfifo((tmp.path() / "fifo").c_str(), 0600), 0);
  EXPECT_NE(refusal([&] { write_file(tmp.path() / "fifo", "x"); }).find("a FIFO"),
            std::string::npos);
  EXPECT_NE(refusal([&] {
              write_file(tmp.path() / "missing-dir" / "f", "x");
            }).find("cannot open the directory"),
            std::string::npos);
}

// ---- locks ------------------------------------------------------------------------------------

TEST(TrustedDir, ALockExcludesAnotherHolderUntilReleased) {
  test::TempDir tmp;
  TrustedDir d = TrustedDir::make(tmp.path());
  {
    Lock held = d.lock(".lock", std::chrono::milliseconds(0));
    EXPECT_TRUE(held.held());
    std::string what = refusal([&] { d.lock(".lock", std::chrono::milliseconds(20)); });
    EXPECT_NE(what.find("still locked by another writer after 20 ms"), std::string::npos) << what;
  }
  EXPECT_TRUE(d.lock(".lock", std::chrono::milliseconds(0)).held()) << "released with its owner";
  // A link at the lock file's name is not followed (nor its target created or locked).
  fs::create_symlink(tmp.path() / "elsewhere", tmp.path() / "linked.lock");
  EXPECT_NE(refusal([&] {
              d.lock("linked.lock", std::chrono::milliseconds(0));
            }).find("cannot open the lock file"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(tmp.path() / "elsewhere"));
}

}  // namespace
}  // namespace hcr::files
