// The backend conformance suite: the same checks against every device of every plugin built
// (tasks pinned to the device under test). A device skips what its backend does not offer (a GPU
// backend runs no host functions), but what it offers must behave.
#include "../backends/blas_check.hpp"
#include "../test_support.hpp"

#include <cmath>
#include <limits>
#include <random>

namespace hcr {
namespace {

// Every backend hcr builds, with devices for the ones that need describing. A backend that was not
// built (CUDA without its toolkit) is skipped by the loader and contributes no device.
Config all_plugins() {
  Config c;
  c.use_environment = false;
  c.backends.push_back({"cpu", true, {{"threads", "2"}}, "conformance"});
  c.backends.push_back({"sim",
                        true,
                        {{"time_scale", "0.001"},
                         {"device.0.name", "sim-apu"},
                         {"device.0.host_memory", "true"},
                         {"device.1.name", "sim-gpu"},
                         {"device.1.kind", "gpu"},
                         {"device.1.gflops", "1000"},
                         {"device.1.concurrency", "2"}},
                        "conformance"});
  // CPU OpenCL devices are off by default (they compete with the cpu backend); ask for them so
  // that a machine with only PoCL still checks the OpenCL backend.
  c.backends.push_back({"opencl", true, {{"device_types", "cpu,gpu,accelerator"}}, "conformance"});
  c.backends.push_back({"cuda", true, {}, "conformance"});
  return c;
}

struct DeviceParam {
  uint32_t id;
  std::string label;
  friend void PrintTo(const DeviceParam& p, std::ostream* os) { *os << p.label; }
};

std::vector<DeviceParam> devices_under_test() {
  std::vector<DeviceParam> out;
  try {
    Runtime rt(all_plugins());
    for (const Device& d : rt.devices()) {
      std::string label = d.backend + "_" + std::to_string(d.id) + "_" + d.name;
      for (char& ch : label)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      out.push_back({d.id, label});
    }
  } catch (...) {
  }
  return out;
}

class Conformance : public ::testing::TestWithParam<DeviceParam> {
 protected:
  void SetUp() override {
    rt_ = std::make_unique<Runtime>(all_plugins());
    ASSERT_LT(GetParam().id, rt_->devices().size());
    dev_ = rt_->devices()[GetParam().id];
  }
  bool runs(const Kernel& k) {
    Event e = rt_->submit(Task(k).on(dev_.id));
    e.wait();
    if (!e.error()) return true;
    try {
      e.get();
    } catch (const Error& err) {
      if (err.code() == ErrorCode::no_device) return false;
      throw;
    }
    return true;
  }
  std::unique_ptr<Runtime> rt_;
  Device dev_;
};

TEST_P(Conformance, DeviceInfoIsSane) {
  EXPECT_FALSE(dev_.name.empty());
  EXPECT_FALSE(dev_.arch.empty());
  EXPECT_FALSE(dev_.backend.empty());
  EXPECT_GE(dev_.concurrency, 1u);
  EXPECT_GE(dev_.compute_units, 1u);
  EXPECT_GT(dev_.memory_bytes, 0u);
}

TEST_P(Conformance, UnknownBuiltinIsNotOffered) {
  Event e = rt_->submit(Task(rt_->kernel("no_such_builtin_kernel")).on(dev_.id));
  Error err = test::expect_error([&] { e.get(); });
  EXPECT_EQ(err.code(), ErrorCode::no_device);
  EXPECT_NE(std::string(err.what()).find(dev_.name), std::string::npos) << err.what();
}

TEST_P(Conformance, HostFunctionsRunWithTheirArguments) {
  std::atomic<int> ran{0};
  Kernel probe = rt_->kernel("probe").cpu([&](TaskContext&) { ran.fetch_add(1); });
  if (!runs(probe)) GTEST_SKIP() << dev_.backend << " runs no host functions";
  auto v = rt_->vector<int32_t>(16);
  Kernel iota = rt_->kernel("iota").cpu([](TaskContext& ctx) {
    auto x = ctx.arg<int32_t>(0);
    for (size_t i = 0; i < x.cols; ++i) x(0, i) = static_cast<int32_t>(i) * ctx.param<int32_t>(0);
  });
  rt_->submit(Task(iota).write(v).param(3).on(dev_.id)).get();
  auto out = v.to_vector();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], 3 * i);
}

TEST_P(Conformance, KernelErrorsReachTheEvent) {
  Kernel probe = rt_->kernel("probe2").cpu([](TaskContext&) {});
  if (!runs(probe)) GTEST_SKIP() << dev_.backend << " runs no host functions";
  Kernel bad = rt_->kernel("bad").cpu([](TaskContext&) { throw std::logic_error("conformance"); });
  EXPECT_THROW(rt_->submit(Task(bad).on(dev_.id)).get(), std::logic_error);
  EXPECT_TRUE(runs(probe));  // the device still works
}

TEST_P(Conformance, ManyTasksComplete) {
  std::atomic<int> ran{0};
  Kernel probe = rt_->kernel("count").cpu([&](TaskContext&) { ran.fetch_add(1); });
  if (!runs(probe)) GTEST_SKIP() << dev_.backend << " runs no host functions";
  for (int i = 0; i < 5000; ++i) rt_->submit(Task(probe).on(dev_.id));
  rt_->wait_all();
  EXPECT_EQ(ran.load(), 5001);
}

template <class T>
void gemm_on(Runtime& rt, uint32_t dev, size_t m, size_t k, size_t n) {
  std::mt19937 gen(static_cast<unsigned>(m + k + n));
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
  hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
  rt.submit(
        Task(rt.kernel(blas::gemm_kernel_name<T>())).read(A).read(B).read_write(C).param(p).on(dev))
      .get();
  auto c = C.to_vector();
  const double eps = std::numeric_limits<T>::epsilon();
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      double want = 0, scale = 0;
      for (size_t q = 0; q < k; ++q) {
        want += static_cast<double>(a[i * k + q]) * b[q * n + j];
        scale += std::abs(static_cast<double>(a[i * k + q]) * b[q * n + j]);
      }
      ASSERT_LE(std::abs(c[i * n + j] - want), 2.0 * (k + 2) * eps * scale + 1e-30)
          << m << "x" << k << "x" << n << " at " << i << "," << j;
    }
}

TEST_P(Conformance, BuiltinGemmIsCorrectWhereOffered) {
  test::BlasCheck check(*rt_, dev_.id);
  int offered = 0;
  for (const char* name : {"gemm_f32", "gemm_f64"}) {
    if (!check.offers(name)) continue;
    ++offered;
    for (auto [m, k, n] : {std::tuple{1, 1, 1}, std::tuple{7, 7, 7}, std::tuple{65, 33, 17},
                           std::tuple{130, 257, 64}}) {
      if (std::string(name) == "gemm_f32") gemm_on<float>(*rt_, dev_.id, m, k, n);
      else gemm_on<double>(*rt_, dev_.id, m, k, n);
    }
  }
  if (offered == 0) GTEST_SKIP() << dev_.backend << " offers no built-in gemm";
}

// Every built-in of plugin.h 1.1 the device offers (gemm with its transposes, syrk, trsm, potrf,
// getrf_nopiv; f32 and f64), every trans/uplo/side/diag combination at odd sizes, against
// references (tests/backends/blas_check.hpp). A kernel the device declines is skipped.
TEST_P(Conformance, BuiltinBlasKernelsAreCorrectWhereOffered) {
  test::BlasCheck check(*rt_, dev_.id);
  std::string ran, declined;
  for (const char* t : {"_f32", "_f64"})
    for (const char* op : {"gemm", "syrk", "trsm", "potrf", "getrf_nopiv"}) {
      const std::string name = std::string(op) + t;
      const bool f64 = std::string(t) == "_f64";
      if (!check.offers(name)) {
        declined += (declined.empty() ? "" : ", ") + name;
        continue;
      }
      ran += (ran.empty() ? "" : ", ") + name;
      SCOPED_TRACE(name);
      for (size_t a : {size_t{1}, size_t{7}, size_t{33}})
        for (int x : {0, 1})
          for (int y : {0, 1}) {
            const size_t b = a == 1 ? 7 : a == 7 ? 33 : 1, c = a == 33 ? 7 : 33;
            if (std::string(op) == "gemm") {
              if (f64) check.gemm<double>(x, y, a, b, c, -1.5, 0.5);
              else check.gemm<float>(x, y, a, b, c, 1.0, 0.0);
            } else if (std::string(op) == "syrk") {
              if (f64) check.syrk<double>(x, y, a, b, 1.0, 0.0);
              else check.syrk<float>(x, y, a, b, -0.5, 2.0);
            } else if (std::string(op) == "trsm") {
              for (int side : {0, 1})
                for (int diag : {0, 1}) {
                  if (f64) check.trsm<double>(side, x, y, diag, a, b, 0.75);
                  else check.trsm<float>(side, x, y, diag, a, b, 0.75);
                }
            } else if (x == 0 && y == 0) {  // potrf (each uplo), getrf_nopiv
              for (int uplo : {0, 1}) {
                if (std::string(op) == "getrf_nopiv" && uplo == 1) break;
                if (std::string(op) == "potrf") {
                  if (f64) check.potrf<double>(uplo, a);
                  else check.potrf<float>(uplo, a);
                } else if (f64) {
                  check.getrf_nopiv<double>(a);
                } else {
                  check.getrf_nopiv<float>(a);
                }
              }
            }
          }
    }
  if (ran.empty())
    GTEST_SKIP() << dev_.backend
                 << " offers none of the built-ins checked here (declined: " << declined << ")";
  RecordProperty("declined", declined);
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Conformance);
INSTANTIATE_TEST_SUITE_P(Devices, Conformance, ::testing::ValuesIn(devices_under_test()),
                         [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace hcr
