// Hot-plug: a plugin loaded while tasks run brings devices that join scheduling (learning policies
// explore them); a device removed while tasks run hands its queued work on, finishes what it runs
// and writes home the data only it holds. Nothing is lost either way.
#include "../test_support.hpp"

#include <cstring>
#include <fstream>
#include <random>
#include <thread>

namespace hcr {
namespace {

using Options = std::vector<std::pair<std::string, std::string>>;

const std::string kSimLibrary = std::string(HCR_TEST_PLUGIN_DIR) + "/libhcr-sim.so";

// One simulated device with its own memory (a 32-tile gemm task at 0.2 GFLOP/s: 0.33 ms).
BackendConfig sim_device(const std::string& name, const std::string& gflops, Options extra = {}) {
  Options o = {{"seed", "7"},
               {"device.0.name", name},
               {"device.0.gflops", gflops},
               {"device.0.bandwidth", "10GB/s"}};
  for (auto& kv : extra) o.push_back(kv);
  return {"sim", true, o, "test"};
}

Config machine(const std::string& policy) {
  Config c;
  c.use_environment = false;
  c.policy = policy;
  c.model_dir = "off";
  c.backends.push_back(sim_device("first", "0.2"));
  return c;
}

void randomise(Runtime& rt, Buffer<float>& a, Buffer<float>& b) {
  (void)rt;
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> d(-1, 1);
  auto va = a.acquire(Access::write), vb = b.acquire(Access::write);
  for (size_t i = 0; i < va.rows() * va.cols(); ++i) {
    va.data()[i] = d(gen);
    vb.data()[i] = d(gen);
  }
}

// The same gemm on one device, start to end: the reference (the k-chains fix the summation
// order, so any placement gives these bits).
std::vector<float> reference(size_t n) {
  Runtime rt(machine("eager"));
  auto a = rt.buffer<float>(n, n), b = rt.buffer<float>(n, n), c = rt.buffer<float>(n, n);
  randomise(rt, a, b);
  blas::gemm(rt, a, b, c, 32).get();
  return c.to_vector();
}

TEST(HotPlug, ALoadedPluginsDeviceJoinsAndTakesWork) {
  const size_t n = 256;
  const std::vector<float> expected = reference(n);
  for (const char* policy : {"eager", "dmda", "ws", "random"}) {
    Runtime rt(machine(policy));
    ASSERT_EQ(rt.devices().size(), 1u);
    auto a = rt.buffer<float>(n, n), b = rt.buffer<float>(n, n), c = rt.buffer<float>(n, n);
    randomise(rt, a, b);
    // 512 tasks on the slow device; the fast one (10x) joins while they run.
    Event done = blas::gemm(rt, a, b, c, 32);
    PluginRecord rec = rt.load_plugin(kSimLibrary, sim_device("second", "2"));
    EXPECT_EQ(rec.status, PluginRecord::Status::loaded);
    EXPECT_EQ(rec.name, "sim");
    EXPECT_EQ(rec.devices, 1u);
    std::vector<Device> devices = rt.devices();
    ASSERT_EQ(devices.size(), 2u) << policy;
    EXPECT_EQ(devices[1].name, "second");
    EXPECT_EQ(devices[1].id, 1u);
    EXPECT_NE(devices[1].memory_node, devices[0].memory_node);  // its own memory
    EXPECT_EQ(rt.load_report().plugins.back().path, kSimLibrary);
    ASSERT_NO_THROW(done.get()) << policy;
    // A second gemm after the join: the new device is known by now.
    const RuntimeStats first = rt.stats();
    auto c2 = rt.buffer<float>(n, n);
    ASSERT_NO_THROW(blas::gemm(rt, a, b, c2, 32).get()) << policy;
    RuntimeStats s = rt.stats();
    ASSERT_EQ(s.devices.size(), 2u);
    EXPECT_GT(s.devices[1].tasks, 0u) << policy << ": the new device never ran anything";
    EXPECT_EQ(s.failed, 0u);
    std::vector<float> got = c.to_vector(), got2 = c2.to_vector();
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), expected.size() * sizeof(float)), 0)
        << policy;
    EXPECT_EQ(std::memcmp(got2.data(), expected.data(), expected.size() * sizeof(float)), 0)
        << policy;
    if (std::string(policy) == "dmda") {
      // Explored, then preferred: the 10x faster device runs most of the second gemm.
      ASSERT_EQ(first.devices.size(), 2u);
      EXPECT_GT(s.devices[1].tasks - first.devices[1].tasks,
                s.devices[0].tasks - first.devices[0].tasks)
          << "dmda did not learn the new device";
    }
  }
}

TEST(HotPlug, AKernelTheNewDeviceLacksStaysOffIt) {
  // Resolution asks the new device about kernels known before it came: a kernel only the first
  // device has (pinned implementations aside) never lands on it.
  Runtime rt(machine("dmda"));
  Kernel k = rt.kernel("only_first");
  k.cpu([](TaskContext&) {});
  rt.submit(Task(k)).get();
  rt.load_plugin(kSimLibrary, sim_device("second", "2", {{"device.0.kernels", "gemm"}}));
  for (int i = 0; i < 20; ++i) rt.submit(Task(k)).get();
  RuntimeStats s = rt.stats();
  EXPECT_EQ(s.devices[1].tasks, 0u);
  EXPECT_EQ(s.devices[0].tasks, 21u);
}

TEST(HotPlug, ARemovedDeviceWritesHomeWhatOnlyItHeld) {
  // Lazy write-back: results stay in device memory until someone needs them.
  Config c = machine("eager");
  c.writeback = "lazy";
  Runtime rt(c);
  rt.load_plugin(kSimLibrary, sim_device("second", "0.2"));
  Kernel fill = rt.kernel("fill").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<float>(0);
    for (size_t i = 0; i < v.cols; ++i) v(0, i) = 7;
  });
  auto x = rt.vector<float>(1024);
  rt.submit(Task(fill).write(x).on(1)).get();  // its only valid copy: on "second"
  const uint64_t writebacks = rt.stats().data.writebacks;
  rt.remove_device(1);
  RuntimeStats s = rt.stats();
  EXPECT_EQ(s.devices[1].health, DeviceHealth::removed);
  EXPECT_GT(s.data.writebacks, writebacks) << "nothing was written home";
  for (const auto& node : s.data.nodes) {
    if (node.id == rt.devices()[1].memory_node) {
      EXPECT_EQ(node.used, 0u) << "memory not freed";
    }
  }
  EXPECT_EQ(x.to_vector(), std::vector<float>(1024, 7.0f));
  // Out of scheduling for good: pinned work fails naming it, other work runs elsewhere.
  Error e = test::expect_error([&] { rt.submit(Task(fill).write(x).on(1)).get(); });
  EXPECT_EQ(e.code(), ErrorCode::no_device) << e.what();
  EXPECT_NE(std::string(e.what()).find("'second'"), std::string::npos) << e.what();
  rt.submit(Task(fill).write(x)).get();
  EXPECT_EQ(rt.stats().devices[1].tasks, s.devices[1].tasks);
}

TEST(HotPlug, RemovingADeviceMidRunLosesNothing) {
  const size_t n = 256;
  const std::vector<float> expected = reference(n);
  for (const char* policy : {"eager", "dmda", "ws", "random"}) {
    if (const char* only = std::getenv("HOTPLUG_POLICY"); only && std::string(only) != policy)
      continue;
    Config c = machine(policy);
    c.writeback = "lazy";
    Runtime rt(c);
    rt.load_plugin(kSimLibrary, sim_device("second", "0.2"));
    auto a = rt.buffer<float>(n, n), b = rt.buffer<float>(n, n), cc = rt.buffer<float>(n, n);
    randomise(rt, a, b);
    Event done = blas::gemm(rt, a, b, cc, 32);
    // Let both devices take work and hold partial sums, then pull one out.
    while (rt.stats().devices[0].tasks < 16) std::this_thread::yield();
    rt.remove_device(0);
    const uint64_t ran_before = rt.stats().devices[0].tasks;
    ASSERT_NO_THROW(done.get()) << policy;
    RuntimeStats s = rt.stats();
    EXPECT_EQ(s.devices[0].health, DeviceHealth::removed);
    EXPECT_EQ(s.devices[0].tasks, ran_before) << policy << ": a removed device got work";
    EXPECT_GT(s.devices[1].tasks, 0u);
    EXPECT_EQ(s.failed, 0u);
    std::vector<float> got = cc.to_vector();
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), expected.size() * sizeof(float)), 0)
        << policy;
  }
}

// One runtime schedules at most kMaxDevices: at start the devices beyond are left out with a
// warning naming the plugin; a plugin loaded later that would go beyond is refused, and nothing of
// it joins. Either way the runtime goes on working.
TEST(HotPlug, DevicesBeyondTheLimitAreLeftOutNamingThePlugin) {
  test::LogCapture log(LogLevel::warn);
  Options o = {{"seed", "7"}};
  for (uint32_t i = 0; i < kMaxDevices + 2; ++i) {
    std::string key = "device.";
    key += std::to_string(i);
    o.push_back({key + ".name", "d" + std::to_string(i)});
    o.push_back({key + ".host_memory", i % 2 ? "true" : "false"});  // half of them
  }
  Config c;
  c.use_environment = false;
  c.model_dir = "off";
  c.backends.push_back({"sim", true, o, "test"});
  Runtime rt(c);
  EXPECT_EQ(rt.devices().size(), size_t{kMaxDevices});
  EXPECT_TRUE(log.contains("libhcr-sim.so: 2 of its " + std::to_string(kMaxDevices + 2) +
                           " device(s) left out"));
  EXPECT_EQ(rt.load_report().plugins.back().devices, size_t{kMaxDevices});

  Error e = test::expect_error([&] { rt.load_plugin(kSimLibrary, sim_device("extra", "1")); });
  EXPECT_EQ(e.code(), ErrorCode::plugin);
  EXPECT_NE(std::string(e.what()).find("do not fit: one runtime takes at most " +
                                       std::to_string(kMaxDevices) + " devices"),
            std::string::npos)
      << e.what();
  EXPECT_EQ(rt.devices().size(), size_t{kMaxDevices});
  EXPECT_EQ(rt.load_report().plugins.back().status, PluginRecord::Status::skipped);

  int ran = 0;
  Kernel k = rt.kernel("count").cpu([&](TaskContext&) { ++ran; });
  rt.submit(Task(k)).get();
  EXPECT_EQ(ran, 1);

  // Devices with memory of their own have a lower limit (the host's memory is a node too).
  Options own = {{"seed", "7"}};
  for (uint32_t i = 0; i < kMaxDevices; ++i) {
    std::string key = "device.";
    key += std::to_string(i);
    own.push_back({key + ".name", "d" + std::to_string(i)});
  }
  c.backends = {{"sim", true, own, "test"}};
  Runtime rt2(c);
  EXPECT_EQ(rt2.devices().size(), size_t{kMaxDevices - 1});
  EXPECT_TRUE(log.contains("1 of its " + std::to_string(kMaxDevices) + " device(s) left out"));
}

TEST(HotPlug, MisuseNamesTheValue) {
  Runtime rt(machine("eager"));
  test::TempDir dir;
  Error e = test::expect_error([&] { rt.load_plugin((dir.path() / "absent.so").string()); });
  EXPECT_EQ(e.code(), ErrorCode::plugin);
  EXPECT_NE(std::string(e.what()).find("absent.so"), std::string::npos) << e.what();
  // A file that is no library: the loader's reason, with the file.
  const auto text = dir.path() / "notes.so";
  { std::ofstream(text) << "not a library\n"; }
  e = test::expect_error([&] { rt.load_plugin(text.string()); });
  EXPECT_EQ(e.code(), ErrorCode::plugin);
  EXPECT_NE(std::string(e.what()).find("notes.so"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("cannot load"), std::string::npos) << e.what();
  // The wrong plugin for the table.
  e = test::expect_error([&] { rt.load_plugin(kSimLibrary, {"cpu", true, {}, "test"}); });
  EXPECT_NE(std::string(e.what()).find("not 'cpu'"), std::string::npos) << e.what();
  EXPECT_EQ(rt.devices().size(), 1u);  // nothing joined
  e = test::expect_error([&] { rt.remove_device(5); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("no device 5"), std::string::npos) << e.what();
}

// The same plugin with the same options drives the same devices: refused, as the configuration's
// loader refuses two such tables; other options, or once the first instance's devices are gone,
// it joins.
TEST(HotPlug, TheSameLibraryWithTheSameOptionsIsRefused) {
  Runtime rt(machine("eager"));
  Error e = test::expect_error([&] { rt.load_plugin(kSimLibrary, sim_device("first", "0.2")); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  EXPECT_NE(std::string(e.what()).find("plugin 'sim' is loaded already with the same options"),
            std::string::npos)
      << e.what();
  EXPECT_NE(std::string(e.what()).find(kSimLibrary), std::string::npos) << e.what();
  EXPECT_EQ(rt.devices().size(), 1u) << "nothing joined";
  EXPECT_EQ(rt.load_report().plugins.back().status, PluginRecord::Status::skipped);
  rt.load_plugin(kSimLibrary, sim_device("second", "0.2"));  // other options: other devices
  EXPECT_EQ(rt.devices().size(), 2u);
  e = test::expect_error([&] { rt.load_plugin(kSimLibrary, sim_device("second", "0.2")); });
  EXPECT_EQ(e.code(), ErrorCode::config);
  rt.remove_device(1);
  rt.load_plugin(kSimLibrary, sim_device("second", "0.2"));  // plugged in again
  ASSERT_EQ(rt.devices().size(), 3u);
  EXPECT_EQ(rt.devices()[2].name, "second");
}

}  // namespace
}  // namespace hcr
