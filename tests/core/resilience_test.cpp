// Resilience: a tiled gemm on simulated devices, one failing a tenth of its launches and one lost
// mid-run, completes with results bit-identical to a fault-free run; data that died with a device
// is reported, never read as garbage.
#include "../test_support.hpp"

#include <chrono>
#include <cstring>
#include <random>

namespace hcr {
namespace {

using Options = std::vector<std::pair<std::string, std::string>>;

// Three devices with their own memory. Each 32-tile gemm is 65,536 flops: at 0.1 GFLOP/s,
// 0.66 ms, so the 512 tasks take about 0.1 s spread over three devices.
Config machine(bool faults, const std::string& policy, const std::string& writeback = "eager") {
  Config c;
  c.use_environment = false;
  c.policy = policy;
  c.model_dir = "off";
  c.writeback = writeback;
  Options o = {{"seed", "7"}};
  for (int i = 0; i < 3; ++i) {
    std::string p = "device." + std::to_string(i) + ".";
    o.push_back({p + "name", "dev" + std::to_string(i)});
    o.push_back({p + "gflops", "0.1"});
    o.push_back({p + "bandwidth", "10GB/s"});
  }
  if (faults) {
    o.push_back({"device.1.fail_probability", "0.1"});  // one launch in ten fails
    o.push_back({"device.2.lost_at", "0.05s"});          // gone early in the run
  }
  c.backends.push_back({"sim", true, o, "test"});
  return c;
}

std::vector<float> run_gemm(const Config& c, RuntimeStats* stats = nullptr) {
  Runtime rt(c);
  const size_t n = 256;
  auto a = rt.buffer<float>(n, n), b = rt.buffer<float>(n, n), cc = rt.buffer<float>(n, n);
  {
    std::mt19937 gen(3);
    std::uniform_real_distribution<float> d(-1, 1);
    auto va = a.acquire(Access::write), vb = b.acquire(Access::write);
    for (size_t i = 0; i < n * n; ++i) {
      va.data()[i] = d(gen);
      vb.data()[i] = d(gen);
    }
  }
  blas::gemm(rt, a, b, cc, 32).get();  // throws if any task of it failed
  if (stats) *stats = rt.stats();
  return cc.to_vector();
}

TEST(Resilience, TiledGemmSurvivesAFlakyAndALostDeviceBitForBit) {
  for (const char* policy : {"eager", "dmda"}) {
    std::vector<float> clean = run_gemm(machine(false, policy));
    RuntimeStats s;
    std::vector<float> faulty;
    ASSERT_NO_THROW(faulty = run_gemm(machine(true, policy), &s)) << policy;
    ASSERT_EQ(faulty.size(), clean.size());
    EXPECT_EQ(std::memcmp(faulty.data(), clean.data(), clean.size() * sizeof(float)), 0)
        << policy << ": results differ from the fault-free run";
    EXPECT_GT(s.devices[1].failed, 0u) << policy << ": the flaky device never failed";
    EXPECT_GT(s.devices[2].tasks, 0u) << policy << ": the doomed device never ran anything";
    EXPECT_EQ(s.devices[2].health, DeviceHealth::lost)
        << policy << ": " << s.devices[2].last_fault;
  }
}

// "doomed", with its own memory, is lost 0.2 s after the start; "apu" works in host memory.
Config doomed_and_apu() {
  Config c;
  c.use_environment = false;
  c.model_dir = "off";
  c.backends.push_back({"sim",
                        true,
                        {{"device.0.name", "doomed"},
                         {"device.0.lost_at", "0.2s"},
                         {"device.1.name", "apu"},
                         {"device.1.host_memory", "true"}},
                        "test"});
  return c;
}

Kernel fill_with_ones(Runtime& rt) {
  return rt.kernel("fill").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<float>(0);
    for (size_t i = 0; i < v.cols; ++i) v(0, i) = 1;
  });
}

TEST(Resilience, DataLostWithADeviceIsReportedNotReadAsGarbage) {
  // Lazy write-back: a result that lives only on a device dies with it. Its reader must say so.
  Runtime rt(doomed_and_apu());
  Kernel fill = fill_with_ones(rt);
  auto x = rt.vector<float>(16);
  rt.submit(Task(fill).write(x).on(0)).get();  // its only valid copy: on "doomed"
  // Lose it: a task that runs past lost_at.
  Kernel wait = rt.kernel("wait").cpu([](TaskContext&) {});
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(250))
    rt.submit(Task(wait).on(0)).wait();
  Error e = test::expect_error([&] { x.to_vector(); });
  EXPECT_EQ(e.code(), ErrorCode::device_lost) << e.what();
  EXPECT_NE(std::string(e.what()).find("lost with device 'doomed'"), std::string::npos) << e.what();
  // Writing it anew makes it usable again.
  rt.submit(Task(fill).write(x)).get();
  EXPECT_EQ(x.to_vector(), std::vector<float>(16, 1.0f));
}

TEST(Resilience, ACopyFromALostDeviceIsNotTheReadersFault) {
  // The loss is found by a copy: results that live only on "doomed" are read on "apu" after
  // doomed is gone. Each reader fails saying the data was lost with doomed; apu, which did
  // nothing wrong, is neither quarantined nor charged with faults, and goes on working.
  Runtime rt(doomed_and_apu());
  Kernel fill = fill_with_ones(rt);
  Kernel sum = rt.kernel("sum").cpu([](TaskContext& ctx) {
    auto in = ctx.arg<float>(0);
    auto out = ctx.arg<float>(1);
    out(0, 0) = 0;
    for (size_t i = 0; i < in.cols; ++i) out(0, 0) += in(0, i);
  });
  std::vector<Buffer<float>> xs;
  for (int i = 0; i < 5; ++i) {
    xs.push_back(rt.vector<float>(16));
    rt.submit(Task(fill).write(xs.back()).on(0)).get();  // the only valid copies: on "doomed"
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // past lost_at
  for (auto& x : xs) {
    auto out = rt.vector<float>(1);
    Error e = test::expect_error([&] { rt.submit(Task(sum).read(x).write(out).on(1)).get(); });
    EXPECT_NE(std::string(e.what()).find("lost with device 'doomed'"), std::string::npos)
        << e.what();
  }
  RuntimeStats s = rt.stats();
  EXPECT_EQ(s.devices[0].health, DeviceHealth::lost) << s.devices[0].last_fault;
  EXPECT_EQ(s.devices[1].health, DeviceHealth::active) << s.devices[1].last_fault;
  EXPECT_EQ(s.devices[1].last_fault, "") << "a fault was charged to apu";
  auto y = rt.vector<float>(16), out = rt.vector<float>(1);
  rt.submit(Task(fill).write(y)).get();
  rt.submit(Task(sum).read(y).write(out).on(1)).get();
  EXPECT_EQ(out.to_vector(), std::vector<float>{16.0f});
}

TEST(Resilience, HungLaunchesTimeOutAndTheirTasksRunElsewhere) {
  // "dev0" never finishes a launch on its own; the runtime's task_timeout gives up on each one,
  // the task runs elsewhere, and after quarantine_failures hangs dev0 is out of scheduling with
  // the tasks queued for it placed again (Policy::drain). Neither the waits nor the runtime's
  // destruction hang.
  const std::vector<float> clean = run_gemm(machine(false, "eager"));
  for (const char* policy : {"eager", "dmda", "random", "ws"}) {
    Config c = machine(false, policy);
    c.task_timeout = 0.05;
    c.backends[0].options.push_back({"device.0.hang_probability", "1"});
    RuntimeStats s;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> got;
    ASSERT_NO_THROW(got = run_gemm(c, &s)) << policy;
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(got.size(), clean.size());
    EXPECT_EQ(std::memcmp(got.data(), clean.data(), clean.size() * sizeof(float)), 0) << policy;
    EXPECT_EQ(s.devices[0].tasks, s.devices[0].failed) << policy << ": a hung launch counted as done";
    EXPECT_EQ(s.devices[0].health, DeviceHealth::quarantined) << policy;
    EXPECT_NE(s.devices[0].last_fault.find("task timeout"), std::string::npos)
        << s.devices[0].last_fault;
    // Once quarantined it gets nothing new: only what it held then (a window of 2 x 1 slot, the
    // default lookahead) fails after the quarantining one.
    EXPECT_LE(s.devices[0].failed, static_cast<uint64_t>(c.quarantine_failures) + 1) << policy;
    EXPECT_EQ(s.failed, 0u) << policy;
    EXPECT_LT(took, 30.0) << policy;
  }
}

TEST(Resilience, WithoutATimeoutAHungTaskIsEndedByItsDevice) {
  // The plugin's own watchdog (hang_timeout) reports HCR_ERROR_TIMEOUT: the task goes elsewhere.
  Config c = machine(false, "eager");
  c.backends[0].options.push_back({"device.0.hang_probability", "1"});
  c.backends[0].options.push_back({"device.0.hang_timeout", "0.02s"});
  RuntimeStats s;
  ASSERT_NO_THROW(run_gemm(c, &s));
  EXPECT_GE(s.devices[0].failed, 1u);
  EXPECT_EQ(s.devices[0].health, DeviceHealth::quarantined);
  EXPECT_EQ(s.devices[1].health, DeviceHealth::active);
  EXPECT_EQ(s.failed, 0u);
}

}  // namespace
}  // namespace hcr
