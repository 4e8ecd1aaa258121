// Random fill and Freivalds' probabilistic check of a matrix product; random SPD matrices and a
// probabilistic estimate of a Cholesky factor's residual.
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

template <class T>
void fill_spd(T* data, size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (size_t r = 0; r < n; ++r) {
    for (size_t c = 0; c < r; ++c) data[r * n + c] = data[c * n + r] = static_cast<T>(dist(gen));
    data[r * n + r] = static_cast<T>(static_cast<double>(n) + 1.5 + 0.5 * dist(gen));
  }
}

template <class T>
double cholesky_residual(const T* a, const T* factor, size_t n, int probes, uint64_t seed) {
  using Acc = long double;
  std::mt19937_64 gen(seed);
  Acc norm_a = 0;
  for (size_t i = 0; i < n * n; ++i) norm_a += static_cast<Acc>(a[i]) * a[i];
  Acc sum = 0;
  std::vector<Acc> x(n), y(n);
  for (int p = 0; p < probes; ++p) {
    for (auto& v : x) v = (gen() & 1) ? 1 : -1;
    // y = L^T x, walking L by rows.
    std::fill(y.begin(), y.end(), Acc(0));
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j <= i; ++j) y[j] += static_cast<Acc>(factor[i * n + j]) * x[i];
    // (A x - L y)_i, squared and summed.
    for (size_t i = 0; i < n; ++i) {
      Acc e = 0;
      for (size_t j = 0; j < n; ++j) e += static_cast<Acc>(a[i * n + j]) * x[j];
      for (size_t j = 0; j <= i; ++j) e -= static_cast<Acc>(factor[i * n + j]) * y[j];
      if (std::isnan(static_cast<double>(e))) return std::numeric_limits<double>::infinity();
      sum += e * e;
    }
  }
  return static_cast<double>(std::sqrt(sum / probes / norm_a));
}

template void fill_spd<float>(float*, size_t, uint64_t);
template void fill_spd<double>(double*, size_t, uint64_t);
template double cholesky_residual<float>(const float*, const float*, size_t, int, uint64_t);
template double cholesky_residual<double>(const double*, const double*, size_t, int, uint64_t);
template void fill_random<float>(float*, size_t, size_t, size_t, uint64_t);
template void fill_random<double>(double*, size_t, size_t, size_t, uint64_t);
template double freivalds<float>(const float*, const float*, const float*, size_t, size_t, size_t,
                                 size_t, size_t, size_t, int, uint64_t);
template double freivalds<double>(const double*, const double*, const double*, size_t, size_t,
                                  size_t, size_t, size_t, size_t, int, uint64_t);

}  // namespace hcr::cli
