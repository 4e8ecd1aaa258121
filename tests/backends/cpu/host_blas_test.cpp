// hcr_host_blas, the cpu and sim backends' built-ins, called as their workers call it: from several
// threads at once. Each result must be exactly what the same call gives alone. Debian's serial
// OpenBLAS, built without locking, fails this (~3% of such overlapping 16x16 gemms wrong); the
// threaded build hcr links privately, held at one thread, passes.
#include "host_blas.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
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
  std::vector<std::vector<double>> a(threads, std::vector<double>(n * n)), c0(threads),
      want(threads);
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

// run_split cuts gemm, syrk and trsm into blocks (by rows or columns of the output): every
// transpose, uplo, side and diagonal, at sizes that leave a ragged last block, gives what the
// whole call gives. Blocks run on two threads at once here, as the cpu backend's workers do.
TEST(HostBlas, CutIntoBlocksEveryCallGivesWhatTheWholeCallGives) {
  host_blas::Split split{[](size_t n, const std::function<void(size_t)>& body) {
                           std::thread other([&] {
                             for (size_t i = 1; i < n; i += 2) body(i);
                           });
                           for (size_t i = 0; i < n; i += 2) body(i);
                           other.join();
                         },
                         /*grain=*/8, /*min_flops=*/0};
  std::mt19937 g(3);
  std::uniform_real_distribution<double> u(-1, 1);
  auto random = [&](size_t r, size_t c, bool dominant = false) {
    std::vector<double> v(r * c);
    for (double& x : v) x = u(g);
    if (dominant)
      for (size_t i = 0; i < std::min(r, c); ++i) v[i * c + i] += static_cast<double>(r) + 4;
    return v;
  };
  auto arg = [](std::vector<double>& v, size_t r, size_t c) {
    hcr_arg_t a{};
    a.struct_size = HCR_ARG_STRUCT_SIZE;
    a.dtype = HCR_DTYPE_F64;
    a.access = HCR_ACCESS_READ_WRITE;
    a.rows = r;
    a.cols = c;
    a.ld = c;
    a.host = v.data();
    return a;
  };
  // Runs `kernel` whole and cut on copies of the same operands; the last operand is the output.
  auto same = [&](const char* kernel, std::vector<std::vector<double>> ops,
                  std::vector<std::pair<size_t, size_t>> shapes, const void* p, size_t size,
                  const std::string& what) {
    auto whole = ops, cut = ops;
    std::vector<hcr_arg_t> wa, ca;
    for (size_t i = 0; i < ops.size(); ++i) {
      wa.push_back(arg(whole[i], shapes[i].first, shapes[i].second));
      ca.push_back(arg(cut[i], shapes[i].first, shapes[i].second));
    }
    const auto k = host_blas::find(kernel);
    ASSERT_TRUE(k.has_value());
    host_blas::run(host_blas::check(*k, wa.data(), wa.size(), p, size), wa.data(), 1);
    host_blas::run_split(host_blas::check(*k, ca.data(), ca.size(), p, size), ca.data(), split);
    const std::vector<double>& w = whole.back();
    const std::vector<double>& c = cut.back();
    double worst = 0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(w[i] - c[i]));
    EXPECT_LE(worst, 1e-11) << what;
  };
  const size_t M = 37, N = 29, K = 23;
  for (int32_t ta : {HCR_NO_TRANS, HCR_TRANS})
    for (int32_t tb : {HCR_NO_TRANS, HCR_TRANS})
      for (auto [m, n] : {std::pair<size_t, size_t>{M, N}, {5, N}}) {  // (5: cut by columns)
        const hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 0.5, -1.0, ta, tb};
        std::pair<size_t, size_t> sa = ta == HCR_TRANS ? std::pair{K, m} : std::pair{m, K};
        std::pair<size_t, size_t> sb = tb == HCR_TRANS ? std::pair{n, K} : std::pair{K, n};
        same("gemm_f64", {random(sa.first, sa.second), random(sb.first, sb.second), random(m, n)},
             {sa, sb, {m, n}}, &p, sizeof p,
             "gemm " + std::to_string(ta) + std::to_string(tb) + " m " + std::to_string(m));
      }
  for (int32_t uplo : {HCR_LOWER, HCR_UPPER})
    for (int32_t t : {HCR_NO_TRANS, HCR_TRANS}) {
      const hcr_syrk_params_t p{HCR_SYRK_PARAMS_STRUCT_SIZE, 0.5, -1.0, uplo, t};
      std::pair<size_t, size_t> sa = t == HCR_TRANS ? std::pair{K, M} : std::pair{M, K};
      same("syrk_f64", {random(sa.first, sa.second), random(M, M)}, {sa, {M, M}}, &p, sizeof p,
           "syrk " + std::to_string(uplo) + std::to_string(t));
    }
  for (int32_t side : {HCR_LEFT, HCR_RIGHT})
    for (int32_t uplo : {HCR_LOWER, HCR_UPPER})
      for (int32_t t : {HCR_NO_TRANS, HCR_TRANS})
        for (int32_t diag : {HCR_NON_UNIT, HCR_UNIT}) {
          const hcr_trsm_params_t p{HCR_TRSM_PARAMS_STRUCT_SIZE, 0.5, side, uplo, t, diag};
          const size_t a = side == HCR_LEFT ? M : N;
          same("trsm_f64", {random(a, a, true), random(M, N)}, {{a, a}, {M, N}}, &p, sizeof p,
               "trsm " + std::to_string(side) + std::to_string(uplo) + std::to_string(t) +
                   std::to_string(diag));
        }
}

}  // namespace
}  // namespace hcr
