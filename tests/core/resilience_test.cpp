// Resilience: a tiled gemm on simulated devices, one failing a tenth of its launches and one lost
// mid-run, completes with results bit-identical to a fault-free run; data that died with a device
// is reported, never read as garbage. A plugin that breaks the launch protocol, a kernel that never
// returns, copies that fail now and then: each is survived and reported.
#include "../test_support.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

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
    o.push_back({p + "gflops", "0.05"});  // 1.3 ms per tile, some 220 ms in all
    o.push_back({p + "bandwidth", "10GB/s"});
  }
  if (faults) {
    o.push_back({"device.1.fail_probability", "0.1"});  // one launch in ten fails
    o.push_back({"device.2.lost_at", "0.1s"});          // gone early in the run
  }
  c.backends.push_back({"sim", true, o, "test"});
  return c;
}

std::vector<float> run_gemm(const Config& c, RuntimeStats* stats = nullptr) {
  const size_t n = 256;
  // The inputs are made before the runtime (its devices' modelled clocks, lost_at's, start with
  // it): the doomed device gets its work however slowly they are made.
  std::vector<float> in_a(n * n), in_b(n * n);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> d(-1, 1);
  for (size_t i = 0; i < n * n; ++i) {
    in_a[i] = d(gen);
    in_b[i] = d(gen);
  }
  Runtime rt(c);
  auto a = rt.buffer<float>(n, n), b = rt.buffer<float>(n, n), cc = rt.buffer<float>(n, n);
  {
    auto va = a.acquire(Access::write), vb = b.acquire(Access::write);
    std::copy(in_a.begin(), in_a.end(), va.data());
    std::copy(in_b.begin(), in_b.end(), vb.data());
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
    EXPECT_EQ(s.devices[2].health, DeviceHealth::lost) << policy << ": " << s.devices[2].last_fault;
  }
}

// "doomed", with its own memory, is lost 0.4 s after the start (what the tests run on it before
// has time to spare under a sanitizer); "apu" works in host memory.
Config doomed_and_apu() {
  Config c;
  c.use_environment = false;
  c.model_dir = "off";
  c.backends.push_back({"sim",
                        true,
                        {{"device.0.name", "doomed"},
                         {"device.0.lost_at", "0.4s"},
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
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(450))
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
  std::this_thread::sleep_for(std::chrono::milliseconds(450));  // past lost_at
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

TEST(Resilience, ADeviceFoundLostByAnAllocationIsLostNotQuarantined) {
  // The loss is found by mem_alloc: the first thing a write-only task needs on "doomed" after
  // lost_at is memory there. The plugin's DEVICE_LOST must retire doomed as lost at once (not
  // count a memory fault toward quarantine, which CI once saw under ThreadSanitizer's timing),
  // and the task runs on apu.
  Runtime rt(doomed_and_apu());
  Kernel fill = fill_with_ones(rt);
  std::this_thread::sleep_for(std::chrono::milliseconds(450));  // past lost_at, nothing ran
  auto x = rt.vector<float>(16, uninitialized);
  Error e = test::expect_error([&] { rt.submit(Task(fill).write(x).on(0)).get(); });
  EXPECT_NE(std::string(e.what()).find("mem_alloc refused"), std::string::npos) << e.what();
  RuntimeStats s = rt.stats();
  EXPECT_EQ(s.devices[0].health, DeviceHealth::lost) << s.devices[0].last_fault;
  EXPECT_EQ(s.devices[1].health, DeviceHealth::active) << s.devices[1].last_fault;
  rt.submit(Task(fill).write(x)).get();  // placed where it can run: apu
  EXPECT_EQ(x.to_vector(), std::vector<float>(16, 1.0f));
}

TEST(Resilience, HungLaunchesTimeOutAndTheirTasksRunElsewhere) {
  // "dev0" never finishes a launch on its own; the runtime's task_timeout gives up on each one,
  // the task runs elsewhere, and after quarantine_failures hangs dev0 is out of scheduling with
  // the tasks queued for it placed again (Policy::drain). Neither the waits nor the runtime's
  // destruction hang. quarantine_failures is 1: how many launches dev0 gets before the gemm ends
  // is up to timing (idle devices steal what waits in its queue, 0.25 s timeouts against a
  // 0.2 s gemm), and under ThreadSanitizer dmda once gave it two, fewer than the default 3. Every
  // policy gives it one at the start.
  const std::vector<float> clean = run_gemm(machine(false, "eager"));
  for (const char* policy : {"eager", "dmda", "random", "ws"}) {
    Config c = machine(false, policy);
    c.task_timeout = 0.25;  // healthy launches (1.3 ms) stay far below it, however delayed
    c.quarantine_failures = 1;
    c.backends[0].options.push_back({"device.0.hang_probability", "1"});
    RuntimeStats s;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> got;
    ASSERT_NO_THROW(got = run_gemm(c, &s)) << policy;
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(got.size(), clean.size());
    EXPECT_EQ(std::memcmp(got.data(), clean.data(), clean.size() * sizeof(float)), 0) << policy;
    EXPECT_EQ(s.devices[0].tasks, s.devices[0].failed)
        << policy << ": a hung launch counted as done";
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

TEST(Resilience, APluginAnsweringALaunchTwiceIsReportedAndIgnored) {
  // Each launch is answered twice: done called twice, or done and then an error returned from
  // launch (inline, and from the stub's own thread). Every task must run once and finish once
  // (a second finish would release its successors twice and free its node under them), the
  // results must be a sequential run's, and every extra answer is counted, the first logged.
  struct Case {
    const char* misbehave;
    bool async;
  };
  for (Case c : {Case{"done_twice", false}, Case{"done_twice", true},
                 Case{"error_after_done", false}, Case{"error_after_done", true}}) {
    SCOPED_TRACE(std::string(c.misbehave) + (c.async ? ", async" : ", inline"));
    test::LogCapture log(LogLevel::error);
    Runtime rt(test::stub_config(
        {{"misbehave", c.misbehave}, {"async", c.async ? "true" : "false"}, {"concurrency", "4"}}));
    std::atomic<int> ran{0};
    Kernel bump = rt.kernel("bump").cpu([&](TaskContext& ctx) {  // modulo 2^64: no overflow
      ran.fetch_add(1, std::memory_order_relaxed);
      auto v = ctx.arg<int64_t>(0);
      v(0, 0) = static_cast<int64_t>(static_cast<uint64_t>(v(0, 0)) * 3 + ctx.param<uint64_t>(0));
    });
    constexpr int kChains = 4, kLength = 250;
    std::vector<Buffer<int64_t>> chains;
    for (int i = 0; i < kChains; ++i) chains.push_back(rt.vector<int64_t>(1));
    std::vector<Event> events;
    for (int i = 0; i < kLength; ++i)
      for (int j = 0; j < kChains; ++j)
        events.push_back(rt.submit(Task(bump).read_write(chains[j]).param(uint64_t(i + j))));
    rt.wait_all();
    for (const Event& e : events) EXPECT_NO_THROW(e.get());
    EXPECT_EQ(ran.load(), kChains * kLength);
    for (int j = 0; j < kChains; ++j) {
      uint64_t want = 0;
      for (int i = 0; i < kLength; ++i) want = want * 3 + uint64_t(i + j);
      EXPECT_EQ(static_cast<uint64_t>(chains[j].to_vector()[0]), want) << "chain " << j;
    }
    // The second answer of the last launches may still be on its way (the stub's thread): wait
    // for it, with a guard against waiting forever.
    RuntimeStats s = rt.stats();
    ASSERT_EQ(s.devices.size(), 1u);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (s.devices[0].protocol_errors < static_cast<uint64_t>(kChains * kLength) &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
      s = rt.stats();
    }
    EXPECT_EQ(s.completed, s.submitted);
    EXPECT_EQ(s.failed, 0u);
    EXPECT_EQ(s.devices[0].tasks, static_cast<uint64_t>(kChains * kLength));
    EXPECT_EQ(s.devices[0].protocol_errors, static_cast<uint64_t>(kChains * kLength));
    EXPECT_TRUE(log.contains("plugin 'stub'")) << "no diagnostic naming the plugin";
    EXPECT_TRUE(log.contains("kernel 'bump'")) << "no diagnostic naming the kernel";
  }
}

// The same for copies: a device with its own memory answers every copy (and launch) twice. Each
// copy completes once (a second completion would release the buffer's pins and references twice,
// and free a Transfer under the plugin); results are a sequential run's; the extra answers are
// counted and the first logged, naming the plugin.
TEST(Resilience, APluginAnsweringACopyTwiceIsReportedAndIgnored) {
  for (const char* misbehave : {"done_twice", "error_after_done"})
    for (bool async : {false, true}) {
      SCOPED_TRACE(std::string(misbehave) + (async ? ", async" : ", inline"));
      test::LogCapture log(LogLevel::error);
      Runtime rt(test::stub_config({{"misbehave", misbehave},
                                    {"own_memory", "true"},
                                    {"async", async ? "true" : "false"},
                                    {"concurrency", "2"}}));
      Kernel bump = rt.kernel("bump").cpu([](TaskContext& ctx) {
        auto v = ctx.arg<int64_t>(0);
        v(0, 0) = static_cast<int64_t>(static_cast<uint64_t>(v(0, 0)) * 3 + ctx.param<uint64_t>(0));
      });
      constexpr int kBuffers = 8, kRounds = 20;
      std::vector<Buffer<int64_t>> xs;
      for (int i = 0; i < kBuffers; ++i) xs.push_back(rt.vector<int64_t>(1));
      for (int r = 0; r < kRounds; ++r) {
        for (int i = 0; i < kBuffers; ++i)
          rt.submit(Task(bump).read_write(xs[i]).param(uint64_t(r + i)));
        // Each buffer read at home: a copy out of the device's memory.
        for (int i = 0; i < kBuffers; ++i) {
          uint64_t want = 0;
          for (int k = 0; k <= r; ++k) want = want * 3 + uint64_t(k + i);
          ASSERT_EQ(static_cast<uint64_t>(xs[i].to_vector()[0]), want) << "buffer " << i;
        }
      }
      rt.wait_all();
      RuntimeStats s = rt.stats();
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      // Every launch and every copy answered twice: a launch and at least a copy home per task.
      const uint64_t least = 2ull * kBuffers * kRounds;
      while (s.devices[0].protocol_errors < least && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::yield();
        s = rt.stats();
      }
      EXPECT_EQ(s.failed, 0u);
      EXPECT_GE(s.devices[0].protocol_errors, least);
      EXPECT_TRUE(log.contains("plugin 'stub'")) << "no diagnostic naming the plugin";
      EXPECT_TRUE(log.contains("for a copy") || log.contains("from copy"))
          << "no diagnostic naming a copy";
    }
}

TEST(Resilience, AKernelThatNeverReturnsDoesNotHangTheRuntimesEnd) {
  // A CPU kernel cannot be stopped. The task timeout gives up on it (the task fails: the only
  // device failed it); then the runtime's end waits for the CPU plugin a bounded time, names the
  // stuck kernel and returns, leaving the plugin (and what the kernel uses) alive. The kernel is
  // let go only after that, so that its thread ends before the process does.
  static std::atomic<bool> release{false};  // outlives the runtime: the kernel reads it
  static std::atomic<bool> returned{false};
  test::LogCapture log(LogLevel::error);
  {
    Config c = test::cpu_config(2);
    c.task_timeout = 0.25;  // "quick" stays far below it, however delayed
    Runtime rt(c);
    Kernel stuck = rt.kernel("never_returns").cpu([](TaskContext& ctx) {
      auto v = ctx.arg<float>(0);
      release.wait(false);
      v(0, 0) = 1;  // its buffer must still be there
      returned.store(true);
    });
    Kernel quick = rt.kernel("quick").cpu([](TaskContext&) {});
    auto x = rt.vector<float>(1 << 12);
    Event e = rt.submit(Task(stuck).read_write(x));
    Error err = test::expect_error([&] { e.get(); });
    EXPECT_NE(std::string(err.what()).find("task timeout"), std::string::npos) << err.what();
    rt.submit(Task(quick)).get();  // the runtime goes on meanwhile
  }                                // must return
  EXPECT_FALSE(returned.load());
  EXPECT_TRUE(log.contains("kernel 'never_returns'")) << "the log does not name the stuck kernel";
  release.store(true);
  release.notify_all();
  while (!returned.load()) std::this_thread::yield();
}

// A device with its own memory whose copies fail one time in five, otherwise healthy.
Config flaky_copies() {
  Config c;
  c.use_environment = false;
  c.model_dir = "off";
  c.quarantine_failures = 1000000;  // its launches must keep running there
  c.backends.push_back(
      {"sim",
       true,
       {{"seed", "11"}, {"device.0.name", "flaky"}, {"device.0.copy_fail_probability", "0.2"}},
       "test"});
  return c;
}

TEST(Resilience, TransientCopyFailuresDoNotFailHostAccess) {
  // Data only the device holds comes home for to_vector, acquire and an unpartition's join; a
  // failed copy is charged to the device and fetched again, as a task's input would be.
  Runtime rt(flaky_copies());
  Kernel fill = rt.kernel("fill").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<float>(0);
    for (size_t r = 0; r < v.rows; ++r)
      for (size_t c = 0; c < v.cols; ++c) v(r, c) = ctx.param<float>(0);
  });
  for (int i = 0; i < 30; ++i) {
    auto x = rt.vector<float>(64);
    rt.submit(Task(fill).write(x).param(float(i)).on(0)).get();  // valid on "flaky" only
    std::vector<float> got;
    ASSERT_NO_THROW(got = (i % 2 == 0 ? x.to_vector() : [&] {
                      auto v = x.acquire(Access::read);
                      return std::vector<float>(v.data(), v.data() + 64);
                    }()))
        << "round " << i;
    EXPECT_EQ(got, std::vector<float>(64, float(i)));
  }
  for (int i = 0; i < 10; ++i) {
    auto m = rt.buffer<float>(8, 8);
    Tiles<float> t = m.partition(4, 4);
    for (size_t a = 0; a < 2; ++a)
      for (size_t b = 0; b < 2; ++b) rt.submit(Task(fill).write(t(a, b)).param(float(i)).on(0));
    ASSERT_NO_THROW(m.unpartition().get()) << "round " << i;
    EXPECT_EQ(m.to_vector(), std::vector<float>(64, float(i)));
  }
  RuntimeStats s = rt.stats();
  EXPECT_GT(s.devices[0].failed, 0u) << "no copy failed: the test tests nothing";
  EXPECT_EQ(s.failed, 0u);
}

}  // namespace
}  // namespace hcr
