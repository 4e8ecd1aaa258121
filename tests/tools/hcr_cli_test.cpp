// The hcr command run as a user runs it: the built binary with arguments, its exit status and
// output checked. Plugins that crash or hang are found by `hcr devices`' probes and named.
#include "../test_support.hpp"

#include <hcr/sched.hpp>

#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>

namespace hcr {
namespace {

namespace fs = std::filesystem;

struct Result {
  int rc = -1;
  std::string out, err;
};

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `hcr ARGS...` with ENV (NAME=VALUE items) added to the test's environment.
Result hcr(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  test::TempDir dir;
  std::vector<std::string> words = {"env"};
  words.insert(words.end(), env.begin(), env.end());
  words.push_back(HCR_CLI);
  words.insert(words.end(), args.begin(), args.end());
  std::string cmd;
  for (const std::string& w : words) cmd.append(quoted(w)).append(" ");
  cmd.append(">").append(quoted((dir.path() / "out").string()));
  cmd.append(" 2>").append(quoted((dir.path() / "err").string()));
  const int status = std::system(cmd.c_str());
  Result r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(dir.path() / "out");
  r.err = slurp(dir.path() / "err");
  return r;
}

// A configuration file in `dir`: the stub plugin and the tables given.
fs::path config_file(const fs::path& dir, const std::string& tables,
                     const std::string& extra_dir = "") {
  const fs::path file = dir / "devices.toml";
  std::ofstream(file) << "[runtime]\nplugin_paths = [\"" << HCR_TEST_GOOD_DIR << "\""
                      << (extra_dir.empty() ? "" : ", \"" + extra_dir + "\"") << "]\n"
                      << tables;
  return file;
}

const std::string kStub = "[[backend]]\nname = \"stub\"\n";

TEST(HcrCli, DevicesListsAndSucceeds) {
  test::TempDir dir;
  Result r = hcr({"devices", "--config", config_file(dir.path(), kStub).string()});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("stub0"), std::string::npos) << r.out;
}

TEST(HcrCli, DevicesFailsWhenNoDeviceLoads) {
  test::TempDir dir;
  Result r =
      hcr({"devices", "--config", config_file(dir.path(), kStub + "devices = 0\n").string()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("devices:\n  (none)"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("no device loaded"), std::string::npos) << r.err;
}

// A plugin that loads and finds no device says why at info level; `hcr devices` prints it at any
// log level (the tests run at error).
TEST(HcrCli, DevicesSaysWhyAPluginHasNoDevice) {
  test::TempDir dir;
  Result r =
      hcr({"devices", "--config",
           config_file(dir.path(), kStub + "[[backend]]\nname = \"sim\"\n", HCR_TEST_PLUGIN_DIR)
               .string()});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("(0 devices)\n           why: sim: no devices: none described"),
            std::string::npos)
      << r.out;
}

TEST(HcrCli, HelpListsEveryPolicy) {
  Result r = hcr({"--help"});
  EXPECT_EQ(r.rc, 0);
  for (const std::string& p : sched::policy_names())
    EXPECT_NE(r.out.find(p), std::string::npos) << p << " missing from:\n" << r.out;
  EXPECT_NE(r.out.find("peft"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("auto (the default)"), std::string::npos) << r.out;
}

TEST(HcrCli, DevicesReportsEveryTableMistakeAndFails) {
  test::TempDir dir;
  const fs::path file =
      config_file(dir.path(), kStub + "devcies = 2\n[[backend]]\nname = \"stubb\"\n");
  Result r = hcr({"devices", "--config", file.string()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(file.string() + ":5: backend.devcies: unknown option 'devcies'"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(file.string() + ":6: backend.name: no plugin named 'stubb'"),
            std::string::npos)
      << r.err;
}

TEST(HcrCli, DevicesRefusesAConfigurationThatIsNoFileAtOnce) {
  Result r = hcr({"devices", "--config", "/dev/zero"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("'/dev/zero' is not a regular file (a character device): refused"),
            std::string::npos)
      << r.err;
  test::TempDir dir;
  r = hcr({"devices", "--config", dir.path().string()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
}

TEST(HcrCli, DevicesNeverWritesTheTraceFilesItsConfigurationNames) {
  // Listing what a configuration loads must not overwrite the trace of the last real run.
  test::TempDir dir;
  const fs::path trace = dir.path() / "run.json", gantt = dir.path() / "run.svg";
  { std::ofstream(trace) << "the last run's trace"; }
  const fs::path file =
      config_file(dir.path(), "[trace]\nfile = \"" + trace.string() + "\"\ngantt = \"" +
                                  gantt.string() + "\"\n" + kStub);
  Result r = hcr({"devices", "--config", file.string()},
                 {"HCR_TRACE=" + (dir.path() / "env.json").string()});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(slurp(trace), "the last run's trace");
  EXPECT_FALSE(fs::exists(gantt));
  EXPECT_FALSE(fs::exists(dir.path() / "env.json"));
}

// Each crashing library beside the stub: named with what it did and where, left out, the stub
// listed. (Sanitizer builds end a crashing process their own way, with an exit status: "crashed
// (SIGSEGV)" elsewhere, "crashed (exit status 1)" there.)
struct Crasher {
  const char* plugin;
  const char* how;
  const char* step;
};

class HcrCliProbe : public ::testing::TestWithParam<Crasher> {};

TEST_P(HcrCliProbe, DevicesNamesALibraryThatCrashesOrHangsAndListsTheRest) {
  test::TempDir dir;
  const std::string plugin = GetParam().plugin;
  const fs::path lib = fs::path(HCR_TEST_CRASHING_DIR) / ("libhcr-" + plugin + ".so");
  const fs::path file = config_file(dir.path(), kStub + "[[backend]]\nname = \"" + plugin + "\"\n",
                                    HCR_TEST_CRASHING_DIR);
  Result r = hcr({"devices", "--config", file.string(), "--probe-timeout", "5"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("stub0"), std::string::npos) << r.out;
  const std::string head = "hcr devices: " + lib.string() + " " + GetParam().how;
  const size_t at = r.err.find(head);
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
  EXPECT_NE(line.find(std::string(GetParam().step) + "; leaving it out and listing again"),
            std::string::npos)
      << line;
  // The listing names it too, among the plugins skipped, with the same verdict.
  const size_t listed = r.out.find(lib.string());
  ASSERT_NE(listed, std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::string(GetParam().how), listed), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("found probing in a child process; left out", listed), std::string::npos)
      << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    HcrCli, HcrCliProbe,
    ::testing::Values(Crasher{"crash_create", "crashed (", "in plugin_create"},
                      Crasher{"hang_count", "hung (no answer within 5 s)", "in device_count"},
                      Crasher{"crash_load", "crashed (",
                              "while loading (its static initialisers or hcr_plugin_get_api)"}),
    [](const auto& info) { return std::string(info.param.plugin); });

TEST(HcrCli, ACrashNamesItsPluginInTheLastLogLine) {
  // Without the probes (an application's own process), HCR_LOG=info still names the culprit:
  // the runtime says which library it is about to initialise before calling into it.
  test::TempDir dir;
  const fs::path file =
      config_file(dir.path(), "[[backend]]\nname = \"crash_create\"\n", HCR_TEST_CRASHING_DIR);
  Result r = hcr({"devices", "--no-probe", "--config", file.string()}, {"HCR_LOG=info"});
  EXPECT_NE(r.rc, 0);
  const std::string lib = (fs::path(HCR_TEST_CRASHING_DIR) / "libhcr-crash_create.so").string();
  const size_t at = r.err.rfind("hcr: info: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.substr(at, r.err.find('\n', at) - at),
            "hcr: info: initialising plugin 'crash_create' from " + lib)
      << r.err;
}

// hcr trace summary reads the file as a stream (memory of one event, whatever its size) and
// refuses what is not a regular file before reading from it (a FIFO would block it for ever).
TEST(HcrCli, TraceSummaryReadsATraceAndRefusesAFifo) {
  test::TempDir dir;
  const fs::path trace = dir.path() / "t.json";
  std::ofstream(trace)
      << R"({"traceEvents":[{"ph":"M","name":"process_name","pid":0},)"
      << R"({"ph":"X","cat":"task","name":"gemm","pid":0,"tid":0,"ts":0,"dur":500000},)"
      << R"({"ph":"X","cat":"task","name":"gemm","pid":0,"tid":1,"ts":250000,"dur":500000},)"
      << R"({"ph":"X","cat":"transfer","name":"copy","pid":1,"tid":0,"ts":0,"dur":1000,)"
      << R"("args":{"link":"host -> gpu","bytes":4096}}],)"
      << R"("otherData":{"devices":[{"id":0,"name":"cpu0","slots":2}]}})";
  Result r = hcr({"trace", "summary", trace.string()});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("0.750 s from first to last event"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("#0 cpu0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 tasks  busy    1.0000 s   66.7% of 2 slots"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("host -> gpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("in 1 copies"), std::string::npos) << r.out;

  const fs::path fifo = dir.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = hcr({"trace", "summary", fifo.string()});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("is not a regular file"), std::string::npos) << r.err;

  std::ofstream(dir.path() / "bad.json") << R"({"traceEvents":[{"ph":"X","ts":1},)";
  r = hcr({"trace", "summary", (dir.path() / "bad.json").string()});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("not JSON"), std::string::npos) << r.err;
}

TEST(HcrCli, ModelsRefusesAnUnknownKernelOrDirectory) {
  test::TempDir dir;
  Result r = hcr({"models", "--dir", (dir.path() / "absent").string()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--dir '" + (dir.path() / "absent").string() + "': no such directory"),
            std::string::npos)
      << r.err;
  r = hcr({"models", "--dir", dir.path().string(), "--kernel", "gemm_f33"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--kernel 'gemm_f33': no learned costs for it in " + dir.path().string() +
                       " (none learned yet)"),
            std::string::npos)
      << r.err;
}

// The second main job: a tiled Cholesky, checked by its residual, in both precisions.
TEST(HcrCli, RunPotrfFactorsAndChecksTheResidual) {
  test::TempDir dir;
  const fs::path config = config_file(
      dir.path(), "[scheduler]\npolicy = \"eager\"\n[[backend]]\nname = \"cpu\"\nthreads = 2\n");
  for (const char* dtype : {"f32", "f64"}) {
    Result r = hcr({"run", "--op", "potrf", "--size", "150", "--tile", "40", "--dtype", dtype,
                    "--repeat", "2", "--no-progress", "--config", config.string()});
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(std::string("job: ") + (dtype[1] == '3' ? "s" : "d") +
                         "potrf (tiled Cholesky, lower) n=150 tile=40: 20 tasks per "
                         "factorisation, 2 factorisation(s)"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("check: ||A - L L^T||_F / ||A||_F = "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("-> OK"), std::string::npos) << r.out;
  }
}

// Simulated devices that compute nothing leave A as it was: the check must see that.
TEST(HcrCli, RunPotrfCheckFailsAWrongFactor) {
  test::TempDir dir;
  const fs::path config =
      config_file(dir.path(), "[scheduler]\npolicy = \"eager\"\n[[backend]]\nname = "
                              "\"sim\"\ncompute = false\n[[backend.device]]\nname = "
                              "\"gpu0\"\n");
  Result r = hcr({"run", "--op", "potrf", "--size", "64", "--tile", "16", "--no-progress",
                  "--config", config.string()});
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("-> WRONG"), std::string::npos) << r.out;
}

// Energy at the end of `hcr run` (a simulated machine with a power model: "modelled"), the
// objective chosen on the command line, and the joules each kernel costs in `hcr models`.
TEST(HcrCli, RunReportsEnergyAndModelsShowJoulesPerTask) {
  test::TempDir dir;
  const std::string models = (dir.path() / "models").string();
  const fs::path config = config_file(
      dir.path(), "[scheduler]\npolicy = \"peft\"\nmodel_dir = \"" + models +
                      "\"\n[[backend]]\nname = \"sim\"\ncompute = false\n"
                      "[[backend.device]]\nname = \"hot\"\ngflops = 400\nhost_memory = true\n"
                      "idle_watts = 50\nbusy_watts = 300\n"
                      "[[backend.device]]\nname = \"cool\"\ngflops = 100\nhost_memory = true\n"
                      "idle_watts = 3\nbusy_watts = 30\n");
  Result r = hcr({"run", "--size", "512", "--tile", "128", "--no-progress", "--no-check",
                  "--objective", "energy", "--max-slowdown", "1.2", "--config", config.string()});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("objective energy"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("energy (this job):"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(modelled)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  total "), std::string::npos) << r.out;
  Result m = hcr({"models", "--config", config.string()});
  EXPECT_EQ(m.rc, 0) << m.err;
  EXPECT_NE(m.out.find("J/task"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("gemm_f32"), std::string::npos) << m.out;
  Result bad = hcr({"run", "--objective", "cheapest", "--config", config.string()});
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("--objective 'cheapest' is not time, energy or weighted"),
            std::string::npos)
      << bad.err;
}

TEST(HcrCli, RunRefusesAnUnknownOp) {
  Result r = hcr({"run", "--op", "lu"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--op 'lu' is not gemm or potrf"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hcr
