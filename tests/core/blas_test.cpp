// Tiled gemm against a naive reference: sizes 1, 7, 513, rectangular shapes, mixed tiles, f32 and
// f64, alpha and beta; and mismatched shapes named in the error.
#include "../test_support.hpp"

#include <cmath>
#include <limits>
#include <random>

namespace hcr {
namespace {

template <class T>
class Gemm : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Gemm, Types);

struct Shape {
  size_t m, k, n, tile;
};

template <class T>
void check_gemm(Runtime& rt, Shape s, T alpha, T beta) {
  std::mt19937 gen(static_cast<unsigned>(s.m * 131 + s.k * 17 + s.n + s.tile));
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<T> a(s.m * s.k), b(s.k * s.n), c0(s.m * s.n);
  for (auto& v : a) v = static_cast<T>(dist(gen));
  for (auto& v : b) v = static_cast<T>(dist(gen));
  for (auto& v : c0) v = static_cast<T>(dist(gen));
  auto A = rt.buffer<T>(s.m, s.k), B = rt.buffer<T>(s.k, s.n), C = rt.buffer<T>(s.m, s.n);
  {
    auto va = A.acquire(Access::write), vb = B.acquire(Access::write),
         vc = C.acquire(Access::write);
    std::copy(a.begin(), a.end(), va.data());
    std::copy(b.begin(), b.end(), vb.data());
    std::copy(c0.begin(), c0.end(), vc.data());
  }
  blas::gemm<T>(rt, A, B, C, s.tile, alpha, beta).get();
  auto got = C.to_vector();
  const double eps = std::numeric_limits<T>::epsilon();
  for (size_t i = 0; i < s.m; ++i)
    for (size_t j = 0; j < s.n; ++j) {
      double want = 0, scale = 0;
      for (size_t p = 0; p < s.k; ++p) {
        want += static_cast<double>(a[i * s.k + p]) * b[p * s.n + j];
        scale += std::abs(static_cast<double>(a[i * s.k + p]) * b[p * s.n + j]);
      }
      want = alpha * want + beta * static_cast<double>(c0[i * s.n + j]);
      scale = std::abs(alpha) * scale + std::abs(beta * static_cast<double>(c0[i * s.n + j]));
      double bound = 2.0 * (s.k + 2) * eps * scale + 1e-30;
      ASSERT_LE(std::abs(got[i * s.n + j] - want), bound)
          << "C(" << i << "," << j << ") for " << s.m << "x" << s.k << "x" << s.n << " tile "
          << s.tile;
    }
}

TYPED_TEST(Gemm, MatchesNaiveReferenceAtAwkwardSizesAndTiles) {
  Runtime rt(test::cpu_config(2));
  const Shape shapes[] = {{1, 1, 1, 1},         {1, 1, 1, 64},    {7, 7, 7, 3},
                          {7, 7, 7, 7},         {7, 7, 7, 100},   {513, 513, 513, 128},
                          {513, 513, 513, 200}, {33, 70, 19, 16}, {70, 33, 5, 9},
                          {1, 300, 1, 64},      {300, 1, 300, 64}};
  for (const Shape& s : shapes) check_gemm<TypeParam>(rt, s, TypeParam(1), TypeParam(0));
}

TYPED_TEST(Gemm, AlphaAndBetaAccumulateIntoC) {
  Runtime rt(test::cpu_config(2));
  check_gemm<TypeParam>(rt, {65, 40, 33, 16}, TypeParam(-0.5), TypeParam(2));
}

TYPED_TEST(Gemm, SameMatrixAsBothInputs) {
  Runtime rt(test::cpu_config(2));
  auto a = rt.buffer<TypeParam>(3, 3), c = rt.buffer<TypeParam>(3, 3);
  {
    auto v = a.acquire(Access::write);
    for (size_t i = 0; i < 3; ++i) v(i, i) = TypeParam(2);
  }
  blas::gemm<TypeParam>(rt, a, a, c, 2).get();
  auto out = c.to_vector();
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < 3; ++j) EXPECT_EQ(out[i * 3 + j], i == j ? TypeParam(4) : TypeParam(0));
}

TEST(GemmErrors, MismatchedShapesNameTheShapes) {
  Runtime rt(test::cpu_config(1));
  auto a = rt.buffer<float>(3, 4), b = rt.buffer<float>(5, 6), c = rt.buffer<float>(3, 6);
  Error e = test::expect_error([&] { blas::gemm(rt, a, b, c, 2); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("A is 3x4, B is 5x6, C is 3x6"), std::string::npos)
      << e.what();
  auto b2 = rt.buffer<float>(4, 6), c2 = rt.buffer<float>(4, 6);
  e = test::expect_error([&] { blas::gemm(rt, a, b2, c2, 2); });
  EXPECT_NE(std::string(e.what()).find("C is 4x6"), std::string::npos);
  e = test::expect_error([&] { blas::gemm(rt, a, b2, c, 0); });
  EXPECT_NE(std::string(e.what()).find("tile size 0"), std::string::npos);
  auto sq = rt.buffer<float>(4, 4);
  e = test::expect_error([&] { blas::gemm(rt, sq, sq, sq, 2); });
  EXPECT_NE(std::string(e.what()).find("must not alias"), std::string::npos);
  // Nothing was left partitioned by the failed calls.
  EXPECT_NO_THROW(blas::gemm(rt, a, b2, c, 2).get());
}

TEST(GemmErrors, NoDeviceWithGemmFailsTheEvent) {
  Runtime rt(test::stub_config());
  auto a = rt.buffer<float>(2, 2), b = rt.buffer<float>(2, 2), c = rt.buffer<float>(2, 2);
  Error e = test::expect_error([&] { blas::gemm(rt, a, b, c, 1).get(); });
  EXPECT_EQ(e.code(), ErrorCode::dependency);
  EXPECT_NE(std::string(e.what()).find("no device can run kernel 'gemm_f32'"), std::string::npos)
      << e.what();
}

}  // namespace
}  // namespace hcr
