// The loader: search order, refusals, the stub plugin's call sequence, and every broken library
// skipped with a diagnostic that names it while the runtime carries on.
#include "../test_support.hpp"

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
      {"libbroken-wrong_major.so", "speaks plugin ABI 2.0; this runtime speaks 1."},
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

TEST(PluginLoader, UnknownBackendOptionIsReportedByKey) {
  Runtime rt(test::stub_config({{"devcies", "2"}}));
  const LoadReport report = rt.load_report();
  const PluginRecord* rec = find_record(report, "libhcr-stub.so");
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->status, PluginRecord::Status::skipped);
  EXPECT_NE(rec->reason.find("unknown option 'devcies'"), std::string::npos) << rec->reason;
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
  Config c = test::stub_config();
  c.backends.push_back({"nonesuch", true, {}, "x.toml:3"});
  c.backends.push_back({"cpu", false, {}, "x.toml:5"});
  Runtime rt(c);
  EXPECT_EQ(rt.devices().size(), 1u);
  bool missing = false, disabled = false;
  for (auto& p : rt.load_report().plugins) {
    if (p.name == "nonesuch")
      missing = p.reason.find("no plugin named 'nonesuch'") != std::string::npos &&
                p.reason.find("x.toml:3") != std::string::npos;
    if (p.name == "cpu" && p.path.empty())
      disabled = p.reason.find("disabled") != std::string::npos;
  }
  EXPECT_TRUE(missing);
  EXPECT_TRUE(disabled);
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
