// Observability: the trace parses back as JSON with the events the run made; counters add up;
// the Gantt chart is well-formed XML with one row per device; their files are replaced whole.
#include "../test_support.hpp"

#include <expat.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/resource.h>

#include <fstream>
#include <map>
#include <sstream>

namespace hcr {
namespace {

Config machine(bool trace_file = false, const std::string& path = "") {
  Config c = test::cpu_config(2, "dmda");
  c.model_dir = "off";
  c.counters = true;
  c.backends.push_back({"sim",
                        true,
                        {{"device.0.name", "gpu"},
                         {"device.0.gflops", "50"},
                         {"device.0.concurrency", "2"},
                         {"device.1.name", "apu"},
                         {"device.1.host_memory", "true"},
                         {"device.1.gflops", "20"}},
                        "test"});
  if (trace_file) c.trace_file = path;
  return c;
}

void run_gemm(Runtime& rt) {
  auto a = rt.buffer<float>(256, 256), b = rt.buffer<float>(256, 256),
       c = rt.buffer<float>(256, 256);
  blas::gemm(rt, a, b, c, 64).get();
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Trace, OffRecordsNothing) {
  Runtime rt(machine());
  run_gemm(rt);
  EXPECT_TRUE(rt.trace_events().empty());
}

TEST(Trace, JsonHasEveryTaskAndCopy) {
  test::TempDir dir;
  auto path = dir.path() / "run.json";
  Runtime rt(machine());
  rt.start_trace();
  run_gemm(rt);  // 4 x 4 x 4 = 64 gemm tiles
  rt.stop_trace();
  rt.write_trace(path.string());
  RuntimeStats s = rt.stats();

  nlohmann::json j = nlohmann::json::parse(slurp(path));
  ASSERT_TRUE(j["traceEvents"].is_array());
  std::map<std::string, int> tasks_by_kernel;
  std::map<int, int> tasks_by_pid;
  uint64_t copied = 0;
  int copies = 0;
  for (auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "task") {
      ++tasks_by_kernel[e["name"]];
      ++tasks_by_pid[e["pid"]];
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      EXPECT_TRUE(e["args"].contains("footprint"));
    }
    if (e["ph"] == "X" && e["cat"] == "transfer") {
      ++copies;
      copied += e["args"]["bytes"].get<uint64_t>();
    }
  }
  EXPECT_EQ(tasks_by_kernel["gemm_f32"], 64);
  for (size_t d = 0; d < rt.devices().size(); ++d)
    EXPECT_EQ(static_cast<uint64_t>(tasks_by_pid[int(d)]), s.devices[d].tasks) << "device " << d;
  EXPECT_EQ(copied, s.data.bytes_moved());
  uint64_t transfers = 0;
  for (auto& l : s.data.links) transfers += l.transfers;
  EXPECT_EQ(static_cast<uint64_t>(copies), transfers);
  // A track (process) is named for each device.
  int named = 0;
  for (auto& e : j["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") ++named;
  EXPECT_EQ(named, static_cast<int>(rt.devices().size()) + 1);  // + the links
}

TEST(Trace, ConfiguredFileIsWrittenAtTheEnd) {
  test::TempDir dir;
  auto path = dir.path() / "end.json";
  {
    Runtime rt(machine(true, path.string()));
    run_gemm(rt);
  }
  auto j = nlohmann::json::parse(slurp(path));
  int tasks = 0;
  for (auto& e : j["traceEvents"]) tasks += e["ph"] == "X" && e["cat"] == "task";
  EXPECT_EQ(tasks, 64);
}

TEST(Counters, AddUp) {
  Runtime rt(machine());
  run_gemm(rt);
  run_gemm(rt);
  rt.wait_all();  // (the joins a gemm's last tasks release may still be finishing)
  RuntimeStats s = rt.stats();
  uint64_t tasks = 0;
  for (size_t d = 0; d < s.devices.size(); ++d) {
    const DeviceCounters& c = s.devices[d];
    tasks += c.tasks;
    const double slots = rt.devices()[d].concurrency;
    EXPECT_LE(c.busy_seconds, s.wall_seconds * slots + 1e-6) << rt.devices()[d].name;
    EXPECT_NEAR(c.busy_seconds + c.idle_seconds, s.wall_seconds * slots, 1e-6);
    if (c.tasks > 0) {
      EXPECT_GT(c.busy_seconds, 0.0) << rt.devices()[d].name;
    }
  }
  // Each gemm partitions and unpartitions A, B and C: six joins that run nowhere.
  EXPECT_EQ(tasks, s.completed - 2 * 6);
  // The gpu (own memory) received its inputs; its bytes are the links into its node.
  uint32_t gpu = 0;
  for (auto& d : rt.devices())
    if (d.name == "gpu") gpu = d.id;
  uint64_t into_gpu = 0;
  for (auto& l : s.data.links)
    if (l.to == rt.devices()[gpu].memory_node) into_gpu += l.bytes;
  EXPECT_GT(into_gpu, 0u);
  EXPECT_EQ(s.devices[gpu].bytes_in, into_gpu);
  // dmda predicted, and the accuracy counters say how well.
  ASSERT_FALSE(s.accuracy.empty());
  for (auto& a : s.accuracy) {
    EXPECT_EQ(a.kernel, "gemm_f32");
    EXPECT_GT(a.samples, 0u);
    EXPECT_GE(a.median_abs_pct_error, 0.0);
  }
}

struct XmlScan {
  int device_rows = 0, link_rows = 0, tasks = 0;
  static void start(void* user, const char* name, const char** attrs) {
    auto* s = static_cast<XmlScan*>(user);
    std::string n = name;
    for (int i = 0; attrs[i]; i += 2) {
      if (std::string(attrs[i]) != "class") continue;
      std::string v = attrs[i + 1];
      if (n == "g" && v == "device-row") ++s->device_rows;
      if (n == "g" && v == "link-row") ++s->link_rows;
      if (n == "rect" && v == "task") ++s->tasks;
    }
  }
};

TEST(Gantt, IsWellFormedXmlWithOneRowPerDevice) {
  test::TempDir dir;
  auto path = dir.path() / "run.svg";
  Runtime rt(machine());
  rt.start_trace();
  run_gemm(rt);
  rt.write_gantt(path.string());
  std::string svg = slurp(path);
  XML_Parser p = XML_ParserCreate(nullptr);
  XmlScan scan;
  XML_SetUserData(p, &scan);
  XML_SetStartElementHandler(p, &XmlScan::start);
  bool ok = XML_Parse(p, svg.data(), static_cast<int>(svg.size()), 1) == XML_STATUS_OK;
  std::string error = ok ? "" : XML_ErrorString(XML_GetErrorCode(p));
  XML_ParserFree(p);
  ASSERT_TRUE(ok) << "not well-formed: " << error;
  EXPECT_EQ(scan.device_rows, static_cast<int>(rt.devices().size()));
  EXPECT_EQ(scan.tasks, 64);
  EXPECT_GE(scan.link_rows, 1) << "copies into the gpu's memory have a row";
}

// The trace and the chart replace their file whole: a link planted at the path is refused (its
// target stays as it was), and a write that fails (the file size limit here, as a full disk) is an
// error naming the file and the reason, with the old file intact.
TEST(Trace, FilesAreReplacedWholeNeverThroughALink) {
  test::TempDir dir, victims;
  const auto victim = victims.path() / "victim";
  std::ofstream(victim) << "untouched";
  std::filesystem::create_symlink(victim, dir.path() / "run.json");
  Runtime rt(machine());
  rt.start_trace();
  run_gemm(rt);
  rt.stop_trace();
  for (auto write : {&Runtime::write_trace, &Runtime::write_gantt}) {
    Error e = test::expect_error([&] { (rt.*write)((dir.path() / "run.json").string()); });
    EXPECT_NE(std::string(e.what()).find((dir.path() / "run.json").string() +
                                         ": a symbolic link, not a regular file"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(slurp(victim), "untouched");

  const auto path = dir.path() / "old.json";
  std::ofstream(path) << "old trace";
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit small = old_limit;
  small.rlim_cur = 1024;  // the trace of 64 tiles is larger
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string what;
  try {
    rt.write_trace(path.string());
  } catch (const Error& e) {
    what = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(what.find("File too large"), std::string::npos) << what;
  EXPECT_NE(what.find(dir.path().string()), std::string::npos) << what;
  EXPECT_EQ(slurp(path), "old trace");
  rt.write_trace(path.string());
  EXPECT_TRUE(nlohmann::json::parse(slurp(path))["traceEvents"].is_array());
}

}  // namespace
}  // namespace hcr
