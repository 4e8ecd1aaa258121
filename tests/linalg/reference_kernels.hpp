// Naive CPU implementations of the tile kernels hcr::linalg submits ("gemm_<t>", "syrk_<t>",
// "trsm_<t>", "potrf_<t>", "getrf_nopiv_<t>"), written from <hcr/plugin.h>'s specification alone.
// Added to a runtime's kernels, they run on any device that accepts host functions and has no
// built-in of that name (the stub plugin): the tiling is then checked apart from any backend.
#pragma once

#include <hcr/hcr.hpp>

#include <cmath>
#include <cstring>
#include <string>

namespace hcr::test {

namespace detail {

template <class P>
P params_of(TaskContext& ctx) {
  return ctx.param<P>(0);
}

// op(X)(i, j) of a row-major view.
template <class T>
double at(const MatrixView<T>& x, int32_t trans, size_t i, size_t j) {
  return trans == HCR_TRANS ? x(j, i) : x(i, j);
}

template <class T>
void gemm(TaskContext& ctx) {
  auto a = ctx.arg<T>(0), b = ctx.arg<T>(1), c = ctx.arg<T>(2);
  const auto p = params_of<hcr_gemm_params_t>(ctx);
  const size_t k = p.trans_a == HCR_TRANS ? a.rows : a.cols;
  for (size_t i = 0; i < c.rows; ++i)
    for (size_t j = 0; j < c.cols; ++j) {
      double s = 0;
      for (size_t l = 0; l < k; ++l) s += at(a, p.trans_a, i, l) * at(b, p.trans_b, l, j);
      c(i, j) = static_cast<T>(p.alpha * s + (p.beta == 0 ? 0.0 : p.beta * c(i, j)));
    }
}

template <class T>
void syrk(TaskContext& ctx) {
  auto a = ctx.arg<T>(0), c = ctx.arg<T>(1);
  const auto p = params_of<hcr_syrk_params_t>(ctx);
  const size_t k = p.trans == HCR_TRANS ? a.rows : a.cols;
  for (size_t i = 0; i < c.rows; ++i)
    for (size_t j = 0; j < c.cols; ++j) {
      if (p.uplo == HCR_LOWER ? j > i : j < i) continue;
      double s = 0;
      for (size_t l = 0; l < k; ++l) s += at(a, p.trans, i, l) * at(a, p.trans, j, l);
      c(i, j) = static_cast<T>(p.alpha * s + (p.beta == 0 ? 0.0 : p.beta * c(i, j)));
    }
}

// op(A)(i, j) of a triangular A: zero outside the triangle, one on a unit diagonal.
template <class T>
double tri(const MatrixView<T>& a, const hcr_trsm_params_t& p, size_t i, size_t j) {
  const size_t r = p.trans == HCR_TRANS ? j : i, c = p.trans == HCR_TRANS ? i : j;
  if (r == c) return p.diag == HCR_UNIT ? 1.0 : a(r, c);
  return (p.uplo == HCR_LOWER ? c < r : c > r) ? a(r, c) : 0.0;
}

template <class T>
void trsm(TaskContext& ctx) {
  auto a = ctx.arg<T>(0), b = ctx.arg<T>(1);
  const auto p = params_of<hcr_trsm_params_t>(ctx);
  // op(A) is lower when (uplo lower) == (no transpose).
  const bool lower = (p.uplo == HCR_LOWER) == (p.trans != HCR_TRANS);
  if (p.side == HCR_LEFT) {  // op(A) X = alpha B, column by column
    const size_t m = b.rows;
    for (size_t j = 0; j < b.cols; ++j)
      for (size_t s = 0; s < m; ++s) {
        const size_t i = lower ? s : m - 1 - s;
        double v = p.alpha * b(i, j);
        for (size_t l = 0; l < m; ++l)
          if (lower ? l < i : l > i) v -= tri(a, p, i, l) * b(l, j);
        b(i, j) = static_cast<T>(v / tri(a, p, i, i));
      }
  } else {  // X op(A) = alpha B, row by row: x op(A) = b is op(A)^T x^T = b^T
    const size_t n = b.cols;
    for (size_t i = 0; i < b.rows; ++i)
      for (size_t s = 0; s < n; ++s) {
        const size_t j = lower ? n - 1 - s : s;
        double v = p.alpha * b(i, j);
        for (size_t l = 0; l < n; ++l)
          if (lower ? l > j : l < j) v -= b(i, l) * tri(a, p, l, j);
        b(i, j) = static_cast<T>(v / tri(a, p, j, j));
      }
  }
}

template <class T>
void potrf(TaskContext& ctx) {
  auto a = ctx.arg<T>(0);
  const auto p = params_of<hcr_potrf_params_t>(ctx);
  const bool lower = p.uplo == HCR_LOWER;
  // The triangle's (i, j), j <= i, as L(i, j) (lower) or U(j, i) (upper).
  auto l = [&](size_t i, size_t j) -> T& { return lower ? a(i, j) : a(j, i); };
  for (size_t j = 0; j < a.rows; ++j) {
    double d = l(j, j);
    for (size_t k = 0; k < j; ++k) d -= static_cast<double>(l(j, k)) * l(j, k);
    if (!(d > 0))
      throw Error(
          ErrorCode::invalid_argument,
          "the leading minor of order " + std::to_string(j + 1) + " is not positive definite");
    l(j, j) = static_cast<T>(std::sqrt(d));
    for (size_t i = j + 1; i < a.rows; ++i) {
      double s = l(i, j);
      for (size_t k = 0; k < j; ++k) s -= static_cast<double>(l(i, k)) * l(j, k);
      l(i, j) = static_cast<T>(s / l(j, j));
    }
  }
}

template <class T>
void getrf_nopiv(TaskContext& ctx) {
  auto a = ctx.arg<T>(0);
  for (size_t k = 0; k < a.rows; ++k) {
    if (a(k, k) == 0)
      throw Error(ErrorCode::invalid_argument, "zero pivot in row " + std::to_string(k + 1));
    for (size_t i = k + 1; i < a.rows; ++i) {
      a(i, k) /= a(k, k);
      for (size_t j = k + 1; j < a.cols; ++j) a(i, j) -= a(i, k) * a(k, j);
    }
  }
}

template <class T>
void add(Runtime& rt, const char* suffix) {
  rt.kernel(std::string("gemm") + suffix).cpu(gemm<T>);
  rt.kernel(std::string("syrk") + suffix).cpu(syrk<T>);
  rt.kernel(std::string("trsm") + suffix).cpu(trsm<T>);
  rt.kernel(std::string("potrf") + suffix).cpu(potrf<T>);
  rt.kernel(std::string("getrf_nopiv") + suffix).cpu(getrf_nopiv<T>);
}

}  // namespace detail

/// Adds the reference implementations to every tile kernel of `rt`, f32 and f64.
inline void add_reference_kernels(Runtime& rt) {
  detail::add<float>(rt, "_f32");
  detail::add<double>(rt, "_f64");
}

}  // namespace hcr::test
