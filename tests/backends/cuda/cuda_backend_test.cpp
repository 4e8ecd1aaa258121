// The CUDA backend plugin. Without a GPU (CI): the plugin loads, reports no devices and says why,
// rejects bad options, and its ABI entries fail cleanly. With a GPU, the tests named CudaGpu*
// run (select them with `ctest -R CudaGpu` or `--gtest_filter='CudaGpu*'`): copies, gemm in every
// precision, native and NVRTC kernels, completion bookkeeping. The CudaAbi suite drives the plugin
// through its C table directly (dlopen); CudaRuntime goes through hcr::Runtime and its data
// manager. Where there is no GPU the CudaGpu* tests skip — unless HCR_CUDA_TESTS_REQUIRE_GPU=1,
// which makes them fail instead (bench/gpu_run.sh sets it, so a GPU machine that silently found no
// GPU cannot pass).
//
// Both suites run twice: CudaGpu/... against the real plugin on a GPU, and FakeCuda/... against
// the same plugin code linked with a fake CUDA runtime and cuBLAS (fake/), on any machine. The
// BLAS built-ins beyond plain gemm are tested in cuda_blas_test.cpp.
#include "cuda_test_plugin.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace hcr {
namespace {

// =================================================================================================
// Without a GPU (and with one): loading, options, the table
// =================================================================================================

TEST(CudaPlugin, LoadsAndReportsItsDevicesOrWhyNone) {
  test::LogCapture log(LogLevel::info);
  Runtime rt(cuda_config());
  const std::optional<PluginRecord> r = record(rt, "cuda");
  ASSERT_TRUE(r.has_value()) << "the cuda plugin was not found in " << HCR_TEST_PLUGIN_DIR;
  EXPECT_EQ(r->status, PluginRecord::Status::loaded) << r->reason;
  EXPECT_EQ(r->devices, static_cast<size_t>(gpus()));
  EXPECT_EQ(rt.devices().size(), static_cast<size_t>(gpus()));
  if (gpus() == 0) {
    std::string why;
    test_gpu_count(&why);
    // The plugin names the CUDA runtime's own error (no driver, no device...).
    EXPECT_TRUE(log.contains("[cuda] no devices")) << "log lacks the reason";
    if (!why.empty()) {
      EXPECT_TRUE(log.contains(why)) << "log lacks the CUDA error '" << why << "'";
    }
  }
}

TEST(CudaPlugin, BadOptionsAreRefusedNamingThem) {
  for (auto [key, value, why] : {
           std::tuple{"memory_limit", "50%", "unknown option 'memory_limit'"},
           std::tuple{"stream", "2", "unknown option 'stream'"},
           std::tuple{"streams", "0", "option 'streams' = 0: must be 1 to 64"},
           std::tuple{"streams", "two", "option 'streams' = 'two' is not an integer"},
           std::tuple{"devices", "0,x", "option 'devices' = '0,x': 'x' is not a device index"},
           std::tuple{"devices", "0,0", "names device 0 twice"},
           std::tuple{"cache_dir", "relative/dir", "must be an absolute path"},
           std::tuple{"copy_threads", "-1", "option 'copy_threads' = -1"},
           std::tuple{"nvml", "lib/libnvidia-ml.so.1",
                      "option 'nvml' = 'lib/libnvidia-ml.so.1': must be \"off\""},
       }) {
    // A mistake in the table is the configuration's: the runtime does not start, and says where.
    Error e = test::expect_error([&] { Runtime rt(cuda_config({{key, value}})); });
    EXPECT_EQ(e.code(), ErrorCode::config) << key << "=" << value;
    const std::string what = e.what();
    EXPECT_NE(what.find(why), std::string::npos) << what;
    EXPECT_EQ(what.rfind(std::string("test: backend.") + key + ": ", 0), 0u)
        << "names the backend table and key: " << what;
  }
}

TEST(CudaPlugin, MemoryLimitIsTheRuntimesKeyNotThePlugins) {
  Config c = Config::parse("[[backend]]\nname = \"cuda\"\nmemory_limit = \"50%\"\nstreams = 3\n",
                           "t.toml");
  c.use_environment = false;
  Runtime rt(c);
  const std::optional<PluginRecord> r = record(rt, "cuda");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, PluginRecord::Status::loaded) << r->reason;
}

TEST(CudaPlugin, GoodOptionsAreAccepted) {
  test::TempDir dir;
  Runtime rt(cuda_config({{"streams", "3"},
                          {"devices", "all"},
                          {"cache_dir", dir.path().string()},
                          {"copy_threads", "2"},
                          {"nvml", "off"}}));
  const std::optional<PluginRecord> r = record(rt, "cuda");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, PluginRecord::Status::loaded) << r->reason;
  for (const Device& d : rt.devices()) EXPECT_EQ(d.concurrency, 3u);
}

TEST(CudaPlugin, TableIsCompleteAndVersioned) {
  Plugin p;
  ASSERT_NE(p.api(), nullptr) << p.create_error();
  const hcr_plugin_api_t* api = p.api();
  EXPECT_STREQ(api->name, "cuda");
  EXPECT_STREQ(api->version, "0.1.0");
  EXPECT_EQ(api->abi_major, static_cast<uint32_t>(HCR_ABI_MAJOR));
  EXPECT_GE(api->struct_size, HCR_PLUGIN_API_STRUCT_SIZE_1_0);
  for (const void* fn :
       {reinterpret_cast<const void*>(api->mem_alloc), reinterpret_cast<const void*>(api->mem_free),
        reinterpret_cast<const void*>(api->copy), reinterpret_cast<const void*>(api->launch),
        reinterpret_cast<const void*>(api->synchronize),
        reinterpret_cast<const void*>(api->host_alloc),
        reinterpret_cast<const void*>(api->host_free),
        reinterpret_cast<const void*>(api->estimate)})
    EXPECT_NE(fn, nullptr);
}

TEST(CudaPlugin, WithoutDevicesEveryEntryFailsCleanly) {
  if (gpus() > 0) GTEST_SKIP() << "this machine has a GPU";
  Plugin p;
  ASSERT_TRUE(p.ok()) << p.create_error();
  EXPECT_EQ(p.device_count(), 0u);
  EXPECT_TRUE(p.logged("no devices")) << p.log_text();
  hcr_mem_alloc_args_t ma{};
  ma.struct_size = HCR_MEM_ALLOC_ARGS_STRUCT_SIZE;
  ma.bytes = 64;
  EXPECT_EQ(p.check(p.api()->mem_alloc(p.get(), &ma)).code, HCR_ERROR_NOT_FOUND);
  CallError e;
  EXPECT_EQ(p.builtin(0, "gemm_f32", &e), nullptr);
  EXPECT_EQ(e.code, HCR_ERROR_NOT_FOUND);
  EXPECT_EQ(p.check(p.api()->synchronize(p.get(), 0)).code, HCR_ERROR_NOT_FOUND);
  void* host = nullptr;
  EXPECT_EQ(p.check(p.api()->host_alloc(p.get(), 64, &host)).code, HCR_ERROR_UNSUPPORTED);
  Outcome o = p.launch(hcr_launch_args_t{});
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.code, HCR_ERROR_NOT_FOUND) << o.message;  // the SDK checks the device first
  EXPECT_NE(o.message.find("no device 0"), std::string::npos) << o.message;
  char buf[8];
  o = p.upload(0, nullptr, 0, 8, buf, 8, 8, 1);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.code, HCR_ERROR_NOT_FOUND) << o.message;
}

// =================================================================================================
// With a GPU: through the C table
// =================================================================================================

class CudaAbi : public PluginFixture {};

INSTANTIATE_TEST_SUITE_P(CudaGpu, CudaAbi, ::testing::Values(Target{false}),
                         [](const auto&) { return std::string("gpu"); });
INSTANTIATE_TEST_SUITE_P(FakeCuda, CudaAbi, ::testing::Values(Target{true}),
                         [](const auto&) { return std::string("fake"); });

TEST_P(CudaAbi, ReportsEveryGpu) {
  ASSERT_EQ(p().device_count(), static_cast<size_t>(devices()));
  for (size_t d = 0; d < p().device_count(); ++d) {
    hcr_device_info_t i = p().info(d);
    EXPECT_EQ(i.kind, HCR_DEVICE_GPU);
    EXPECT_EQ(i.flags & HCR_DEVICE_HOST_MEMORY, 0u);
    EXPECT_NE(i.flags & HCR_DEVICE_PINNED_HOST, 0u);
    EXPECT_GT(i.memory_bytes, 0u);
    EXPECT_GT(i.compute_units, 0u);
    EXPECT_EQ(i.concurrency, 2u);
    EXPECT_GT(i.peak_gflops, 0.0);
    ASSERT_NE(i.name, nullptr);
    ASSERT_NE(i.arch, nullptr);
    std::string arch = i.arch;
    EXPECT_EQ(arch.rfind("sm_", 0), 0u) << arch;
    EXPECT_NE(arch.find(i.name), std::string::npos) << arch;
  }
}

TEST_P(CudaAbi, DevicesOptionSelects) {
  auto one = make(Options{{"devices", std::to_string(devices() - 1)}, {"streams", "4"}});
  ASSERT_TRUE(one->ok()) << one->create_error();
  ASSERT_EQ(one->device_count(), 1u);
  EXPECT_STREQ(one->info(0).name, p().info(p().device_count() - 1).name);
  EXPECT_EQ(one->info(0).concurrency, 4u);
  auto none = make(Options{{"devices", "4000"}});
  EXPECT_FALSE(none->ok());
  EXPECT_NE(none->create_error().find("there is no CUDA device 4000"), std::string::npos)
      << none->create_error();
}

// devices = "share:K/N" (hcr::mpi::split_node): local rank K of N takes the GPUs K, K+N, ...; with
// fewer GPUs than ranks, GPU K % count.
TEST_P(CudaAbi, DevicesShareSplitsTheGpusBetweenRanks) {
  const int count = devices();
  for (int n = 1; n <= 3; ++n)
    for (int k = 0; k < n; ++k) {
      std::vector<int> want;
      for (int i = k; i < count; i += n) want.push_back(i);
      if (want.empty()) want.push_back(k % count);
      auto share =
          make(Options{{"devices", "share:" + std::to_string(k) + "/" + std::to_string(n)}});
      ASSERT_TRUE(share->ok()) << share->create_error();
      ASSERT_EQ(share->device_count(), want.size()) << k << "/" << n;
      for (size_t d = 0; d < want.size(); ++d)
        EXPECT_STREQ(share->info(d).name, p().info(static_cast<size_t>(want[d])).name);
    }
  for (const char* bad : {"share:2/2", "share:1", "share:-1/2", "share:0/2x"}) {
    auto b = make(Options{{"devices", bad}});
    EXPECT_FALSE(b->ok()) << bad;
    EXPECT_NE(b->create_error().find("a share is"), std::string::npos) << b->create_error();
  }
}

TEST_P(CudaAbi, HostAllocIsPinned) {
  void* ptr = nullptr;
  CallError e = p().check(p().api()->host_alloc(p().get(), 1 << 20, &ptr));
  ASSERT_TRUE(e.ok) << e.message;
  ASSERT_NE(ptr, nullptr);
  if (!fake()) {
    EXPECT_TRUE(test_is_pinned(ptr));
  }
  std::memset(ptr, 7, 1 << 20);
  p().api()->host_free(p().get(), ptr);
}

// Host -> device -> device -> host with different pitches and offsets on every leg; the bytes
// between rows must stay untouched.
void round_trip_2d(Plugin& p, size_t dev, bool pinned, uint64_t width, uint64_t rows) {
  const uint64_t sp = width + 29, dp1 = width + 64, dp2 = width + 3, hp = width + 17;
  const uint64_t off1 = 256, off2 = 5;
  std::vector<unsigned char> src_v, dst_v;
  unsigned char *src = nullptr, *dst = nullptr;
  void *pin_src = nullptr, *pin_dst = nullptr;
  if (pinned) {
    ASSERT_TRUE(p.check(p.api()->host_alloc(p.get(), sp * rows, &pin_src)).ok);
    ASSERT_TRUE(p.check(p.api()->host_alloc(p.get(), hp * rows, &pin_dst)).ok);
    src = static_cast<unsigned char*>(pin_src);
    dst = static_cast<unsigned char*>(pin_dst);
  } else {
    src_v.resize(sp * rows);
    dst_v.resize(hp * rows);
    src = src_v.data();
    dst = dst_v.data();
  }
  std::mt19937 gen(static_cast<unsigned>(width * 31 + rows));
  for (uint64_t i = 0; i < sp * rows; ++i) src[i] = static_cast<unsigned char>(gen());
  std::memset(dst, 0xAB, hp * rows);
  hcr_memory_t* m1 = p.alloc(dev, off1 + dp1 * rows);
  hcr_memory_t* m2 = p.alloc(dev, off2 + dp2 * rows);
  ASSERT_NE(m1, nullptr);
  ASSERT_NE(m2, nullptr);

  Outcome o = p.upload(dev, m1, off1, dp1, src, sp, width, rows);
  ASSERT_TRUE(o.ok) << o.message;
  hcr_copy_args_t dd{};
  dd.device = dev;
  dd.src_memory = m1;
  dd.src_offset = off1;
  dd.src_pitch = dp1;
  dd.dst_memory = m2;
  dd.dst_offset = off2;
  dd.dst_pitch = dp2;
  dd.width = width;
  dd.rows = rows;
  o = p.copy(dd);
  ASSERT_TRUE(o.ok) << o.message;
  o = p.download(dev, dst, hp, m2, off2, dp2, width, rows);
  ASSERT_TRUE(o.ok) << o.message;

  size_t wrong = 0, padding = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    wrong += std::memcmp(dst + r * hp, src + r * sp, width) != 0;
    for (uint64_t c = width; c < hp; ++c) padding += dst[r * hp + c] != 0xAB;
  }
  EXPECT_EQ(wrong, 0u) << "rows differ; width " << width << ", rows " << rows
                       << (pinned ? ", pinned" : ", pageable");
  EXPECT_EQ(padding, 0u) << "bytes between rows were overwritten";
  p.free(dev, m1);
  p.free(dev, m2);
  if (pinned) {
    p.api()->host_free(p.get(), pin_src);
    p.api()->host_free(p.get(), pin_dst);
  }
}

TEST_P(CudaAbi, Copies2DRoundTrip) {
  for (bool pinned : {false, true})
    for (auto [w, r] : {std::pair<uint64_t, uint64_t>{1, 1}, {100, 37}, {4096, 3}, {13, 1000}})
      round_trip_2d(p(), 0, pinned, w, r);
}

TEST_P(CudaAbi, LargePageableCopiesGoThroughStaging) {
  // Wider than a staging chunk (8 MiB), and many rows that take several chunks; with the host
  // copies on one thread and split over several.
  for (const char* threads : {"1", "3"}) {
    auto q = make(Options{{"copy_threads", threads}});
    ASSERT_TRUE(q->ok()) << q->create_error();
    round_trip_2d(*q, 0, false, (20u << 20) + 3, 1);
    round_trip_2d(*q, 0, false, 7001, 3000);
    round_trip_2d(*q, 0, false, 300, 1 << 16);
  }
  // And plain 1-D copies, both directions, of an odd size.
  const size_t n = (33u << 20) + 11;
  std::vector<unsigned char> a(n), b(n, 0);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<unsigned char>(i * 7 + 3);
  hcr_memory_t* m = p().alloc(0, n);
  ASSERT_TRUE(p().upload(0, m, 0, n, a.data(), n, n, 1).ok);
  ASSERT_TRUE(p().download(0, b.data(), n, m, 0, n, n, 1).ok);
  EXPECT_TRUE(a == b);
  p().free(0, m);
}

TEST_P(CudaAbi, CopyMistakesAreRefused) {
  hcr_memory_t* m = p().alloc(0, 1000);
  std::vector<char> host(4000);
  Outcome o = p().upload(0, m, 100, 100, host.data(), 100, 100, 10);  // ends at byte 1100
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("ends at byte 1100 of a 1000-byte allocation"), std::string::npos)
      << o.message;
  o = p().upload(0, m, 0, 50, host.data(), 100, 100, 2);  // pitch < width
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.message.find("smaller than the row width"), std::string::npos) << o.message;
  hcr_copy_args_t hh{};
  hh.src_host = host.data();
  hh.dst_host = host.data() + 10;
  hh.width = 1;
  hh.rows = 1;
  o = p().copy(hh);
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.message.find("two host pointers"), std::string::npos) << o.message;
  o = p().upload(0, m, 0, 0, host.data(), 0, 0, 0);  // nothing to copy: reported done
  EXPECT_TRUE(o.ok) << o.message;
  p().free(0, m);
}

TEST_P(CudaAbi, PeerCopyBetweenGpus) {
  if (devices() < 2) GTEST_SKIP() << "needs two GPUs";
  const uint64_t w = 1000, rows = 50;
  std::vector<unsigned char> a(w * rows), b(w * rows, 0);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<unsigned char>(i * 13);
  hcr_memory_t* m0 = p().alloc(0, w * rows);
  hcr_memory_t* m1 = p().alloc(1, 2 * w * rows);
  ASSERT_TRUE(p().upload(0, m0, 0, w, a.data(), w, w, rows).ok);
  for (size_t engine : {0u, 1u}) {
    hcr_copy_args_t c{};
    c.device = engine;
    c.src_memory = m0;
    c.src_pitch = w;
    c.dst_memory = m1;
    c.dst_pitch = 2 * w;  // strided on the far side
    c.width = w;
    c.rows = rows;
    Outcome o = p().copy(c);
    ASSERT_TRUE(o.ok) << o.message;
    std::fill(b.begin(), b.end(), 0);
    ASSERT_TRUE(p().download(1, b.data(), w, m1, 0, 2 * w, w, rows).ok);
    EXPECT_TRUE(a == b) << "copy run by device " << engine;
  }
  p().free(0, m0);
  p().free(1, m1);
}

// ---- gemm --------------------------------------------------------------------------------------

struct Precision {
  hcr_dtype_t dtype;
  const char* kernel;
  size_t bytes;
  double unit;  // unit roundoff of the storage type
};

double round_to(const Precision& pr, double x) {
  switch (pr.dtype) {
    case HCR_DTYPE_F16: return test_f16_to_f32(test_f32_to_f16(static_cast<float>(x)));
    case HCR_DTYPE_BF16: return test_bf16_to_f32(test_f32_to_bf16(static_cast<float>(x)));
    case HCR_DTYPE_F32: return static_cast<float>(x);
    default: return x;
  }
}

void store(const Precision& pr, double x, unsigned char* at) {
  switch (pr.dtype) {
    case HCR_DTYPE_F16: {
      uint16_t h = test_f32_to_f16(static_cast<float>(x));
      std::memcpy(at, &h, 2);
      break;
    }
    case HCR_DTYPE_BF16: {
      uint16_t h = test_f32_to_bf16(static_cast<float>(x));
      std::memcpy(at, &h, 2);
      break;
    }
    case HCR_DTYPE_F32: {
      float f = static_cast<float>(x);
      std::memcpy(at, &f, 4);
      break;
    }
    default: std::memcpy(at, &x, 8);
  }
}

double load(const Precision& pr, const unsigned char* at) {
  switch (pr.dtype) {
    case HCR_DTYPE_F16:
    case HCR_DTYPE_BF16: {
      uint16_t h;
      std::memcpy(&h, at, 2);
      return pr.dtype == HCR_DTYPE_F16 ? test_f16_to_f32(h) : test_bf16_to_f32(h);
    }
    case HCR_DTYPE_F32: {
      float f;
      std::memcpy(&f, at, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, at, 8);
      return d;
    }
  }
}

// C = alpha A B + beta C through the plugin, row-major with padded leading dimensions and an
// offset on C, checked element by element against a double-precision reference.
void check_gemm(Plugin& p, const Precision& pr, uint64_t m, uint64_t k, uint64_t n) {
  SCOPED_TRACE(std::string(pr.kernel) + " " + std::to_string(m) + "x" + std::to_string(k) + "x" +
               std::to_string(n));
  const uint64_t lda = k + 3, ldb = n + 1, ldc = n + 5, c_off = 64;
  const double alpha = 1.5, beta = -0.5;
  std::mt19937 gen(static_cast<unsigned>(m * 1000003 + k * 1009 + n));
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> a(m * k), b(k * n), c0(m * n);
  for (auto& x : a) x = round_to(pr, dist(gen));
  for (auto& x : b) x = round_to(pr, dist(gen));
  for (auto& x : c0) x = round_to(pr, dist(gen));
  std::vector<unsigned char> ha(m * lda * pr.bytes), hb(k * ldb * pr.bytes),
      hc(c_off + m * ldc * pr.bytes);
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t j = 0; j < k; ++j) store(pr, a[i * k + j], &ha[(i * lda + j) * pr.bytes]);
  for (uint64_t i = 0; i < k; ++i)
    for (uint64_t j = 0; j < n; ++j) store(pr, b[i * n + j], &hb[(i * ldb + j) * pr.bytes]);
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t j = 0; j < n; ++j)
      store(pr, c0[i * n + j], &hc[c_off + (i * ldc + j) * pr.bytes]);
  hcr_memory_t* A = p.alloc(0, ha.size());
  hcr_memory_t* B = p.alloc(0, hb.size());
  hcr_memory_t* C = p.alloc(0, hc.size());
  ASSERT_TRUE(p.upload(0, A, 0, ha.size(), ha.data(), ha.size(), ha.size(), 1).ok);
  ASSERT_TRUE(p.upload(0, B, 0, hb.size(), hb.data(), hb.size(), hb.size(), 1).ok);
  ASSERT_TRUE(p.upload(0, C, 0, hc.size(), hc.data(), hc.size(), hc.size(), 1).ok);

  hcr_kernel_t* kern = p.builtin(0, pr.kernel);
  ASSERT_NE(kern, nullptr);
  hcr_arg_t args[3] = {matrix_arg(A, 0, pr.dtype, HCR_ACCESS_READ, m, k, lda),
                       matrix_arg(B, 0, pr.dtype, HCR_ACCESS_READ, k, n, ldb),
                       matrix_arg(C, c_off, pr.dtype, HCR_ACCESS_READ_WRITE, m, n, ldc)};
  hcr_gemm_params_t params{HCR_GEMM_PARAMS_STRUCT_SIZE, alpha, beta};
  hcr_launch_args_t la{};
  la.kernel = kern;
  la.args = args;
  la.num_args = 3;
  la.params = &params;
  la.params_size = sizeof params;
  la.flags = HCR_LAUNCH_MEASURE;
  Outcome o = p.launch(la);
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_GE(o.seconds, 0.0) << "HCR_LAUNCH_MEASURE asks for device_seconds";
  std::vector<unsigned char> out(hc.size());
  ASSERT_TRUE(p.download(0, out.data(), out.size(), C, 0, out.size(), out.size(), 1).ok);
  p.release(kern);
  p.free(0, A);
  p.free(0, B);
  p.free(0, C);

  // Error bounds: the f32/f64 accumulation error (k+2)u·Σ|terms| doubled; for f16/bf16 the
  // products are exact in f32 and the sum is kept in f32 (with a 64x margin for the tensor cores'
  // truncating adders), then rounded once to the 16-bit output (u·|C|, doubled).
  const bool half = pr.dtype == HCR_DTYPE_F16 || pr.dtype == HCR_DTYPE_BF16;
  size_t bad = 0;
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t j = 0; j < n; ++j) {
      double want = beta * c0[i * n + j], scale = std::abs(beta * c0[i * n + j]);
      for (uint64_t q = 0; q < k; ++q) {
        want += alpha * a[i * k + q] * b[q * n + j];
        scale += std::abs(alpha * a[i * k + q] * b[q * n + j]);
      }
      const double got = load(pr, &out[c_off + (i * ldc + j) * pr.bytes]);
      const double tol = half
                             ? 2 * pr.unit * std::abs(want) + (k + 2) * std::ldexp(1.0, -18) * scale
                             : 2.0 * (k + 2) * pr.unit * scale + 1e-300;
      if (!(std::abs(got - want) <= tol) && bad++ < 5)
        ADD_FAILURE() << "C(" << i << "," << j << ") = " << got << ", want " << want << " +- "
                      << tol;
    }
  EXPECT_EQ(bad, 0u);
  // The padding between C's rows is untouched.
  size_t pad = 0;
  for (uint64_t i = 0; i + 1 < m; ++i)
    pad += std::memcmp(&out[c_off + (i * ldc + n) * pr.bytes],
                       &hc[c_off + (i * ldc + n) * pr.bytes], (ldc - n) * pr.bytes) != 0;
  EXPECT_EQ(pad, 0u);
}

TEST_P(CudaAbi, GemmInEveryPrecision) {
  const Precision precisions[] = {
      {HCR_DTYPE_F64, "gemm_f64", 8, std::ldexp(1.0, -53)},
      {HCR_DTYPE_F32, "gemm_f32", 4, std::ldexp(1.0, -24)},
      {HCR_DTYPE_F16, "gemm_f16", 2, std::ldexp(1.0, -11)},
      {HCR_DTYPE_BF16, "gemm_bf16", 2, std::ldexp(1.0, -8)},
  };
  for (const Precision& pr : precisions)
    for (auto [m, k, n] : {std::tuple{1, 1, 1}, std::tuple{7, 7, 7}, std::tuple{65, 65, 65},
                           std::tuple{513, 513, 513}, std::tuple{65, 33, 130},
                           std::tuple{513, 7, 65}, std::tuple{1, 513, 7}, std::tuple{130, 1, 3}}) {
      if (fake() && m * k * n > 1000000) continue;  // the fake multiplies on one host core
      check_gemm(p(), pr, m, k, n);
    }
}

TEST_P(CudaAbi, GemmMistakesNameTheShapes) {
  hcr_memory_t* m = p().alloc(0, 4096);
  hcr_kernel_t* k = p().builtin(0, "gemm_f32");
  hcr_gemm_params_t params{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0};
  hcr_arg_t args[3] = {matrix_arg(m, 0, HCR_DTYPE_F32, HCR_ACCESS_READ, 2, 3, 3),
                       matrix_arg(m, 0, HCR_DTYPE_F32, HCR_ACCESS_READ, 4, 2, 2),
                       matrix_arg(m, 0, HCR_DTYPE_F32, HCR_ACCESS_READ_WRITE, 2, 2, 2)};
  hcr_launch_args_t la{};
  la.kernel = k;
  la.args = args;
  la.num_args = 3;
  la.params = &params;
  la.params_size = sizeof params;
  Outcome o = p().launch(la);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("A is 2x3, B is 4x2, C is 2x2"), std::string::npos) << o.message;

  args[1] = matrix_arg(m, 0, HCR_DTYPE_F64, HCR_ACCESS_READ, 3, 2, 2);
  o = p().launch(la);
  EXPECT_NE(o.message.find("argument 1 (B) is f64, expected f32"), std::string::npos) << o.message;

  args[1] = matrix_arg(m, 4080, HCR_DTYPE_F32, HCR_ACCESS_READ, 3, 2, 2);  // past the end
  o = p().launch(la);
  EXPECT_NE(o.message.find("ends at byte 4104 of a 4096-byte allocation"), std::string::npos)
      << o.message;

  args[1] = matrix_arg(m, 0, HCR_DTYPE_F32, HCR_ACCESS_READ, 3, 2, 2);
  la.num_args = 2;
  o = p().launch(la);
  EXPECT_NE(o.message.find("takes 3 buffers"), std::string::npos) << o.message;
  p().release(k);
  p().free(0, m);
}

TEST_P(CudaAbi, EstimatesGemm) {
  hcr_kernel_t* k = p().builtin(0, "gemm_f32");
  hcr_arg_t args[3] = {
      matrix_arg(nullptr, 0, HCR_DTYPE_F32, HCR_ACCESS_READ, 1024, 1024, 1024),
      matrix_arg(nullptr, 0, HCR_DTYPE_F32, HCR_ACCESS_READ, 1024, 1024, 1024),
      matrix_arg(nullptr, 0, HCR_DTYPE_F32, HCR_ACCESS_READ_WRITE, 1024, 1024, 1024)};
  hcr_launch_args_t la{};
  la.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
  la.kernel = k;
  la.args = args;
  la.num_args = 3;
  double s = -1;
  CallError e = p().check(p().api()->estimate(p().get(), &la, &s));
  EXPECT_TRUE(e.ok) << e.message;
  EXPECT_GT(s, 0.0);
  p().release(k);
}

// ---- user kernels ------------------------------------------------------------------------------

// hcr_test_scale's twin for the fake runtime, whose device memory the host can touch.
int host_scale(void* user_data, const hcr_exec_context_t* ctx, char* message, size_t size) {
  if (ctx->num_args != 1 || ctx->args[0].host == nullptr || ctx->native_queue == nullptr ||
      ctx->num_params != 1) {
    std::snprintf(message, size, "bad context");
    return 1;
  }
  float a;
  std::memcpy(&a, static_cast<const char*>(ctx->params) + ctx->param_offsets[0], sizeof a);
  const hcr_arg_t& x = ctx->args[0];
  auto* data = static_cast<float*>(x.host);
  for (uint64_t r = 0; r < x.rows; ++r)
    for (uint64_t c = 0; c < x.cols; ++c) data[r * x.ld + c] *= a;
  auto* seen = static_cast<NativeSeen*>(user_data);
  seen->calls += 1;
  seen->ordinal = ctx->native_device ? *static_cast<const int*>(ctx->native_device) : -1;
  seen->worker = ctx->worker;
  seen->stream = ctx->native_queue;
  return 0;
}

TEST_P(CudaAbi, NativeFunctionGetsTheStreamAndDevicePointers) {
  const uint64_t rows = 33, cols = 70, ld = 80;
  std::vector<float> x(rows * ld);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  hcr_memory_t* m = p().alloc(0, 16 + x.size() * 4);
  ASSERT_TRUE(p().upload(0, m, 16, x.size() * 4, x.data(), x.size() * 4, x.size() * 4, 1).ok);
  NativeSeen seen;
  hcr_kernel_desc_t d{};
  d.name = "scale";
  d.kind = HCR_IMPL_NATIVE_FUNCTION;
  d.api = "cuda";
  // On the fake runtime "device" memory is host memory: a host version of the same launcher.
  d.fn = fake() ? &host_scale : &hcr_test_scale;
  d.user_data = &seen;
  hcr_kernel_t* k = p().kernel(0, d);
  ASSERT_NE(k, nullptr);
  hcr_arg_t arg = matrix_arg(m, 16, HCR_DTYPE_F32, HCR_ACCESS_READ_WRITE, rows, cols, ld);
  float factor = 3;
  uint32_t offsets[1] = {0};
  hcr_launch_args_t la{};
  la.kernel = k;
  la.args = &arg;
  la.num_args = 1;
  la.params = &factor;
  la.params_size = sizeof factor;
  la.param_offsets = offsets;
  la.num_params = 1;
  Outcome o = p().launch(la);
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(seen.calls, 1);
  EXPECT_EQ(seen.ordinal, 0);
  if (!fake()) {
    EXPECT_EQ(seen.current_device, 0) << "the task's device is current in the function";
  }
  EXPECT_LT(seen.worker, p().info(0).concurrency);
  EXPECT_NE(seen.stream, nullptr);
  std::vector<float> y(x.size());
  ASSERT_TRUE(p().download(0, y.data(), y.size() * 4, m, 16, y.size() * 4, y.size() * 4, 1).ok);
  size_t wrong = 0;
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < ld; ++c)
      wrong += y[r * ld + c] != (c < cols ? 3 * x[r * ld + c] : x[r * ld + c]);
  EXPECT_EQ(wrong, 0u);

  // A failing function fails its launch through done, with its message.
  d.fn = &hcr_test_fail;
  hcr_kernel_t* bad = p().kernel(0, d);
  la.kernel = bad;
  o = p().launch(la);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.code, HCR_ERROR_KERNEL);
  EXPECT_NE(o.message.find("native failure on purpose"), std::string::npos) << o.message;
  p().release(k);
  p().release(bad);
  p().free(0, m);
}

// Why source kernels cannot be tested here (NVRTC missing from the toolkit), or empty.
std::string nvrtc_missing(const std::string& file) {
  static const std::string why = [&file] {
    Plugin p(Options{{"cache_dir", ""}}, file);  // no disk cache: the probe leaves no file
    CallError e;
    hcr_kernel_t* k = p.source(0, "probe", "extern \"C\" __global__ void probe() {}", nullptr, &e);
    if (k != nullptr) p.release(k);
    return e.code == HCR_ERROR_UNSUPPORTED && e.message.find("need NVRTC") != std::string::npos
               ? e.message
               : std::string();
  }();
  return why;
}

#define HCR_NEED_NVRTC()                                                                          \
  do {                                                                                            \
    if (std::string why_ = nvrtc_missing(GetParam().file()); !why_.empty()) GTEST_SKIP() << why_; \
  } while (0)

const char* const kAxpy = R"(
extern "C" __global__ void axpy(float* y, const float* x, float a, unsigned long long n) {
  unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
)";

// y += a x over n elements, through a source kernel with the default geometry (one thread per
// element of y, the written buffer).
void run_axpy(Plugin& p, hcr_kernel_t* k, size_t n) {
  std::vector<float> x(n), y(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i), y[i] = 1;
  hcr_memory_t* mx = p.alloc(0, n * 4);
  hcr_memory_t* my = p.alloc(0, n * 4);
  ASSERT_TRUE(p.upload(0, mx, 0, n * 4, x.data(), n * 4, n * 4, 1).ok);
  ASSERT_TRUE(p.upload(0, my, 0, n * 4, y.data(), n * 4, n * 4, 1).ok);
  hcr_arg_t args[2] = {matrix_arg(my, 0, HCR_DTYPE_F32, HCR_ACCESS_READ_WRITE, 1, n, n),
                       matrix_arg(mx, 0, HCR_DTYPE_F32, HCR_ACCESS_READ, 1, n, n)};
  struct {
    float a;
    unsigned long long n;
  } params{2.0f, n};
  uint32_t offsets[2] = {0, 8};
  hcr_launch_args_t la{};
  la.kernel = k;
  la.args = args;
  la.num_args = 2;
  la.params = &params;
  la.params_size = sizeof params;
  la.param_offsets = offsets;
  la.num_params = 2;
  Outcome o = p.launch(la);
  ASSERT_TRUE(o.ok) << o.message;
  ASSERT_TRUE(p.download(0, y.data(), n * 4, my, 0, n * 4, n * 4, 1).ok);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += y[i] != 1 + 2.0f * x[i];
  EXPECT_EQ(wrong, 0u);
  p.free(0, mx);
  p.free(0, my);
}

TEST_P(CudaAbi, SourceKernelIsCompiledThenReadFromTheCache) {
  HCR_NEED_NVRTC();
  hcr_kernel_t* k = p().source(0, "axpy", kAxpy);
  ASSERT_NE(k, nullptr) << p().log_text();
  EXPECT_TRUE(p().logged("kernel 'axpy' compiled for ")) << p().log_text();
  run_axpy(p(), k, 100003);
  p().release(k);

  // The cache holds one file for this architecture.
  std::string arch = p().info(0).arch;
  fs::path dir = cache_.path() / arch.substr(0, arch.find(' '));
  size_t files = 0;
  for (auto& e : fs::directory_iterator(dir)) files += e.path().extension() == ".bin";
  EXPECT_EQ(files, 1u) << dir;

  // A second plugin instance (a second run) reads it instead of compiling.
  p_->destroy();
  auto again = make(Options{{"cache_dir", cache_.path().string()}});
  ASSERT_TRUE(again->ok());
  hcr_kernel_t* k2 = again->source(0, "axpy", kAxpy);
  ASSERT_NE(k2, nullptr);
  EXPECT_TRUE(again->logged("kernel 'axpy' for sm_")) << again->log_text();
  EXPECT_TRUE(again->logged("read from cache")) << again->log_text();
  EXPECT_FALSE(again->logged("compiled for")) << again->log_text();
  run_axpy(*again, k2, 5);
  again->release(k2);
}

// A cubin another user could have written is never run: an entry owned by another user is
// compiled anew and replaced by ours; a cache directory another user owns is not used at all (one
// warning naming it and why), nothing is written there.
TEST_P(CudaAbi, CacheEntriesAndDirectoriesOfOthersAreNotUsed) {
  HCR_NEED_NVRTC();
  hcr_kernel_t* k = p().source(0, "axpy", kAxpy);
  ASSERT_NE(k, nullptr) << p().log_text();
  p().release(k);
  std::string arch = p().info(0).arch;
  const fs::path dir = cache_.path() / arch.substr(0, arch.find(' '));
  fs::path entry;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".bin") entry = e.path();
  ASSERT_FALSE(entry.empty());
  if (::chown(entry.c_str(), 12345, 12345) != 0) GTEST_SKIP() << "cannot chown (not root)";
  p_->destroy();
  auto again = make(Options{{"cache_dir", cache_.path().string()}});
  ASSERT_TRUE(again->ok());
  hcr_kernel_t* k2 = again->source(0, "axpy", kAxpy);
  ASSERT_NE(k2, nullptr) << again->log_text();
  EXPECT_FALSE(again->logged("read from cache")) << again->log_text();
  EXPECT_TRUE(again->logged("kernel 'axpy' compiled for ")) << again->log_text();
  struct stat st {};
  ASSERT_EQ(::stat(entry.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, ::geteuid()) << "the planted entry was not replaced";
  again->release(k2);
  again->destroy();

  test::TempDir other;
  const fs::path theirs = other.path() / "theirs";
  fs::create_directory(theirs);
  ASSERT_EQ(::chown(theirs.c_str(), 12345, 12345), 0);
  auto third = make(Options{{"cache_dir", theirs.string()}});
  ASSERT_TRUE(third->ok());
  hcr_kernel_t* k3 = third->source(0, "axpy", kAxpy);
  ASSERT_NE(k3, nullptr) << third->log_text();
  EXPECT_TRUE(third->logged("kernel cache " + theirs.string())) << third->log_text();
  EXPECT_TRUE(third->logged("owned by uid 12345")) << third->log_text();
  EXPECT_TRUE(fs::is_empty(theirs)) << "written into another user's directory";
  third->release(k3);
}

TEST_P(CudaAbi, SourceKernelsMayBeCxxAnd2D) {
  HCR_NEED_NVRTC();
  // A template instance named as written, in C++ linkage, over a 2-D grid given explicitly.
  const std::string src = R"(
template <class T> __global__ void fill2d(T* m, unsigned long long rows, unsigned long long cols,
                                          unsigned long long ld, T v) {
  unsigned long long c = blockIdx.x * 1ull * blockDim.x + threadIdx.x;
  unsigned long long r = blockIdx.y * 1ull * blockDim.y + threadIdx.y;
  if (r < rows && c < cols) m[r * ld + c] = v + static_cast<T>(r * 1000 + c);
}
)";
  hcr_kernel_t* k = p().source(0, "fill2d", src, "fill2d<double>");
  ASSERT_NE(k, nullptr);
  const uint64_t rows = 37, cols = 45, ld = 50;
  hcr_memory_t* m = p().alloc(0, rows * ld * 8);
  hcr_arg_t arg = matrix_arg(m, 0, HCR_DTYPE_F64, HCR_ACCESS_WRITE, rows, cols, ld);
  struct {
    unsigned long long rows, cols, ld;
    double v;
  } params{rows, cols, ld, 0.5};
  uint32_t offsets[4] = {0, 8, 16, 24};
  hcr_launch_args_t la{};
  la.kernel = k;
  la.args = &arg;
  la.num_args = 1;
  la.params = &params;
  la.params_size = sizeof params;
  la.param_offsets = offsets;
  la.num_params = 4;
  la.global_size[0] = cols;
  la.global_size[1] = rows;
  la.local_size[0] = 32;
  la.local_size[1] = 4;
  Outcome o = p().launch(la);
  ASSERT_TRUE(o.ok) << o.message;
  std::vector<double> out(rows * ld);
  ASSERT_TRUE(
      p().download(0, out.data(), out.size() * 8, m, 0, out.size() * 8, out.size() * 8, 1).ok);
  size_t wrong = 0;
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) wrong += out[r * ld + c] != 0.5 + r * 1000 + c;
  EXPECT_EQ(wrong, 0u);
  p().release(k);
  p().free(0, m);
}

TEST_P(CudaAbi, SourceLaunchWithWrongArgumentsIsRefused) {
  HCR_NEED_NVRTC();
  hcr_kernel_t* k = p().source(0, "axpy", kAxpy);
  ASSERT_NE(k, nullptr);
  hcr_memory_t* m = p().alloc(0, 64);
  hcr_arg_t args[2] = {matrix_arg(m, 0, HCR_DTYPE_F32, HCR_ACCESS_READ_WRITE, 1, 4, 4),
                       matrix_arg(m, 0, HCR_DTYPE_F32, HCR_ACCESS_READ, 1, 4, 4)};
  float a = 1;
  uint32_t offsets[1] = {0};
  hcr_launch_args_t la{};
  la.kernel = k;
  la.args = args;
  la.num_args = 2;
  la.params = &a;
  la.params_size = sizeof a;
  la.param_offsets = offsets;
  la.num_params = 1;  // n is missing
  Outcome o = p().launch(la);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("kernel 'axpy' takes 4 argument(s)"), std::string::npos) << o.message;
  // No grid and no written buffer: nothing to size the launch by.
  args[0].access = HCR_ACCESS_READ;
  o = p().launch(la);
  EXPECT_FALSE(o.ok);
  p().release(k);
  p().free(0, m);
}

// Task::param passes a value's bytes unconverted: .param(2.0).param(n) for (float a, int n) spans
// 8 bytes for a, where 4 and no padding before an int fit. Refused naming the parameter (it used to
// pass, as anything up to 15 bytes too long did, and run with the double's low half: 0).
TEST_P(CudaAbi, SourceParameterLongerThanItsArgumentIsRefused) {
  HCR_NEED_NVRTC();
  hcr_kernel_t* k = p().source(0, "scale_n", R"(
extern "C" __global__ void scale_n(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
)");
  ASSERT_NE(k, nullptr);
  const int n = 4;
  std::vector<float> x(n, 1.5f);
  hcr_memory_t* m = p().alloc(0, n * 4);
  ASSERT_TRUE(p().upload(0, m, 0, n * 4, x.data(), n * 4, n * 4, 1).ok);
  hcr_arg_t arg = matrix_arg(m, 0, HCR_DTYPE_F32, HCR_ACCESS_READ_WRITE, 1, n, n);
  struct {
    double a;
    int n;
  } wrong{2.0, n};
  uint32_t offsets[2] = {0, 8};
  hcr_launch_args_t la{};
  la.kernel = k;
  la.args = &arg;
  la.num_args = 1;
  la.params = &wrong;
  la.params_size = 12;  // as the runtime packs them: the double, then the int
  la.param_offsets = offsets;
  la.num_params = 2;
  Outcome o = p().launch(la);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("kernel 'scale_n': parameter 0 spans 8 bytes up to the next where "
                           "argument 1 takes 4"),
            std::string::npos)
      << o.message;
  struct {
    float a;
    int n;
  } right{2.0f, n};
  offsets[1] = 4;
  la.params = &right;
  la.params_size = sizeof right;
  o = p().launch(la);
  ASSERT_TRUE(o.ok) << o.message;
  ASSERT_TRUE(p().download(0, x.data(), n * 4, m, 0, n * 4, n * 4, 1).ok);
  for (float v : x) EXPECT_EQ(v, 3.0f);
  p().release(k);
  p().free(0, m);
}

TEST_P(CudaAbi, CompileErrorsCarryTheLog) {
  HCR_NEED_NVRTC();
  CallError e;
  hcr_kernel_t* k =
      p().source(0, "broken", "__global__ void broken(float* x) { x[0] = y; }", nullptr, &e);
  EXPECT_EQ(k, nullptr);
  EXPECT_EQ(e.code, HCR_ERROR_BACKEND);
  EXPECT_NE(e.message.find("NVRTC could not compile kernel 'broken'"), std::string::npos)
      << e.message;
  EXPECT_NE(e.message.find("\"y\""), std::string::npos)
      << "the log names the culprit: " << e.message;
}

TEST_P(CudaAbi, OtherKernelKindsAreRefused) {
  CallError e;
  EXPECT_EQ(p().builtin(0, "gemm_i8", &e), nullptr);
  EXPECT_EQ(e.code, HCR_ERROR_NOT_FOUND);
  hcr_kernel_desc_t d{};
  d.name = "h";
  d.kind = HCR_IMPL_HOST_FUNCTION;
  d.api = "host";
  d.fn = &hcr_test_fail;
  EXPECT_EQ(p().kernel(0, d, &e), nullptr);
  EXPECT_EQ(e.code, HCR_ERROR_UNSUPPORTED);
  d.kind = HCR_IMPL_NATIVE_FUNCTION;
  d.api = "opencl";
  EXPECT_EQ(p().kernel(0, d, &e), nullptr);
  EXPECT_EQ(e.code, HCR_ERROR_UNSUPPORTED);
  d.kind = HCR_IMPL_SOURCE;
  d.source = "__kernel void h() {}";
  EXPECT_EQ(p().kernel(0, d, &e), nullptr);
  EXPECT_EQ(e.code, HCR_ERROR_UNSUPPORTED);
  d.kind = HCR_IMPL_BINARY;
  d.api = "cuda";
  d.binary_path = "/nonexistent.cubin";
  EXPECT_EQ(p().kernel(0, d, &e), nullptr);
  EXPECT_EQ(e.code, HCR_ERROR_UNSUPPORTED);
}

// ---- completion --------------------------------------------------------------------------------

// Every done is called exactly once; synchronize returns only after all of them.
struct Tally {
  std::vector<std::atomic<int>> calls;
  std::atomic<int> failed{0};
  std::atomic<int> negative_seconds{0};
  explicit Tally(size_t n) : calls(n) {}
};
struct TallyTicket {
  Tally* tally;
  size_t index;
  const hcr_plugin_api_t* api;
};
void tally_done(void* user, hcr_error_t* error, const hcr_completion_info_t* info) {
  auto* t = static_cast<TallyTicket*>(user);
  t->tally->calls[t->index].fetch_add(1);
  if (error != nullptr) {
    t->tally->failed.fetch_add(1);
    t->api->error_destroy(error);
  }
  if (info == nullptr || info->device_seconds < 0) t->tally->negative_seconds.fetch_add(1);
}

TEST_P(CudaAbi, ManyLaunchesCompleteExactlyOnce) {
  const size_t kLaunches = 3000, n = 16, mat = n * n * 4;
  // A and B shared, a C of its own for each launch: launches run side by side on the streams.
  hcr_memory_t* m = p().alloc(0, (2 + kLaunches) * mat);
  hcr_kernel_t* k = p().builtin(0, "gemm_f32");
  hcr_gemm_params_t params{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 1};
  Tally tally(kLaunches);
  std::vector<TallyTicket> tickets(kLaunches);
  std::vector<std::array<hcr_arg_t, 3>> all_args(kLaunches);
  for (size_t i = 0; i < kLaunches; ++i) {
    tickets[i] = {&tally, i, p().api()};
    hcr_arg_t* args = all_args[i].data();
    args[0] = matrix_arg(m, 0, HCR_DTYPE_F32, HCR_ACCESS_READ, n, n, n);
    args[1] = matrix_arg(m, mat, HCR_DTYPE_F32, HCR_ACCESS_READ, n, n, n);
    args[2] = matrix_arg(m, (2 + i) * mat, HCR_DTYPE_F32, HCR_ACCESS_READ_WRITE, n, n, n);
    hcr_launch_args_t la{};
    la.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
    la.kernel = k;
    la.args = args;
    la.num_args = 3;
    la.params = &params;
    la.params_size = sizeof params;
    la.flags = HCR_LAUNCH_MEASURE;
    la.done = &tally_done;
    la.done_user_data = &tickets[i];
    CallError e = p().check(p().api()->launch(p().get(), &la));
    ASSERT_TRUE(e.ok) << e.message;
  }
  CallError e = p().check(p().api()->synchronize(p().get(), 0));
  ASSERT_TRUE(e.ok) << e.message;
  size_t not_once = 0;
  for (auto& c : tally.calls) not_once += c.load() != 1;
  EXPECT_EQ(not_once, 0u);
  EXPECT_EQ(tally.failed.load(), 0);
  EXPECT_EQ(tally.negative_seconds.load(), 0);
  p().release(k);
  p().free(0, m);
}

TEST_P(CudaAbi, DestroyWaitsForOutstandingWork) {
  const size_t kLaunches = 200, n = fake() ? 32 : 256, mat = n * n * 4;
  hcr_memory_t* m = p().alloc(0, (2 + kLaunches) * mat);
  hcr_kernel_t* k = p().builtin(0, "gemm_f32");
  Tally tally(kLaunches + 1);
  std::vector<TallyTicket> tickets(kLaunches + 1);
  std::vector<std::array<hcr_arg_t, 3>> all_args(kLaunches);
  for (size_t i = 0; i < kLaunches; ++i) {
    tickets[i] = {&tally, i, p().api()};
    hcr_arg_t* args = all_args[i].data();
    args[0] = matrix_arg(m, 0, HCR_DTYPE_F32, HCR_ACCESS_READ, n, n, n);
    args[1] = matrix_arg(m, mat, HCR_DTYPE_F32, HCR_ACCESS_READ, n, n, n);
    args[2] = matrix_arg(m, (2 + i) * mat, HCR_DTYPE_F32, HCR_ACCESS_READ_WRITE, n, n, n);
    hcr_launch_args_t la{};
    la.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
    la.kernel = k;
    la.args = args;
    la.num_args = 3;
    la.done = &tally_done;
    la.done_user_data = &tickets[i];
    ASSERT_TRUE(p().check(p().api()->launch(p().get(), &la)).ok);
  }
  // And a pageable download (of A and B, which nothing writes) in flight through the staging
  // thread.
  std::vector<unsigned char> host(2 * mat);
  tickets[kLaunches] = {&tally, kLaunches, p().api()};
  hcr_copy_args_t c{};
  c.struct_size = HCR_COPY_ARGS_STRUCT_SIZE;
  c.src_memory = m;
  c.dst_host = host.data();
  c.width = host.size();
  c.rows = 1;
  c.done = &tally_done;
  c.done_user_data = &tickets[kLaunches];
  ASSERT_TRUE(p().check(p().api()->copy(p().get(), &c)).ok);
  // Neither the kernel nor the memory is given back: destroy waits for the work that uses them,
  // then frees what the host left behind.
  p_->destroy();
  size_t not_once = 0;
  for (auto& x : tally.calls) not_once += x.load() != 1;
  EXPECT_EQ(not_once, 0u);
}

// =================================================================================================
// Through hcr::Runtime and its data manager (the same two targets)
// =================================================================================================

class CudaRuntime : public RuntimeFixture {};

INSTANTIATE_TEST_SUITE_P(CudaGpu, CudaRuntime, ::testing::Values(Target{false}),
                         [](const auto&) { return std::string("gpu"); });
INSTANTIATE_TEST_SUITE_P(FakeCuda, CudaRuntime, ::testing::Values(Target{true}),
                         [](const auto&) { return std::string("fake"); });

TEST_P(CudaRuntime, DevicesAppearWithTheirOwnMemory) {
  for (const Device& d : rt().devices()) {
    EXPECT_EQ(d.backend, "cuda");
    EXPECT_EQ(d.kind, DeviceKind::gpu);
    EXPECT_EQ(d.arch.rfind("sm_", 0), 0u) << d.arch;
    EXPECT_NE(d.memory_node, 0u) << "a GPU has its own memory node";
    EXPECT_EQ(d.concurrency, 2u);
  }
}

template <class T>
std::vector<T> random_matrix(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

template <class T>
void fill(Buffer<T>& b, const std::vector<T>& values) {
  auto v = b.acquire(Access::write);
  std::copy(values.begin(), values.end(), v.data());
}

// C = A B through hcr::blas::gemm (tiles spread over every GPU, inputs and tiles copied by the
// data manager), checked against a double reference.
template <class T>
void tiled_gemm(Runtime& rt, size_t m, size_t k, size_t n, size_t tile) {
  SCOPED_TRACE(std::string(blas::gemm_kernel_name<T>()) + " " + std::to_string(m) + "x" +
               std::to_string(k) + "x" + std::to_string(n) + " tile " + std::to_string(tile));
  auto A = rt.buffer<T>(m, k), B = rt.buffer<T>(k, n), C = rt.buffer<T>(m, n);
  auto a = random_matrix<T>(m * k, 1), b = random_matrix<T>(k * n, 2);
  fill(A, a);
  fill(B, b);
  blas::gemm(rt, A, B, C, tile).get();
  auto c = C.to_vector();
  size_t bad = 0;
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      double want = 0, scale = 0;
      for (size_t q = 0; q < k; ++q) {
        want += static_cast<double>(a[i * k + q]) * b[q * n + j];
        scale += std::abs(static_cast<double>(a[i * k + q]) * b[q * n + j]);
      }
      const double tol = 2.0 * (k + 2) * std::numeric_limits<T>::epsilon() * scale + 1e-30;
      if (!(std::abs(c[i * n + j] - want) <= tol) && bad++ < 5)
        ADD_FAILURE() << "C(" << i << "," << j << ") = " << c[i * n + j] << ", want " << want;
    }
  EXPECT_EQ(bad, 0u);
}

TEST_P(CudaRuntime, TiledGemmMovesItsDataThroughTheDataManager) {
  const size_t n = fake() ? 96 : 1000;
  tiled_gemm<float>(rt(), n, n + 7, n - 5, fake() ? 32 : 256);
  tiled_gemm<double>(rt(), n - 3, n / 2, n, fake() ? 40 : 300);
  RuntimeStats s = rt().stats();
  EXPECT_EQ(s.failed, 0u);
  EXPECT_GT(s.data.bytes_moved(), 0u) << "the inputs went to the GPU and C came back";
}

TEST_P(CudaRuntime, Bf16GemmTask) {
  const size_t m = 33, k = 70, n = 45;
  auto A = rt().buffer<bfloat16>(m, k), B = rt().buffer<bfloat16>(k, n),
       C = rt().buffer<bfloat16>(m, n);
  auto a = random_matrix<double>(m * k, 3), b = random_matrix<double>(k * n, 4);
  {
    auto va = A.acquire(Access::write), vb = B.acquire(Access::write);
    for (size_t i = 0; i < a.size(); ++i) {
      va.data()[i].bits = test_f32_to_bf16(static_cast<float>(a[i]));
      a[i] = test_bf16_to_f32(va.data()[i].bits);
    }
    for (size_t i = 0; i < b.size(); ++i) {
      vb.data()[i].bits = test_f32_to_bf16(static_cast<float>(b[i]));
      b[i] = test_bf16_to_f32(vb.data()[i].bits);
    }
  }
  hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0};
  rt().submit(Task(rt().kernel("gemm_bf16")).read(A).read(B).write(C).param(p).on(0)).get();
  auto c = C.to_vector();
  size_t bad = 0;
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      double want = 0, scale = 0;
      for (size_t q = 0; q < k; ++q) {
        want += a[i * k + q] * b[q * n + j];
        scale += std::abs(a[i * k + q] * b[q * n + j]);
      }
      const double got = test_bf16_to_f32(c[i * n + j].bits);
      bad += !(std::abs(got - want) <=
               std::ldexp(2.0, -8) * std::abs(want) + (k + 2) * std::ldexp(1.0, -18) * scale);
    }
  EXPECT_EQ(bad, 0u);
}

TEST_P(CudaRuntime, NativeKernelGetsDevicePointersToTheTaskBuffers) {
  const size_t rows = 40, cols = 75;
  auto x = rt().buffer<float>(rows, cols);
  std::vector<float> v(rows * cols);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000);
  fill(x, v);
  NativeSeen seen;
  Kernel k = rt().kernel("scale").native("cuda", fake() ? &host_scale : &hcr_test_scale, &seen);
  rt().submit(Task(k).read_write(x).param(2.5f).on(0)).get();
  auto out = x.to_vector();
  size_t wrong = 0;
  for (size_t i = 0; i < v.size(); ++i) wrong += out[i] != 2.5f * v[i];
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(seen.calls, 1);
}

// hcr_test_halo_step on the fake runtime, whose "device" memory is host memory.
int host_halo_step(void*, const hcr_exec_context_t* ctx, char* message, size_t size) {
  if (ctx->num_args != 2 || ctx->num_params != 8) {
    std::snprintf(message, size, "bad context");
    return 1;
  }
  uint64_t p[8];
  for (int i = 0; i < 8; ++i)
    std::memcpy(&p[i], static_cast<const char*>(ctx->params) + ctx->param_offsets[i], sizeof p[i]);
  const hcr_arg_t& a = ctx->args[0];
  const auto* in = static_cast<const int32_t*>(a.host);
  auto* out = static_cast<int32_t*>(ctx->args[1].host);
  const uint64_t ld = a.ld, rows = a.rows - p[0] - p[2], cols = a.cols - p[1] - p[3];
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t gr = p[4] + r, gc = p[5] + c, x = (p[0] + r) * ld + p[1] + c;
      out[x] = gr == 0 || gc == 0 || gr + 1 == p[6] || gc + 1 == p[7]
                   ? in[x]
                   : (2 * in[x] + in[x - 1] + in[x + 1] + in[x - ld] + in[x + ld]) % 10007;
    }
  return 0;
}

// A halo stencil through the runtime (native launcher: a CUDA kernel on a GPU, its host twin on the
// fake runtime), equal to the plain loop's grid. `pin` says where tile (i, j) of step s runs: on
// `pin(i, j, s)`, or where the policy places it (nullopt).
template <class Pin>
void halo_stencil(Runtime& rt, bool fake, Pin pin) {
  constexpr size_t kN = 45, kM = 38, kTile = 9;
  constexpr int kSteps = 6;
  std::vector<int32_t> want(kN * kM);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<int32_t>((i * 7919) % 1009);
  auto a = rt.buffer<int32_t>(kN, kM), b = rt.buffer<int32_t>(kN, kM);
  fill(a, want);
  fill(b, want);
  Kernel step =
      rt.kernel("halo_step").native("cuda", fake ? &host_halo_step : &hcr_test_halo_step, nullptr);
  Tiles<int32_t> ta = a.partition(kTile, kTile, Halo{1}), tb = b.partition(kTile, kTile, Halo{1});
  for (int s = 0; s < kSteps; ++s) {
    const Tiles<int32_t>& in = s % 2 == 0 ? ta : tb;
    const Tiles<int32_t>& out = s % 2 == 0 ? tb : ta;
    for (size_t i = 0; i < in.rows(); ++i)
      for (size_t j = 0; j < in.cols(); ++j) {
        const Ghosts g = in.ghosts(i, j);
        Task t(step);
        t.read(in(i, j)).write(out(i, j));
        if (std::optional<uint32_t> d = pin(i, j, s)) t.on(*d);
        for (size_t v : {g.top, g.left, g.bottom, g.right, i * kTile, j * kTile, kN, kM})
          t.param(uint64_t{v});
        rt.submit(t);
      }
  }
  a.unpartition().get();
  b.unpartition().get();
  std::vector<int32_t> next = want;
  for (int s = 0; s < kSteps; ++s) {
    for (size_t r = 1; r + 1 < kN; ++r)
      for (size_t c = 1; c + 1 < kM; ++c) {
        const int32_t* x = want.data() + r * kM + c;
        next[r * kM + c] =
            (2 * x[0] + x[-1] + x[1] + x[-static_cast<ptrdiff_t>(kM)] + x[kM]) % 10007;
      }
    std::swap(want, next);
  }
  EXPECT_EQ((kSteps % 2 == 1 ? b : a).to_vector(), want);
  EXPECT_EQ(rt.stats().failed, 0u);
}

// Halo tiles on a GPU: each tile held as its region, its ghost edges copied in (from host memory,
// then from the neighbours' copies on the same GPU) before each step reads it, only interiors
// brought home.
TEST_P(CudaRuntime, HaloTileStencilMatchesAPlainLoop) {
  halo_stencil(rt(), fake(), [](size_t, size_t, int) { return std::optional<uint32_t>(0); });
}

// The same over two devices (the fake runtime has two), under each policy that places on them:
// each tile's task on the other device than its neighbours' and its previous writer's, so that
// every edge is copied between the devices; then placed by the policy. Under dmda the tasks pinned
// to the second device were parked for good, their tile shapes unmeasured on a pair whose
// calibration was done (EarliestFinish::take_parked).
TEST_P(CudaRuntime, HaloTileStencilOnTwoDevicesMatchesAPlainLoop) {
  if (rt().devices().size() < 2) GTEST_SKIP() << "one GPU";
  for (const char* policy : {"eager", "dmda", "peft"}) {
    SCOPED_TRACE(policy);
    Config c = cuda_config({{"cache_dir", cache_.path().string()}});
    if (fake()) c.plugin_paths = {HCR_TEST_FAKE_CUDA_DIR};
    c.policy = policy;
    c.model_dir = "off";
    Runtime r(c);
    halo_stencil(r, fake(), [](size_t i, size_t j, int s) {
      return std::optional<uint32_t>(static_cast<uint32_t>((i + j + static_cast<size_t>(s)) % 2));
    });
    halo_stencil(r, fake(), [](size_t, size_t, int) { return std::optional<uint32_t>(); });
  }
}

const char* const kAxpyKernel = R"(
extern "C" __global__ void axpy(float* y, const float* x, float a, unsigned long long n) {
  unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
)";

TEST_P(CudaRuntime, SourceKernelTasksChainAcrossDevices) {
  if (std::string why = nvrtc_missing(GetParam().file()); !why.empty()) GTEST_SKIP() << why;
  // y += x, 60 times, the tasks pinned to the GPUs in turn: each one waits for the last and the
  // data manager moves y between devices (or keeps it where it is, with one GPU).
  const size_t n = 100003;
  auto x = rt().vector<float>(n), y = rt().vector<float>(n);
  std::vector<float> xs(n), ys(n, 1.0f);
  for (size_t i = 0; i < n; ++i) xs[i] = static_cast<float>(i % 97);
  fill(x, xs);
  fill(y, ys);
  Kernel axpy = rt().kernel("axpy").source("cuda", kAxpyKernel);
  const size_t ndev = rt().devices().size();
  const int kSteps = 60;
  for (int s = 0; s < kSteps; ++s)
    rt().submit(Task(axpy)
                    .read_write(y)
                    .read(x)
                    .param(1.0f)
                    .param(static_cast<unsigned long long>(n))
                    .on(static_cast<uint32_t>(s % ndev)));
  auto out = y.to_vector();
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += out[i] != 1.0f + kSteps * xs[i];
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(rt().stats().failed, 0u);
}

TEST_P(CudaRuntime, SourceTaskWithParametersAndAGrid) {
  if (std::string why = nvrtc_missing(GetParam().file()); !why.empty()) GTEST_SKIP() << why;
  // The kernel writes its first buffer; the grid is given rather than derived from it.
  const size_t n = 1000;
  auto out = rt().vector<int64_t>(n);
  Kernel iota = rt().kernel("iota").source("cuda", R"(
extern "C" __global__ void iota(unsigned long long* out, unsigned long long n, int mul) {
  unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * mul;
})");
  rt().submit(Task(iota)
                  .write(out)
                  .param(static_cast<unsigned long long>(n))
                  .param(int{3})
                  .grid(n)
                  .block(128)
                  .on(0))
      .get();
  auto v = out.to_vector();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(v[i], static_cast<int64_t>(3 * i)) << i;
}

}  // namespace
}  // namespace hcr
