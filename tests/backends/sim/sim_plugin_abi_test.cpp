// The simulated backend at the plugin ABI, loaded with dlopen like the runtime would: device memory
// (allocation cap, 2-D copies in, out and between devices, modelled copy time), gemm and host
// functions on device memory, hangs ended by synchronize and by destruction, lost devices, copy
// faults, estimates, and `done` handlers that call straight back into the plugin.
#include <hcr/plugin.h>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Options = std::vector<std::pair<std::string, std::string>>;

/// The library, loaded once for the whole suite.
const hcr_plugin_api_t* sim_api() {
  static const hcr_plugin_api_t* api = [] {
    void* lib = dlopen(HCR_TEST_PLUGIN_DIR "/libhcr-sim.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return static_cast<const hcr_plugin_api_t*>(nullptr);
    auto get = reinterpret_cast<hcr_plugin_get_api_fn>(dlsym(lib, HCR_PLUGIN_ENTRY_SYMBOL));
    return get ? get() : nullptr;
  }();
  return api;
}

/// An error's code and text (the error is freed); code 0 for success.
struct Status {
  int code = 0;
  std::string message;
};

Status take(hcr_error_t* e) {
  if (e == nullptr) return {};
  const hcr_plugin_api_t* api = sim_api();
  Status s{static_cast<int>(api->error_code(e)), api->error_message(e)};
  api->error_destroy(e);
  return s;
}

/// One `done` callback: how often it was called, with what.
class Done {
 public:
  static void fn(void* user, hcr_error_t* error, const hcr_completion_info_t* info) {
    auto* self = static_cast<Done*>(user);
    Status s = take(error);
    std::lock_guard<std::mutex> lock(self->mutex_);
    ++self->calls_;
    self->status_ = s;
    self->seconds_ = info ? info->device_seconds : -1;
    self->cv_.notify_all();
  }
  /// Waits (at most a minute, so that a broken plugin fails the test instead of hanging it).
  bool wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return calls_ > 0; });
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }
  Status status() {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_;
  }
  double seconds() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seconds_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int calls_ = 0;
  Status status_;
  double seconds_ = -1;
};

/// One plugin instance.
class Sim {
 public:
  Sim(std::initializer_list<std::pair<std::string, std::string>> options) : api_(sim_api()) {
    create_status_ = create(Options(options));
  }
  ~Sim() { destroy(); }
  Sim(const Sim&) = delete;
  Sim& operator=(const Sim&) = delete;

  const Status& created() const { return create_status_; }
  /// Releases the kernels (or leaves them to the plugin, which owns them), then destroys.
  void destroy(bool release_kernels = true) {
    if (p_ == nullptr) return;
    if (release_kernels)
      for (hcr_kernel_t* k : kernels_) api_->kernel_release(p_, k);
    kernels_.clear();
    api_->plugin_destroy(p_);
    p_ = nullptr;
  }

  hcr_device_info_t info(size_t device) {
    hcr_device_info_t i{};
    i.struct_size = HCR_DEVICE_INFO_STRUCT_SIZE;
    EXPECT_EQ(take(api_->device_info(p_, device, &i)).code, 0);
    return i;
  }

  std::pair<Status, hcr_memory_t*> alloc(size_t device, uint64_t bytes) {
    hcr_mem_alloc_args_t a{};
    a.struct_size = HCR_MEM_ALLOC_ARGS_STRUCT_SIZE;
    a.device = device;
    a.bytes = bytes;
    Status s = take(api_->mem_alloc(p_, &a));
    return {s, a.memory};
  }
  void free(size_t device, hcr_memory_t* m) { api_->mem_free(p_, device, m); }

  /// A 2-D copy; each end is a memory (with offset) or a host pointer.
  struct End {
    hcr_memory_t* memory = nullptr;
    void* host = nullptr;
    uint64_t offset = 0;
    uint64_t pitch = 0;
  };
  Status copy(size_t device, End src, End dst, uint64_t width, uint64_t rows, Done& done) {
    hcr_copy_args_t a{};
    a.struct_size = HCR_COPY_ARGS_STRUCT_SIZE;
    a.device = device;
    a.src_memory = src.memory;
    a.src_host = src.host;
    a.src_offset = src.offset;
    a.src_pitch = src.pitch;
    a.dst_memory = dst.memory;
    a.dst_host = dst.host;
    a.dst_offset = dst.offset;
    a.dst_pitch = dst.pitch;
    a.width = width;
    a.rows = rows;
    a.done = &Done::fn;
    a.done_user_data = &done;
    return take(api_->copy(p_, &a));
  }
  /// Copies and waits; fails the test on any error.
  void copy_sync(size_t device, End src, End dst, uint64_t width, uint64_t rows) {
    Done d;
    ASSERT_EQ(copy(device, src, dst, width, rows, d).code, 0);
    ASSERT_TRUE(d.wait());
    ASSERT_EQ(d.status().code, 0) << d.status().message;
  }

  std::pair<Status, hcr_kernel_t*> kernel(size_t device, const char* name, hcr_impl_kind_t kind,
                                          hcr_kernel_fn fn = nullptr, void* user = nullptr) {
    hcr_kernel_desc_t desc{};
    desc.struct_size = HCR_KERNEL_DESC_STRUCT_SIZE;
    desc.name = name;
    desc.kind = kind;
    desc.api = kind == HCR_IMPL_HOST_FUNCTION ? "host" : nullptr;
    desc.fn = fn;
    desc.user_data = user;
    hcr_kernel_get_args_t a{};
    a.struct_size = HCR_KERNEL_GET_ARGS_STRUCT_SIZE;
    a.device = device;
    a.desc = &desc;
    Status s = take(api_->kernel_get(p_, &a));
    if (s.code == 0) kernels_.push_back(a.kernel);
    return {s, a.kernel};
  }

  hcr_launch_args_t launch_args(size_t device, hcr_kernel_t* k, const std::vector<hcr_arg_t>& args,
                                const void* params, size_t params_size, Done* done) {
    hcr_launch_args_t a{};
    a.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
    a.device = device;
    a.kernel = k;
    a.args = args.data();
    a.num_args = args.size();
    a.params = params;
    a.params_size = params_size;
    a.done = &Done::fn;
    a.done_user_data = done;
    return a;
  }
  Status launch(const hcr_launch_args_t& a) { return take(api_->launch(p_, &a)); }
  Status synchronize(size_t device) { return take(api_->synchronize(p_, device)); }
  std::pair<Status, double> estimate(const hcr_launch_args_t& a) {
    double s = -1;
    Status st = take(api_->estimate(p_, &a, &s));
    return {st, s};
  }

  const hcr_plugin_api_t* api() const { return api_; }
  hcr_plugin_t* handle() const { return p_; }

 private:
  Status create(const Options& options) {
    std::vector<hcr_option_t> opts;
    for (auto& [k, v] : options) opts.push_back({HCR_OPTION_STRUCT_SIZE, k.c_str(), v.c_str()});
    hcr_plugin_create_args_t a{};
    a.struct_size = HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE;
    a.options = opts.data();
    a.num_options = opts.size();
    a.library_path = "libhcr-sim.so";
    Status s = take(api_->plugin_create(&a));
    p_ = a.plugin;
    return s;
  }

  const hcr_plugin_api_t* api_;
  hcr_plugin_t* p_ = nullptr;
  Status create_status_;
  std::vector<hcr_kernel_t*> kernels_;
};

hcr_arg_t matrix(hcr_memory_t* m, uint64_t offset, hcr_dtype_t t, uint64_t rows, uint64_t cols,
                 uint64_t ld, hcr_access_t access) {
  hcr_arg_t a{};
  a.struct_size = HCR_ARG_STRUCT_SIZE;
  a.memory = m;
  a.offset = offset;
  a.dtype = t;
  a.access = access;
  a.rows = rows;
  a.cols = cols;
  a.ld = ld;
  return a;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class SimPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(sim_api(), nullptr) << "cannot load " HCR_TEST_PLUGIN_DIR "/libhcr-sim.so: "
                                  << dlerror();
  }
};

TEST_F(SimPlugin, TableIsComplete) {
  const hcr_plugin_api_t* api = sim_api();
  EXPECT_EQ(api->abi_major, static_cast<uint32_t>(HCR_ABI_MAJOR));
  EXPECT_STREQ(api->name, "sim");
  EXPECT_NE(api->mem_alloc, nullptr);
  EXPECT_NE(api->copy, nullptr);
  EXPECT_NE(api->estimate, nullptr);
}

TEST_F(SimPlugin, BadOptionsFailCreateNamingKeyAndValue) {
  Sim sim({{"device.0.gflops", "fast"}});
  EXPECT_EQ(sim.created().code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(sim.created().message, "option 'device.0.gflops' = 'fast' is not a number");
  Sim sim2({{"device.0.hang_timeout", "0s"}});
  EXPECT_NE(sim2.created().message.find("'device.0.hang_timeout' = '0s'"), std::string::npos)
      << sim2.created().message;
}

TEST_F(SimPlugin, MemoryIsCappedByTheMemoryOption) {
  Sim sim({{"device.0.name", "small"}, {"device.0.memory", "1MiB"}});
  ASSERT_EQ(sim.created().code, 0) << sim.created().message;
  EXPECT_EQ(sim.info(0).memory_bytes, 1u << 20);
  EXPECT_EQ(sim.info(0).flags & HCR_DEVICE_HOST_MEMORY, 0u);
  auto [s1, m1] = sim.alloc(0, 600 << 10);
  ASSERT_EQ(s1.code, 0) << s1.message;
  auto [s2, m2] = sim.alloc(0, 600 << 10);
  EXPECT_EQ(s2.code, HCR_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(s2.message.find("device 'small': cannot allocate 614400 bytes"), std::string::npos)
      << s2.message;
  sim.free(0, m1);
  auto [s3, m3] = sim.alloc(0, 1 << 20);
  EXPECT_EQ(s3.code, 0) << s3.message;
  sim.free(0, m3);
}

TEST_F(SimPlugin, HostMemoryDevicesHaveNoAllocations) {
  Sim sim({{"device.0.host_memory", "true"}});
  ASSERT_EQ(sim.created().code, 0);
  EXPECT_EQ(sim.info(0).flags & HCR_DEVICE_HOST_MEMORY, HCR_DEVICE_HOST_MEMORY);
  EXPECT_EQ(sim.alloc(0, 64).first.code, HCR_ERROR_UNSUPPORTED);
}

TEST_F(SimPlugin, TwoDimensionalCopiesInOutAndBetweenDevices) {
  Sim sim({{"time_scale", "0.001"}, {"device.0.name", "d0"}, {"device.1.name", "d1"}});
  ASSERT_EQ(sim.created().code, 0) << sim.created().message;
  // A 5 x 7 float block: host pitch 9 floats, device pitch 8 floats from byte 16.
  const uint64_t rows = 5, width = 7 * sizeof(float);
  std::vector<float> in(5 * 9), out(5 * 10, -1.0f), back(5 * 7, -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  auto [s0, m0] = sim.alloc(0, 16 + 5 * 8 * sizeof(float));
  auto [s1, m1] = sim.alloc(1, 5 * 7 * sizeof(float));
  ASSERT_EQ(s0.code, 0);
  ASSERT_EQ(s1.code, 0);
  sim.copy_sync(0, {nullptr, in.data(), 0, 9 * sizeof(float)}, {m0, nullptr, 16, 8 * sizeof(float)},
                width, rows);
  sim.copy_sync(0, {m0, nullptr, 16, 8 * sizeof(float)},
                {nullptr, out.data(), 0, 10 * sizeof(float)}, width, rows);
  // Device to device (d0's memory to d1's, packed), on d1's engine; then out of d1.
  sim.copy_sync(1, {m0, nullptr, 16, 8 * sizeof(float)}, {m1, nullptr, 0, width}, width, rows);
  sim.copy_sync(1, {m1, nullptr, 0, width}, {nullptr, back.data(), 0, width}, width, rows);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < 10; ++c) {
      if (c < 7) {
        ASSERT_EQ(out[r * 10 + c], in[r * 9 + c]) << r << "," << c;
        ASSERT_EQ(back[r * 7 + c], in[r * 9 + c]) << r << "," << c;
      } else {
        ASSERT_EQ(out[r * 10 + c], -1.0f) << "wrote past the row at " << r << "," << c;
      }
    }
  sim.free(0, m0);
  sim.free(1, m1);
}

TEST_F(SimPlugin, BadCopiesAreRefusedNamingTheValues) {
  Sim sim({{"time_scale", "0.001"}, {"device.0.name", "d0"}, {"device.1.name", "d1"}});
  auto [s, m] = sim.alloc(0, 100);
  ASSERT_EQ(s.code, 0);
  std::vector<char> host(1000);
  Done d;
  Status st = sim.copy(0, {nullptr, host.data(), 0, 50}, {m, nullptr, 10, 40}, 30, 3, d);
  EXPECT_EQ(st.code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(st.message.find("from offset 10 overrun the allocation of 100 bytes"),
            std::string::npos)
      << st.message;
  st = sim.copy(0, {nullptr, host.data(), 0, 0}, {nullptr, host.data() + 500, 0, 0}, 10, 1, d);
  EXPECT_EQ(st.code, HCR_ERROR_INVALID_ARGUMENT) << st.message;
  st = sim.copy(1, {nullptr, host.data(), 0, 0}, {m, nullptr, 0, 0}, 10, 1, d);
  EXPECT_NE(st.message.find("neither end is in its memory"), std::string::npos) << st.message;
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(d.calls(), 0);  // refused operations never call done
  sim.free(0, m);
}

TEST_F(SimPlugin, CopyTimeIsLatencyPlusBytesOverBandwidth) {
  Sim sim(
      {{"device.0.name", "link"}, {"device.0.bandwidth", "1MB/s"}, {"device.0.latency", "2ms"}});
  EXPECT_DOUBLE_EQ(sim.info(0).link_bandwidth, 1e6);
  EXPECT_DOUBLE_EQ(sim.info(0).link_latency, 2e-3);
  auto [s, m] = sim.alloc(0, 3000);
  std::vector<char> host(3000, 7);
  Done d;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(sim.copy(0, {nullptr, host.data(), 0, 0}, {m, nullptr, 0, 0}, 3000, 1, d).code, 0);
  ASSERT_TRUE(d.wait());
  double wall = since(t0);
  EXPECT_GE(wall, 0.005);
  EXPECT_NEAR(d.seconds(), 0.002 + 3000 / 1e6, 1e-12);

  // Two transfers in the same direction share one engine: the second starts when the first ends.
  Done e1, e2;
  t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(sim.copy(0, {nullptr, host.data(), 0, 0}, {m, nullptr, 0, 0}, 3000, 1, e1).code, 0);
  ASSERT_EQ(sim.copy(0, {nullptr, host.data(), 0, 0}, {m, nullptr, 0, 0}, 3000, 1, e2).code, 0);
  ASSERT_TRUE(e1.wait());
  ASSERT_TRUE(e2.wait());
  EXPECT_GE(since(t0), 0.010);
  EXPECT_NEAR(e2.seconds(), 0.005, 1e-12);  // its own duration, not its wait
  sim.free(0, m);
}

TEST_F(SimPlugin, CopyFaultsAreInjected) {
  Sim sim({{"time_scale", "0.001"},
           {"device.0.name", "leaky"},
           {"device.0.copy_fail_probability", "1"}});
  auto [s, m] = sim.alloc(0, 64);
  std::vector<char> host(64);
  Done d;
  ASSERT_EQ(sim.copy(0, {nullptr, host.data(), 0, 0}, {m, nullptr, 0, 0}, 64, 1, d).code, 0);
  ASSERT_TRUE(d.wait());
  EXPECT_EQ(d.status().code, HCR_ERROR_BACKEND);
  EXPECT_NE(d.status().message.find("device 'leaky': injected failure of copy #0"),
            std::string::npos)
      << d.status().message;
  sim.free(0, m);
}

template <class T>
void gemm_on_device_memory(hcr_dtype_t dtype, const char* name) {
  Sim sim({{"time_scale", "0.001"}, {"device.0.name", "discrete"}});
  ASSERT_EQ(sim.created().code, 0);
  // A (m x k, ld k + 3), B (k x n), C (m x n) in one allocation at offsets.
  const uint64_t m = 37, k = 29, n = 23, lda = k + 3;
  const uint64_t off_a = 64, off_b = off_a + m * lda * sizeof(T), off_c = off_b + k * n * sizeof(T);
  const uint64_t bytes = off_c + m * n * sizeof(T);
  auto [s, mem] = sim.alloc(0, bytes);
  ASSERT_EQ(s.code, 0);
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<T> a(m * k), b(k * n), c(m * n);
  for (auto& x : a) x = static_cast<T>(dist(gen));
  for (auto& x : b) x = static_cast<T>(dist(gen));
  for (auto& x : c) x = static_cast<T>(dist(gen));
  sim.copy_sync(0, {nullptr, a.data(), 0, k * sizeof(T)}, {mem, nullptr, off_a, lda * sizeof(T)},
                k * sizeof(T), m);
  sim.copy_sync(0, {nullptr, b.data(), 0, 0}, {mem, nullptr, off_b, 0}, k * n * sizeof(T), 1);
  sim.copy_sync(0, {nullptr, c.data(), 0, 0}, {mem, nullptr, off_c, 0}, m * n * sizeof(T), 1);

  auto [ks, kernel] = sim.kernel(0, name, HCR_IMPL_BUILTIN);
  ASSERT_EQ(ks.code, 0) << ks.message;
  std::vector<hcr_arg_t> args = {matrix(mem, off_a, dtype, m, k, lda, HCR_ACCESS_READ),
                                 matrix(mem, off_b, dtype, k, n, n, HCR_ACCESS_READ),
                                 matrix(mem, off_c, dtype, m, n, n, HCR_ACCESS_READ_WRITE)};
  hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 2.0, 0.5};
  Done d;
  ASSERT_EQ(sim.launch(sim.launch_args(0, kernel, args, &p, sizeof p, &d)).code, 0);
  ASSERT_TRUE(d.wait());
  ASSERT_EQ(d.status().code, 0) << d.status().message;
  // The default 100 GFLOP/s, reported in wall seconds (x time_scale 0.001).
  EXPECT_NEAR(d.seconds(), 2.0 * m * n * k / 100e9 * 0.001, 1e-15);

  std::vector<T> out(m * n);
  sim.copy_sync(0, {mem, nullptr, off_c, 0}, {nullptr, out.data(), 0, 0}, m * n * sizeof(T), 1);
  const double eps = std::numeric_limits<T>::epsilon();
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t j = 0; j < n; ++j) {
      double want = 0.5 * c[i * n + j], scale = std::abs(want);
      for (uint64_t q = 0; q < k; ++q) {
        want += 2.0 * a[i * k + q] * b[q * n + j];
        scale += std::abs(2.0 * a[i * k + q] * b[q * n + j]);
      }
      ASSERT_LE(std::abs(out[i * n + j] - want), 2.0 * (k + 2) * eps * scale) << i << "," << j;
    }
  sim.free(0, mem);
}

TEST_F(SimPlugin, GemmF32OnDeviceMemory) {
  gemm_on_device_memory<float>(HCR_DTYPE_F32, "gemm_f32");
}
TEST_F(SimPlugin, GemmF64OnDeviceMemory) {
  gemm_on_device_memory<double>(HCR_DTYPE_F64, "gemm_f64");
}

// Doubles a 1 x n float vector in place; records the pointer it was given.
int doubler(void* user, const hcr_exec_context_t* ctx, char* message, size_t size) {
  if (ctx->num_args != 1 || ctx->args[0].host == nullptr) {
    std::snprintf(message, size, "doubler: no host pointer");
    return 1;
  }
  *static_cast<void**>(user) = ctx->args[0].host;
  auto* x = static_cast<float*>(ctx->args[0].host);
  for (uint64_t i = 0; i < ctx->args[0].cols; ++i) x[i] *= 2;
  return 0;
}

TEST_F(SimPlugin, HostFunctionsSeeDeviceMemoryThroughHostPointers) {
  Sim sim({{"time_scale", "0.001"}, {"device.0.name", "discrete"}});
  auto [s, mem] = sim.alloc(0, 256);
  std::vector<float> v(10);
  for (int i = 0; i < 10; ++i) v[i] = static_cast<float>(i);
  sim.copy_sync(0, {nullptr, v.data(), 0, 0}, {mem, nullptr, 32, 0}, 40, 1);
  void* seen = nullptr;
  auto [ks, kernel] = sim.kernel(0, "doubler", HCR_IMPL_HOST_FUNCTION, &doubler, &seen);
  ASSERT_EQ(ks.code, 0) << ks.message;
  std::vector<hcr_arg_t> args = {matrix(mem, 32, HCR_DTYPE_F32, 1, 10, 10, HCR_ACCESS_READ_WRITE)};
  Done d;
  ASSERT_EQ(sim.launch(sim.launch_args(0, kernel, args, nullptr, 0, &d)).code, 0);
  ASSERT_TRUE(d.wait());
  ASSERT_EQ(d.status().code, 0) << d.status().message;
  EXPECT_NE(seen, nullptr);
  EXPECT_NE(seen, static_cast<void*>(v.data()));  // the simulated memory, not the caller's
  std::vector<float> out(10);
  sim.copy_sync(0, {mem, nullptr, 32, 0}, {nullptr, out.data(), 0, 0}, 40, 1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[i], 2.0f * i);
  sim.free(0, mem);
}

TEST_F(SimPlugin, LaunchArgumentsAreChecked) {
  Sim sim({{"time_scale", "0.001"}, {"device.0.name", "discrete"}, {"device.1.name", "other"}});
  auto [s, mem] = sim.alloc(0, 64);
  auto [s1, mem1] = sim.alloc(1, 64);
  auto [ks, kernel] = sim.kernel(0, "doubler", HCR_IMPL_HOST_FUNCTION, &doubler, nullptr);
  Done d;
  std::vector<hcr_arg_t> args = {matrix(mem, 32, HCR_DTYPE_F32, 1, 10, 10, HCR_ACCESS_READ)};
  Status st = sim.launch(sim.launch_args(0, kernel, args, nullptr, 0, &d));
  EXPECT_EQ(st.code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(st.message.find("argument 0 (1x10): 1 row(s) of 40 bytes"), std::string::npos)
      << st.message;
  float host[4];
  args = {matrix(nullptr, 0, HCR_DTYPE_F32, 1, 4, 4, HCR_ACCESS_READ)};
  args[0].host = host;
  st = sim.launch(sim.launch_args(0, kernel, args, nullptr, 0, &d));
  EXPECT_NE(st.message.find("is not in device memory"), std::string::npos) << st.message;
  args = {matrix(mem1, 0, HCR_DTYPE_F32, 1, 4, 4, HCR_ACCESS_READ)};
  st = sim.launch(sim.launch_args(0, kernel, args, nullptr, 0, &d));
  EXPECT_NE(st.message.find("lives on device 1, not on device 0"), std::string::npos) << st.message;
  auto [gs, gemm] = sim.kernel(0, "gemm_f32", HCR_IMPL_BUILTIN);
  args = {matrix(mem, 0, HCR_DTYPE_F32, 2, 3, 3, HCR_ACCESS_READ),
          matrix(mem, 0, HCR_DTYPE_F32, 2, 2, 2, HCR_ACCESS_READ),
          matrix(mem, 0, HCR_DTYPE_F32, 2, 2, 2, HCR_ACCESS_READ_WRITE)};
  st = sim.launch(sim.launch_args(0, gemm, args, nullptr, 0, &d));
  EXPECT_NE(st.message.find("A is 2x3, B is 2x2, C is 2x2"), std::string::npos) << st.message;
  EXPECT_EQ(d.calls(), 0);
  sim.free(0, mem);
  sim.free(1, mem1);
}

// The built-ins' launch checks (backends/host_blas), as a host that skipped the runtime's own
// submit-time checks would meet them: parameter blocks by struct_size (an ABI 1.0 gemm block
// included), enumerations, shapes per side and transpose. Timing only: nothing is computed.
TEST_F(SimPlugin, BuiltinLaunchesAreCheckedAgainstTheirContract) {
  Sim sim({{"time_scale", "0.001"}, {"compute", "false"}, {"device.0.name", "discrete"}});
  auto [s, mem] = sim.alloc(0, 4096);
  ASSERT_EQ(s.code, 0);
  auto m = [&](uint64_t rows, uint64_t cols, hcr_access_t access = HCR_ACCESS_READ) {
    return matrix(mem, 0, HCR_DTYPE_F64, rows, cols, cols, access);
  };
  struct Case {
    const char* kernel;
    std::vector<hcr_arg_t> args;
    std::vector<std::byte> params;
    std::string error;  // empty: accepted
  };
  auto bytes = [](const auto& block, size_t size = 0) {
    std::vector<std::byte> out(size ? size : sizeof block);
    std::memcpy(out.data(), &block, std::min(out.size(), sizeof block));
    return out;
  };
  hcr_gemm_params_t g10{HCR_GEMM_PARAMS_STRUCT_SIZE_1_0, 1, 0};
  hcr_gemm_params_t gt{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0, HCR_TRANS, HCR_NO_TRANS};
  hcr_gemm_params_t bad_size{HCR_GEMM_PARAMS_STRUCT_SIZE + 8, 1, 0};
  const std::vector<Case> cases = {
      // An ABI 1.0 block: 24 bytes, no transposes; A 2x3 . B 3x4.
      {"gemm_f64",
       {m(2, 3), m(3, 4), m(2, 4, HCR_ACCESS_READ_WRITE)},
       bytes(g10, HCR_GEMM_PARAMS_STRUCT_SIZE_1_0),
       ""},
      // The same shapes are wrong once trans_a says A is k x m.
      {"gemm_f64",
       {m(2, 3), m(3, 4), m(2, 4, HCR_ACCESS_READ_WRITE)},
       bytes(gt),
       "gemm_f64: shapes do not match: A is 2x3, B is 3x4, C is 2x4 (trans_a 1, trans_b 0"},
      {"gemm_f64", {m(3, 2), m(3, 4), m(2, 4, HCR_ACCESS_READ_WRITE)}, bytes(gt), ""},
      {"gemm_f64",
       {m(2, 3), m(3, 4), m(2, 4, HCR_ACCESS_READ_WRITE)},
       bytes(bad_size),
       "hcr_gemm_params_t: struct_size 40 in 32 bytes of parameters"},
      {"syrk_f64",
       {m(3, 2), m(3, 3, HCR_ACCESS_READ_WRITE)},
       bytes(hcr_syrk_params_t{HCR_SYRK_PARAMS_STRUCT_SIZE, 1, 0, 3, 0}),
       "syrk_f64: uplo 3 is neither HCR_LOWER (0) nor HCR_UPPER (1)"},
      {"syrk_f64",
       {m(2, 3), m(3, 3, HCR_ACCESS_READ_WRITE)},
       bytes(hcr_syrk_params_t{HCR_SYRK_PARAMS_STRUCT_SIZE, 1, 0, HCR_UPPER, HCR_TRANS}),
       ""},
      {"trsm_f64",
       {m(4, 4), m(3, 4, HCR_ACCESS_READ_WRITE)},
       bytes(hcr_trsm_params_t{HCR_TRSM_PARAMS_STRUCT_SIZE, 1, HCR_LEFT, 0, 0, 0}),
       "trsm_f64: shapes do not match: A is 4x4, B is 3x4 (side left"},
      {"trsm_f64",
       {m(4, 4), m(3, 4, HCR_ACCESS_READ_WRITE)},
       bytes(hcr_trsm_params_t{HCR_TRSM_PARAMS_STRUCT_SIZE, 1, HCR_RIGHT, 0, 0, 0}),
       ""},
      {"potrf_f64",
       {m(3, 3, HCR_ACCESS_READ_WRITE)},
       {},
       "potrf_f64: parameters: 0 bytes, expected an hcr_potrf_params_t"},
      {"getrf_nopiv_f64",
       {m(3, 3, HCR_ACCESS_READ_WRITE)},
       bytes(hcr_potrf_params_t{HCR_POTRF_PARAMS_STRUCT_SIZE, 0}),
       "getrf_nopiv_f64: takes no parameters, got 16 bytes of them"},
      {"getrf_nopiv_f64",
       {m(3, 2, HCR_ACCESS_READ_WRITE)},
       {},
       "getrf_nopiv_f64: A is 3x2, not square"},
      {"potrf_f32",
       {m(3, 3, HCR_ACCESS_READ_WRITE)},
       bytes(hcr_potrf_params_t{HCR_POTRF_PARAMS_STRUCT_SIZE, 0}),
       "potrf_f32: A (argument 0, 3x3 f64) is not an f32 matrix"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.kernel) + (c.error.empty() ? " accepted" : ": " + c.error));
    auto [ks, kernel] = sim.kernel(0, c.kernel, HCR_IMPL_BUILTIN);
    ASSERT_EQ(ks.code, 0) << ks.message;
    Done d;
    const void* params = c.params.empty() ? nullptr : c.params.data();
    Status st = sim.launch(sim.launch_args(0, kernel, c.args, params, c.params.size(), &d));
    if (c.error.empty()) {
      ASSERT_EQ(st.code, 0) << st.message;
      ASSERT_TRUE(d.wait());
      EXPECT_EQ(d.status().code, 0) << d.status().message;
    } else {
      EXPECT_EQ(st.code, HCR_ERROR_INVALID_ARGUMENT) << st.message;
      EXPECT_NE(st.message.find(c.error), std::string::npos) << st.message;
      EXPECT_EQ(d.calls(), 0);
    }
  }
  sim.free(0, mem);
}

int count_calls(void* user, const hcr_exec_context_t*, char*, size_t) {
  static_cast<std::atomic<int>*>(user)->fetch_add(1);
  return 0;
}

TEST_F(SimPlugin, HungLaunchesEndWithATimeoutAtSynchronize) {
  Sim sim({{"device.0.name", "stuck"},
           {"device.0.host_memory", "true"},
           {"device.0.hang_probability", "1"}});
  std::atomic<int> runs{0};
  auto [ks, k] = sim.kernel(0, "k", HCR_IMPL_HOST_FUNCTION, &count_calls, &runs);
  std::vector<hcr_arg_t> none;
  Done first, second;
  ASSERT_EQ(sim.launch(sim.launch_args(0, k, none, nullptr, 0, &first)).code, 0);
  ASSERT_EQ(sim.launch(sim.launch_args(0, k, none, nullptr, 0, &second)).code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(first.calls(), 0);  // it hangs
  ASSERT_EQ(sim.synchronize(0).code, 0);
  // Both were called exactly once, with a timeout: the second, queued behind the first, started
  // when the first was abandoned and hung in turn.
  for (Done* d : {&first, &second}) {
    EXPECT_EQ(d->calls(), 1);
    EXPECT_EQ(d->status().code, HCR_ERROR_TIMEOUT);
    EXPECT_NE(d->status().message.find("on device 'stuck' hung"), std::string::npos)
        << d->status().message;
  }
  EXPECT_EQ(runs.load(), 0);

  // Destruction ends a hang the same way (the kernel stays with the launch, which needs it until
  // done: the plugin frees it).
  Done third;
  ASSERT_EQ(sim.launch(sim.launch_args(0, k, none, nullptr, 0, &third)).code, 0);
  sim.destroy(/*release_kernels=*/false);
  EXPECT_EQ(third.calls(), 1);
  EXPECT_EQ(third.status().code, HCR_ERROR_TIMEOUT);
}

TEST_F(SimPlugin, ALostDeviceRefusesEverything) {
  Sim sim({{"device.0.name", "gone"}, {"device.0.lost_at", "0s"}});
  auto [s, m] = sim.alloc(0, 64);
  EXPECT_EQ(s.code, HCR_ERROR_DEVICE_LOST);
  EXPECT_NE(s.message.find("device 'gone' was lost at 0 s"), std::string::npos) << s.message;
  auto [ks, k] = sim.kernel(0, "gemm_f32", HCR_IMPL_BUILTIN);
  ASSERT_EQ(ks.code, 0);
  std::vector<hcr_arg_t> none;
  Done d;
  EXPECT_EQ(sim.launch(sim.launch_args(0, k, none, nullptr, 0, &d)).code, HCR_ERROR_DEVICE_LOST);
  std::vector<char> host(8);
  EXPECT_EQ(sim.copy(0, {nullptr, host.data(), 0, 0}, {nullptr, host.data(), 0, 0}, 8, 1, d).code,
            HCR_ERROR_DEVICE_LOST);
  EXPECT_EQ(d.calls(), 0);
}

TEST_F(SimPlugin, KernelsOutsideTheListAreNotFound) {
  Sim sim({{"device.0.name", "narrow"}, {"device.0.kernels", "k1,k2"}});
  auto [s, k] = sim.kernel(0, "gemm_f32", HCR_IMPL_BUILTIN);
  EXPECT_EQ(s.code, HCR_ERROR_NOT_FOUND);
  EXPECT_NE(s.message.find("'narrow' does not offer kernel 'gemm_f32' (its kernels: k1, k2)"),
            std::string::npos)
      << s.message;
  std::atomic<int> runs{0};
  EXPECT_EQ(sim.kernel(0, "k1", HCR_IMPL_HOST_FUNCTION, &count_calls, &runs).first.code, 0);
  EXPECT_EQ(sim.kernel(0, "k3", HCR_IMPL_HOST_FUNCTION, &count_calls, &runs).first.code,
            HCR_ERROR_NOT_FOUND);
  EXPECT_EQ(sim.kernel(0, "k2", HCR_IMPL_SOURCE).first.code, HCR_ERROR_UNSUPPORTED);
}

TEST_F(SimPlugin, EstimatesAreTheNoiselessModelWhenEnabled) {
  std::vector<hcr_arg_t> args = {
      matrix(nullptr, 0, HCR_DTYPE_F32, 64, 32, 32, HCR_ACCESS_READ),
      matrix(nullptr, 0, HCR_DTYPE_F32, 32, 16, 16, HCR_ACCESS_READ),
      matrix(nullptr, 0, HCR_DTYPE_F32, 64, 16, 16, HCR_ACCESS_READ_WRITE)};
  {
    Sim sim({{"estimates", "true"},
             {"device.0.gflops", "50"},
             {"device.0.noise", "0.5"},
             {"device.0.factors.gemm_f32", "2"}});
    auto [ks, k] = sim.kernel(0, "gemm_f32", HCR_IMPL_BUILTIN);
    auto [st, seconds] = sim.estimate(sim.launch_args(0, k, args, nullptr, 0, nullptr));
    ASSERT_EQ(st.code, 0) << st.message;
    EXPECT_NEAR(seconds, 2.0 * 64 * 16 * 32 / (50e9 * 2), 1e-15);
  }
  Sim sim({{"device.0.gflops", "50"}});
  auto [ks, k] = sim.kernel(0, "gemm_f32", HCR_IMPL_BUILTIN);
  EXPECT_EQ(sim.estimate(sim.launch_args(0, k, args, nullptr, 0, nullptr)).first.code,
            HCR_ERROR_UNSUPPORTED);
}

// Each completion launches the next from inside `done`: a plugin that called done with its own
// lock held would deadlock here.
struct Chain {
  Sim* sim;
  hcr_kernel_t* kernel;
  std::vector<hcr_arg_t> args;
  std::atomic<int> left{50};
  std::atomic<int> failures{0};
  std::mutex m;
  std::condition_variable cv;
  bool finished = false;

  static void done(void* user, hcr_error_t* e, const hcr_completion_info_t*) {
    auto* c = static_cast<Chain*>(user);
    if (take(e).code != 0) c->failures.fetch_add(1);
    if (c->left.fetch_sub(1) > 1) {
      hcr_launch_args_t a = c->sim->launch_args(0, c->kernel, c->args, nullptr, 0, nullptr);
      a.done = &Chain::done;
      a.done_user_data = c;
      if (c->sim->launch(a).code == 0) return;
      c->failures.fetch_add(1);
    }
    std::lock_guard<std::mutex> lock(c->m);
    c->finished = true;
    c->cv.notify_all();
  }
};

TEST_F(SimPlugin, DoneHandlersMayCallBackIn) {
  Sim sim({{"time_scale", "0.001"}, {"device.0.host_memory", "true"}, {"device.0.noise", "0.2"}});
  std::atomic<int> runs{0};
  Chain chain;
  chain.sim = &sim;
  chain.kernel = sim.kernel(0, "k", HCR_IMPL_HOST_FUNCTION, &count_calls, &runs).second;
  hcr_launch_args_t a = sim.launch_args(0, chain.kernel, chain.args, nullptr, 0, nullptr);
  a.done = &Chain::done;
  a.done_user_data = &chain;
  ASSERT_EQ(sim.launch(a).code, 0);
  std::unique_lock<std::mutex> lock(chain.m);
  ASSERT_TRUE(chain.cv.wait_for(lock, std::chrono::seconds(60), [&] { return chain.finished; }));
  EXPECT_EQ(chain.failures.load(), 0);
  EXPECT_EQ(runs.load(), 50);
}

std::vector<double> copy_times(const std::string& seed) {
  Sim sim({{"seed", seed},
           {"time_scale", "0.001"},
           {"device.0.name", "jittery"},
           {"device.0.noise", "0.5"}});
  auto [s, m] = sim.alloc(0, 1024);
  std::vector<char> host(1024);
  std::vector<double> out;
  for (int i = 0; i < 10; ++i) {
    Done d;
    EXPECT_EQ(sim.copy(0, {nullptr, host.data(), 0, 0}, {m, nullptr, 0, 0}, 1024, 1, d).code, 0);
    EXPECT_TRUE(d.wait());
    out.push_back(d.seconds());
  }
  sim.free(0, m);
  return out;
}

TEST_F(SimPlugin, CopyNoiseIsDeterministicForASeed) {
  auto a = copy_times("11"), b = copy_times("11"), c = copy_times("12");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

}  // namespace

// ---- device graphs (ABI 1.2) ------------------------------------------------------------------

// x = x * mul + add over a 1 x n f32 vector (params: float mul, float add); logs its token.
struct GraphLog {
  std::mutex mutex;
  std::vector<int> order;  // host_token of each node, in the order they ran
  void add(const hcr_exec_context_t* ctx) {
    std::lock_guard<std::mutex> lock(mutex);
    order.push_back(static_cast<int>(reinterpret_cast<intptr_t>(ctx->host_token)));
  }
  size_t position(int node) {
    std::lock_guard<std::mutex> lock(mutex);
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i] == node) return i;
    return order.size();
  }
};

int affine(void* user, const hcr_exec_context_t* ctx, char*, size_t) {
  float p[2];
  std::memcpy(p, ctx->params, sizeof p);
  auto* x = static_cast<float*>(ctx->args[0].host);
  for (uint64_t i = 0; i < ctx->args[0].cols; ++i) x[i] = x[i] * p[0] + p[1];
  static_cast<GraphLog*>(user)->add(ctx);
  return 0;
}

// args[0] += args[1].
int accumulate(void* user, const hcr_exec_context_t* ctx, char*, size_t) {
  auto* x = static_cast<float*>(ctx->args[0].host);
  const auto* y = static_cast<const float*>(ctx->args[1].host);
  for (uint64_t i = 0; i < ctx->args[0].cols; ++i) x[i] += y[i];
  static_cast<GraphLog*>(user)->add(ctx);
  return 0;
}

int graph_fails(void* user, const hcr_exec_context_t* ctx, char* message, size_t size) {
  static_cast<GraphLog*>(user)->add(ctx);
  std::snprintf(message, size, "node failure on purpose");
  return 1;
}

/// A graph under construction: nodes with their own arguments and successors.
struct GraphSpec {
  struct Node {
    hcr_kernel_t* kernel;
    std::vector<hcr_arg_t> args;
    std::vector<float> params;
    std::vector<uint32_t> successors;
  };
  std::vector<Node> nodes;
  std::vector<uint32_t> offsets = {0, 4};

  std::vector<hcr_arg_t> all_args() const {
    std::vector<hcr_arg_t> out;
    for (auto& n : nodes) out.insert(out.end(), n.args.begin(), n.args.end());
    return out;
  }
  std::pair<Status, hcr_graph_t*> create(Sim& sim, size_t device) const {
    std::vector<hcr_graph_node_t> ns;
    for (size_t i = 0; i < nodes.size(); ++i) {
      hcr_graph_node_t n{};
      n.struct_size = HCR_GRAPH_NODE_STRUCT_SIZE;
      n.kernel = nodes[i].kernel;
      n.num_args = nodes[i].args.size();
      n.params = nodes[i].params.empty() ? nullptr : nodes[i].params.data();
      n.params_size = nodes[i].params.size() * sizeof(float);
      n.param_offsets = offsets.data();
      n.num_params = nodes[i].params.size();
      n.host_token = reinterpret_cast<void*>(static_cast<intptr_t>(i));
      n.successors = nodes[i].successors.data();
      n.num_successors = nodes[i].successors.size();
      ns.push_back(n);
    }
    std::vector<hcr_arg_t> args = all_args();
    hcr_graph_create_args_t a{};
    a.struct_size = HCR_GRAPH_CREATE_ARGS_STRUCT_SIZE;
    a.device = device;
    a.nodes = ns.data();
    a.num_nodes = ns.size();
    a.args = args.data();
    a.num_args = args.size();
    Status s = take(sim.api()->graph_create(sim.handle(), &a));
    return {s, a.graph};
  }
};

/// Launches `g` with `args` and waits; the node index the plugin reported failing, if any.
Status launch_graph(Sim& sim, hcr_graph_t* g, const std::vector<hcr_arg_t>& args, Done& done,
                    uint64_t* failed_node = nullptr) {
  hcr_graph_launch_args_t a{};
  a.struct_size = HCR_GRAPH_LAUNCH_ARGS_STRUCT_SIZE;
  a.graph = g;
  a.args = args.data();
  a.num_args = args.size();
  a.flags = HCR_LAUNCH_MEASURE;
  a.done = &Done::fn;
  a.done_user_data = &done;
  a.failed_node = failed_node;
  Status s = take(sim.api()->graph_launch(sim.handle(), &a));
  if (s.code == 0) {
    EXPECT_TRUE(done.wait());
  }
  return s;
}

// A fork/join graph over device memory: the edges order the nodes, the results come out as the
// nodes run one by one in that order, and a second launch on other allocations (a replay's new
// buffers) computes in those. The modelled time is the critical path, not the sum of the nodes.
TEST_F(SimPlugin, DeviceGraphFollowsItsEdgesOnDeviceMemory) {
  Sim sim({{"time_scale", "0.001"},
           {"device.0.name", "discrete"},
           {"device.0.concurrency", "2"},
           {"device.0.launch_overhead", "0.01"},
           {"device.0.noise", "0"}});
  const size_t n = 8;
  GraphLog log;
  auto [s1, aff] = sim.kernel(0, "affine", HCR_IMPL_HOST_FUNCTION, &affine, &log);
  auto [s2, acc] = sim.kernel(0, "accumulate", HCR_IMPL_HOST_FUNCTION, &accumulate, &log);
  ASSERT_EQ(s1.code + s2.code, 0) << s1.message << s2.message;
  hcr_memory_t* mem[4];
  for (auto& m : mem) m = sim.alloc(0, n * 4).second;
  auto upload = [&](hcr_memory_t* m, float base) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
    sim.copy_sync(0, {nullptr, v.data(), 0, 0}, {m, nullptr, 0, 0}, n * 4, 1);
  };
  auto rw = [&](hcr_memory_t* m) {
    return matrix(m, 0, HCR_DTYPE_F32, 1, n, n, HCR_ACCESS_READ_WRITE);
  };
  auto rd = [&](hcr_memory_t* m) { return matrix(m, 0, HCR_DTYPE_F32, 1, n, n, HCR_ACCESS_READ); };
  // 0: a = 2a + 1   1: b = 3b      2: a += b (after 0 and 1)      3: a = a - 5 (after 2)
  GraphSpec g;
  g.nodes = {{aff, {rw(mem[0])}, {2, 1}, {2}},
             {aff, {rw(mem[1])}, {3, 0}, {2}},
             {acc, {rw(mem[0]), rd(mem[1])}, {}, {3}},
             {aff, {rw(mem[0])}, {1, -5}, {}}};
  auto [cs, graph] = g.create(sim, 0);
  ASSERT_EQ(cs.code, 0) << cs.message;
  ASSERT_NE(graph, nullptr);

  auto expect = [&](hcr_memory_t* a, float base_a, float base_b) {
    std::vector<float> out(n);
    sim.copy_sync(0, {a, nullptr, 0, 0}, {nullptr, out.data(), 0, 0}, n * 4, 1);
    for (size_t i = 0; i < n; ++i) {
      const float x = base_a + static_cast<float>(i), y = base_b + static_cast<float>(i);
      EXPECT_EQ(out[i], (2 * x + 1) + 3 * y - 5) << i;
    }
  };
  for (int round = 0; round < 2; ++round) {
    // Round 1 binds the other two allocations: the nodes must compute in those.
    hcr_memory_t* a = mem[2 * round];
    hcr_memory_t* b = mem[2 * round + 1];
    upload(a, 10.0f * round);
    upload(b, 100.0f);
    GraphSpec bound = g;
    bound.nodes[0].args = {rw(a)};
    bound.nodes[1].args = {rw(b)};
    bound.nodes[2].args = {rw(a), rd(b)};
    bound.nodes[3].args = {rw(a)};
    {
      std::lock_guard<std::mutex> lock(log.mutex);
      log.order.clear();
    }
    Done d;
    ASSERT_EQ(launch_graph(sim, graph, bound.all_args(), d).code, 0);
    ASSERT_EQ(d.status().code, 0) << d.status().message;
    EXPECT_EQ(d.calls(), 1);
    ASSERT_EQ(log.order.size(), 4u);
    EXPECT_LT(log.position(0), log.position(2));
    EXPECT_LT(log.position(1), log.position(2));
    EXPECT_LT(log.position(2), log.position(3));
    // Each node models 0.01 s (real seconds: times time_scale): 0 and 1 side by side, then 2,
    // then 3.
    EXPECT_NEAR(d.seconds(), 0.03 * 0.001, 1e-9);
    expect(a, 10.0f * round, 100.0f);
  }
  ASSERT_EQ(sim.synchronize(0).code, 0);
  sim.api()->graph_release(sim.handle(), graph);
  for (auto& m : mem) sim.free(0, m);
}

// A failing node: done once with its error and index; its successors (and theirs) are skipped,
// the independent branch still runs.
TEST_F(SimPlugin, DeviceGraphNodeFailureSkipsItsSuccessorsOnly) {
  Sim sim({{"time_scale", "0.001"}, {"device.0.name", "discrete"}});
  const size_t n = 4;
  GraphLog log;
  auto [s1, aff] = sim.kernel(0, "affine", HCR_IMPL_HOST_FUNCTION, &affine, &log);
  auto [s2, bad] = sim.kernel(0, "fails", HCR_IMPL_HOST_FUNCTION, &graph_fails, &log);
  ASSERT_EQ(s1.code + s2.code, 0);
  hcr_memory_t* a = sim.alloc(0, n * 4).second;
  hcr_memory_t* b = sim.alloc(0, n * 4).second;
  auto rw = [&](hcr_memory_t* m) {
    return matrix(m, 0, HCR_DTYPE_F32, 1, n, n, HCR_ACCESS_READ_WRITE);
  };
  // 0 -> 1 (fails) -> 2 -> 3; 4 independent.
  GraphSpec g;
  g.nodes = {{aff, {rw(a)}, {1, 1}, {1}},
             {bad, {rw(a)}, {}, {2}},
             {aff, {rw(a)}, {1, 1}, {3}},
             {aff, {rw(a)}, {1, 1}, {}},
             {aff, {rw(b)}, {1, 1}, {}}};
  auto [cs, graph] = g.create(sim, 0);
  ASSERT_EQ(cs.code, 0) << cs.message;
  Done d;
  uint64_t failed = 99;
  ASSERT_EQ(launch_graph(sim, graph, g.all_args(), d, &failed).code, 0);
  ASSERT_EQ(sim.synchronize(0).code, 0);
  EXPECT_EQ(d.calls(), 1);
  EXPECT_EQ(d.status().code, HCR_ERROR_KERNEL);
  EXPECT_NE(d.status().message.find("node failure on purpose"), std::string::npos)
      << d.status().message;
  EXPECT_EQ(failed, 1u);
  EXPECT_EQ(log.order.size(), 3u);
  EXPECT_LT(log.position(0), 3u);
  EXPECT_LT(log.position(1), 3u);
  EXPECT_LT(log.position(4), 3u);
  EXPECT_EQ(log.position(2), 3u) << "a successor of the failed node ran";
  EXPECT_EQ(log.position(3), 3u) << "a successor of a skipped node ran";
  sim.api()->graph_release(sim.handle(), graph);
  sim.free(0, a);
  sim.free(0, b);
}

// graph_create checks each node as its launch would, naming the node; so does graph_launch the
// arguments' count.
TEST_F(SimPlugin, DeviceGraphArgumentsAreCheckedNamingTheNode) {
  Sim sim({{"time_scale", "0.001"}, {"device.0.name", "one"}, {"device.1.name", "two"}});
  GraphLog log;
  auto [s1, aff] = sim.kernel(0, "affine", HCR_IMPL_HOST_FUNCTION, &affine, &log);
  ASSERT_EQ(s1.code, 0);
  hcr_memory_t* here = sim.alloc(0, 64).second;
  hcr_memory_t* there = sim.alloc(1, 64).second;
  GraphSpec g;
  g.nodes = {{aff, {matrix(here, 0, HCR_DTYPE_F32, 1, 4, 4, HCR_ACCESS_READ_WRITE)}, {1, 1}, {1}},
             {aff, {matrix(there, 0, HCR_DTYPE_F32, 1, 4, 4, HCR_ACCESS_READ_WRITE)}, {1, 1}, {}}};
  auto [cs, graph] = g.create(sim, 0);
  EXPECT_EQ(cs.code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(cs.message.find("graph node 1: argument 0"), std::string::npos) << cs.message;
  EXPECT_EQ(graph, nullptr);
  g.nodes[1].args[0].memory = here;
  auto [ok, good] = g.create(sim, 0);
  ASSERT_EQ(ok.code, 0) << ok.message;
  Done d;
  std::vector<hcr_arg_t> short_args = g.all_args();
  short_args.pop_back();
  Status ls = launch_graph(sim, good, short_args, d);
  EXPECT_EQ(ls.code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(d.calls(), 0);
  sim.api()->graph_release(sim.handle(), good);
  sim.free(0, here);
  sim.free(1, there);
}

// A graph created before its data is on the device (arguments without memory, as the runtime
// creates them): accepted, and each launch computes in the memory it hands.
TEST_F(SimPlugin, DeviceGraphMayBeCreatedBeforeItsDataIsPlaced) {
  Sim sim({{"time_scale", "0.001"}, {"device.0.name", "discrete"}});
  const size_t n = 4;
  GraphLog log;
  auto [s1, aff] = sim.kernel(0, "affine", HCR_IMPL_HOST_FUNCTION, &affine, &log);
  ASSERT_EQ(s1.code, 0);
  hcr_memory_t* a = sim.alloc(0, n * 4).second;
  std::vector<float> v = {1, 2, 3, 4};
  sim.copy_sync(0, {nullptr, v.data(), 0, 0}, {a, nullptr, 0, 0}, n * 4, 1);
  auto arg = [&](hcr_memory_t* m) {
    return matrix(m, 0, HCR_DTYPE_F32, 1, n, n, HCR_ACCESS_READ_WRITE);
  };
  GraphSpec g;
  g.nodes = {{aff, {arg(nullptr)}, {2, 0}, {1}}, {aff, {arg(nullptr)}, {1, 3}, {}}};
  auto [cs, graph] = g.create(sim, 0);
  ASSERT_EQ(cs.code, 0) << cs.message;
  g.nodes[0].args = {arg(a)};
  g.nodes[1].args = {arg(a)};
  Done d;
  ASSERT_EQ(launch_graph(sim, graph, g.all_args(), d).code, 0);
  ASSERT_EQ(d.status().code, 0) << d.status().message;
  std::vector<float> out(n);
  sim.copy_sync(0, {a, nullptr, 0, 0}, {nullptr, out.data(), 0, 0}, n * 4, 1);
  EXPECT_EQ(out, (std::vector<float>{5, 7, 9, 11}));
  sim.api()->graph_release(sim.handle(), graph);
  sim.free(0, a);
}
