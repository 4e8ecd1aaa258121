// The OpenCL backend through the runtime: device filters, option checking, CLBlast gemm, syrk and
// trsm (and potrf, getrf_nopiv never placed there), OpenCL C kernels (parameters, geometry, build
// logs, the compile cache), offline binaries named in TOML, 2-D staging of strided tiles, many
// tasks, and a tiled gemm shared with the CPU backend. Every test skips when no OpenCL device is
// found (CPU devices included: PoCL is enough).
#include "../../test_support.hpp"

#include <hcr/sched.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace hcr {
namespace {

using Options = std::vector<std::pair<std::string, std::string>>;

/// Only the OpenCL backend, every device type, the program cache in `cache_dir` ("" disables).
Config ocl_config(Options options = {}, const std::string& cache_dir = "") {
  Config c;
  c.use_environment = false;
  bool types = false, cache = false;
  for (auto& [k, v] : options) {
    types = types || k == "device_types";
    cache = cache || k == "cache_dir";
  }
  if (!types) options.push_back({"device_types", "cpu,gpu,accelerator"});
  if (!cache) options.push_back({"cache_dir", cache_dir});
  c.backends.push_back({"opencl", true, std::move(options), "opencl.toml:1"});
  return c;
}

// A copy: the report is a snapshot (hot-plug may add to it).
std::optional<PluginRecord> opencl_record(const Runtime& rt) {
  for (auto& p : rt.load_report().plugins)
    if (p.name == "opencl") return p;
  return std::nullopt;
}

std::vector<Device> opencl_devices(const Runtime& rt) {
  std::vector<Device> out;
  for (const Device& d : rt.devices())
    if (d.backend == "opencl") out.push_back(d);
  return out;
}

/// The first OpenCL device of every type, or nothing (the machine has none).
std::optional<Device> any_opencl_device() {
  static const std::optional<Device> found = [] {
    Runtime rt(ocl_config());
    auto d = opencl_devices(rt);
    return d.empty() ? std::nullopt : std::optional<Device>(d[0]);
  }();
  return found;
}

#define REQUIRE_OPENCL_DEVICE()                                                   \
  do {                                                                            \
    if (!any_opencl_device()) GTEST_SKIP() << "no OpenCL device on this machine"; \
  } while (0)

uint32_t first_opencl(const Runtime& rt) {
  auto d = opencl_devices(rt);
  EXPECT_FALSE(d.empty());
  return d.empty() ? 0 : d[0].id;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

template <class T>
std::vector<T> random_values(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

template <class T>
void fill(Buffer<T>& b, const std::vector<T>& values) {
  auto v = b.acquire(Access::write);
  for (size_t r = 0; r < v.rows(); ++r)
    for (size_t c = 0; c < v.cols(); ++c) v(r, c) = values[r * v.cols() + c];
}

/// C = alpha A B + beta C0, checked elementwise against a double-precision reference.
template <class T>
void check_gemm(const std::vector<T>& a, const std::vector<T>& b, const std::vector<T>& c0,
                const std::vector<T>& c, size_t m, size_t k, size_t n, double alpha, double beta) {
  const double eps = std::numeric_limits<T>::epsilon();
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      double want = beta * c0[i * n + j], scale = std::abs(beta * c0[i * n + j]);
      for (size_t q = 0; q < k; ++q) {
        want += alpha * static_cast<double>(a[i * k + q]) * b[q * n + j];
        scale += std::abs(alpha * static_cast<double>(a[i * k + q]) * b[q * n + j]);
      }
      ASSERT_LE(std::abs(c[i * n + j] - want), 2.0 * (k + 2) * eps * scale + 1e-30)
          << m << "x" << k << "x" << n << " at " << i << "," << j << ": " << c[i * n + j] << " vs "
          << want;
    }
}

// ---- devices and options --------------------------------------------------------------------

TEST(OpenClBackend, DefaultTypesLeaveCpuDevicesToTheCpuBackend) {
  Config c;
  c.use_environment = false;
  c.backends.push_back({"opencl", true, {{"cache_dir", ""}}, "opencl.toml:1"});
  test::LogCapture log(LogLevel::info);
  Runtime rt(c);
  const std::optional<PluginRecord> rec = opencl_record(rt);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->status, PluginRecord::Status::loaded) << rec->reason;
  for (const Device& d : opencl_devices(rt)) EXPECT_NE(d.kind, DeviceKind::cpu) << d.name;
  // Where the only OpenCL device is a CPU (PoCL), the plugin says why it offers nothing.
  if (any_opencl_device() && any_opencl_device()->kind == DeviceKind::cpu &&
      opencl_devices(rt).empty()) {
    EXPECT_TRUE(log.contains("add \"cpu\" to device_types")) << "no explanation logged";
  }
}

// Without any OpenCL platform the plugin still loads, with no device and a reason. The ICD loader
// reads its vendor directory once per process, so the check runs in a child process of this test
// binary whose loader looks into an empty directory.
TEST(OpenClBackend, NoPlatformMeansNoDevicesAndAReason) {
  if (std::getenv("HCR_TEST_NO_PLATFORM_CHILD") != nullptr) {
    test::LogCapture log(LogLevel::info);
    Runtime rt(ocl_config());
    const std::optional<PluginRecord> rec = opencl_record(rt);
    ASSERT_TRUE(rec.has_value());
    EXPECT_EQ(rec->status, PluginRecord::Status::loaded) << rec->reason;
    EXPECT_TRUE(opencl_devices(rt).empty());
    EXPECT_TRUE(log.contains("found no platform"));
    return;
  }
  test::TempDir empty;
  const std::string cmd = "OCL_ICD_VENDORS='" + empty.path().string() +
                          "' HCR_TEST_NO_PLATFORM_CHILD=1 /proc/" + std::to_string(::getpid()) +
                          "/exe --gtest_filter=OpenClBackend.NoPlatformMeansNoDevicesAndAReason "
                          "> '" +
                          (empty.path() / "child.log").string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream logf(empty.path() / "child.log");
  std::string log((std::istreambuf_iterator<char>(logf)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << log;
  EXPECT_NE(log.find("[  PASSED  ] 1 test"), std::string::npos) << log;
}

TEST(OpenClBackend, DeviceTypesFilter) {
  REQUIRE_OPENCL_DEVICE();
  Runtime all(ocl_config({{"device_types", "all"}}));
  Runtime cpus(ocl_config({{"device_types", "cpu"}}));
  Runtime accel(ocl_config({{"device_types", "gpu, accelerator"}}));
  for (const Device& d : opencl_devices(cpus)) EXPECT_EQ(d.kind, DeviceKind::cpu) << d.name;
  for (const Device& d : opencl_devices(accel)) EXPECT_NE(d.kind, DeviceKind::cpu) << d.name;
  EXPECT_EQ(opencl_devices(all).size(), opencl_devices(cpus).size() + opencl_devices(accel).size());
}

TEST(OpenClBackend, NameFilters) {
  REQUIRE_OPENCL_DEVICE();
  const std::string name = any_opencl_device()->name;
  // A piece of the name, in another case: substrings match case-insensitively.
  std::string piece = name.substr(0, std::min<size_t>(name.size(), 5));
  for (char& ch : piece) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  {
    Runtime rt(ocl_config({{"device", piece}}));
    auto d = opencl_devices(rt);
    ASSERT_FALSE(d.empty());
    for (auto& x : d) EXPECT_NE(lower(x.name).find(lower(piece)), std::string::npos);
  }
  {
    test::LogCapture log(LogLevel::info);
    Runtime rt(ocl_config({{"device", "no-such-device-xyz"}}));
    EXPECT_TRUE(opencl_devices(rt).empty());
    EXPECT_TRUE(log.contains("does not match device = 'no-such-device-xyz'"));
  }
  {
    test::LogCapture log(LogLevel::info);
    Runtime rt(ocl_config({{"platform", "no-such-platform-xyz"}}));
    EXPECT_TRUE(opencl_devices(rt).empty());
    EXPECT_TRUE(log.contains("does not match platform = 'no-such-platform-xyz'"));
  }
}

TEST(OpenClBackend, BadOptionsAreRejectedNamingTheKey) {
  struct Case {
    Options options;
    std::string why;
  };
  const std::vector<Case> cases = {
      {{{"device_types", "cpu,tpu"}}, "'device_types' = 'cpu,tpu': 'tpu' is not one of"},
      {{{"device_types", ""}}, "'device_types'"},
      {{{"queues", "0"}}, "'queues' = '0'"},
      {{{"queues", "two"}}, "'queues' = 'two' is not an integer"},
      {{{"cache_dir", "relative/dir"}}, "'cache_dir' = 'relative/dir': must be an absolute path"},
      {{{"binary.0.kernel", "vadd"}}, "'binary.0.path' is missing"},
      {{{"binary.0.kernel", "vadd"}, {"binary.0.path", "vadd.bin"}},
       "'binary.0.path' = 'vadd.bin': must be an absolute path"},
      {{{"binary.0.kernel", "vadd"}, {"binary.0.path", "/x.bin"}, {"binary.0.colour", "red"}},
       "unknown option 'binary.0.colour'"},
      {{{"colour", "red"}}, "unknown option 'colour'"},
  };
  // A mistake in the table is the configuration's: the runtime does not start, and says why.
  for (const Case& k : cases) {
    Error e = test::expect_error([&] { Runtime rt(ocl_config(k.options)); });
    EXPECT_EQ(e.code(), ErrorCode::config) << k.why;
    EXPECT_NE(std::string(e.what()).find(k.why), std::string::npos)
        << "wanted '" << k.why << "' in '" << e.what() << "'";
  }
}

TEST(OpenClBackend, SampleConfigurationLoads) {
  Config c = Config::load(std::filesystem::path(HCR_SOURCE_DIR) / "samples" / "opencl.toml");
  c.use_environment = false;
  c.model_dir = "off";
  for (auto& b : c.backends)
    if (b.name == "cpu") b.options = {{"threads", "1"}};
  Runtime rt(c);
  const std::optional<PluginRecord> rec = opencl_record(rt);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->status, PluginRecord::Status::loaded) << rec->reason;
  if (any_opencl_device()) {
    EXPECT_FALSE(opencl_devices(rt).empty());
  }
}

TEST(OpenClBackend, DeviceInfo) {
  REQUIRE_OPENCL_DEVICE();
  Runtime rt(ocl_config({{"queues", "3"}}));
  for (const Device& d : opencl_devices(rt)) {
    EXPECT_EQ(d.concurrency, 3u);
    EXPECT_GT(d.memory_bytes, 0u);
    EXPECT_GE(d.compute_units, 1u);
    EXPECT_NE(d.memory_node, 0u) << "OpenCL devices have their own memory";
    EXPECT_EQ(d.arch.rfind("opencl:", 0), 0u) << d.arch;
    EXPECT_NE(d.arch.find(d.name), std::string::npos) << d.arch;
    if (d.kind == DeviceKind::cpu) {
      EXPECT_GT(d.peak_gflops, 0) << "derivable for CPU devices";
    }
  }
}

// ---- gemm -----------------------------------------------------------------------------------

template <class T>
void gemm_odd_sizes() {
  REQUIRE_OPENCL_DEVICE();
  Runtime rt(ocl_config());
  const uint32_t dev = first_opencl(rt);
  Kernel gemm = rt.kernel(blas::gemm_kernel_name<T>());
  {  // Is it offered (f64 needs cl_khr_fp64)?
    auto a = rt.buffer<T>(1, 1), b = rt.buffer<T>(1, 1), c = rt.buffer<T>(1, 1);
    Event e = rt.submit(Task(gemm).read(a).read(b).read_write(c).on(dev));
    e.wait();
    if (e.error()) {
      Error err = test::expect_error([&] { e.get(); });
      ASSERT_EQ(err.code(), ErrorCode::no_device) << err.what();
      GTEST_SKIP() << err.what();
    }
  }
  unsigned seed = 1;
  for (auto [m, k, n] : {std::tuple<size_t, size_t, size_t>{1, 1, 1},
                         {3, 5, 7},
                         {33, 17, 65},
                         {127, 64, 129},
                         {200, 1, 3}}) {
    for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{1.5, -0.5}}) {
      auto a = random_values<T>(m * k, ++seed), b = random_values<T>(k * n, ++seed),
           c0 = random_values<T>(m * n, ++seed);
      auto A = rt.buffer<T>(m, k), B = rt.buffer<T>(k, n), C = rt.buffer<T>(m, n);
      fill(A, a);
      fill(B, b);
      fill(C, c0);
      hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, alpha, beta};
      rt.submit(Task(gemm).read(A).read(B).read_write(C).param(p).on(dev)).get();
      check_gemm(a, b, c0, C.to_vector(), m, k, n, alpha, beta);
    }
  }
}

TEST(OpenClBackend, GemmF32OddSizes) { gemm_odd_sizes<float>(); }
TEST(OpenClBackend, GemmF64OddSizes) { gemm_odd_sizes<double>(); }

// A C the task only writes arrives as fresh device memory, never copied in: beta = 0 must not
// read it (0 * NaN is NaN).
TEST(OpenClBackend, GemmWithBetaZeroIgnoresOldC) {
  REQUIRE_OPENCL_DEVICE();
  Runtime rt(ocl_config());
  const uint32_t dev = first_opencl(rt);
  const size_t m = 45, k = 31, n = 27;
  auto a = random_values<float>(m * k, 7), b = random_values<float>(k * n, 8);
  std::vector<float> nans(m * n, std::numeric_limits<float>::quiet_NaN());
  auto A = rt.buffer<float>(m, k), B = rt.buffer<float>(k, n), C = rt.buffer<float>(m, n);
  fill(A, a);
  fill(B, b);
  Kernel gemm = rt.kernel("gemm_f32");
  hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
  for (int round = 0; round < 2; ++round) {
    fill(C, nans);  // the host copy holds NaNs; a read_write C brings them to the device
    rt.submit(Task(gemm)
                  .read(A)
                  .read(B)
                  .arg(C, round == 0 ? Access::write : Access::read_write)
                  .param(p)
                  .on(dev))
        .get();
    check_gemm(a, b, std::vector<float>(m * n, 0.0f), C.to_vector(), m, k, n, 1.0, 0.0);
  }
}

TEST(OpenClBackend, GemmShapeMismatchNamesTheShapes) {
  REQUIRE_OPENCL_DEVICE();
  Runtime rt(ocl_config());
  const uint32_t dev = first_opencl(rt);
  auto A = rt.buffer<float>(3, 4), B = rt.buffer<float>(5, 6), C = rt.buffer<float>(3, 6);
  Error err = test::expect_error(
      [&] { rt.submit(Task(rt.kernel("gemm_f32")).read(A).read(B).read_write(C).on(dev)).get(); });
  EXPECT_NE(std::string(err.what()).find("A is 3x4, B is 5x6, C is 3x6"), std::string::npos)
      << err.what();
  // Fresh buffers: C above belongs to a failed task, and its readers would fail with it.
  auto D = rt.buffer<double>(3, 4);
  auto B2 = rt.buffer<float>(4, 6), C2 = rt.buffer<float>(3, 6);
  err = test::expect_error([&] {
    rt.submit(Task(rt.kernel("gemm_f32")).read(D).read(B2).read_write(C2).on(dev)).get();
  });
  EXPECT_NE(std::string(err.what()).find("is not an f32 matrix"), std::string::npos) << err.what();
}

// The rest of the BLAS built-ins through the runtime: a trsm and a syrk task with their parameter
// blocks run on the OpenCL device; potrf and getrf_nopiv, which CLBlast lacks, are never placed
// there (with no other backend, no device can run them).
TEST(OpenClBackend, TrsmAndSyrkRunAsTasksFactorizationsFindNoDevice) {
  REQUIRE_OPENCL_DEVICE();
  Runtime rt(ocl_config());
  const size_t n = 21, k = 13;
  auto a = random_values<float>(n * k, 31);
  auto L = rt.buffer<float>(n, n), B = rt.buffer<float>(n, k), C = rt.buffer<float>(n, n);
  std::vector<float> l(n * n, 0.0f), ones(n * k, 1.0f);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j <= i; ++j) l[i * n + j] = i == j ? 4.0f : 0.25f * a[i * k + j % k];
  fill(L, l);
  fill(B, a);
  // C = A A^T on the lower triangle (read_write: the upper one is kept), then B = L^-1 B.
  const hcr_syrk_params_t update{HCR_SYRK_PARAMS_STRUCT_SIZE, 1.0, 0.0, HCR_LOWER, HCR_NO_TRANS};
  rt.submit(Task(rt.kernel("syrk_f32")).read(B).read_write(C).param(update)).get();
  const hcr_trsm_params_t solve{
      HCR_TRSM_PARAMS_STRUCT_SIZE, 1.0, HCR_LEFT, HCR_LOWER, HCR_NO_TRANS, HCR_NON_UNIT};
  fill(B, ones);
  rt.submit(Task(rt.kernel("trsm_f32")).read(L).read_write(B).param(solve)).get();
  auto c = C.to_vector(), x = B.to_vector();
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j <= i; ++j) {
      double want = 0;
      for (size_t q = 0; q < k; ++q) want += static_cast<double>(a[i * k + q]) * a[j * k + q];
      EXPECT_NEAR(c[i * n + j], want, 1e-5 * (k + 2)) << i << "," << j;
    }
  for (size_t i = 0; i < n; ++i)  // L X = 1, row i of the solve
    for (size_t j = 0; j < k; ++j) {
      double lhs = 0;
      for (size_t q = 0; q <= i; ++q) lhs += static_cast<double>(l[i * n + q]) * x[q * k + j];
      EXPECT_NEAR(lhs, 1.0, 1e-5 * (n + 2)) << i << "," << j;
    }
  const hcr_potrf_params_t lower{HCR_POTRF_PARAMS_STRUCT_SIZE, HCR_LOWER};
  Error err = test::expect_error(
      [&] { rt.submit(Task(rt.kernel("potrf_f32")).read_write(L).param(lower)).get(); });
  EXPECT_EQ(err.code(), ErrorCode::no_device) << err.what();
  auto D = rt.buffer<float>(n, n);
  fill(D, l);
  err = test::expect_error(
      [&] { rt.submit(Task(rt.kernel("getrf_nopiv_f32")).read_write(D)).get(); });
  EXPECT_EQ(err.code(), ErrorCode::no_device) << err.what();
}

// ---- user kernels ---------------------------------------------------------------------------

const char* kKernels = R"CL(
// y[i] = a * x[i] + b, with parameters of mixed sizes (char, double, int) to test their spans.
__kernel void axpb(__global float* y, __global const float* x, char sign, float a, int b) {
  size_t i = get_global_id(0);
  y[i] = sign * a * x[i] + b;
}
// A 2-D grid over a rows x cols matrix: m[r][c] = r * 1000 + c + base.
__kernel void coords(__global int* m, int cols, int base) {
  size_t c = get_global_id(0), r = get_global_id(1);
  m[r * cols + c] = (int)(r * 1000 + c) + base;
}
__kernel void add_one(__global float* x) { x[get_global_id(0)] += 1.0f; }
// x[i] *= f: a float parameter (a double given for it must be refused, not cut to its low half).
__kernel void scale(__global float* x, float f) { x[get_global_id(0)] *= f; }
)CL";

TEST(OpenClBackend, SourceKernelWithScalarsAndGeometry) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir cache;
  Runtime rt(ocl_config({}, cache.path().string()));
  const uint32_t dev = first_opencl(rt);

  Kernel axpb = rt.kernel("axpb").source("opencl", kKernels);
  const size_t n = 1000;
  auto x = random_values<float>(n, 3);
  auto X = rt.vector<float>(n), Y = rt.vector<float>(n);
  fill(X, x);
  // Default geometry: one work item per element of the first written buffer (Y).
  rt.submit(Task(axpb).write(Y).read(X).param(static_cast<char>(-1)).param(2.5f).param(7).on(dev))
      .get();
  auto y = Y.to_vector();
  for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], -2.5f * x[i] + 7) << i;

  // 2-D grid with work-groups, from an entry point other than the kernel's name.
  Kernel grid = rt.kernel("grid2d").source("opencl", kKernels, "", "coords");
  const int rows = 24, cols = 40;
  auto M = rt.buffer<int32_t>(rows, cols);
  rt.submit(Task(grid).write(M).param(cols).param(5).grid(cols, rows).block(8, 4).on(dev)).get();
  auto mv = M.to_vector();
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ASSERT_EQ(mv[r * cols + c], r * 1000 + c + 5) << r << "," << c;

  // A grid that is not made of whole work-groups is refused with both sizes named.
  Error err = test::expect_error([&] {
    rt.submit(Task(grid).write(M).param(cols).param(5).grid(cols, rows).block(7).on(dev)).get();
  });
  EXPECT_NE(std::string(err.what()).find("grid 40 is not a multiple of block 7"), std::string::npos)
      << err.what();
  // Too few arguments: the message counts them.
  err = test::expect_error([&] { rt.submit(Task(axpb).write(Y).read(X).on(dev)).get(); });
  EXPECT_NE(std::string(err.what()).find("takes 5 arguments"), std::string::npos) << err.what();
}

// Kernels whose scalar arguments a task can get wrong: Task::param passes a value's bytes as they
// are, so the plugin checks each against its argument (kernel_args.hpp).
const char* kScalarKernels = R"CL(
__kernel void scale(__global float* x, float f) { x[get_global_id(0)] *= f; }
__kernel void iscale(__global int* x, int k) { x[get_global_id(0)] *= k; }
__kernel void lscale(__global long* x, long k) { x[get_global_id(0)] *= k; }
__kernel void affine(__global float* x, float a, float b, int n) {
  size_t i = get_global_id(0);
  if (i < n) x[i] = a * x[i] + b;
}
)CL";

/// The error of the task `submit` submits on a fresh buffer of 8 floats (a failed task's buffer
/// fails its later readers, so each case gets its own): its code must be invalid_argument, and its
/// message hold every one of `texts`.
template <class F>
void expect_refused(Runtime& rt, F&& submit, std::initializer_list<std::string> texts) {
  auto x = rt.vector<float>(8);
  Error err = test::expect_error([&] { submit(x).get(); });
  EXPECT_EQ(err.code(), ErrorCode::invalid_argument) << err.what();
  for (const std::string& t : texts)
    EXPECT_NE(std::string(err.what()).find(t), std::string::npos)
        << "wanted '" << t << "' in '" << err.what() << "'";
}

// A double given for a float argument used to run with the double's low half (0 for 2.0), an
// int64 likewise, and a buffer given for a long argument with the buffer's address as the value.
// Source kernels keep their argument info (the plugin builds them with -cl-kernel-arg-info), so
// the errors name the argument and its type.
TEST(OpenClBackend, ScalarParametersMustBeOfTheArgumentsSize) {
  REQUIRE_OPENCL_DEVICE();
  Runtime rt(ocl_config());
  const uint32_t dev = first_opencl(rt);
  Kernel scale = rt.kernel("scale").source("opencl", kScalarKernels);
  auto x = rt.vector<float>(8);
  fill(x, std::vector<float>(8, 1.5f));
  rt.submit(Task(scale).read_write(x).param(2.0f).on(dev)).get();
  for (float f : x.to_vector()) ASSERT_EQ(f, 3.0f);

  expect_refused(
      rt, [&](Buffer<float>& b) { return rt.submit(Task(scale).read_write(b).param(2.0).on(dev)); },
      {"kernel 'scale': argument 1 'f' (float, 4 bytes) is given parameter 0 of 8 bytes",
       "0x4000000000000000: 2 as a double", "give a float (2.0f, not 2.0)"});
  expect_refused(rt,
                 [&](Buffer<float>& b) {
                   return rt.submit(Task(scale).read_write(b).param(int64_t{2}).on(dev));
                 },
                 {"argument 1 'f' (float, 4 bytes)", "2 as an int64"});
  Kernel iscale = rt.kernel("iscale").source("opencl", kScalarKernels);
  expect_refused(
      rt,
      [&](Buffer<float>& b) { return rt.submit(Task(iscale).read_write(b).param(3.0).on(dev)); },
      {"kernel 'iscale': argument 1 'k' (int, 4 bytes)", "3 as a double", "int32_t"});

  // A parameter followed by others: its span runs to the next one and may end in padding, which
  // is zero and no longer than the next parameter's alignment. A double's high half is not.
  Kernel affine = rt.kernel("affine").source("opencl", kScalarKernels);
  const int n = 8;
  rt.submit(Task(affine).read_write(x).param(2.0f).param(1.0f).param(n).on(dev)).get();
  for (float f : x.to_vector()) ASSERT_EQ(f, 7.0f);
  expect_refused(
      rt,
      [&](Buffer<float>& b) {
        return rt.submit(Task(affine).read_write(b).param(2.0).param(1.0f).param(n).on(dev));
      },
      {"argument 1 'a' (float, 4 bytes) is given parameter 0, which runs up to parameter 1 over 8 "
       "bytes (0x4000000000000000: 2 as a double"});
  // 0.0 has no high half to give it away; the int after it needs no 4 bytes of padding.
  expect_refused(
      rt,
      [&](Buffer<float>& b) {
        return rt.submit(Task(affine).read_write(b).param(0.0).param(1.0f).param(n).on(dev));
      },
      {"argument 1 'a' (float, 4 bytes) is given parameter 0"});
  // The parameter blamed is the wrong one (the second), not the float before it whose span the
  // double's alignment stretched.
  expect_refused(
      rt,
      [&](Buffer<float>& b) {
        return rt.submit(Task(affine).read_write(b).param(2.0f).param(1.0).param(n).on(dev));
      },
      {"argument 2 'b' (float, 4 bytes) is given parameter 1"});

  // Buffers and values in each other's places.
  Kernel lscale = rt.kernel("lscale").source("opencl", kScalarKernels);
  auto other = rt.vector<float>(8);
  expect_refused(
      rt,
      [&](Buffer<float>& b) { return rt.submit(Task(lscale).read_write(b).read(other).on(dev)); },
      {"argument 1 'k' (long, 8 bytes) is a value, not a buffer, but the task gives "
       "buffer 1 there"});
  expect_refused(
      rt, [&](Buffer<float>&) { return rt.submit(Task(scale).param(2.0f).param(2.0f).on(dev)); },
      {"argument 0 'x' (float*) is a buffer, not a value, but the task gives "
       "parameter 0 there"});
}

// A program from hcr's cache is rebuilt with the options it was compiled with, so it keeps the
// argument info: a later run's errors still name the argument.
TEST(OpenClBackend, ScalarParameterErrorsNameTheArgumentAfterACacheHit) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir cache;
  for (const char* run : {"program cache miss", "program cache hit"}) {
    SCOPED_TRACE(run);
    test::LogCapture log(LogLevel::debug);
    Runtime rt(ocl_config({}, cache.path().string()));
    const uint32_t dev = first_opencl(rt);
    Kernel scale = rt.kernel("scale").source("opencl", kScalarKernels);
    expect_refused(
        rt,
        [&](Buffer<float>& b) { return rt.submit(Task(scale).read_write(b).param(2.0).on(dev)); },
        {"argument 1 'f' (float, 4 bytes) is given parameter 0 of 8 bytes"});
    EXPECT_TRUE(log.contains(run));
  }
}

TEST(OpenClBackend, BuildFailureShowsTheBuildLog) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir cache;
  Runtime rt(ocl_config({}, cache.path().string()));
  const uint32_t dev = first_opencl(rt);
  Kernel broken = rt.kernel("broken").source(
      "opencl", "__kernel void broken(__global float* x) { x[0] = undeclared_thing_42; }");
  auto v = rt.vector<float>(4);
  Error err = test::expect_error([&] { rt.submit(Task(broken).write(v).on(dev)).get(); });
  EXPECT_EQ(err.code(), ErrorCode::no_device);
  const std::string what = err.what();
  EXPECT_NE(what.find("build log"), std::string::npos) << what;
  EXPECT_NE(what.find("undeclared_thing_42"), std::string::npos) << what;
  // A program without the entry point says which kernels it has.
  Kernel missing = rt.kernel("missing").source("opencl", kKernels);
  err = test::expect_error([&] { rt.submit(Task(missing).write(v).on(dev)).get(); });
  EXPECT_NE(std::string(err.what()).find("no kernel function 'missing'"), std::string::npos)
      << err.what();
  EXPECT_NE(std::string(err.what()).find("axpb"), std::string::npos) << err.what();
}

// Runs add_one over a 64-vector with a fresh runtime on `cache_dir`; returns the log.
std::vector<std::string> run_add_one(const std::string& cache_dir) {
  test::LogCapture log(LogLevel::debug);
  Runtime rt(ocl_config({}, cache_dir));
  const uint32_t dev = first_opencl(rt);
  Kernel k = rt.kernel("add_one").source("opencl", kKernels);
  auto v = rt.vector<float>(64);
  rt.submit(Task(k).read_write(v).on(dev)).get();
  auto out = v.to_vector();
  for (float f : out) EXPECT_EQ(f, 1.0f);
  return log.lines();
}

bool any_contains(const std::vector<std::string>& lines, const std::string& needle) {
  for (auto& l : lines)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

TEST(OpenClBackend, CompileCacheIsReusedAndRepaired) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir cache;
  auto first = run_add_one(cache.path().string());
  EXPECT_TRUE(any_contains(first, "program cache miss")) << "first run should build";
  std::vector<std::filesystem::path> files;
  for (auto& e : std::filesystem::directory_iterator(cache.path())) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u) << "one program, one file (no temporary left behind)";
  EXPECT_EQ(files[0].extension(), ".clbin");

  auto second = run_add_one(cache.path().string());
  EXPECT_TRUE(any_contains(second, "program cache hit")) << "second run should load the binary";
  EXPECT_FALSE(any_contains(second, "program cache miss"));

  {  // Damage the entry: it is rebuilt from source with a warning, and rewritten.
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-16, std::ios::end);
    f.write("garbage-garbage!", 16);
  }
  auto third = run_add_one(cache.path().string());
  EXPECT_TRUE(any_contains(third, "corrupt program cache entry")) << "damage must be noticed";
  EXPECT_TRUE(any_contains(third, "program cache miss"));
  auto fourth = run_add_one(cache.path().string());
  EXPECT_TRUE(any_contains(fourth, "program cache hit")) << "the entry was rewritten";

  // Different build options are a different program.
  test::LogCapture log(LogLevel::debug);
  Runtime rt(ocl_config({}, cache.path().string()));
  Kernel k = rt.kernel("add_one").source("opencl", kKernels, "-DUNUSED=1");
  auto v = rt.vector<float>(8);
  rt.submit(Task(k).read_write(v).on(first_opencl(rt))).get();
  EXPECT_TRUE(log.contains("program cache miss"));
}

TEST(OpenClBackend, WorldWritableCacheDirIsRefused) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir dir;
  std::filesystem::permissions(dir.path(), std::filesystem::perms::all);
  test::LogCapture log(LogLevel::warn);
  Runtime rt(ocl_config({}, dir.path().string()));
  EXPECT_TRUE(log.contains("' not used (program cache disabled): " + dir.path().string() +
                           ": writable by its group or others (mode 0777)"))
      << "the warning names the directory and why";
  Kernel k = rt.kernel("add_one").source("opencl", kKernels);
  auto v = rt.vector<float>(8);
  rt.submit(Task(k).read_write(v).on(first_opencl(rt))).get();  // still runs, uncached
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// The cache directory must be the user's (or root's) and writable by nobody else: a group member
// or another user could otherwise plant binaries that we would run.
TEST(OpenClBackend, CacheDirOfAnotherUserOrWritableByItsGroupIsRefused) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir tmp;
  const auto theirs = tmp.path() / "theirs", group = tmp.path() / "group";
  std::filesystem::create_directory(theirs);
  std::filesystem::create_directory(group);
  if (::chown(theirs.c_str(), 12345, 12345) != 0) GTEST_SKIP() << "cannot chown (not root)";
  ASSERT_EQ(::chmod(group.c_str(), 0770), 0);
  for (auto [dir, why] : {std::pair{theirs, std::string("owned by uid 12345")},
                          std::pair{group, std::string("writable by its group or others")}}) {
    test::LogCapture log(LogLevel::warn);
    Runtime rt(ocl_config({}, dir.string()));
    EXPECT_TRUE(log.contains("cache_dir '" + dir.string() + "' not used (program cache disabled)"))
        << dir;
    EXPECT_TRUE(log.contains(why)) << dir;
    Kernel k = rt.kernel("add_one").source("opencl", kKernels);
    auto v = rt.vector<float>(8);
    rt.submit(Task(k).read_write(v).on(first_opencl(rt))).get();  // still runs, uncached
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << dir;
  }
}

// An entry another user could have written is never loaded: one owned by another user, a link
// (here to a valid entry elsewhere: it would be a hit), a FIFO (which would block a reader). Each
// is rebuilt from source with a warning and replaced by our own file.
TEST(OpenClBackend, PlantedCacheEntriesAreNotUsed) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir cache, elsewhere;
  run_add_one(cache.path().string());
  std::filesystem::path entry;
  for (auto& e : std::filesystem::directory_iterator(cache.path()))
    if (e.path().extension() == ".clbin") entry = e.path();
  ASSERT_FALSE(entry.empty());
  const auto copy = elsewhere.path() / "copy.clbin";
  std::filesystem::copy_file(entry, copy);
  const std::string good = [&] {
    std::ifstream in(copy, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();

  auto replant = [&](const std::string& how) {
    std::filesystem::remove(entry);
    if (how == "theirs") {
      std::filesystem::copy_file(copy, entry);
      return ::chown(entry.c_str(), 12345, 12345) == 0;
    }
    if (how == "link") {
      std::filesystem::create_symlink(copy, entry);
      return true;
    }
    return ::mkfifo(entry.c_str(), 0600) == 0;
  };
  for (const std::string how : {"theirs", "link", "fifo"}) {
    if (!replant(how)) {
      ADD_FAILURE() << how << ": cannot plant (not root?)";
      continue;
    }
    auto lines = run_add_one(cache.path().string());
    EXPECT_TRUE(any_contains(lines, "program cache entry not used (" + entry.string())) << how;
    EXPECT_FALSE(any_contains(lines, "program cache hit")) << how << ": the planted entry ran";
    EXPECT_TRUE(any_contains(lines, "program cache miss")) << how;
    struct stat st {};
    ASSERT_EQ(::lstat(entry.c_str(), &st), 0) << how;
    EXPECT_TRUE(S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) << how << ": not replaced";
    std::ifstream in(copy, std::ios::binary);
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
              good)
        << how << ": the link's target was written";
  }
}

// A default runtime (no configuration: every plugin installed, the OpenCL plugin with its default
// device types) creates no directory or file of its own in the user's cache until something is
// actually cached: not the program cache, nor (with dmda) a model directory when nothing was
// learned. Run in a child of this binary with HOME and XDG_CACHE_HOME pointing at empty
// directories, so that the drivers initialise there too. What the OpenCL drivers do when asked for
// their devices is theirs: PoCL creates its kernel cache (with a stray tempfile_*) on any
// clGetDeviceIDs, whatever the device type asked for.
TEST(OpenClBackend, ADefaultRuntimeLeavesNothingOfItsOwnInTheUsersCaches) {
  if (std::getenv("HCR_TEST_DEFAULT_RUNTIME_CHILD") != nullptr) {
    { Runtime plain; }
    setenv("HCR_SCHED", "dmda", 1);
    { Runtime learning; }
    return;
  }
  test::TempDir tmp;
  const auto home = tmp.path() / "home", cache = tmp.path() / "cache";
  std::filesystem::create_directory(home);
  std::filesystem::create_directory(cache);
  const std::string cmd = "HOME='" + home.string() + "' XDG_CACHE_HOME='" + cache.string() +
                          "' HCR_TEST_DEFAULT_RUNTIME_CHILD=1 /proc/" + std::to_string(::getpid()) +
                          "/exe --gtest_filter=OpenClBackend."
                          "ADefaultRuntimeLeavesNothingOfItsOwnInTheUsersCaches > '" +
                          (tmp.path() / "child.log").string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream logf(tmp.path() / "child.log");
  std::string log((std::istreambuf_iterator<char>(logf)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << log;
  ASSERT_NE(log.find("[  PASSED  ] 1 test"), std::string::npos) << log;
  std::string found;
  for (auto& e : std::filesystem::recursive_directory_iterator(tmp.path()))
    found += "\n  " + e.path().string();
  EXPECT_TRUE(std::filesystem::is_empty(home)) << "created:" << found;
  EXPECT_FALSE(std::filesystem::exists(cache / "hcr")) << "created:" << found;
}

// A platform the configuration rules out (`platform`) is never initialised at all: not even its
// drivers' own caches appear.
TEST(OpenClBackend, APlatformRuledOutIsNeverInitialised) {
  if (std::getenv("HCR_TEST_RULED_OUT_CHILD") != nullptr) {
    Runtime rt(ocl_config({{"platform", "no-such-platform"}}, ""));
    EXPECT_TRUE(opencl_devices(rt).empty());
    return;
  }
  test::TempDir tmp;
  const std::string cmd = "HOME='" + tmp.path().string() + "' XDG_CACHE_HOME='" +
                          tmp.path().string() + "' HCR_TEST_RULED_OUT_CHILD=1 /proc/" +
                          std::to_string(::getpid()) +
                          "/exe --gtest_filter=OpenClBackend.APlatformRuledOutIsNeverInitialised"
                          " > /dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path()));
}

// ---- binaries -------------------------------------------------------------------------------

/// Builds kKernels offline with hcr-opencl-compile for the device `device_name`; the file.
std::filesystem::path compile_offline(const test::TempDir& dir, const std::string& device_name) {
  const auto src = dir.path() / "kernels.cl";
  const auto bin = dir.path() / "kernels.bin";
  std::ofstream(src) << kKernels;
  const std::string cmd = std::string("'") + HCR_OPENCL_COMPILE + "' --device '" + device_name +
                          "' -o '" + bin.string() + "' '" + src.string() + "' > '" +
                          (dir.path() / "compile.log").string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream logf(dir.path() / "compile.log");
  std::string log((std::istreambuf_iterator<char>(logf)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd << "\n" << log;
  EXPECT_TRUE(std::filesystem::exists(bin)) << log;
  return bin;
}

TEST(OpenClBackend, OfflineBinaryFromTomlRunsWithoutAnyImplementation) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir dir;
  const std::string name = any_opencl_device()->name;
  const auto bin = compile_offline(dir, name);
  // A fresh runtime that knows only the binary's path: no source anywhere.
  Runtime rt(ocl_config({{"binary.0.kernel", "add_one"},
                         {"binary.0.device", name.substr(0, std::min<size_t>(7, name.size()))},
                         {"binary.0.path", bin.string()},
                         {"binary.1.kernel", "scale2d"},
                         {"binary.1.entry", "coords"},
                         {"binary.1.path", bin.string()},
                         {"binary.2.kernel", "elsewhere"},
                         {"binary.2.device", "no-such-device-xyz"},
                         {"binary.2.path", bin.string()}}));
  const uint32_t dev = first_opencl(rt);
  auto v = rt.vector<float>(100);
  fill(v, std::vector<float>(100, 41.0f));
  rt.submit(Task(rt.kernel("add_one")).read_write(v).on(dev)).get();
  for (float f : v.to_vector()) ASSERT_EQ(f, 42.0f);

  auto M = rt.buffer<int32_t>(3, 8);
  rt.submit(Task(rt.kernel("scale2d")).write(M).param(8).param(0).grid(8, 3).on(dev)).get();
  auto mv = M.to_vector();
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 8; ++c) ASSERT_EQ(mv[r * 8 + c], r * 1000 + c);

  // A binary for another device does not make the kernel available here.
  Error err = test::expect_error([&] { rt.submit(Task(rt.kernel("elsewhere")).on(dev)).get(); });
  EXPECT_EQ(err.code(), ErrorCode::no_device);
}

// A prebuilt binary keeps no argument info (hcr-opencl-compile builds without
// -cl-kernel-arg-info): the sizes the driver accepts, read when the kernel is made, still catch a
// double given for a float, as a binary of the application or of the configuration (the FPGA
// flow); parameters of mixed sizes with padding between them still pass.
TEST(OpenClBackend, ScalarParametersOfBinariesWithoutArgumentInfoAreChecked) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir dir;
  const auto bin = compile_offline(dir, any_opencl_device()->name);
  Runtime rt(ocl_config({{"binary.0.kernel", "scale_fpga"},
                         {"binary.0.entry", "scale"},
                         {"binary.0.path", bin.string()}}));
  const uint32_t dev = first_opencl(rt);
  Kernel app = rt.kernel("scale_app").binary("opencl", bin.string(), "", "scale");
  for (Kernel k : {rt.kernel("scale_fpga"), app}) {
    SCOPED_TRACE(k.name());
    auto x = rt.vector<float>(8);
    fill(x, std::vector<float>(8, 1.5f));
    rt.submit(Task(k).read_write(x).param(2.0f).on(dev)).get();
    for (float f : x.to_vector()) ASSERT_EQ(f, 3.0f);
    expect_refused(
        rt, [&](Buffer<float>& b) { return rt.submit(Task(k).read_write(b).param(2.0).on(dev)); },
        {"kernel '" + k.name() +
             "': argument 1 (4 bytes) is given parameter 0 of 8 "
             "bytes (0x4000000000000000: 2 as a double",
         "give a value of exactly 4 bytes"});
  }
  Kernel axpb = rt.kernel("axpb").binary("opencl", bin.string());
  const size_t n = 64;
  auto X = rt.vector<float>(n), Y = rt.vector<float>(n);
  fill(X, std::vector<float>(n, 2.0f));
  rt.submit(Task(axpb).write(Y).read(X).param(static_cast<char>(-1)).param(2.5f).param(7).on(dev))
      .get();
  for (float f : Y.to_vector()) ASSERT_EQ(f, 2.0f);
}

// A configured binary that cannot be loaded is reported, and the application's own implementation
// runs instead.
TEST(OpenClBackend, BrokenConfiguredBinaryFallsBackToTheSource) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir dir;
  test::LogCapture log(LogLevel::warn);
  Runtime rt(ocl_config(
      {{"binary.0.kernel", "add_one"}, {"binary.0.path", (dir.path() / "missing.bin").string()}},
      dir.path().string()));
  Kernel k = rt.kernel("add_one").source("opencl", kKernels);
  auto v = rt.vector<float>(16);
  rt.submit(Task(k).read_write(v).on(first_opencl(rt))).get();
  for (float f : v.to_vector()) ASSERT_EQ(f, 1.0f);
  EXPECT_TRUE(log.contains("binary.0.path")) << "the broken binary must be reported";
}

TEST(OpenClBackend, BinaryImplementationAndBrokenBinaries) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir dir;
  const auto bin = compile_offline(dir, any_opencl_device()->name);
  Runtime rt(ocl_config());
  const uint32_t dev = first_opencl(rt);
  Kernel k = rt.kernel("add_one").binary("opencl", bin.string());
  auto v = rt.vector<float>(33);
  rt.submit(Task(k).read_write(v).on(dev)).get();
  for (float f : v.to_vector()) ASSERT_EQ(f, 1.0f);

  const auto junk = dir.path() / "junk.bin";
  std::ofstream(junk) << "not a program binary";
  Kernel bad = rt.kernel("bad_binary").binary("opencl", junk.string(), "", "add_one");
  Error err = test::expect_error([&] { rt.submit(Task(bad).read_write(v).on(dev)).get(); });
  EXPECT_NE(std::string(err.what()).find("junk.bin"), std::string::npos) << err.what();
  Kernel gone = rt.kernel("gone").binary("opencl", (dir.path() / "missing.bin").string());
  auto w = rt.vector<float>(33);  // v belongs to the failed task above
  err = test::expect_error([&] { rt.submit(Task(gone).read_write(w).on(dev)).get(); });
  EXPECT_NE(std::string(err.what()).find("cannot read"), std::string::npos) << err.what();
}

TEST(OpenClBackend, HostFunctionsAndOtherApisAreNotRunHere) {
  REQUIRE_OPENCL_DEVICE();
  Runtime rt(ocl_config());
  const uint32_t dev = first_opencl(rt);
  Kernel host_only = rt.kernel("host_only").cpu([](TaskContext&) {});
  Error err = test::expect_error([&] { rt.submit(Task(host_only).on(dev)).get(); });
  EXPECT_EQ(err.code(), ErrorCode::no_device);
  EXPECT_NE(std::string(err.what()).find("not host or native functions"), std::string::npos)
      << err.what();
  Kernel cuda = rt.kernel("cuda_only").source("cuda", "__global__ void cuda_only() {}");
  err = test::expect_error([&] { rt.submit(Task(cuda).on(dev)).get(); });
  EXPECT_NE(std::string(err.what()).find("not cuda source"), std::string::npos) << err.what();
}

// ---- data movement and volume ---------------------------------------------------------------

// Tiles of a partitioned matrix are strided views of its host memory: staging them onto the device
// and back takes 2-D copies (host pitch = the matrix's row, device pitch = the tile's row).
TEST(OpenClBackend, StridedTilesRoundTripThroughDeviceMemory) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir cache;
  Runtime rt(ocl_config({}, cache.path().string()));
  const uint32_t dev = first_opencl(rt);
  Kernel add_one = rt.kernel("add_one").source("opencl", kKernels);
  const size_t rows = 37, cols = 53;
  std::vector<float> init(rows * cols);
  for (size_t i = 0; i < init.size(); ++i) init[i] = static_cast<float>(i);
  auto M = rt.buffer<float>(rows, cols);
  fill(M, init);
  {
    Tiles<float> t = M.partition(16, 16);
    for (size_t i = 0; i < t.rows(); ++i)
      for (size_t j = 0; j < t.cols(); ++j)
        for (size_t rep = 0; rep <= (i + j) % 3; ++rep)
          rt.submit(Task(add_one).read_write(t(i, j)).on(dev));
    M.unpartition().get();
  }
  auto out = M.to_vector();
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) {
      const float adds = static_cast<float>(1 + (r / 16 + c / 16) % 3);
      ASSERT_EQ(out[r * cols + c], init[r * cols + c] + adds) << r << "," << c;
    }
}

// What a kernel on a tile sees (README, "Tiles in a kernel"): its own buffer, packed, from the
// tile's element (0, 0), rows of `cols` elements one after another (not the matrix's row stride,
// which only the host's view of a tile has), and by default one work item per element. The kernel
// learns the tile's shape and place only from its parameters.
TEST(OpenClBackend, AUserKernelOnATileSeesItPackedFromItsFirstElement) {
  REQUIRE_OPENCL_DEVICE();
  Runtime rt(ocl_config());
  const uint32_t dev = first_opencl(rt);
  Kernel probe = rt.kernel("tile_probe").source("opencl", R"CL(
// Element i of the tile at (row0, col0) is the matrix's (row0 + i / cols, col0 + i % cols), which
// the host set to row * 100 + col + 1: negated where so, 1e9 where not.
__kernel void tile_probe(__global float* t, int rows, int cols, int row0, int col0) {
  size_t i = get_global_id(0);
  float want = (row0 + (int)i / cols) * 100 + col0 + (int)i % cols + 1;
  t[i] = get_global_size(0) == (size_t)(rows * cols) && t[i] == want ? -want : 1e9f;
}
)CL");
  const size_t rows = 10, cols = 11, tr = 4, tc = 3;  // edge tiles 2 x 3, 4 x 2 and 2 x 2
  auto M = rt.buffer<float>(rows, cols);
  {
    auto v = M.acquire(Access::write);
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) v(r, c) = static_cast<float>(r * 100 + c + 1);
  }
  {
    Tiles<float> t = M.partition(tr, tc);
    for (size_t i = 0; i < t.rows(); ++i)
      for (size_t j = 0; j < t.cols(); ++j) {
        Buffer<float> tile = t(i, j);
        EXPECT_EQ(tile.ld(), cols) << "the host's view of a tile keeps the matrix's row stride";
        rt.submit(Task(probe)
                      .read_write(tile)
                      .param(static_cast<int>(tile.rows()))
                      .param(static_cast<int>(tile.cols()))
                      .param(static_cast<int>(i * tr))
                      .param(static_cast<int>(j * tc))
                      .on(dev));
      }
    M.unpartition().get();
  }
  auto out = M.to_vector();
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c)
      ASSERT_EQ(out[r * cols + c], -static_cast<float>(r * 100 + c + 1)) << r << "," << c;
}

TEST(OpenClBackend, ManyTasks) {
  REQUIRE_OPENCL_DEVICE();
  test::TempDir cache;
  Runtime rt(ocl_config({}, cache.path().string()));
  const uint32_t dev = first_opencl(rt);
  Kernel add_one = rt.kernel("add_one").source("opencl", kKernels);
  // A chain on one buffer (each task waits for the previous one) ...
  auto chain = rt.vector<float>(256);
  const int steps = 1000;
  for (int i = 0; i < steps; ++i) rt.submit(Task(add_one).read_write(chain).on(dev));
  // ... and independent tasks on many small buffers, with their copies in between. (Few distinct
  // sizes: PoCL compiles the kernel anew for every work-group size it picks.)
  std::vector<Buffer<float>> many;
  for (int i = 0; i < 200; ++i) {
    many.push_back(rt.vector<float>(i % 3 == 0 ? 17 : i % 3 == 1 ? 64 : 1000));
    rt.submit(Task(add_one).read_write(many.back()).on(dev));
    rt.submit(Task(add_one).read_write(many.back()).on(dev));
  }
  rt.wait_all();
  for (float f : chain.to_vector()) ASSERT_EQ(f, static_cast<float>(steps));
  for (auto& b : many)
    for (float f : b.to_vector()) ASSERT_EQ(f, 2.0f);
  EXPECT_EQ(rt.stats().failed, 0u);
}

// ---- with the CPU backend -------------------------------------------------------------------

class TiledGemmWithCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(TiledGemmWithCpu, SharesTheWorkAndIsCorrect) {
  REQUIRE_OPENCL_DEVICE();
  Config c = ocl_config();
  c.policy = GetParam();
  c.model_dir = "off";  // learn from this run only
  c.backends.push_back({"cpu", true, {{"threads", "2"}}, "cpu.toml:1"});
  Runtime rt(c);
  ASSERT_EQ(rt.policy(), GetParam());
  const size_t m = 320, k = 256, n = 288, tile = 64;
  auto a = random_values<float>(m * k, 11), b = random_values<float>(k * n, 12);
  auto A = rt.buffer<float>(m, k), B = rt.buffer<float>(k, n), C = rt.buffer<float>(m, n);
  fill(A, a);
  fill(B, b);
  for (int round = 0; round < 2; ++round) {
    blas::gemm(rt, A, B, C, tile).get();
    check_gemm(a, b, std::vector<float>(m * n, 0.0f), C.to_vector(), m, k, n, 1.0, 0.0);
  }
  const RuntimeStats s = rt.stats();
  uint64_t ocl = 0, cpu = 0;
  for (const Device& d : rt.devices()) (d.backend == "opencl" ? ocl : cpu) += s.devices[d.id].tasks;
  auto tiles = [&](size_t x) { return (x + tile - 1) / tile; };
  EXPECT_EQ(ocl + cpu, 2u * tiles(m) * tiles(n) * tiles(k));
  EXPECT_GT(ocl, 0u) << "the OpenCL device ran none of the tiles";
  EXPECT_GT(cpu, 0u) << "the CPU backend ran none of the tiles";
  EXPECT_EQ(s.failed, 0u);
}

std::vector<std::string> policies_to_test() {
  std::vector<std::string> out = {"eager"};
  for (const std::string& p : sched::policy_names())
    if (p == "dmda") out.push_back(p);  // the model-driven policy, where core has it
  return out;
}

INSTANTIATE_TEST_SUITE_P(Policies, TiledGemmWithCpu, ::testing::ValuesIn(policies_to_test()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hcr
