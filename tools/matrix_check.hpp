// Matrix helpers for the main jobs and the benchmarks: random fill and Freivalds' check of a
// product; a random SPD matrix and the residual of its Cholesky factor.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hcr::cli {

/// Fills rows x cols (leading dimension ld) with uniform values in [-1, 1).
template <class T>
void fill_random(T* data, size_t rows, size_t cols, size_t ld, uint64_t seed);

/// Freivalds' check of C = A * B in O(n^2): compares C x with A (B x) for random vectors x,
/// allowing the rounding error of a k-term dot product in T (2 k eps |A| |B| |x|). Returns the
/// largest error as a multiple of that bound (<= 1 passes).
template <class T>
double freivalds(const T* a, const T* b, const T* c, size_t m, size_t k, size_t n, size_t lda,
                 size_t ldb, size_t ldc, int rounds = 2, uint64_t seed = 7);

/// A random symmetric positive definite n x n matrix (leading dimension n): off-diagonal entries
/// uniform in [-1, 1), mirrored; diagonal n + 1 + uniform [0, 1). Strictly diagonally dominant,
/// hence positive definite and well conditioned, made in O(n^2).
template <class T>
void fill_spd(T* data, size_t n, uint64_t seed);

/// ||A - L L^T||_F / ||A||_F for the Cholesky factor L in the lower triangle of `factor` (its
/// upper triangle is not read) of the full symmetric `a`, both n x n with leading dimension n.
/// O(n^2) per probe: ||E x||^2 for x of independent random signs has expectation ||E||_F^2, so
/// the mean over `probes` such x estimates the residual without forming L L^T (its relative
/// spread is at most 1/sqrt(2 probes): 35% for 4); computed in long double so that an f64
/// factor's rounding is not the check's own.
template <class T>
double cholesky_residual(const T* a, const T* factor, size_t n, int probes = 4, uint64_t seed = 11);

}  // namespace hcr::cli
