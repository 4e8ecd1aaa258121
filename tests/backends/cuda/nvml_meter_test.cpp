// The CUDA backend's energy meter (nvml_meter.cpp, the plugin's device_energy). FakeCudaNvml/...
// run the fake-runtime plugin against a fake NVML (fake/fake_nvml.cpp) whose counters each test
// sets: the figures are measured, equal the fake's counters less their values when the plugin
// started, belong to the board at the device's PCI bus id (the fake lists its boards in another
// order than CUDA, behind one CUDA does not see), come from integrated power where a board has no
// energy counter; a missing library, a failing nvmlInit or the option "off" leave no meter and a
// working plugin. CudaGpuNvml/... reads a real GPU's meter over a busy second (skipped without a
// GPU).
#include "cuda_test_plugin.hpp"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace hcr {
namespace {

// Where the fake CUDA runtime puts its devices 0 and 1, and a board NVML has that CUDA does not
// show (fake_cudart.cpp, fake_nvml.cpp). NVML's order: hidden, device 1, device 0.
const char* const kBus0 = "0000:17:00.0";
const char* const kBus1 = "0000:37:00.0";
const char* const kHiddenBus = "0000:C1:00.0";

/// A device_energy call: its error code, or the reading.
struct Energy {
  bool ok = false;
  hcr_error_code_t code = HCR_ERROR_UNKNOWN;
  hcr_energy_reading_t r{};
};

Energy energy(const Plugin& p, size_t device) {
  Energy e;
  e.r.struct_size = HCR_ENERGY_READING_STRUCT_SIZE;
  const CallError err = p.check(p.api()->device_energy(p.get(), device, &e.r));
  e.ok = err.ok;
  e.code = err.code;
  return e;
}

double since(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int noop(void*, const hcr_exec_context_t*, char*, size_t) { return 0; }

/// Holds the fake NVML open (the plugin's dlopen finds the same file, so the same library) and
/// resets its boards; at the end, every nvmlInit must have been matched by nvmlShutdown.
class FakeCudaNvml : public ::testing::Test {
 protected:
  void SetUp() override {
    HCR_NEED_ONLY_FAKE_CUDA_LIBS();
    lib_ = dlopen(HCR_TEST_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    reset_ = sym<void (*)()>("hcr_fake_nvml_reset");
    set_ = sym<int (*)(const char*, unsigned long long, unsigned int)>("hcr_fake_nvml_set");
    supports_ = sym<int (*)(const char*, int, int, int)>("hcr_fake_nvml_supports");
    fail_init_ = sym<void (*)(int)>("hcr_fake_nvml_fail_init");
    inits_ = sym<long (*)()>("hcr_fake_nvml_inits");
    ASSERT_TRUE(reset_ && set_ && supports_ && fail_init_ && inits_);
    reset_();
  }
  void TearDown() override {
    if (lib_ == nullptr) return;
    if (inits_ != nullptr) {
      EXPECT_EQ(inits_(), 0) << "nvmlInit not matched by nvmlShutdown";
    }
    if (reset_ != nullptr) reset_();
    dlclose(lib_);
  }
  template <class F>
  F sym(const char* name) {
    return reinterpret_cast<F>(dlsym(lib_, name));
  }
  void set(const char* bus, unsigned long long mj, unsigned int mw) {
    ASSERT_EQ(set_(bus, mj, mw), 1) << bus;
  }
  void supports(const char* bus, bool energy, bool power, bool present = true) {
    ASSERT_EQ(supports_(bus, energy, power, present), 1) << bus;
  }
  std::unique_ptr<Plugin> plugin(Options o = {}) {
    o.push_back({"cache_dir", ""});
    auto p = std::make_unique<Plugin>(std::move(o), kFakePluginFile);
    EXPECT_TRUE(p->ok()) << p->create_error();
    return p;
  }

  void* lib_ = nullptr;
  void (*reset_)() = nullptr;
  int (*set_)(const char*, unsigned long long, unsigned int) = nullptr;
  int (*supports_)(const char*, int, int, int) = nullptr;
  void (*fail_init_)(int) = nullptr;
  long (*inits_)() = nullptr;
};

TEST_F(FakeCudaNvml, CountsTheBoardsJoulesSinceTheStartAsMeasured) {
  set(kBus0, 5'000'000, 80'000);
  set(kBus1, 7'000'000, 90'000);
  auto p = plugin();
  ASSERT_TRUE(p->ok());
  ASSERT_EQ(p->device_count(), 2u);
  EXPECT_TRUE(p->logged("energy from NVML for 2 of 2 device(s)")) << p->log_text();
  EXPECT_EQ(inits_(), 1) << "one nvmlInit per plugin";

  Energy e = energy(*p, 0);
  ASSERT_TRUE(e.ok);
  EXPECT_EQ(e.r.source, HCR_ENERGY_MEASURED);
  EXPECT_EQ(e.r.joules, 0.0) << "the counter's value at the start is not the plugin's";
  EXPECT_DOUBLE_EQ(e.r.watts, 80.0);
  EXPECT_DOUBLE_EQ(e.r.resolution, 0.1) << "NVML's counter updates every 20-100 ms";
  EXPECT_LT(e.r.idle_watts, 0) << "NVML does not say the idle draw";

  set(kBus0, 5'002'500, 123'456);
  set(kBus1, 7'010'000, 90'000);
  set(kHiddenBus, 99'999'999, 400'000);  // the board CUDA does not see moves too: not ours
  e = energy(*p, 0);
  ASSERT_TRUE(e.ok);
  EXPECT_DOUBLE_EQ(e.r.joules, 2.5);
  EXPECT_DOUBLE_EQ(e.r.watts, 123.456);
  Energy e1 = energy(*p, 1);
  ASSERT_TRUE(e1.ok);
  EXPECT_EQ(e1.r.source, HCR_ENERGY_MEASURED);
  EXPECT_DOUBLE_EQ(e1.r.joules, 10.0);
  EXPECT_DOUBLE_EQ(e1.r.watts, 90.0);

  // A counter that goes back (the driver reloaded) never makes the figure go back.
  set(kBus0, 1'000, 50'000);
  EXPECT_DOUBLE_EQ(energy(*p, 0).r.joules, 2.5);
  set(kBus0, 1'500, 50'000);
  EXPECT_DOUBLE_EQ(energy(*p, 0).r.joules, 3.0);

  p->destroy();
  EXPECT_EQ(inits_(), 0) << "nvmlShutdown at plugin end";
}

TEST_F(FakeCudaNvml, DevicesAreMatchedByBusIdNotByIndex) {
  set(kBus0, 1'000'000, 10'000);
  set(kBus1, 2'000'000, 20'000);
  {
    // The plugin's device 0 is CUDA device 1 here: its board is 0000:37:00.0.
    auto p = plugin({{"devices", "1"}});
    ASSERT_EQ(p->device_count(), 1u);
    set(kBus0, 1'004'000, 11'000);
    set(kBus1, 2'001'000, 21'000);
    Energy e = energy(*p, 0);
    ASSERT_TRUE(e.ok);
    EXPECT_DOUBLE_EQ(e.r.joules, 1.0);
    EXPECT_DOUBLE_EQ(e.r.watts, 21.0);
  }
  // A device whose bus id NVML does not know has no meter; the others keep theirs.
  supports(kBus0, true, true, /*present=*/false);
  auto p = plugin();
  ASSERT_EQ(p->device_count(), 2u);
  EXPECT_FALSE(energy(*p, 0).ok);
  EXPECT_EQ(energy(*p, 0).code, HCR_ERROR_UNSUPPORTED);
  EXPECT_TRUE(energy(*p, 1).ok);
  EXPECT_TRUE(p->logged("energy from NVML for 1 of 2 device(s)")) << p->log_text();
}

TEST_F(FakeCudaNvml, WithoutAnEnergyCounterPowerIsIntegrated) {
  using clock = std::chrono::steady_clock;
  supports(kBus0, /*energy=*/false, /*power=*/true);
  set(kBus0, 0, 100'000);  // 100 W
  const auto t0 = clock::now();
  auto p = plugin();
  const auto t1 = clock::now();
  ASSERT_EQ(p->device_count(), 2u);
  EXPECT_TRUE(p->logged("(1 from power samples)")) << p->log_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto t2 = clock::now();
  Energy e = energy(*p, 0);
  const auto t3 = clock::now();
  ASSERT_TRUE(e.ok);
  EXPECT_EQ(e.r.source, HCR_ENERGY_MEASURED);
  EXPECT_DOUBLE_EQ(e.r.watts, 100.0);
  // 100 W over the time since the plugin started: at least the time between t1 and t2, at most
  // between t0 and t3.
  EXPECT_GE(e.r.joules, 100 * since(t1, t2));
  EXPECT_LE(e.r.joules, 100 * since(t0, t3));
  EXPECT_GE(e.r.resolution, 1.0) << "no finer than NVML's averaged power samples";
  // The draw changes: the interval up to this reading counts the mean of its two samples.
  set(kBus0, 0, 300'000);
  const double before = e.r.joules;
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto t4 = clock::now();
  e = energy(*p, 0);
  const auto t5 = clock::now();
  EXPECT_DOUBLE_EQ(e.r.watts, 300.0);
  EXPECT_GE(e.r.joules - before, 200 * since(t3, t4));
  EXPECT_LE(e.r.joules - before, 200 * since(t2, t5));
  // The other board has its counter.
  EXPECT_DOUBLE_EQ(energy(*p, 1).r.resolution, 0.1);
}

TEST_F(FakeCudaNvml, WithoutPowerSamplesWattsComeFromTheCounter) {
  using clock = std::chrono::steady_clock;
  supports(kBus0, /*energy=*/true, /*power=*/false);
  set(kBus0, 1'000'000, 0);
  const auto t0 = clock::now();
  auto p = plugin();
  const auto t1 = clock::now();
  EXPECT_LT(energy(*p, 0).r.watts, 0) << "unknown until the counter moves";
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  set(kBus0, 1'002'000, 0);  // +2 J
  const auto t2 = clock::now();
  Energy e = energy(*p, 0);
  const auto t3 = clock::now();
  ASSERT_TRUE(e.ok);
  EXPECT_DOUBLE_EQ(e.r.joules, 2.0);
  EXPECT_GE(e.r.watts, 2.0 / since(t0, t3));
  EXPECT_LE(e.r.watts, 2.0 / since(t1, t2));
}

TEST_F(FakeCudaNvml, InitFailureIsNoMeter) {
  fail_init_(1);
  auto p = plugin();
  ASSERT_EQ(p->device_count(), 2u) << "the devices stay";
  for (size_t d = 0; d < 2; ++d) {
    Energy e = energy(*p, d);
    EXPECT_FALSE(e.ok);
    EXPECT_EQ(e.code, HCR_ERROR_UNSUPPORTED);
  }
  EXPECT_TRUE(p->logged("no energy meter: nvmlInit failed: Driver Not Loaded")) << p->log_text();
  EXPECT_EQ(inits_(), 0);
}

TEST_F(FakeCudaNvml, NoLibraryIsNoMeterAndTheRuntimeStillWorks) {
  const std::string absent = "/nonexistent/libnvidia-ml.so.1";
  {
    auto p = plugin({{"nvml", absent}});
    ASSERT_EQ(p->device_count(), 2u);
    EXPECT_EQ(energy(*p, 0).code, HCR_ERROR_UNSUPPORTED);
    EXPECT_TRUE(p->logged("no energy meter: cannot open " + absent)) << p->log_text();
    EXPECT_EQ(inits_(), 0);
  }
  Config c = cuda_config({{"cache_dir", ""}, {"nvml", absent}});
  c.plugin_paths = {HCR_TEST_FAKE_CUDA_DIR};
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 2u);
  Kernel k = rt.kernel("noop").native("cuda", &noop, nullptr);
  rt.submit(Task(k).on(0)).get();
  const RuntimeStats s = rt.stats();
  EXPECT_EQ(s.completed, 1u);
  for (const DeviceCounters& d : s.devices) EXPECT_EQ(d.energy_source, "none");
}

TEST_F(FakeCudaNvml, OffOpensNothing) {
  auto p = plugin({{"nvml", "off"}});
  ASSERT_EQ(p->device_count(), 2u);
  EXPECT_EQ(inits_(), 0) << "NVML was initialized though the meter is off";
  EXPECT_EQ(energy(*p, 0).code, HCR_ERROR_UNSUPPORTED);
  EXPECT_EQ(energy(*p, 1).code, HCR_ERROR_UNSUPPORTED);
  EXPECT_FALSE(p->logged("NVML")) << p->log_text();
}

TEST_F(FakeCudaNvml, AnAbsolutePathNamesTheLibrary) {
  auto p = plugin({{"nvml", HCR_TEST_FAKE_NVML}});
  set(kBus0, 1'000'250, 100'000);  // +0.25 J over the default 1'000'000 mJ
  Energy e = energy(*p, 0);
  ASSERT_TRUE(e.ok);
  EXPECT_DOUBLE_EQ(e.r.joules, 0.25);
}

TEST_F(FakeCudaNvml, BadOptionValuesAreRefusedNamingTheOption) {
  Plugin p(Options{{"nvml", "lib/libnvidia-ml.so.1"}}, kFakePluginFile);
  EXPECT_FALSE(p.ok());
  EXPECT_NE(p.create_error().find("option 'nvml' = 'lib/libnvidia-ml.so.1'"), std::string::npos)
      << p.create_error();
}

TEST_F(FakeCudaNvml, ConcurrentReadsNeverGoBack) {
  set(kBus0, 0, 1'000);
  auto p = plugin();
  std::atomic<bool> stop{false};
  std::atomic<int> backwards{0}, failed{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&] {
      double last = 0;
      while (!stop.load()) {
        Energy e = energy(*p, 0);
        if (!e.ok) ++failed;
        if (e.r.joules < last) ++backwards;
        last = e.r.joules;
      }
    });
  for (unsigned long long mj = 1; mj <= 2000; ++mj) set(kBus0, mj, 1'000);
  stop = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(backwards.load(), 0);
  EXPECT_DOUBLE_EQ(energy(*p, 0).r.joules, 2.0) << "every millijoule counted once";
}

TEST_F(FakeCudaNvml, TheRuntimeReportsEachGpusJoulesAsMeasured) {
  Config c = cuda_config({{"cache_dir", ""}});
  c.plugin_paths = {HCR_TEST_FAKE_CUDA_DIR};
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 2u);
  set(kBus0, 1'003'000, 100'000);  // device 0: +3 J
  set(kBus1, 2'000'500, 200'000);  // device 1: +0.5 J
  const RuntimeStats s = rt.stats();
  double total = 0;
  for (const Device& d : rt.devices()) {
    const DeviceCounters& x = s.devices.at(d.id);
    EXPECT_EQ(x.energy_source, "measured") << d.name;
    const double want = d.name == "Fake CUDA device 0" ? 3.0 : 0.5;
    EXPECT_NEAR(x.energy_joules, want, 1e-9) << d.name;
    total += x.energy_joules;
  }
  EXPECT_NEAR(s.energy_joules, 3.5, 1e-9);
  EXPECT_NEAR(total, 3.5, 1e-9);
}

// ---- a real GPU ---------------------------------------------------------------------------------

TEST(CudaGpuNvml, JoulesGrowOverABusySecond) {
  HCR_NEED_GPU();
  Plugin p(Options{{"cache_dir", ""}}, kPluginFile);
  ASSERT_TRUE(p.ok()) << p.create_error();
  Energy start = energy(p, 0);
  if (!start.ok) GTEST_SKIP() << "no NVML meter on this machine: " << p.log_text();
  EXPECT_EQ(start.r.source, HCR_ENERGY_MEASURED);

  const uint64_t n = 4096;
  const uint64_t bytes = n * n * sizeof(float);
  std::vector<float> ones(n * n, 1.0f);
  hcr_memory_t* m[3];
  for (auto& x : m) {
    x = p.alloc(0, bytes);
    ASSERT_NE(x, nullptr);
    ASSERT_TRUE(p.upload(0, x, 0, bytes, ones.data(), bytes, bytes, 1).ok);
  }
  hcr_kernel_t* gemm = p.builtin(0, "gemm_f32");
  ASSERT_NE(gemm, nullptr);
  hcr_arg_t args[3] = {matrix_arg(m[0], 0, HCR_DTYPE_F32, HCR_ACCESS_READ, n, n, n),
                       matrix_arg(m[1], 0, HCR_DTYPE_F32, HCR_ACCESS_READ, n, n, n),
                       matrix_arg(m[2], 0, HCR_DTYPE_F32, HCR_ACCESS_READ_WRITE, n, n, n)};
  hcr_gemm_params_t params{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
  hcr_launch_args_t la{};
  la.kernel = gemm;
  la.args = args;
  la.num_args = 3;
  la.params = &params;
  la.params_size = sizeof params;
  const Energy before = energy(p, 0);
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1)) {
    Outcome o = p.launch(la);
    ASSERT_TRUE(o.ok) << o.message;
  }
  // Past the counter's update interval, so that the last of the work shows.
  std::this_thread::sleep_for(std::chrono::duration<double>(before.r.resolution));
  const Energy after = energy(p, 0);
  ASSERT_TRUE(after.ok);
  EXPECT_GT(after.r.joules, before.r.joules + 1.0)
      << "a busy second of a GPU costs more than a joule";
  EXPECT_GT(after.r.watts, 0.0);
  p.release(gemm);
  for (auto* x : m) p.free(0, x);
}

}  // namespace
}  // namespace hcr
