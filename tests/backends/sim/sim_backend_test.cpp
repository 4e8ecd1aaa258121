// The simulated backend through the runtime: devices as configured, options checked, real results,
// modelled durations (held on the device and reported to the scheduler), deterministic noise, and
// injected faults. Timing checks are lower bounds only ("not earlier than modelled").
#include "../../test_support.hpp"
#include "../blas_check.hpp"

#include <hcr/sched.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

namespace hcr {
namespace {

using Options = std::vector<std::pair<std::string, std::string>>;

Config sim_config(Options options, std::string policy = "eager") {
  Config c;
  c.use_environment = false;
  c.policy = std::move(policy);
  c.backends.push_back({"sim", true, std::move(options), "sim.toml:3"});
  return c;
}

// A copy: the report is a snapshot (hot-plug may add to it).
std::optional<PluginRecord> sim_record(const Runtime& rt) {
  for (auto& p : rt.load_report().plugins)
    if (p.name == "sim") return p;
  return std::nullopt;
}

// ---- a policy that records what the plugin reports ------------------------------------------

/// Every completed() call of the "sim_record" policy: kernel name and device seconds.
struct Recorded {
  std::string kernel;
  uint32_t device;
  double seconds;
};

class Recorder {
 public:
  static Recorder& get() {
    static Recorder r;
    return r;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    items_.clear();
  }
  void add(Recorded r) {
    std::lock_guard<std::mutex> lock(mutex_);
    items_.push_back(std::move(r));
  }
  std::vector<Recorded> items() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_;
  }
  std::vector<double> seconds(const std::string& kernel) const {
    std::vector<double> out;
    for (auto& r : items())
      if (r.kernel == kernel) out.push_back(r.seconds);
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Recorded> items_;
};

// FIFO placement like eager, plus a record of the seconds each completion reports.
class RecordingPolicy final : public sched::Policy {
 public:
  std::string_view name() const noexcept override { return "sim_record"; }
  void attach(sched::Context&) override {}
  sched::DeviceId push(sched::TaskRef task) override {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(task);
    return sched::kAnyDevice;
  }
  sched::TaskRef pop(sched::DeviceId d) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if (it->can_run(d)) {
        sched::TaskRef t = *it;
        queue_.erase(it);
        return t;
      }
    return {};
  }
  void completed(sched::TaskRef task, sched::DeviceId d, double seconds) override {
    Recorder::get().add({std::string(task.kernel_name()), d, seconds});
  }

 private:
  std::mutex mutex_;
  std::deque<sched::TaskRef> queue_;
};

const bool policy_registered = [] {
  sched::register_policy("sim_record",
                         [](const Config&) { return std::make_unique<RecordingPolicy>(); });
  return true;
}();

Config recording(Options options) {
  Recorder::get().clear();
  return sim_config(std::move(options), "sim_record");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A kernel whose modelled cost is set by [backend.kernel.<name>] flops; it counts its runs.
Kernel counting_kernel(Runtime& rt, const std::string& name, std::atomic<int>& runs) {
  return rt.kernel(name).cpu([&runs](TaskContext&) { runs.fetch_add(1); });
}

// ---- devices and options --------------------------------------------------------------------

TEST(SimBackend, DevicesAreAsConfigured) {
  Runtime rt(sim_config({{"device.0.name", "fast"},
                         {"device.0.kind", "gpu"},
                         {"device.0.gflops", "2000"},
                         {"device.0.memory", "512MiB"},
                         {"device.0.concurrency", "4"},
                         {"device.0.host_memory", "true"},
                         {"device.0.arch", "twin"},
                         {"device.1.name", "fast-too"},
                         {"device.1.arch", "twin"},
                         {"device.1.host_memory", "true"},
                         {"device.2.name", "fpga"},
                         {"device.2.kind", "accelerator"},
                         {"device.2.memory", "1GB"},
                         {"device.2.bandwidth", "8GB/s"},
                         {"device.2.latency", "20us"},
                         {"device.2.compute_units", "16"},
                         {"device.3.kind", "cpu"},
                         {"device.3.host_memory", "true"}}));
  ASSERT_EQ(rt.devices().size(), 4u);
  const std::vector<Device> devices = rt.devices();
  const Device &fast = devices[0], &twin = devices[1], &fpga = devices[2], &cpu = devices[3];
  EXPECT_EQ(fast.name, "fast");
  EXPECT_EQ(fast.backend, "sim");
  EXPECT_EQ(fast.kind, DeviceKind::gpu);
  EXPECT_EQ(fast.memory_bytes, 512ull << 20);
  EXPECT_EQ(fast.concurrency, 4u);
  EXPECT_EQ(fast.compute_units, 4u);  // defaults to the slots
  EXPECT_DOUBLE_EQ(fast.peak_gflops, 2000);
  EXPECT_EQ(fast.arch, "twin");
  EXPECT_EQ(twin.arch, "twin");  // identical devices share a cost model
  EXPECT_EQ(fast.memory_node, 0u);
  EXPECT_EQ(twin.memory_node, 0u);

  EXPECT_EQ(fpga.kind, DeviceKind::accelerator);
  EXPECT_EQ(fpga.memory_bytes, 1000000000ull);
  EXPECT_NE(fpga.memory_node, 0u);  // its own memory
  EXPECT_DOUBLE_EQ(fpga.link_bandwidth, 8e9);
  EXPECT_DOUBLE_EQ(fpga.link_latency, 20e-6);
  EXPECT_EQ(fpga.compute_units, 16u);
  EXPECT_EQ(fpga.concurrency, 1u);
  EXPECT_EQ(fpga.arch, "sim:fpga");  // derived from the name

  EXPECT_EQ(cpu.kind, DeviceKind::cpu);
  EXPECT_EQ(cpu.name, "sim-cpu3");
  EXPECT_EQ(cpu.memory_bytes, 8ull << 30);
  EXPECT_DOUBLE_EQ(cpu.link_bandwidth, 0);  // host memory: no link
}

TEST(SimBackend, LinkKeysOfAHostMemoryDeviceDrawAWarning) {
  test::LogCapture log(LogLevel::warn);
  Runtime rt(sim_config({{"device.0.name", "apu"},
                         {"device.0.host_memory", "true"},
                         {"device.0.bandwidth", "10GB/s"}}));
  ASSERT_EQ(rt.devices().size(), 1u);
  EXPECT_TRUE(log.contains("option 'device.0.bandwidth' has no effect")) << "no warning";
}

TEST(SimBackend, WithoutDeviceTablesThereAreNoDevices) {
  Runtime rt(sim_config({}));
  EXPECT_TRUE(rt.devices().empty());
  bool loaded = false;
  for (auto& p : rt.load_report().plugins)
    loaded = loaded || (p.name == "sim" && p.status == PluginRecord::Status::loaded);
  EXPECT_TRUE(loaded) << "the plugin loads; it just simulates nothing";
}

TEST(SimBackend, BadOptionsAreConfigErrorsNamingTheKey) {
  struct Case {
    Options options;
    std::string why;
  } cases[] = {
      {{{"device.0.gflop", "10"}}, "unknown option 'device.0.gflop'"},
      {{{"speed", "1"}}, "unknown option 'speed'"},
      {{{"device.0.memory", "8XB"}}, "option 'device.0.memory' = '8XB' is not a size"},
      {{{"device.0.bandwidth", "20GB"}}, "option 'device.0.bandwidth' = '20GB' is not a rate"},
      {{{"device.0.latency", "10 sec"}}, "option 'device.0.latency' = '10 sec' is not a duration"},
      {{{"time_scale", "0"}}, "option 'time_scale' = '0' is not a number greater than 0"},
      {{{"seed", "x"}}, "option 'seed' = 'x' is not an integer"},
      {{{"compute", "yes"}}, "option 'compute' = 'yes' is not true or false"},
      {{{"device.0.kind", "tpu"}}, "option 'device.0.kind' = 'tpu' is not a device kind"},
      {{{"device.0.fail_probability", "1.5"}},
       "option 'device.0.fail_probability' = '1.5' is not a probability"},
      {{{"device.0.concurrency", "0"}}, "option 'device.0.concurrency' = '0'"},
      {{{"device.0.factors.gemm_f32", "-1"}}, "option 'device.0.factors.gemm_f32' = '-1'"},
      {{{"device.name", "x"}}, "option 'device.name': devices are [[backend.device]] tables"},
      {{{"kernel.scale.cost", "3"}}, "unknown option 'kernel.scale.cost'"},
      {{{"kernel.gemm_f32.flops", "3"}}, "fixed at 2*m*n*k flops"},
      {{{"kernel.potrf_f64.flops_per_byte", "3"}},
       "the cost of potrf_f64 is fixed at n*n*n/3 flops"},
      {{{"device.0.slowdown_at", "1s"}}, "needs 'device.0.slowdown_factor'"},
  };
  // A mistake in the table is the configuration's: the runtime does not start, and says where.
  for (const Case& k : cases) {
    Error e = test::expect_error([&] { Runtime rt(sim_config(k.options)); });
    EXPECT_EQ(e.code(), ErrorCode::config) << k.why;
    const std::string what = e.what();
    EXPECT_NE(what.find(k.why), std::string::npos)
        << "wanted '" << k.why << "' in '" << what << "'";
    EXPECT_EQ(what.rfind("sim.toml:3: backend." + k.options[0].first + ": ", 0), 0u) << what;
  }
}

TEST(SimBackend, NestedTomlTablesReachThePlugin) {
  Config c = Config::parse(R"(
[scheduler]
policy = "sim_record"

[[backend]]
name = "sim"
seed = 3
time_scale = 0.001

[backend.kernel.touch]
flops = 2e9

[[backend.device]]
name = "gpu0"
gflops = 1000
kernels = ["gemm_f32", "touch"]
host_memory = true
[backend.device.factors]
touch = 0.5

[[backend.device]]
name = "gpu1"
host_memory = true
)",
                           "inline.toml");
  c.use_environment = false;
  Recorder::get().clear();
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 2u);
  EXPECT_EQ(rt.devices()[0].name, "gpu0");
  EXPECT_EQ(rt.devices()[1].name, "gpu1");
  std::atomic<int> runs{0};
  rt.submit(Task(counting_kernel(rt, "touch", runs)).on(0)).get();
  auto s = Recorder::get().seconds("touch");
  ASSERT_EQ(s.size(), 1u);
  // Kernel flops over gflops times factor, in wall seconds (x time_scale 0.001).
  EXPECT_NEAR(s[0], 2e9 / (1000e9 * 0.5) * 0.001, 1e-12);
  auto A = rt.buffer<double>(2, 2), B = rt.buffer<double>(2, 2), C = rt.buffer<double>(2, 2);
  Error e = test::expect_error(
      [&] { rt.submit(Task(rt.kernel("gemm_f64")).read(A).read(B).write(C).on(0)).get(); });
  EXPECT_EQ(e.code(), ErrorCode::no_device) << e.what();  // not in gpu0's kernels list
}

TEST(SimBackend, TheSampleMachineLoads) {
  Config c = Config::load(HCR_SOURCE_DIR "/samples/sim_machine.toml");
  c.use_environment = false;
  Runtime rt(c);
  const std::optional<PluginRecord> rec = sim_record(rt);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->status, PluginRecord::Status::loaded) << rec->reason;
  EXPECT_GE(rec->devices, 2u);
}

TEST(SimBackend, TheSampleMachineShowsTheSchedulerAtWork) {
  // What `hcr run --config samples/sim_machine.toml` shows: the model, not the host, sets the
  // pace (no warning that the host's computation outruns it), the policy spreads the work over
  // the devices, and their busy time is measured.
  test::LogCapture log(LogLevel::warn);
  Config c = Config::load(HCR_SOURCE_DIR "/samples/sim_machine.toml");
  c.use_environment = false;
  Runtime rt(c);
  const size_t n = 1024;
  auto a = rt.buffer<float>(n, n), b = rt.buffer<float>(n, n), out = rt.buffer<float>(n, n);
  blas::gemm(rt, a, b, out, 256).get();
  const RuntimeStats stats = rt.stats();
  size_t used = 0;
  for (const Device& d : rt.devices()) {
    const DeviceCounters& k = stats.devices[d.id];
    if (k.tasks == 0) continue;
    ++used;
    EXPECT_GT(k.busy_seconds, 0.0) << d.name << " ran " << k.tasks << " tasks";
  }
  EXPECT_GE(used, 2u) << "one device took everything";
  EXPECT_FALSE(log.contains("the host took"));
}

// ---- real results ---------------------------------------------------------------------------

template <class T>
void check_gemm(Runtime& rt, size_t m, size_t k, size_t n, size_t tile) {
  std::mt19937 gen(42);
  std::uniform_real_distribution<double> dist(-1, 1);
  auto A = rt.buffer<T>(m, k), B = rt.buffer<T>(k, n), C = rt.buffer<T>(m, n);
  std::vector<T> a(m * k), b(k * n);
  for (auto& x : a) x = static_cast<T>(dist(gen));
  for (auto& x : b) x = static_cast<T>(dist(gen));
  {
    auto va = A.acquire(Access::write), vb = B.acquire(Access::write);
    std::copy(a.begin(), a.end(), va.data());
    std::copy(b.begin(), b.end(), vb.data());
  }
  blas::gemm(rt, A, B, C, tile).get();
  auto c = C.to_vector();
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      double want = 0, scale = 0;
      for (size_t q = 0; q < k; ++q) {
        want += static_cast<double>(a[i * k + q]) * b[q * n + j];
        scale += std::abs(static_cast<double>(a[i * k + q]) * b[q * n + j]);
      }
      ASSERT_LE(std::abs(c[i * n + j] - want),
                2.0 * (k + 2) * std::numeric_limits<T>::epsilon() * scale + 1e-30)
          << i << "," << j;
    }
}

TEST(SimBackend, TiledGemmThroughTheRuntimeIsCorrect) {
  Runtime rt(sim_config({{"time_scale", "0.001"},
                         {"device.0.name", "big"},
                         {"device.0.gflops", "1000"},
                         {"device.0.host_memory", "true"},
                         {"device.0.concurrency", "2"},
                         {"device.1.name", "small"},
                         {"device.1.gflops", "50"},
                         {"device.1.host_memory", "true"},
                         {"device.1.noise", "0.3"}}));
  check_gemm<float>(rt, 96, 80, 72, 32);
  check_gemm<double>(rt, 70, 65, 33, 16);
  RuntimeStats s = rt.stats();
  EXPECT_EQ(s.failed, 0u);
  EXPECT_GT(s.devices[0].tasks + s.devices[1].tasks, 0u);
}

TEST(SimBackend, UserCpuKernelsRunOnEachPinnedDevice) {
  Runtime rt(sim_config({{"time_scale", "0.001"},
                         {"device.0.name", "a"},
                         {"device.0.host_memory", "true"},
                         {"device.0.concurrency", "3"},
                         {"device.1.name", "b"},
                         {"device.1.host_memory", "true"}}));
  std::atomic<uint32_t> max_worker{0};
  Kernel axpy = rt.kernel("axpy").cpu([&](TaskContext& ctx) {
    auto x = ctx.arg<float>(0);
    auto y = ctx.arg<float>(1);
    float alpha = ctx.param<float>(0);
    for (size_t i = 0; i < y.cols; ++i) y(0, i) += alpha * x(0, i);
    uint32_t w = ctx.worker(), seen = max_worker.load();
    while (w > seen && !max_worker.compare_exchange_weak(seen, w)) {
    }
  });
  for (uint32_t dev = 0; dev < 2; ++dev) {
    auto x = rt.vector<float>(100), y = rt.vector<float>(100);
    {
      auto vx = x.acquire(Access::write), vy = y.acquire(Access::write);
      for (size_t i = 0; i < 100; ++i) {
        vx(0, i) = static_cast<float>(i);
        vy(0, i) = 1.0f;
      }
    }
    Event e = rt.submit(Task(axpy).read(x).read_write(y).param(2.0f).on(dev));
    e.get();
    EXPECT_EQ(e.device(), static_cast<int>(dev));
    auto out = y.to_vector();
    for (size_t i = 0; i < 100; ++i) ASSERT_EQ(out[i], 1.0f + 2.0f * i) << "device " << dev;
  }
  EXPECT_LT(max_worker.load(), 3u);  // a slot of the device, never beyond its concurrency
}

TEST(SimBackend, KernelErrorsReachTheEventUnchanged) {
  Runtime rt(sim_config({{"device.0.name", "apu"}, {"device.0.host_memory", "true"}}));
  Kernel bad = rt.kernel("bad").cpu([](TaskContext&) { throw std::out_of_range("sim says no"); });
  EXPECT_THROW(rt.submit(Task(bad).on(0)).get(), std::out_of_range);
}

// ---- modelled time --------------------------------------------------------------------------

TEST(SimBackend, ModelledDurationsHoldTheDevice) {
  // 5e7 flops at 1 GFLOP/s: 50 ms; a 25x20x50 gemm is 5e4 flops at 1 MFLOP/s: 50 ms.
  Runtime rt(sim_config({{"kernel.wait50.flops", "5e7"},
                         {"device.0.name", "slow"},
                         {"device.0.gflops", "1"},
                         {"device.0.host_memory", "true"},
                         {"device.1.name", "slower"},
                         {"device.1.gflops", "0.001"},
                         {"device.1.host_memory", "true"}}));
  std::atomic<int> runs{0};
  Kernel wait50 = counting_kernel(rt, "wait50", runs);
  auto t0 = std::chrono::steady_clock::now();
  rt.submit(Task(wait50).on(0)).get();
  EXPECT_GE(seconds_since(t0), 0.050);
  EXPECT_EQ(runs.load(), 1);

  auto A = rt.buffer<float>(25, 20), B = rt.buffer<float>(20, 50), C = rt.buffer<float>(25, 50);
  hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
  t0 = std::chrono::steady_clock::now();
  rt.submit(Task(rt.kernel("gemm_f32")).read(A).read(B).read_write(C).param(p).on(1)).get();
  EXPECT_GE(seconds_since(t0), 0.050);

  // Two tasks on one slot: the second waits for the first's modelled end.
  t0 = std::chrono::steady_clock::now();
  Event a = rt.submit(Task(wait50).on(0)), b = rt.submit(Task(wait50).on(0));
  a.get();
  b.get();
  EXPECT_GE(seconds_since(t0), 0.100);
}

// Each built-in kernel costs its flops (sim/README.md): gemm 2mnk, syrk n²k, trsm m²n on the left
// and mn² on the right, potrf n³/3, getrf_nopiv 2n³/3; timing only, so no data is needed.
TEST(SimBackend, BuiltinBlasKernelsCostTheirFlops) {
  Runtime rt(recording({{"time_scale", "0.01"},
                        {"compute", "false"},
                        {"device.0.name", "m"},
                        {"device.0.gflops", "10"},
                        {"device.0.factors.trsm_f32", "0.5"},
                        {"device.0.host_memory", "true"}}));
  auto a45 = rt.buffer<double>(5, 4), b56 = rt.buffer<double>(6, 5), c46 = rt.buffer<double>(4, 6);
  auto s66 = rt.buffer<double>(6, 6);
  auto f44 = rt.buffer<float>(4, 4), f46 = rt.buffer<float>(4, 6), f66 = rt.buffer<float>(6, 6);
  const double scale = 0.01 / 10e9;  // wall seconds per flop
  struct Case {
    const char* kernel;
    std::function<Task()> task;
    double flops;
  };
  const std::vector<Case> cases = {
      {"gemm_f64",  // A and B given transposed: m 4, n 6, k 5
       [&] {
         return std::move(Task(rt.kernel("gemm_f64"))
                              .read(a45)
                              .read(b56)
                              .write(c46)
                              .param(hcr_gemm_params_t{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0, HCR_TRANS,
                                                       HCR_TRANS}));
       },
       2.0 * 4 * 6 * 5},
      {"syrk_f64",  // n 6, k 5
       [&] {
         return std::move(Task(rt.kernel("syrk_f64"))
                              .read(b56)
                              .read_write(s66)
                              .param(hcr_syrk_params_t{HCR_SYRK_PARAMS_STRUCT_SIZE, 1, 0, HCR_LOWER,
                                                       HCR_NO_TRANS}));
       },
       6.0 * 6 * 5},
      {"trsm_f32",  // left: m 4, n 6; the device's factor halves its speed
       [&] {
         return std::move(Task(rt.kernel("trsm_f32"))
                              .read(f44)
                              .read_write(f46)
                              .param(hcr_trsm_params_t{HCR_TRSM_PARAMS_STRUCT_SIZE, 1, HCR_LEFT,
                                                       HCR_LOWER, 0, 0}));
       },
       2.0 * 4 * 4 * 6},  // twice the flops: half the speed
      {"trsm_f32",        // right: m 4, n 6, at half speed too
       [&] {
         return std::move(Task(rt.kernel("trsm_f32"))
                              .read(f66)
                              .read_write(f46)
                              .param(hcr_trsm_params_t{HCR_TRSM_PARAMS_STRUCT_SIZE, 1, HCR_RIGHT,
                                                       HCR_UPPER, 1, 1}));
       },
       2.0 * 4 * 6 * 6},
      {"potrf_f64",
       [&] {
         return std::move(Task(rt.kernel("potrf_f64"))
                              .read_write(s66)
                              .param(hcr_potrf_params_t{HCR_POTRF_PARAMS_STRUCT_SIZE, HCR_UPPER}));
       },
       6.0 * 6 * 6 / 3},
      {"getrf_nopiv_f64",
       [&] { return std::move(Task(rt.kernel("getrf_nopiv_f64")).read_write(s66)); },
       2.0 * 6 * 6 * 6 / 3},
  };
  for (const Case& c : cases) {
    Recorder::get().clear();
    Task t = c.task();
    rt.submit(t.on(0)).get();
    auto s = Recorder::get().seconds(c.kernel);
    ASSERT_EQ(s.size(), 1u) << c.kernel;
    EXPECT_NEAR(s[0], c.flops * scale, 1e-6 * c.flops * scale) << c.kernel;
  }
}

// The built-ins compute real results on the host, in host memory and in a device's own.
TEST(SimBackend, BuiltinBlasKernelsComputeWhereverTheDataLives) {
  Runtime rt(sim_config({{"time_scale", "0.0001"},
                         {"device.0.name", "apu"},
                         {"device.0.host_memory", "true"},
                         {"device.0.gflops", "1000"},
                         {"device.1.name", "gpu"},
                         {"device.1.gflops", "1000"},
                         {"device.1.concurrency", "2"}}));
  for (uint32_t dev : {0u, 1u}) {
    SCOPED_TRACE(rt.devices()[dev].name);
    test::BlasCheck check(rt, dev);
    check.all<float>({1, 7, 33});
    check.all<double>({1, 7, 33, 65});
  }
}

TEST(SimBackend, TimeScaleStretchesTheDeviceAndItsReports) {
  Runtime rt(recording({{"time_scale", "0.5"},
                        {"kernel.wait.flops", "1e8"},
                        {"device.0.gflops", "1"},
                        {"device.0.host_memory", "true"}}));
  std::atomic<int> runs{0};
  auto t0 = std::chrono::steady_clock::now();
  rt.submit(Task(counting_kernel(rt, "wait", runs)).on(0)).get();
  EXPECT_GE(seconds_since(t0), 0.050);  // 100 ms modelled, at half speed
  auto s = Recorder::get().seconds("wait");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_NEAR(s[0], 0.05, 1e-12);  // reported in wall seconds: what the device was held
  EXPECT_NEAR(rt.devices()[0].peak_gflops, 2.0, 1e-12);  // 1 GFLOP/s at half speed
}

TEST(SimBackend, DeviceSecondsFollowTheModel) {
  Runtime rt(recording({{"time_scale", "0.01"},
                        {"kernel.touch.flops", "1e6"},
                        {"kernel.touch.flops_per_byte", "2"},
                        {"flops_per_byte", "10"},
                        {"device.0.name", "m"},
                        {"device.0.gflops", "10"},
                        {"device.0.factors.gemm_f64", "0.5"},
                        {"device.0.launch_overhead", "1ms"},
                        {"device.0.host_memory", "true"},
                        {"device.1.name", "slowed"},
                        {"device.1.gflops", "10"},
                        {"device.1.factors.gemm_f64", "0.5"},
                        {"device.1.launch_overhead", "1ms"},
                        {"device.1.host_memory", "true"},
                        {"device.1.slowdown_at", "0s"},
                        {"device.1.slowdown_factor", "3"}}));
  auto A = rt.buffer<double>(32, 16), B = rt.buffer<double>(16, 8), C = rt.buffer<double>(32, 8);
  auto v = rt.vector<float>(100);
  hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
  Kernel gemm = rt.kernel("gemm_f64");
  std::atomic<int> runs{0};
  Kernel touch = counting_kernel(rt, "touch", runs);
  Kernel plain = rt.kernel("plain").cpu([](TaskContext&) {});
  for (uint32_t dev = 0; dev < 2; ++dev) {
    Recorder::get().clear();
    rt.submit(Task(gemm).read(A).read(B).read_write(C).param(p).on(dev)).get();
    rt.submit(Task(touch).read_write(v).on(dev)).get();
    rt.submit(Task(plain).read(v).on(dev)).get();
    const double slow = (dev == 1 ? 3.0 : 1.0) * 0.01;  // and x time_scale: wall seconds
    auto g = Recorder::get().seconds("gemm_f64");
    auto t = Recorder::get().seconds("touch");
    auto q = Recorder::get().seconds("plain");
    ASSERT_EQ(g.size(), 1u);
    ASSERT_EQ(t.size(), 1u);
    ASSERT_EQ(q.size(), 1u);
    EXPECT_NEAR(g[0], slow * (1e-3 + 2.0 * 32 * 16 * 8 / (10e9 * 0.5)), 1e-12);
    EXPECT_NEAR(t[0], slow * (1e-3 + (1e6 + 2.0 * 400) / 10e9), 1e-12);
    EXPECT_NEAR(q[0], slow * (1e-3 + 10.0 * 400 / 10e9), 1e-12);  // the backend's flops_per_byte
  }
}

TEST(SimBackend, SlowdownStartsAtItsModelledTime) {
  Runtime rt(recording({{"time_scale", "0.1"},
                        {"kernel.k.flops", "1e8"},
                        {"device.0.gflops", "1"},
                        {"device.0.host_memory", "true"},
                        {"device.0.slowdown_at", "5s"},
                        {"device.0.slowdown_factor", "10"}}));
  std::atomic<int> runs{0};
  Kernel k = counting_kernel(rt, "k", runs);
  // 100 ms modelled each, back to back: the first starts well before 5 s (500 ms of wall time
  // after the start, to spare under a sanitizer), and one of the first fifty or so after it.
  // Durations are reported in wall seconds: 10 ms before, 100 ms after.
  std::vector<double> s;
  for (int i = 0; i < 500; ++i) {
    rt.submit(Task(k).on(0)).get();
    s = Recorder::get().seconds("k");
    if (s.back() > 0.02) break;
  }
  ASSERT_GE(s.size(), 2u);
  EXPECT_NEAR(s.front(), 0.01, 1e-12);
  EXPECT_NEAR(s.back(), 0.1, 1e-12);
}

std::vector<double> noisy_run(uint64_t seed, int tasks) {
  Runtime rt(recording({{"seed", std::to_string(seed)},
                        {"time_scale", "0.001"},
                        {"kernel.k.flops", "1e6"},
                        {"device.0.name", "noisy"},
                        {"device.0.gflops", "1"},
                        {"device.0.noise", "0.3"},
                        {"device.0.host_memory", "true"}}));
  std::atomic<int> runs{0};
  Kernel k = counting_kernel(rt, "k", runs);
  for (int i = 0; i < tasks; ++i) rt.submit(Task(k).on(0)).get();
  return Recorder::get().seconds("k");
}

TEST(SimBackend, NoiseIsDeterministicForASeed) {
  std::vector<double> a = noisy_run(7, 20), b = noisy_run(7, 20), c = noisy_run(8, 20);
  ASSERT_EQ(a.size(), 20u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_GT(*std::max_element(a.begin(), a.end()), *std::min_element(a.begin(), a.end()));
  for (double s : a) EXPECT_GT(s, 0);
}

// ---- faults ---------------------------------------------------------------------------------

TEST(SimBackend, FailProbabilityOneFailsEveryTaskNamingTheDevice) {
  Runtime rt(sim_config({{"time_scale", "0.001"},
                         {"device.0.name", "flaky"},
                         {"device.0.host_memory", "true"},
                         {"device.0.fail_probability", "1"}}));
  std::atomic<int> runs{0};
  Kernel k = counting_kernel(rt, "k", runs);
  std::vector<Event> events;
  for (int i = 0; i < 5; ++i) events.push_back(rt.submit(Task(k).on(0)));
  for (Event& e : events) {
    // Retried elsewhere in vain (the only device): no device left, every device's error said.
    Error err = test::expect_error([&] { e.get(); });
    EXPECT_EQ(err.code(), ErrorCode::no_device);
    EXPECT_NE(std::string(err.what()).find("'flaky'"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("injected failure"), std::string::npos) << err.what();
  }
  EXPECT_EQ(runs.load(), 0);  // a failed launch's results are garbage: not computed
}

TEST(SimBackend, FailAfterLetsTheFirstLaunchesSucceed) {
  Runtime rt(sim_config({{"time_scale", "0.001"},
                         {"device.0.name", "tired"},
                         {"device.0.host_memory", "true"},
                         {"device.0.fail_after", "3"}}));
  std::atomic<int> runs{0};
  Kernel k = counting_kernel(rt, "k", runs);
  for (int i = 0; i < 6; ++i) {
    Event e = rt.submit(Task(k).on(0));
    e.wait();
    EXPECT_EQ(static_cast<bool>(e.error()), i >= 3) << "task " << i;
  }
  EXPECT_EQ(runs.load(), 3);
}

TEST(SimBackend, ALostDeviceFailsWhatRunsAndEverythingAfter) {
  // lost at 1 s; the short task ends long before, the long one (100 s) runs into it.
  Runtime rt(sim_config({{"kernel.short.flops", "1e6"},
                         {"kernel.long.flops", "1e11"},
                         {"device.0.name", "doomed"},
                         {"device.0.gflops", "1"},
                         {"device.0.host_memory", "true"},
                         {"device.0.lost_at", "1s"}}));
  std::atomic<int> runs{0};
  Kernel quick = counting_kernel(rt, "short", runs), slow = counting_kernel(rt, "long", runs);
  rt.submit(Task(quick).on(0)).get();
  // Ends at lost_at, not after its 100 modelled seconds.
  Error e = test::expect_error([&] { rt.submit(Task(slow).on(0)).get(); });
  EXPECT_EQ(e.code(), ErrorCode::no_device) << e.what();  // its only device is gone
  EXPECT_NE(std::string(e.what()).find("'doomed' was lost"), std::string::npos) << e.what();
  e = test::expect_error([&] { rt.submit(Task(quick).on(0)).get(); });
  EXPECT_EQ(e.code(), ErrorCode::no_device) << e.what();
  EXPECT_NE(std::string(e.what()).find("lost"), std::string::npos) << e.what();
  EXPECT_EQ(runs.load(), 1);
}

TEST(SimBackend, AHungTaskTimesOutAndShutdownDoesNotHang) {
  std::atomic<int> runs{0};
  {
    Runtime rt(sim_config({{"device.0.name", "stuck"},
                           {"device.0.host_memory", "true"},
                           {"device.0.hang_probability", "1"},
                           {"device.0.hang_timeout", "100ms"}}));
    Kernel k = counting_kernel(rt, "k", runs);
    auto t0 = std::chrono::steady_clock::now();
    Error e = test::expect_error([&] { rt.submit(Task(k).on(0)).get(); });
    EXPECT_GE(seconds_since(t0), 0.1);
    EXPECT_EQ(e.code(), ErrorCode::no_device) << e.what();  // timed out, nowhere else to go
    EXPECT_NE(std::string(e.what()).find("hung"), std::string::npos) << e.what();
    rt.submit(Task(k).on(0));  // left running: destruction waits for its timeout
  }
  EXPECT_EQ(runs.load(), 0);
}

TEST(SimBackend, KernelsListLimitsWhatADeviceRuns) {
  Runtime rt(sim_config({{"time_scale", "0.001"},
                         {"device.0.name", "blasless"},
                         {"device.0.host_memory", "true"},
                         {"device.0.kernels", "scale"},
                         {"device.1.name", "any"},
                         {"device.1.host_memory", "true"}}));
  auto A = rt.buffer<float>(4, 4), B = rt.buffer<float>(4, 4), C = rt.buffer<float>(4, 4);
  hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
  Kernel gemm = rt.kernel("gemm_f32");
  Error e = test::expect_error(
      [&] { rt.submit(Task(gemm).read(A).read(B).read_write(C).param(p).on(0)).get(); });
  EXPECT_EQ(e.code(), ErrorCode::no_device);
  EXPECT_NE(std::string(e.what()).find("'blasless' does not offer kernel 'gemm_f32'"),
            std::string::npos)
      << e.what();
  auto C2 = rt.buffer<float>(4, 4);  // C is now the output of a failed task
  Event anywhere = rt.submit(Task(gemm).read(A).read(B).read_write(C2).param(p));
  EXPECT_NO_THROW(anywhere.get());
  EXPECT_EQ(anywhere.device(), 1);

  std::atomic<int> runs{0};
  EXPECT_NO_THROW(rt.submit(Task(counting_kernel(rt, "scale", runs)).on(0)).get());
  e = test::expect_error([&] { rt.submit(Task(counting_kernel(rt, "other", runs)).on(0)).get(); });
  EXPECT_EQ(e.code(), ErrorCode::no_device);
  EXPECT_EQ(runs.load(), 1);
}

TEST(SimBackend, ComputeFalseModelsTimeOnly) {
  Runtime rt(recording({{"compute", "false"},
                        {"time_scale", "0.001"},
                        {"device.0.gflops", "1"},
                        {"device.0.host_memory", "true"}}));
  std::atomic<int> runs{0};
  rt.submit(Task(counting_kernel(rt, "k", runs)).on(0)).get();
  EXPECT_EQ(runs.load(), 0);
  auto A = rt.buffer<float>(8, 8), B = rt.buffer<float>(8, 8), C = rt.buffer<float>(8, 8);
  {
    auto va = A.acquire(Access::write), vb = B.acquire(Access::write);
    std::fill(va.data(), va.data() + 64, 1.0f);
    std::fill(vb.data(), vb.data() + 64, 1.0f);
  }
  hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
  rt.submit(Task(rt.kernel("gemm_f32")).read(A).read(B).read_write(C).param(p).on(0)).get();
  for (float x : C.to_vector()) EXPECT_EQ(x, 0.0f);
  auto s = Recorder::get().seconds("gemm_f32");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_NEAR(s[0], 2.0 * 8 * 8 * 8 / 1e9 * 0.001, 1e-15);  // x time_scale
}

TEST(SimBackend, WarnsOnceWhenTheHostsComputationOutrunsTheModel) {
  // A kernel that takes the host 20 ms on a device that models it at nothing: the host, not the
  // model, sets the pace. Said once, naming the device and the remedies.
  test::LogCapture log(LogLevel::warn);  // first: the plugin learns the level at its creation
  Runtime rt(sim_config({{"device.0.name", "quick"},
                         {"device.0.host_memory", "true"},
                         {"device.0.concurrency", "2"}}));
  Kernel slow = rt.kernel("slow").cpu(
      [](TaskContext&) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  for (int i = 0; i < 12; ++i) rt.submit(Task(slow).on(0));
  rt.wait_all();
  size_t warnings = 0;
  for (const std::string& line : log.lines())
    if (line.find("sim: device 'quick': the host took") != std::string::npos) {
      ++warnings;
      EXPECT_NE(line.find("of 'slow'"), std::string::npos) << line;
      EXPECT_NE(line.find("Set compute = false (timing only) or a larger time_scale"),
                std::string::npos)
          << line;
    }
  EXPECT_EQ(warnings, 1u);
}

TEST(SimBackend, NoWarningWhileTheModelSetsThePace) {
  // The same number of launches, modelled at 30 ms each, computing next to nothing; and a slow
  // kernel on a timing-only device (compute = false runs nothing).
  for (const Options& o :
       {Options{{"device.0.launch_overhead", "30ms"}}, Options{{"compute", "false"}}}) {
    Options options = {{"device.0.name", "paced"},
                       {"device.0.host_memory", "true"},
                       {"device.0.concurrency", "4"}};
    options.insert(options.end(), o.begin(), o.end());
    test::LogCapture log(LogLevel::warn);
    Runtime rt(sim_config(options));
    const bool compute = o[0].first != "compute";
    Kernel k = rt.kernel("k").cpu([compute](TaskContext&) {
      if (!compute) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    });
    for (int i = 0; i < 12; ++i) rt.submit(Task(k).on(0));
    rt.wait_all();
    EXPECT_FALSE(log.contains("the host took")) << o[0].first;
  }
}

TEST(SimBackend, OwnMemoryDevicesRunTasksWithoutBuffers) {
  Runtime rt(sim_config({{"time_scale", "0.001"}, {"device.0.name", "discrete"}}));
  ASSERT_EQ(rt.devices().size(), 1u);
  EXPECT_NE(rt.devices()[0].memory_node, 0u);
  std::atomic<int> runs{0};
  rt.submit(Task(counting_kernel(rt, "k", runs)).param(1).on(0)).get();
  EXPECT_EQ(runs.load(), 1);
}

}  // namespace
}  // namespace hcr
