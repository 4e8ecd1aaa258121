// The simulated backend at the plugin ABI, loaded with dlopen like the runtime would: device memory
// (allocation cap, 2-D copies in, out and between devices, modelled copy time), gemm and host
// functions on device memory, hangs ended by synchronize and by destruction, lost devices, copy
// faults, estimates, and `done` handlers that call straight back into the plugin.
#include "sim_plugin_support.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace hcr::test {
namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

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
}  // namespace hcr::test
