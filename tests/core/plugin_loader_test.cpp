// The loader: search order, refusals, the stub plugin's call sequence, and every broken library
// skipped with a diagnostic that names it while the runtime carries on.
#include "../test_support.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace hcr {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

const PluginRecord* find_record(const LoadReport& r, const std::string& file_part) {
  for (auto& p : r.plugins)
    if (p.path.find(file_part) != std::string::npos) return &p;
  return nullptr;
}

// What the loader says of libother-machine.so, the stub with its ELF header's machine rewritten
// (tests/plugins/retarget.cmake): aarch64, or x86-64 on an aarch64 host.
#if defined(__x86_64__)
constexpr const char* kOtherMachine = "built for aarch64, this machine is x86-64";
#elif defined(__aarch64__)
constexpr const char* kOtherMachine = "built for x86-64, this machine is aarch64";
#else
constexpr const char* kOtherMachine = "cannot load";  // no machine check on this host
#endif

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST(PluginLoader, EveryBrokenLibraryIsSkippedWithItsReason) {
  Config c;
  c.use_environment = false;
  c.plugin_paths = {HCR_TEST_BROKEN_DIR, HCR_TEST_GOOD_DIR};
  c.backends = {{"broken", true, {}, "test"}, {"stub", true, {}, "test"}};
  test::LogCapture log(LogLevel::warn);
  Runtime rt(c);
  const LoadReport& r = rt.load_report();

  struct Case {
    const char* file;
    const char* reason;
  } cases[] = {
      {"libbroken-no_entry.so", "no entry symbol hcr_plugin_get_api"},
      {"libbroken-wrong_major.so", "speaks plugin ABI 2."},
      {"libbroken-short_table.so", "short table"},
      {"libbroken-null_entry.so", "required entry 'launch' is NULL"},
      {"libbroken-init_fails.so", "init failed: broken plugin: init refuses to start"},
      {"libbroken-garbage_size.so", "implausible table size"},
      {"libbroken-returns_null.so", "hcr_plugin_get_api returned NULL"},
      {"libnot-a-library.so", "cannot load"},
      {"libtruncated.so", "cannot load"},
      {"libother-machine.so", kOtherMachine},
  };
  for (const Case& k : cases) {
    const PluginRecord* rec = find_record(r, k.file);
    ASSERT_NE(rec, nullptr) << k.file << " not in the report";
    EXPECT_EQ(rec->status, PluginRecord::Status::skipped) << k.file;
    EXPECT_NE(rec->reason.find(k.reason), std::string::npos)
        << k.file << ": reason was '" << rec->reason << "'";
    EXPECT_TRUE(log.contains(k.file)) << "no warning names " << k.file;
  }
  // ... and the good plugin behind them still loads and works.
  const PluginRecord* stub = find_record(r, "libhcr-stub.so");
  ASSERT_NE(stub, nullptr);
  EXPECT_EQ(stub->status, PluginRecord::Status::loaded) << stub->reason;
  ASSERT_EQ(rt.devices().size(), 1u);
  EXPECT_EQ(rt.devices()[0].name, "stub0");
  rt.submit(Task(rt.kernel("noop"))).get();
}

TEST(PluginLoader, ALibraryForAnotherMachineIsSkippedNamingBothMachines) {
  const fs::path file = fs::path(HCR_TEST_BROKEN_DIR) / "libother-machine.so";
  Config c;
  c.use_environment = false;
  c.plugin_paths = {HCR_TEST_BROKEN_DIR, HCR_TEST_GOOD_DIR};
  c.backends = {{"stub", true, {}, "test"}};
  test::LogCapture log(LogLevel::warn);
  Runtime rt(c);
  // Named nowhere in the configuration, it is opened all the same (its name is no libhcr-<name>),
  // refused from its header before dlopen sees it, and the warning names the file and both
  // machines on one line.
  const LoadReport report = rt.load_report();
  const PluginRecord* rec = find_record(report, "libother-machine.so");
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->status, PluginRecord::Status::skipped);
  EXPECT_EQ(rec->reason, std::string("cannot load: ") + kOtherMachine);
  bool named = false;
  for (const std::string& line : log.lines())
    named = named || (line.find(file.string()) != std::string::npos &&
                      line.find(kOtherMachine) != std::string::npos);
  EXPECT_TRUE(named) << "no warning names " << file << " and '" << kOtherMachine << "'";
  EXPECT_EQ(rt.devices().size(), 1u);  // the real stub loads
  // Hot-plugged, it is refused the same way, naming the file.
  Error e = test::expect_error([&] { rt.load_plugin(file.string(), {"stub", true, {}, "test"}); });
  EXPECT_EQ(e.code(), ErrorCode::plugin);
  EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find(kOtherMachine), std::string::npos) << e.what();
  EXPECT_EQ(rt.devices().size(), 1u);
}

TEST(PluginLoader, StubRecordsTheCallSequence) {
  TempDir dir;
  fs::path calls = dir.path() / "calls.log";
  {
    Runtime rt(test::stub_config({{"devices", "2"}, {"call_log", calls.string()}}));
    ASSERT_EQ(rt.devices().size(), 2u);
    EXPECT_EQ(rt.devices()[1].name, "stub1");
    EXPECT_EQ(rt.devices()[0].kind, DeviceKind::accelerator);
    EXPECT_EQ(rt.devices()[0].concurrency, 2u);
    EXPECT_EQ(rt.devices()[0].backend, "stub");
    rt.submit(Task(rt.kernel("noop"))).get();
  }
  auto lines = read_lines(calls);
  ASSERT_GE(lines.size(), 9u);
  EXPECT_EQ(lines[0], "create");
  EXPECT_EQ(lines[1], "device_count");
  EXPECT_EQ(lines[2], "device_info 0");
  EXPECT_EQ(lines[3], "device_info 1");
  EXPECT_EQ(lines[4], "kernel_get 0 noop kind=0");  // built-in asked first, on each device
  EXPECT_EQ(lines[5], "kernel_get 1 noop kind=0");
  EXPECT_TRUE(lines[6] == "launch 0 noop" || lines[6] == "launch 1 noop") << lines[6];
  // Shutdown: synchronise, release kernels, then destroy — nothing after destroy.
  EXPECT_EQ(lines.back(), "destroy");
  size_t n = lines.size();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), "kernel_release noop"), 2);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "synchronize 0"), lines.end());
  EXPECT_LT(std::find(lines.begin(), lines.end(), "synchronize 0") - lines.begin(),
            static_cast<long>(n - 1));
}

TEST(PluginLoader, InitFailureFromOptionsIsSkippedNamingTheTable) {
  Config c = test::stub_config({{"fail_init", "true"}});
  c.backends[0].origin = "devices.toml:7";
  Runtime rt(c);
  EXPECT_TRUE(rt.devices().empty());
  const LoadReport report = rt.load_report();
  const PluginRecord* rec = find_record(report, "libhcr-stub.so");
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->status, PluginRecord::Status::skipped);
  EXPECT_NE(rec->reason.find("fail_init = true"), std::string::npos) << rec->reason;
  EXPECT_NE(rec->reason.find("devices.toml:7"), std::string::npos) << rec->reason;
}

TEST(PluginLoader, AnOptionThePluginRefusesIsAnErrorNamingFileLineAndKey) {
  // A [[backend]] key is checked by its plugin, but a mistake there is the file's, as a core
  // key's is: an error naming file, line and key, not a plugin skipped and zero devices.
  Config c = Config::parse(std::string("[runtime]\nplugin_paths = [\"") + HCR_TEST_GOOD_DIR +
                               "\"]\n[[backend]]\nname = \"stub\"\ndevices = 2\ndevcies = 2\n",
                           "devices.toml");
  c.use_environment = false;
  Error e = test::expect_error([&] { Runtime rt(c); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  EXPECT_EQ(std::string(e.what()),
            "devices.toml:6: backend.devcies: unknown option 'devcies' (plugin 'stub')");
  // A value of the wrong type is one too.
  Config bad_value = test::stub_config({{"devices", "two"}});
  bad_value.backends[0].origin = "x.toml:4";
  e = test::expect_error([&] { Runtime rt(bad_value); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  EXPECT_NE(std::string(e.what()).find("x.toml:4: backend.devices: option 'devices' = 'two' is "
                                       "not an integer (plugin 'stub')"),
            std::string::npos)
      << e.what();
}

TEST(PluginLoader, EveryMistakeInTheTablesIsReportedInOnePassInLineOrder) {
  const std::string text = std::string("[runtime]\nplugin_paths = [\"") + HCR_TEST_GOOD_DIR +
                           "\"]\n"
                           "[[backend]]\n"  // 3
                           "name = \"stub\"\n"
                           "name_prefix = \"a\"\n"
                           "devices = \"many\"\n"  // 6
                           "[[backend]]\n"         // 7
                           "name = \"stubb\"\n"
                           "[[backend]]\n"  // 9
                           "name = \"stub\"\n"
                           "colour = \"red\"\n"  // 11
                           "shape = \"round\"\n"
                           "[[backend]]\n"  // 13
                           "name = \"stub\"\n"
                           "name_prefix = \"d\"\n";
  Config c = Config::parse(text, "m.toml");
  c.use_environment = false;
  Error e = test::expect_error([&] { Runtime rt(c); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  const std::string what = e.what();
  const size_t a = what.find("m.toml:6: backend.devices: option 'devices' = 'many'");
  const size_t b = what.find("m.toml:7: backend.name: no plugin named 'stubb' in the search path "
                             "(found: stub");
  const size_t d = what.find("m.toml:11: backend.colour: unknown options 'colour', 'shape'");
  EXPECT_NE(a, std::string::npos) << what;
  EXPECT_NE(b, std::string::npos) << what;
  EXPECT_NE(d, std::string::npos) << what;
  EXPECT_LT(a, b) << what;
  EXPECT_LT(b, d) << what;
  EXPECT_EQ(std::count(what.begin(), what.end(), '\n'), 2) << what;  // the last table is fine
}

TEST(PluginLoader, APluginThatFailsForWantOfHardwareIsStillSkipped) {
  // Only mistakes in the table are errors: a plugin that cannot start here (its init fails with
  // anything but HCR_ERROR_INVALID_ARGUMENT) is skipped with a diagnostic, as before.
  Config c = test::stub_config({{"fail_init", "true"}});
  c.backends.push_back({"stub", true, {{"name_prefix", "ok"}}, "test"});
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 1u);
  EXPECT_EQ(rt.devices()[0].name, "ok0");
}

TEST(PluginLoader, ATableNamingAPluginThatCannotLoadHereIsNoMistake) {
  // libhcr-mine.so is there but unusable (built for nothing): the table's name is right, the
  // machine lacks the plugin. Skipped with the library's reason, not an error.
  test::TempDir dir;
  { std::ofstream(dir.path() / "libhcr-mine.so") << "not a library\n"; }
  Config c = test::stub_config();
  c.plugin_paths.push_back(dir.path().string());
  c.backends.push_back({"mine", true, {}, "x.toml:9"});
  test::LogCapture log(LogLevel::warn);
  Runtime rt(c);
  EXPECT_EQ(rt.devices().size(), 1u);
  bool reported = false;
  for (auto& p : rt.load_report().plugins)
    reported = reported ||
               (p.name == "mine" && p.reason.find("no usable plugin named 'mine' (backend table at "
                                                  "x.toml:9): perhaps " +
                                                  (dir.path() / "libhcr-mine.so").string() +
                                                  ": cannot load") != std::string::npos);
  EXPECT_TRUE(reported);
  EXPECT_TRUE(log.contains("backend 'mine' skipped"));
  // A library named for another plugin cannot be it: a misspelt name stays a mistake.
  c.backends.back().name = "mien";
  Error e = test::expect_error([&] { Runtime rt2(c); });
  EXPECT_NE(std::string(e.what()).find("x.toml:9: backend.name: no plugin named 'mien'"),
            std::string::npos)
      << e.what();
}

TEST(PluginLoader, TwoIdenticalTablesOfOnePluginAreAnError) {
  // Core cannot tell which keys select a backend's devices; two tables alike certainly drive
  // the same devices twice. Tables that differ in an option are taken to select different ones
  // (TwoTablesOfOnePluginMakeTwoInstances).
  const std::string text = std::string("[runtime]\nplugin_paths = [\"") + HCR_TEST_GOOD_DIR +
                           "\"]\n[[backend]]\nname = \"stub\"\ndevices = 2\n"
                           "[[backend]]\nname = \"stub\"\nmemory_limit = \"50%\"\ndevices = 2\n";
  Error e = test::expect_error([&] { Config::parse(text, "d.toml"); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  EXPECT_NE(std::string(e.what()).find("d.toml:6: backend: a second table for plugin 'stub' with "
                                       "the same options as the one at d.toml:3"),
            std::string::npos)
      << e.what();
  // Built by hand, the runtime refuses it the same way; one disabled is no duplicate.
  Config c = test::stub_config({{"devices", "2"}});
  c.backends.push_back({"stub", true, {{"devices", "2"}}, "hand:2"});
  e = test::expect_error([&] { Runtime rt(c); });
  EXPECT_NE(std::string(e.what()).find("hand:2: backend: a second table for plugin 'stub'"),
            std::string::npos)
      << e.what();
  c.backends.back().enabled = false;
  Runtime rt(c);
  EXPECT_EQ(rt.devices().size(), 2u);
}

TEST(PluginLoader, HotPlugWithOptionsThePluginRefusesIsAConfigError) {
  Runtime rt(test::stub_config());
  const std::string lib = std::string(HCR_TEST_GOOD_DIR) + "/libhcr-stub.so";
  BackendConfig b{"stub", true, {{"name_prefix", "x"}, {"devcies", "2"}}, "plug.toml:2"};
  b.option_origins = {"plug.toml:3", "plug.toml:4"};
  Error e = test::expect_error([&] { rt.load_plugin(lib, b); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  EXPECT_NE(std::string(e.what()).find("plug.toml:4: backend.devcies: unknown option 'devcies'"),
            std::string::npos)
      << e.what();
  EXPECT_EQ(rt.devices().size(), 1u);
}

TEST(PluginLoader, LibrariesOfPluginsNobodyAskedForAreNotOpened) {
  // Only "stub" is named: the install directory's libhcr-cpu.so and the others stay closed (their
  // dependencies' initialisers cost start-up time), listed as such.
  Runtime rt(test::stub_config());
  const LoadReport report = rt.load_report();
  const PluginRecord* cpu = find_record(report, "libhcr-cpu.so");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->status, PluginRecord::Status::skipped);
  EXPECT_EQ(cpu->reason, "not named in the configuration (not opened)");
  EXPECT_TRUE(cpu->name.empty());  // never asked
  EXPECT_EQ(rt.devices().size(), 1u);
}

TEST(PluginLoader, ARenamedLibraryIsStillFoundByItsPluginName) {
  // The file name is only a hint: a table's plugin missing after the hinted pass makes the loader
  // open the other libraries after all.
  test::TempDir dir;
  fs::copy_file(fs::path(HCR_TEST_GOOD_DIR) / "libhcr-stub.so", dir.path() / "libhcr-renamed.so");
  Config c = test::stub_config();
  c.plugin_paths = {dir.path().string()};
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 1u);
  EXPECT_EQ(rt.devices()[0].backend, "stub");
  const LoadReport report = rt.load_report();
  const PluginRecord* rec = find_record(report, "libhcr-renamed.so");
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->status, PluginRecord::Status::loaded);
}

TEST(PluginLoader, TwoTablesOfOnePluginMakeTwoInstances) {
  Config c = test::stub_config({{"name_prefix", "a"}});
  c.backends.push_back({"stub", true, {{"name_prefix", "b"}, {"devices", "2"}}, "test"});
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 3u);
  EXPECT_EQ(rt.devices()[0].name, "a0");
  EXPECT_EQ(rt.devices()[1].name, "b0");
  EXPECT_EQ(rt.devices()[2].name, "b1");
}

TEST(PluginLoader, MissingAndDisabledBackendsAreReported) {
  // A disabled table loads nothing and says so; a table naming no plugin found is a mistake.
  Config c = test::stub_config();
  c.backends.push_back({"cpu", false, {}, "x.toml:5"});
  Runtime rt(c);
  EXPECT_EQ(rt.devices().size(), 1u);
  bool disabled = false;
  for (auto& p : rt.load_report().plugins)
    if (p.name == "cpu" && p.path.empty())
      disabled = p.reason.find("disabled") != std::string::npos;
  EXPECT_TRUE(disabled);
  c.backends.push_back({"nonesuch", true, {}, "x.toml:3"});
  Error e = test::expect_error([&] { Runtime rt2(c); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  EXPECT_NE(std::string(e.what()).find("x.toml:3: backend.name: no plugin named 'nonesuch' in "
                                       "the search path (found: stub"),
            std::string::npos)
      << e.what();
}

TEST(PluginLoader, SearchOrderIsConfigThenEnvironmentThenInstall) {
  TempDir env_dir;
  fs::copy_file(fs::path(HCR_TEST_GOOD_DIR) / "libhcr-stub.so", env_dir.path() / "libhcr-stub.so");
  ::setenv("HCR_PLUGIN_PATH", ("relative/dir:" + env_dir.path().string()).c_str(), 1);
  Config c;
  c.plugin_paths = {HCR_TEST_GOOD_DIR};
  c.backends.push_back({"stub", true, {}, "test"});
  Runtime rt(c);
  ::unsetenv("HCR_PLUGIN_PATH");
  const LoadReport& r = rt.load_report();
  ASSERT_EQ(r.dirs.size(), 4u);
  EXPECT_EQ(r.dirs[0].origin, "config");
  EXPECT_EQ(r.dirs[1].origin, "HCR_PLUGIN_PATH");
  EXPECT_FALSE(r.dirs[1].used);
  EXPECT_NE(r.dirs[1].reason.find("not an absolute path"), std::string::npos);
  EXPECT_EQ(r.dirs[2].origin, "HCR_PLUGIN_PATH");
  EXPECT_TRUE(r.dirs[2].used);
  EXPECT_EQ(r.dirs[3].origin, "install");
  EXPECT_EQ(fs::path(r.dirs[3].path), fs::path(HCR_TEST_PLUGIN_DIR));
  // The copy in the environment's directory is shadowed by the configuration's.
  const PluginRecord* shadowed = find_record(r, env_dir.path().string());
  ASSERT_NE(shadowed, nullptr);
  EXPECT_NE(shadowed->reason.find("shadowed by"), std::string::npos) << shadowed->reason;
  EXPECT_EQ(rt.devices().size(), 1u);
}

TEST(PluginLoader, WorldWritableDirectoriesAndFilesAreRefused) {
  TempDir open_dir, open_file_dir;
  fs::copy_file(fs::path(HCR_TEST_GOOD_DIR) / "libhcr-stub.so", open_dir.path() / "libhcr-stub.so");
  fs::permissions(open_dir.path(), fs::perms::others_all, fs::perm_options::add);
  fs::path f = open_file_dir.path() / "libhcr-stub.so";
  fs::copy_file(fs::path(HCR_TEST_GOOD_DIR) / "libhcr-stub.so", f);
  fs::permissions(f, fs::perms::others_write, fs::perm_options::add);

  Config c;
  c.use_environment = false;
  c.plugin_paths = {open_dir.path().string(), open_file_dir.path().string()};
  Runtime rt(c);
  const LoadReport& r = rt.load_report();
  EXPECT_FALSE(r.dirs[0].used);
  EXPECT_NE(r.dirs[0].reason.find("world-writable directory"), std::string::npos);
  const PluginRecord* rec = find_record(r, open_file_dir.path().string());
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->status, PluginRecord::Status::skipped);
  EXPECT_NE(rec->reason.find("world-writable file"), std::string::npos) << rec->reason;
  for (auto& d : rt.devices()) EXPECT_NE(d.backend, "stub");
}

// The loader trusts a library only when nobody but root and this user can change what its path
// leads to: the directory searched, every directory above it, every symbolic link on the way and
// the file itself. These cases need another owner, hence root (CI runs the suite as root).
class PluginTrust : public ::testing::Test {
 protected:
  static constexpr uid_t kStranger = 4242;
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to give files to another user";
  }
  // `dir` holding a copy of the stub; returns the library's path.
  static fs::path with_stub(const fs::path& dir) {
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                             fs::perms::others_read | fs::perms::others_exec);
    const fs::path lib = dir / "libhcr-stub.so";
    fs::copy_file(fs::path(HCR_TEST_GOOD_DIR) / "libhcr-stub.so", lib);
    return lib;
  }
  // The runtime's verdict on searching `dir` for the stub: the directory's reason, else the
  // library's, else "" (loaded).
  static std::string verdict(const fs::path& dir) {
    Config c;
    c.use_environment = false;
    c.plugin_paths = {dir.string()};
    Runtime rt(c);
    const LoadReport r = rt.load_report();
    if (!r.dirs[0].used) return "dir: " + r.dirs[0].reason;
    const PluginRecord* rec = find_record(r, dir.string());
    if (rec == nullptr) return "no record";
    return rec->status == PluginRecord::Status::loaded ? "" : "file: " + rec->reason;
  }
  TempDir top_;
};

TEST_F(PluginTrust, ATrustedPathLoads) {
  with_stub(top_.path() / "plugins");
  EXPECT_EQ(verdict(top_.path() / "plugins"), "");
}

TEST_F(PluginTrust, ADirectoryOfAnotherUserIsRefused) {
  const fs::path dir = top_.path() / "plugins";
  with_stub(dir);
  ASSERT_EQ(::chown(dir.c_str(), kStranger, kStranger), 0);
  EXPECT_EQ(verdict(dir), "dir: directory " + dir.string() +
                              " belongs to uid 4242 (neither root nor this user): refused");
}

TEST_F(PluginTrust, AGroupWritableDirectoryIsRefused) {
  const fs::path dir = top_.path() / "plugins";
  with_stub(dir);
  fs::permissions(dir, fs::perms::group_write, fs::perm_options::add);
  EXPECT_EQ(verdict(dir), "dir: group-writable directory: refused");
}

TEST_F(PluginTrust, AParentWritableByOthersIsRefused) {
  const fs::path parent = top_.path() / "parent";
  const fs::path dir = parent / "plugins";
  with_stub(dir);
  fs::permissions(parent, fs::perms::group_write, fs::perm_options::add);
  EXPECT_EQ(verdict(dir),
            "dir: on its path: group-writable directory " + parent.string() + ": refused");
  // Another user's parent is as bad: they may rename our directory away and put theirs there.
  fs::permissions(parent, fs::perms::group_write, fs::perm_options::remove);
  ASSERT_EQ(::chown(parent.c_str(), kStranger, kStranger), 0);
  EXPECT_NE(verdict(dir).find("on its path: directory " + parent.string() + " belongs to uid 4242"),
            std::string::npos);
}

TEST_F(PluginTrust, AStickySharedParentIsLikeTmp) {
  // World-writable and sticky (root's /tmp): others may add entries but not replace ours.
  const fs::path shared = top_.path() / "shared";
  const fs::path dir = shared / "plugins";
  with_stub(dir);
  fs::permissions(shared, fs::perms::all | fs::perms::sticky_bit);
  EXPECT_EQ(verdict(dir), "");
  // ... but an entry there that another user owns is theirs to replace.
  ASSERT_EQ(::chown(dir.c_str(), kStranger, kStranger), 0);
  EXPECT_NE(verdict(dir).find("belongs to uid 4242"), std::string::npos);
  // Not sticky: anyone may rename our directory away.
  ASSERT_EQ(::chown(dir.c_str(), 0, 0), 0);
  fs::permissions(shared, fs::perms::sticky_bit, fs::perm_options::remove);
  EXPECT_EQ(verdict(dir),
            "dir: on its path: world-writable directory " + shared.string() + ": refused");
}

TEST_F(PluginTrust, ALibraryOfAnotherUserOrWritableByGroupIsRefused) {
  const fs::path dir = top_.path() / "plugins";
  const fs::path lib = with_stub(dir);
  ASSERT_EQ(::chown(lib.c_str(), kStranger, kStranger), 0);
  EXPECT_EQ(verdict(dir), "file: file " + lib.string() +
                              " belongs to uid 4242 (neither root nor this user): refused");
  ASSERT_EQ(::chown(lib.c_str(), 0, 0), 0);
  fs::permissions(lib, fs::perms::group_write, fs::perm_options::add);
  EXPECT_EQ(verdict(dir), "file: group-writable file: refused");
}

TEST_F(PluginTrust, SymbolicLinksAreFollowedAndTheirTargetsChecked) {
  // A link in a trusted directory to a library in an untrusted one: the target decides.
  const fs::path dir = top_.path() / "plugins";
  fs::create_directories(dir);
  const fs::path elsewhere = top_.path() / "elsewhere";
  const fs::path lib = with_stub(elsewhere);
  fs::create_symlink(lib, dir / "libhcr-stub.so");
  EXPECT_EQ(verdict(dir), "");
  fs::permissions(elsewhere, fs::perms::others_write, fs::perm_options::add);
  EXPECT_EQ(verdict(dir),
            "file: on its path: world-writable directory " + elsewhere.string() + ": refused");
  fs::permissions(elsewhere, fs::perms::others_write, fs::perm_options::remove);
  ASSERT_EQ(::chown(lib.c_str(), kStranger, kStranger), 0);
  EXPECT_NE(verdict(dir).find("file " + lib.string() + " belongs to uid 4242"), std::string::npos);
  // A searched directory that is a link: the same for its target.
  ASSERT_EQ(::chown(lib.c_str(), 0, 0), 0);
  const fs::path link_dir = top_.path() / "link-to-elsewhere";
  fs::create_symlink(elsewhere, link_dir);
  EXPECT_EQ(verdict(link_dir), "");
  ASSERT_EQ(::chown(elsewhere.c_str(), kStranger, kStranger), 0);
  EXPECT_NE(verdict(link_dir).find("directory " + elsewhere.string() + " belongs to uid 4242"),
            std::string::npos);
}

TEST_F(PluginTrust, ALinkAnotherUserOwnsInASharedDirectoryIsRefused) {
  // In a sticky directory the owner of an entry may replace it: a link there must be ours.
  const fs::path shared = top_.path() / "shared";
  fs::create_directories(shared);
  fs::permissions(shared, fs::perms::all | fs::perms::sticky_bit);
  const fs::path dir = top_.path() / "plugins";
  with_stub(dir);
  const fs::path link = shared / "plugins";
  fs::create_symlink(dir, link);
  EXPECT_EQ(verdict(link), "");
  ASSERT_EQ(::lchown(link.c_str(), kStranger, kStranger), 0);
  EXPECT_EQ(verdict(link), "dir: symbolic link " + link.string() + " belongs to uid 4242 in the " +
                               "shared directory " + shared.string() + ": refused");
}

TEST_F(PluginTrust, HotPlugChecksTheFileAndItsPathToo) {
  Runtime rt(test::stub_config());
  const fs::path dir = top_.path() / "plugins";
  const fs::path lib = with_stub(dir);
  ASSERT_EQ(::chown(dir.c_str(), kStranger, kStranger), 0);
  // Options of its own: the same plugin with the same options as the runtime's is refused anyway.
  const BackendConfig second{"stub", true, {{"devices", "1"}}, "test"};
  Error e = test::expect_error([&] { rt.load_plugin(lib.string(), second); });
  EXPECT_EQ(e.code(), ErrorCode::plugin);
  EXPECT_NE(std::string(e.what()).find("directory " + dir.string() + " belongs to uid 4242"),
            std::string::npos)
      << e.what();
  EXPECT_EQ(rt.devices().size(), 1u);
  ASSERT_EQ(::chown(dir.c_str(), 0, 0), 0);
  rt.load_plugin(lib.string(), second);
  EXPECT_EQ(rt.devices().size(), 2u);
}

TEST(PluginLoader, HotPlugRefusesARelativePath) {
  // A relative name would be looked up in the working directory, whatever that holds.
  Runtime rt(test::stub_config());
  const fs::path cwd = fs::current_path();
  fs::current_path(HCR_TEST_GOOD_DIR);
  Error e = test::expect_error([&] { rt.load_plugin("libhcr-stub.so"); });
  fs::current_path(cwd);
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("'libhcr-stub.so' is not an absolute path"),
            std::string::npos)
      << e.what();
  EXPECT_EQ(rt.devices().size(), 1u);
}

TEST(PluginLoader, NoConfigurationLoadsEveryInstalledPlugin) {
  Config c;
  c.use_environment = false;
  Runtime rt(c);
  const LoadReport report = rt.load_report();
  const PluginRecord* cpu = find_record(report, "libhcr-cpu.so");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->status, PluginRecord::Status::loaded);
  EXPECT_EQ(cpu->name, "cpu");
  bool has_cpu = false;
  for (auto& d : rt.devices()) has_cpu = has_cpu || d.kind == DeviceKind::cpu;
  EXPECT_TRUE(has_cpu);
}

TEST(PluginLoader, HandlesOutliveTheRuntimeAndThenRefuseUse) {
  Buffer<float> b;
  Kernel k;
  Event e;
  {
    Runtime rt(test::stub_config());
    b = rt.buffer<float>(4, 4);
    k = rt.kernel("noop");
    e = rt.submit(Task(k).read_write(b));
    e.wait();
  }  // plugins unloaded here; the handles keep only the runtime's bookkeeping alive
  EXPECT_TRUE(e.ready());
  EXPECT_NO_THROW(e.get());
  EXPECT_EQ(test::expect_error([&] { Task t(k); }).code(), ErrorCode::shutdown);
  EXPECT_EQ(test::expect_error([&] { b.acquire(); }).code(), ErrorCode::shutdown);
}

}  // namespace
}  // namespace hcr
