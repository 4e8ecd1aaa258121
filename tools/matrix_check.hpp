// Matrix helpers for the main job and the benchmarks: random fill and Freivalds' check.
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

}  // namespace hcr::cli
