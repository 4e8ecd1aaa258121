// The CPU backend's built-in BLAS and LAPACK kernels: every kernel, f32 and f64, every
// trans/uplo/side/diag combination at odd sizes against double-precision references
// (blas_check.hpp: leading dimensions wider than the columns, unread parts NaN, unwritten parts
// kept), the ABI 1.0 gemm parameter block, and the factorizations' failures naming the minor or
// the row.
#include "../blas_check.hpp"

#include <algorithm>
#include <cmath>
#include <random>

namespace hcr {
namespace {

TEST(CpuBlas, OffersEveryBuiltinInF32AndF64Only) {
  Runtime rt(test::cpu_config(1));
  test::BlasCheck check(rt, 0);
  for (const char* op : {"gemm", "syrk", "trsm", "potrf", "getrf_nopiv"})
    for (const char* t : {"_f32", "_f64"})
      EXPECT_TRUE(check.offers(std::string(op) + t)) << op << t;
  // Declined names: the runtime places such a task nowhere (no_device), it does not fail there.
  auto a = rt.buffer<half>(1, 1), b = rt.buffer<half>(1, 1), c = rt.buffer<half>(1, 1);
  Error e = test::expect_error(
      [&] { rt.submit(Task(rt.kernel("gemm_f16")).read(a).read(b).write(c)).get(); });
  EXPECT_EQ(e.code(), ErrorCode::no_device) << e.what();
  EXPECT_NE(std::string(e.what()).find("no built-in kernel 'gemm_f16'"), std::string::npos)
      << e.what();
}

TEST(CpuBlas, EveryKernelAndCombinationF32) {
  Runtime rt(test::cpu_config(2));
  test::BlasCheck(rt, 0).all<float>({1, 7, 33, 65});
}

TEST(CpuBlas, EveryKernelAndCombinationF64) {
  Runtime rt(test::cpu_config(2));
  test::BlasCheck(rt, 0).all<double>({1, 7, 33, 65});
}

// getrf_nopiv is blocked by 64 columns: several blocks, and a last one that is not full.
TEST(CpuBlas, FactorizationsOverSeveralBlocks) {
  Runtime rt(test::cpu_config(2));
  test::BlasCheck check(rt, 0);
  for (size_t n : {64, 129, 200}) {
    check.getrf_nopiv<float>(n);
    check.getrf_nopiv<double>(n);
    check.potrf<double>(HCR_LOWER, n);
    check.potrf<float>(HCR_UPPER, n);
  }
}

// An application built against ABI 1.0 passes the gemm block without trans_a and trans_b: 24
// bytes, struct_size 24. It still means C = alpha A B + beta C.
TEST(CpuBlas, AnAbi10GemmBlockMeansNoTransposes) {
  struct GemmParams10 {
    size_t struct_size;
    double alpha;
    double beta;
  };
  static_assert(sizeof(GemmParams10) == HCR_GEMM_PARAMS_STRUCT_SIZE_1_0);
  Runtime rt(test::cpu_config(1));
  // A 2x3, B 3x2: with a transpose read from garbage the shapes (or the values) would differ.
  std::vector<double> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 0, 1, 1, 1}, c(4, -1);
  auto A = rt.wrap(a.data(), 2, 3), B = rt.wrap(b.data(), 3, 2), C = rt.wrap(c.data(), 2, 2);
  const GemmParams10 p{HCR_GEMM_PARAMS_STRUCT_SIZE_1_0, 2.0, 0.0};
  rt.submit(Task(rt.kernel("gemm_f64")).read(A).read(B).write(C).param(p)).get();
  C.acquire(Access::read).release();
  EXPECT_EQ(c, (std::vector<double>{8, 10, 20, 22}));
  // The same call with ABI 1.1's block and trans_b: C = 2 A (B^T)^T with B given as its transpose.
  std::vector<double> bt = {1, 0, 1, 0, 1, 1}, c2(4, -1);
  auto BT = rt.wrap(bt.data(), 2, 3), C2 = rt.wrap(c2.data(), 2, 2);
  const hcr_gemm_params_t q{HCR_GEMM_PARAMS_STRUCT_SIZE, 2.0, 0.0, HCR_NO_TRANS, HCR_TRANS};
  rt.submit(Task(rt.kernel("gemm_f64")).read(A).read(BT).write(C2).param(q)).get();
  C2.acquire(Access::read).release();
  EXPECT_EQ(c2, (std::vector<double>{8, 10, 20, 22}));
}

TEST(CpuBlas, PotrfOfAMatrixNotPositiveDefiniteNamesTheMinor) {
  Runtime rt(test::cpu_config(1));
  // Leading minors of order 1 and 2 are positive, the one of order 3 is not.
  std::vector<double> a = {4, 0, 0,  0,  //
                           2, 5, 0,  0,  //
                           0, 1, -3, 0,  //
                           0, 0, 0,  1};
  auto A = rt.wrap(a.data(), 4, 4);
  const hcr_potrf_params_t p{HCR_POTRF_PARAMS_STRUCT_SIZE, HCR_LOWER};
  Error e = test::expect_error(
      [&] { rt.submit(Task(rt.kernel("potrf_f64")).read_write(A).param(p)).get(); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  EXPECT_NE(std::string(e.what()).find(
                "potrf_f64: the leading minor of order 3 (of 4) is not positive definite"),
            std::string::npos)
      << e.what();
}

TEST(CpuBlas, GetrfNopivAtAZeroPivotNamesTheRow) {
  Runtime rt(test::cpu_config(1));
  // After the first elimination step the second pivot is 4 - 2 * 2 = 0.
  std::vector<float> a = {1, 2, 0,  //
                          2, 4, 1,  //
                          0, 1, 1};
  auto A = rt.wrap(a.data(), 3, 3);
  Error e = test::expect_error(
      [&] { rt.submit(Task(rt.kernel("getrf_nopiv_f32")).read_write(A)).get(); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  EXPECT_NE(std::string(e.what()).find("getrf_nopiv_f32: zero pivot in row 2 of 3"),
            std::string::npos)
      << e.what();
}

// The workers call the backend's OpenBLAS at once: each call must be as exact as alone. (Debian's
// serial OpenBLAS, built without locking, gets some of them wrong: host_blas_test shows it surely.)
TEST(CpuBlas, ConcurrentCallsAreExact) {
  Runtime rt(test::cpu_config(2));
  constexpr size_t n = 64, tasks = 2000;
  std::mt19937 g(7);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<std::vector<double>> a(tasks, std::vector<double>(n * n)), c(tasks);
  std::vector<Buffer<double>> A, C;
  for (size_t t = 0; t < tasks; ++t) {
    for (double& x : a[t]) x = u(g);
    c[t].assign(n * n, u(g));
    A.push_back(rt.wrap(a[t].data(), n, n));
    C.push_back(rt.wrap(c[t].data(), n, n));
  }
  const std::vector<std::vector<double>> c0 = c;
  Kernel gemm = rt.kernel("gemm_f64");
  const hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, -1.0, 1.0, HCR_TRANS, HCR_NO_TRANS};
  for (size_t t = 0; t < tasks; ++t)
    rt.submit(Task(gemm).read(A[t]).read(A[t]).read_write(C[t]).param(p));
  rt.wait_all();
  size_t wrong = 0;
  for (size_t t = 0; t < tasks; ++t) {
    C[t].acquire(Access::read).release();
    bool bad = false;
    for (size_t i = 0; i < n && !bad; ++i)
      for (size_t j = 0; j < n && !bad; ++j) {
        double want = c0[t][i * n + j];
        for (size_t k = 0; k < n; ++k) want -= a[t][k * n + i] * a[t][k * n + j];
        bad = std::abs(c[t][i * n + j] - want) > 1e-12 * n;
      }
    wrong += bad;
  }
  EXPECT_EQ(wrong, 0u) << "of " << tasks << " gemms on two workers at once";
}

// With parallel_tasks, a big built-in call is cut into blocks that idle workers take: the result
// is the whole call's (host_blas_test checks every kernel's blocks; this, the backend's path).
TEST(CpuBlas, ParallelTasksGiveTheWholeCallsResult) {
  Config c = test::cpu_config(2);
  c.backends[0].options.push_back({"parallel_tasks", "true"});
  Runtime rt(c);
  constexpr size_t n = 300;  // 2 n^3 = 5.4e7 flops: cut into two blocks of rows
  std::mt19937 g(11);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> a(n * n), b(n * n), cm(n * n, 0.0);
  for (double& x : a) x = u(g);
  for (double& x : b) x = u(g);
  auto A = rt.wrap(a.data(), n, n), B = rt.wrap(b.data(), n, n), C = rt.wrap(cm.data(), n, n);
  const hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0, HCR_NO_TRANS, HCR_TRANS};
  rt.submit(Task(rt.kernel("gemm_f64")).read(A).read(B).write(C).param(p)).get();
  C.acquire(Access::read).release();
  double worst = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      double want = 0;
      for (size_t k = 0; k < n; ++k) want += a[i * n + k] * b[j * n + k];
      worst = std::max(worst, std::abs(cm[i * n + j] - want));
    }
  EXPECT_LE(worst, 1e-10);
}

}  // namespace
}  // namespace hcr
