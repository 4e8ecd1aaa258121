// The application's OpenBLAS is the application's: its thread count stays what the application set
// before a Runtime with the CPU and simulated backends starts, while it runs BLAS tasks (seen from
// the application's own thread) and after it ends. The backends compute on their own
// single-threaded OpenBLAS (backends/host_blas/README.md). This executable links the shared
// OpenBLAS as an application would.
#include "../../test_support.hpp"

#include <cblas.h>

namespace hcr {
namespace {

Config cpu_and_sim() {
  Config c = test::cpu_config(2);
  c.backends.push_back(
      {"sim",
       true,
       {{"time_scale", "0.001"}, {"device.0.name", "sim-gpu"}, {"device.0.gflops", "1000"}},
       "test"});
  return c;
}

// Runs gemm and potrf tasks on every device and checks one result.
void run_blas(Runtime& rt) {
  const size_t n = 96;
  for (const Device& d : rt.devices()) {
    auto A = rt.buffer<double>(n, n), C = rt.buffer<double>(n, n);
    {
      auto a = A.acquire(Access::write);
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < n; ++j) a.data()[i * n + j] = i == j ? 2.0 : 0.0;
    }
    const hcr_gemm_params_t g{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0, HCR_NO_TRANS, HCR_TRANS};
    const hcr_potrf_params_t p{HCR_POTRF_PARAMS_STRUCT_SIZE, HCR_LOWER};
    rt.submit(Task(rt.kernel("gemm_f64")).read(A).read(A).write(C).param(g).on(d.id));
    rt.submit(Task(rt.kernel("potrf_f64")).read_write(C).param(p).on(d.id)).get();
    EXPECT_DOUBLE_EQ(C.to_vector()[0], 2.0) << d.name;  // sqrt(2 * 2)
  }
}

TEST(BlasThreads, TheApplicationsSettingSurvivesARuntime) {
  const int before = openblas_get_num_threads();
  // A setting of the application's own, different from what a backend would choose (1) and from
  // the default (the cores), where the library allows one.
  openblas_set_num_threads(3);
  const int set = openblas_get_num_threads();
  ASSERT_GE(set, 2) << "this OpenBLAS is single-threaded: the test cannot tell settings apart";
  {
    Runtime rt(cpu_and_sim());
    ASSERT_EQ(rt.devices().size(), 2u);
    EXPECT_EQ(openblas_get_num_threads(), set) << "after the runtime started";
    run_blas(rt);
    EXPECT_EQ(openblas_get_num_threads(), set) << "while the runtime is alive, after BLAS tasks";
    // The application's own BLAS call works beside the runtime, with its own setting.
    std::vector<double> x(64 * 64, 1.0), y(64 * 64, 0.0);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 64, 64, 64, 1.0, x.data(), 64, x.data(),
                64, 0.0, y.data(), 64);
    EXPECT_EQ(y[0], 64.0);
  }
  EXPECT_EQ(openblas_get_num_threads(), set) << "after the runtime ended";
  openblas_set_num_threads(before);
}

}  // namespace
}  // namespace hcr
