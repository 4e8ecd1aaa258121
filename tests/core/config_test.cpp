// TOML configuration: every key checked; errors name file, line and key.
#include "../test_support.hpp"

#include <sys/stat.h>

#include <fstream>

namespace hcr {
namespace {

using test::expect_error;

TEST(Config, ParsesEverySection) {
  Config c = Config::parse(R"(
[runtime]
plugin_paths = ["/opt/hcr/plugins", "/usr/local/lib/hcr"]
log_level = "info"

[scheduler]
policy = "eager"

[[backend]]
name = "cpu"
threads = 4

[[backend]]
name = "sim"
enabled = false
seed = 42
ratio = 0.5
verbose = true
kinds = ["gpu", "accelerator"]
[[backend.device]]
name = "fast"
gflops = 2000
[[backend.device]]
name = "slow"
[backend.link]
bandwidth = "20GB/s"
)",
                           "devices.toml");
  EXPECT_EQ(c.origin, "devices.toml");
  ASSERT_EQ(c.plugin_paths.size(), 2u);
  EXPECT_EQ(c.plugin_paths[1], "/usr/local/lib/hcr");
  ASSERT_TRUE(c.log_level.has_value());
  EXPECT_EQ(*c.log_level, LogLevel::info);
  EXPECT_EQ(c.policy, "eager");
  ASSERT_EQ(c.backends.size(), 2u);
  EXPECT_EQ(c.backends[0].name, "cpu");
  EXPECT_EQ(c.backends[0].origin, "devices.toml:9");
  ASSERT_EQ(c.backends[0].options.size(), 1u);
  EXPECT_EQ(c.backends[0].options[0], (std::pair<std::string, std::string>{"threads", "4"}));
  const auto& s = c.backends[1];
  EXPECT_FALSE(s.enabled);
  auto opt = [&](const std::string& k) -> std::string {
    for (auto& [key, v] : s.options)
      if (key == k) return v;
    return "<missing " + k + ">";
  };
  EXPECT_EQ(opt("seed"), "42");
  EXPECT_EQ(opt("ratio"), "0.5");
  EXPECT_EQ(opt("verbose"), "true");
  EXPECT_EQ(opt("kinds"), "gpu,accelerator");
  EXPECT_EQ(opt("device.0.name"), "fast");
  EXPECT_EQ(opt("device.0.gflops"), "2000");
  EXPECT_EQ(opt("device.1.name"), "slow");
  EXPECT_EQ(opt("link.bandwidth"), "20GB/s");
}

TEST(Config, ParsesRuntimeSchedulerDataAndTraceKeys) {
  Config c = Config::parse(R"(
[runtime]
quarantine_failures = 5
quarantine_window = 2.5
task_timeout = 30

[scheduler]
policy = "dmdas"
model_dir = "/var/cache/hcr"
calibrate = "force"
calibrate_samples = 7
seed = 11

[data]
prefetch = false
lookahead = 0
writeback = "eager"

[trace]
file = "/tmp/run.json"
gantt = "/tmp/run.svg"
counters = true
)",
                           "all.toml");
  EXPECT_EQ(c.quarantine_failures, 5);
  EXPECT_DOUBLE_EQ(c.quarantine_window, 2.5);
  EXPECT_DOUBLE_EQ(c.task_timeout, 30.0);
  EXPECT_EQ(c.policy, "dmdas");
  EXPECT_EQ(c.model_dir, "/var/cache/hcr");
  EXPECT_EQ(c.calibrate, "force");
  EXPECT_EQ(c.calibrate_samples, 7);
  EXPECT_EQ(c.seed, 11u);
  EXPECT_FALSE(c.prefetch);
  EXPECT_EQ(c.lookahead, 0);
  EXPECT_EQ(c.writeback, "eager");
  EXPECT_EQ(c.trace_file, "/tmp/run.json");
  EXPECT_EQ(c.gantt_file, "/tmp/run.svg");
  EXPECT_TRUE(c.counters);
}

TEST(Config, EmptyTextGivesDefaults) {
  Config c = Config::parse("", "empty.toml");
  EXPECT_TRUE(c.plugin_paths.empty());
  EXPECT_FALSE(c.log_level.has_value());
  EXPECT_EQ(c.policy, "auto") << "resolved from the devices when the runtime starts";
  EXPECT_TRUE(c.backends.empty());
}

struct BadCase {
  const char* text;
  const char* message;  // expected in the error, after "bad.toml:"
};

class ConfigErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(ConfigErrors, NameFileLineAndKey) {
  Error e = expect_error([] { Config::parse(GetParam().text, "bad.toml"); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos)
      << "error was: " << e.what();
}

INSTANTIATE_TEST_SUITE_P(
    Config, ConfigErrors,
    ::testing::Values(
        BadCase{"[runtime]\nplugin_path = []\n", "bad.toml:2: runtime.plugin_path: unknown key"},
        BadCase{"\n\n[runtme]\n", "bad.toml:3: runtme: unknown key"},
        BadCase{"[runtime]\nlog_level = 3\n",
                "bad.toml:2: runtime.log_level: expected a string, got an integer"},
        BadCase{"[runtime]\nlog_level = \"loud\"\n",
                "bad.toml:2: runtime.log_level: 'loud' is not one of"},
        BadCase{"[runtime]\nplugin_paths = \"/opt\"\n",
                "bad.toml:2: runtime.plugin_paths: expected an array of strings, got a string"},
        BadCase{"[runtime]\nplugin_paths = [\"rel/dir\"]\n",
                "bad.toml:2: runtime.plugin_paths: 'rel/dir' is not an absolute directory"},
        BadCase{"[scheduler]\npolicy = \"fastest\"\n",
                "bad.toml:2: scheduler.policy: unknown policy 'fastest' (known: auto, dmda, dmdas, "
                "eager, peft, random, ws)"},
        BadCase{"[scheduler]\npolicy = 1\n", "bad.toml:2: scheduler.policy: expected a string"},
        BadCase{"[scheduler]\nplicy = \"eager\"\n", "bad.toml:2: scheduler.plicy: unknown key"},
        BadCase{"[[backend]]\nthreads = 2\n", "bad.toml:1: backend.name: every [[backend]] needs"},
        BadCase{"[[backend]]\nname = 5\n", "bad.toml:2: backend.name: expected a string"},
        BadCase{"[[backend]]\nname = \"cpu\"\nenabled = \"yes\"\n",
                "bad.toml:3: backend.enabled: expected true or false"},
        BadCase{"[backend]\nname = \"cpu\"\n", "bad.toml:1: backend: expected [[backend]] tables"},
        BadCase{"[runtime]\ntask_timeout = -1\n",
                "bad.toml:2: runtime.task_timeout: expected a number of seconds (0: no limit)"},
        BadCase{"[runtime]\ntask_timeout = \"1s\"\n", "bad.toml:2: runtime.task_timeout:"},
        // Seconds become steady_clock durations: inf, nan and the absurd are refused.
        BadCase{"[runtime]\ntask_timeout = inf\n",
                "bad.toml:2: runtime.task_timeout: expected a number of seconds (0: no limit), "
                "at most 1e9"},
        BadCase{"[runtime]\ntask_timeout = nan\n", "bad.toml:2: runtime.task_timeout:"},
        BadCase{"[runtime]\ntask_timeout = 1e300\n", "bad.toml:2: runtime.task_timeout:"},
        BadCase{"[runtime]\nquarantine_window = inf\n",
                "bad.toml:2: runtime.quarantine_window: expected a positive number of seconds"},
        BadCase{"[runtime]\nquarantine_window = nan\n", "bad.toml:2: runtime.quarantine_window:"},
        BadCase{"[runtime]\nquarantine_failures = 0\n",
                "bad.toml:2: runtime.quarantine_failures: 0 is not 1 to 1000000"},
        BadCase{"[runtime]\nquarantine_window = 0\n",
                "bad.toml:2: runtime.quarantine_window: expected a positive number of seconds"},
        BadCase{"[scheduler]\nmodel_dir = \"models\"\n",
                "bad.toml:2: scheduler.model_dir: 'models' is not an absolute directory"},
        BadCase{"[scheduler]\ncalibrate = \"always\"\n",
                "bad.toml:2: scheduler.calibrate: 'always' is not one of auto, force, off"},
        BadCase{"[scheduler]\ncalibrate_samples = 0\n",
                "bad.toml:2: scheduler.calibrate_samples: 0 is not 1 to 1000"},
        BadCase{"[data]\nlookahead = -2\n",
                "bad.toml:2: data.lookahead: -2 is not -1 or 0 to 1024"},
        BadCase{"[data]\nwriteback = \"soon\"\n",
                "bad.toml:2: data.writeback: 'soon' is not lazy or eager"},
        BadCase{"[data]\nprefetch = 1\n", "bad.toml:2: data.prefetch: expected true or false"},
        BadCase{"[data]\nprefech = true\n", "bad.toml:2: data.prefech: unknown key"},
        BadCase{"[trace]\nfile = \"\"\n", "bad.toml:2: trace.file: an empty path"},
        BadCase{"[trace]\nformat = \"json\"\n", "bad.toml:2: trace.format: unknown key"},
        BadCase{"[arbiter]\nsocket = \"arb.sock\"\n",
                "bad.toml:2: arbiter.socket: 'arb.sock' is not an absolute path"},
        BadCase{"[arbiter]\nweight = 0\n",
                "bad.toml:2: arbiter.weight: expected a positive number, at most 1e6"},
        BadCase{"[arbiter]\nweight = \"2\"\n", "bad.toml:2: arbiter.weight: expected a positive"},
        BadCase{"[arbiter]\n\nsockt = \"/run/a.sock\"\n",
                "bad.toml:3: arbiter.sockt: unknown key (expected socket or weight)"},
        BadCase{"[runtime\n", "bad.toml:1:"},
        // Not whitespace where TOML++ expects it (inside TOML++ this reaches its
        // TOML_UNREACHABLE, tests/fuzz/ubsan_ignore.txt): still an error naming the place.
        BadCase{"a = 1 \xc5\xbe\n", "bad.toml:1:7:"}, BadCase{"a = 1\na = 2\n", "bad.toml:2:"}));

TEST(Config, ArbiterTable) {
  Config c = Config::parse("[arbiter]\nsocket = \"/run/hcr/a.sock\"\nweight = 2.5\n", "a.toml");
  EXPECT_EQ(c.arbiter_socket, "/run/hcr/a.sock");
  EXPECT_EQ(c.arbiter_weight, 2.5);
  Config d = Config::parse("", "empty.toml");
  EXPECT_TRUE(d.arbiter_socket.empty()) << "no arbiter unless asked for";
  EXPECT_EQ(d.arbiter_weight, 1);
}

TEST(Config, TheSampleFilesParse) {
  // What the README points users at must load as it stands.
  for (const char* name : {"devices.toml", "opencl.toml", "sim_machine.toml"}) {
    const std::string path = std::string(HCR_SOURCE_DIR) + "/samples/" + name;
    Config c;
    ASSERT_NO_THROW(c = Config::load(path)) << path;
    EXPECT_EQ(c.origin, path);
    EXPECT_FALSE(c.backends.empty()) << path << ": no [[backend]] table";
  }
  Config d = Config::load(std::string(HCR_SOURCE_DIR) + "/samples/devices.toml");
  EXPECT_EQ(d.task_timeout, 0.0);
  EXPECT_EQ(d.writeback, "lazy");
  EXPECT_TRUE(d.prefetch);
}

TEST(Config, LoadNamesAMissingFile) {
  Error e = expect_error([] { Config::load("/nonexistent/devices.toml"); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  EXPECT_NE(std::string(e.what()).find("/nonexistent/devices.toml"), std::string::npos);
}

TEST(Config, LoadReadsAFileAndNamesItInErrors) {
  test::TempDir dir;
  auto path = dir.path() / "devices.toml";
  std::ofstream(path) << "[scheduler]\npolicy = \"eager\"\n[[backend]]\nname = \"cpu\"\n"
                         "threads = 1\nbogus = [[1], [2]]\n";
  Error e = expect_error([&] { Config::load(path); });
  EXPECT_NE(std::string(e.what()).find(path.string() + ":6: bogus"), std::string::npos) << e.what();
}

TEST(Config, EveryProblemOfAFileIsReportedInOnePassInLineOrder) {
  Error e = expect_error([] {
    Config::parse("[runtime]\n"
                  "log_level = \"loud\"\n"  // 2
                  "[scheduler]\n"
                  "policy = \"eager\"\n"
                  "plicy = \"dmda\"\n"  // 5
                  "[data]\n"
                  "lookahead = -2\n"  // 7
                  "[[backend]]\n"     // 8: no name
                  "threads = 2\n"
                  "[[backend]]\n"
                  "name = \"cpu\"\n"
                  "bogus = [[1], [2]]\n"  // 12
                  "[trace]\n"
                  "file = \"\"\n",  // 14
                  "many.toml");
  });
  EXPECT_EQ(e.code(), ErrorCode::config);
  const std::string expected =
      "many.toml:2: runtime.log_level: 'loud' is not one of trace, debug, info, warn, error, off\n"
      "many.toml:5: scheduler.plicy: unknown key (expected policy, model_dir, calibrate, "
      "calibrate_samples, seed, objective, max_slowdown, gamma or idle_power)\n"
      "many.toml:7: data.lookahead: -2 is not -1 or 0 to 1024\n"
      "many.toml:8: backend.name: every [[backend]] needs a name\n"
      "many.toml:12: bogus: arrays may hold values or tables, not a mix or nested arrays\n"
      "many.toml:14: trace.file: an empty path";
  EXPECT_EQ(std::string(e.what()), expected);
}

TEST(Config, AFileOfManyMistakesGetsAReadableMessage) {
  std::string text = "[scheduler]\n";
  for (int i = 0; i < 120; ++i) text += "key" + std::to_string(i) + " = 1\n";
  Error e = expect_error([&] { Config::parse(text, "many.toml"); });
  const std::string what = e.what();
  EXPECT_EQ(what.rfind("many.toml:2: scheduler.key0: unknown key", 0), 0u) << what;
  EXPECT_NE(what.find("many.toml:51: scheduler.key49: unknown key"), std::string::npos);
  EXPECT_EQ(what.find("scheduler.key50:"), std::string::npos);
  EXPECT_NE(what.find("\n(and 70 more)"), std::string::npos) << what.substr(what.size() - 40);
}

TEST(Config, BackendOptionsRememberTheirLines) {
  Config c = Config::parse("[[backend]]\nname = \"sim\"\nseed = 3\n[[backend.device]]\n"
                           "name = \"a\"\ngflops = 5\n",
                           "lines.toml");
  ASSERT_EQ(c.backends.size(), 1u);
  const BackendConfig& b = c.backends[0];
  ASSERT_EQ(b.option_origins.size(), b.options.size());
  for (size_t i = 0; i < b.options.size(); ++i) {
    const std::string& key = b.options[i].first;
    const std::string want = key == "seed"              ? "lines.toml:3"
                             : key == "device.0.name"   ? "lines.toml:5"
                             : key == "device.0.gflops" ? "lines.toml:6"
                                                        : "?";
    EXPECT_EQ(b.option_origins[i], want) << key;
  }
}

TEST(Config, LoadRefusesWhatIsNoRegularFileWithoutReadingIt) {
  // /dev/zero would never end, a FIFO would block the open: refused from stat alone.
  Error e = expect_error([] { Config::load("/dev/zero"); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  EXPECT_EQ(std::string(e.what()),
            "configuration file '/dev/zero' is not a regular file (a character device): refused");
  test::TempDir dir;
  const auto fifo = dir.path() / "devices.toml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  e = expect_error([&] { Config::load(fifo); });
  EXPECT_NE(std::string(e.what()).find("is not a regular file (a FIFO): refused"),
            std::string::npos)
      << e.what();
  e = expect_error([&] { Config::load(dir.path()); });
  EXPECT_EQ(std::string(e.what()),
            "configuration file '" + dir.path().string() + "' is a directory");
}

TEST(Config, LoadRefusesAFileOverItsSizeCap) {
  test::TempDir dir;
  const auto big = dir.path() / "big.toml";
  { std::ofstream(big) << "# a comment\n"; }
  std::filesystem::resize_file(big, (16u << 20) + 1);  // sparse: costs no disk
  Error e = expect_error([&] { Config::load(big); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  EXPECT_NE(std::string(e.what()).find("is larger than 16 MiB: refused"), std::string::npos)
      << e.what();
}

TEST(Config, EnvironmentOverridesPolicy) {
  Config c = test::cpu_config(1);
  c.use_environment = true;
  c.policy = "no-such-policy";
  ::setenv("HCR_SCHED", "eager", 1);
  Runtime rt(c);
  ::unsetenv("HCR_SCHED");
  EXPECT_EQ(rt.policy(), "eager");
}

TEST(Config, UnknownPolicyFailsTheRuntimeClearly) {
  Config c = test::cpu_config(1);
  c.policy = "fastest";
  Error e = expect_error([&] { Runtime rt(c); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  EXPECT_NE(std::string(e.what()).find("'fastest'"), std::string::npos);
}

}  // namespace
}  // namespace hcr
