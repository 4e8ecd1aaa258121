// hcr_host_blas, the cpu and sim backends' built-ins, called as their workers call it: from several
// threads at once. Each result must be exactly what the same call gives alone. Debian's serial
// OpenBLAS, built without locking, fails this (~3% of such overlapping 16x16 gemms wrong); the
// threaded build hcr links privately, held at one thread, passes.
#include "host_blas.hpp"

#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

namespace hcr {
namespace {

hcr_arg_t matrix(double* p, size_t n) {
  hcr_arg_t a{};
  a.struct_size = HCR_ARG_STRUCT_SIZE;
  a.dtype = HCR_DTYPE_F64;
  a.access = HCR_ACCESS_READ_WRITE;
  a.rows = n;
  a.cols = n;
  a.ld = n;
  a.host = p;
  return a;
}

TEST(HostBlas, CallsFromSeveralThreadsAtOnceAreExact) {
  constexpr size_t n = 16;
  constexpr int threads = 2, calls = 50000;
  const auto gemm = host_blas::find("gemm_f64");
  ASSERT_TRUE(gemm.has_value());
  const hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, -1.0, 1.0, HCR_TRANS, HCR_NO_TRANS};
  std::mt19937 g(1);
  std::uniform_real_distribution<double> u(-1, 1);
  // Per thread: its own A and C, and the result of the call made alone.
  std::vector<std::vector<double>> a(threads, std::vector<double>(n * n)), c0(threads), want(threads);
  for (int t = 0; t < threads; ++t) {
    for (double& x : a[t]) x = u(g);
    c0[t].assign(n * n, 0);
    for (double& x : c0[t]) x = u(g);
    want[t] = c0[t];
    const hcr_arg_t args[] = {matrix(a[t].data(), n), matrix(a[t].data(), n),
                              matrix(want[t].data(), n)};
    host_blas::run(host_blas::check(*gemm, args, 3, &p, sizeof p), args, 1);
  }
  std::vector<int> wrong(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::vector<double> c;
      for (int i = 0; i < calls; ++i) {
        c = c0[t];
        const hcr_arg_t args[] = {matrix(a[t].data(), n), matrix(a[t].data(), n),
                                  matrix(c.data(), n)};
        host_blas::run(host_blas::check(*gemm, args, 3, &p, sizeof p), args, 1);
        wrong[t] += c != want[t];
      }
    });
  for (std::thread& th : pool) th.join();
  for (int t = 0; t < threads; ++t)
    EXPECT_EQ(wrong[t], 0) << "thread " << t << ": of " << calls << " gemms made alongside another";
}

}  // namespace
}  // namespace hcr
