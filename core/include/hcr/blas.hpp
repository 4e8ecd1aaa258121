/// \file blas.hpp
/// A tiled matrix product built on tasks, in libhcr itself.
///
/// \code
/// hcr::Event done = hcr::blas::gemm(rt, a, b, c, 512);   // C = A * B, 512 x 512 tiles
/// done.get();
/// \endcode
///
/// The tiled algorithms live in hcr::linalg (<hcr/linalg.hpp>, target hcr::linalg): gemm with
/// transposes, syrk, trsm, potrf, potrs. This product stays here for programs that link hcr::hcr
/// alone; it submits the same tasks as hcr::linalg::gemm without transposes.
#pragma once

#include <hcr/buffer.hpp>
#include <hcr/runtime.hpp>
#include <hcr/task.hpp>

namespace hcr::blas {

/// C = alpha * A * B + beta * C, as one task per C tile and k step: each C tile's k steps form a
/// chain of accumulating tasks, and the tiles are independent, so the scheduler can spread them.
/// A is m x k, B is k x n, C is m x n; anything else throws Error naming the shapes. The buffers
/// must not be partitioned and C must not alias A or B. Returns at once; the Event completes when
/// C is whole again.
template <class T>
Event gemm(Runtime& rt, const Buffer<T>& a, const Buffer<T>& b, const Buffer<T>& c, size_t tile,
           T alpha = T(1), T beta = T(0));

extern template HCR_API Event gemm<float>(Runtime&, const Buffer<float>&, const Buffer<float>&,
                                          const Buffer<float>&, size_t, float, float);
extern template HCR_API Event gemm<double>(Runtime&, const Buffer<double>&, const Buffer<double>&,
                                           const Buffer<double>&, size_t, double, double);

/// Name of the built-in gemm kernel for element type T ("gemm_f32", ...).
template <class T>
constexpr const char* gemm_kernel_name() {
  if constexpr (dtype_of_v<T> == DType::f32) return "gemm_f32";
  else if constexpr (dtype_of_v<T> == DType::f64) return "gemm_f64";
  else if constexpr (dtype_of_v<T> == DType::f16) return "gemm_f16";
  else if constexpr (dtype_of_v<T> == DType::bf16) return "gemm_bf16";
  else static_assert(sizeof(T) == 0, "no gemm for this type");
}

}  // namespace hcr::blas
