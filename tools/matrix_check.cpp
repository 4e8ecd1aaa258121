// Random fill and Freivalds' probabilistic check of a matrix product.
#include "matrix_check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace hcr::cli {

template <class T>
void fill_random(T* data, size_t rows, size_t cols, size_t ld, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) data[r * ld + c] = static_cast<T>(dist(gen));
}

template <class T>
double freivalds(const T* a, const T* b, const T* c, size_t m, size_t k, size_t n, size_t lda,
                 size_t ldb, size_t ldc, int rounds, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  const double eps = std::numeric_limits<T>::epsilon();
  double worst = 0;
  std::vector<double> x(n), bx(k), abs_bx(k);
  for (int r = 0; r < rounds; ++r) {
    for (auto& v : x) v = dist(gen);
    for (size_t i = 0; i < k; ++i) {
      double s = 0, sa = 0;
      for (size_t j = 0; j < n; ++j) {
        s += static_cast<double>(b[i * ldb + j]) * x[j];
        sa += std::abs(static_cast<double>(b[i * ldb + j]) * x[j]);
      }
      bx[i] = s;
      abs_bx[i] = sa;
    }
    for (size_t i = 0; i < m; ++i) {
      double want = 0, scale = 0, got = 0;
      for (size_t p = 0; p < k; ++p) {
        want += static_cast<double>(a[i * lda + p]) * bx[p];
        scale += std::abs(static_cast<double>(a[i * lda + p])) * abs_bx[p];
      }
      for (size_t j = 0; j < n; ++j) got += static_cast<double>(c[i * ldc + j]) * x[j];
      double bound = 2.0 * static_cast<double>(k) * eps * scale + 1e-300;
      worst = std::max(worst, std::abs(got - want) / bound);
      if (std::isnan(got)) return std::numeric_limits<double>::infinity();
    }
  }
  return worst;
}

template void fill_random<float>(float*, size_t, size_t, size_t, uint64_t);
template void fill_random<double>(double*, size_t, size_t, size_t, uint64_t);
template double freivalds<float>(const float*, const float*, const float*, size_t, size_t, size_t,
                                 size_t, size_t, size_t, int, uint64_t);
template double freivalds<double>(const double*, const double*, const double*, size_t, size_t,
                                  size_t, size_t, size_t, size_t, int, uint64_t);

}  // namespace hcr::cli
