// The built-in BLAS kernels of plugin.h (gemm, syrk, trsm, potrf, getrf_nopiv) on cuBLAS and
// cuSOLVER: checking a launch against the contract, the row-major to column-major mapping, and a
// first estimate of the time.
#pragma once

#include "cuda_device.hpp"

#include <hcr/plugin.h>
#include <hcr/sdk/blas.hpp>

#include <optional>
#include <string>

namespace hcr::cuda {

/// Bytes per element; throws INVALID_ARGUMENT for an unknown dtype.
size_t dtype_size(hcr_dtype_t t);

using BlasOp = sdk::BlasOp;

/// A built-in kernel: what it computes, on which element type.
using Builtin = sdk::BlasBuiltin;

/// The built-in named `name` ("gemm_f32", "potrf_f64", ...), or nullopt. gemm comes in f32, f64,
/// f16 and bf16; the others in f32 and f64.
std::optional<Builtin> builtin(const std::string& name);

/// Whether the kernel runs on cuSOLVER (potrf, getrf_nopiv) rather than cuBLAS alone.
bool needs_cusolver(BlasOp op) noexcept;

/// One launch of a built-in, checked, in the ABI's row-major terms. Matrix i is the launch's
/// argument i: gemm A, B, C; syrk A, C; trsm A, B; potrf and getrf_nopiv A.
struct BlasCall {
  Builtin kernel;
  std::string name;  ///< "trsm_f64", for messages
  // gemm: C is m x n, op(A) m x k. syrk: C is n x n, op(A) n x k. trsm: B is m x n.
  // potrf, getrf_nopiv: A is n x n.
  int m = 0, n = 0, k = 0;
  void* ptr[3] = {nullptr, nullptr, nullptr};  ///< device address of each matrix's element (0,0)
  int ld[3] = {1, 1, 1};                       ///< leading dimensions, >= max(1, columns)
  sdk::BlasParams params;  ///< alpha, beta and the flags (trans_a is syrk's and trsm's trans)
};

/// Checks the launch's arguments and parameters against plugin.h's contract for `kernel` (the
/// number and element type of the buffers, their shapes and leading dimensions, dimensions within
/// cuBLAS's int range, the parameter block and the values of its enumerations) and builds the call.
/// `ptrs` holds a device pointer per argument (NULL allowed: empty matrices, estimates). Throws
/// INVALID_ARGUMENT with a message naming the shapes, argument or parameter at fault.
BlasCall make_call(const Builtin& kernel, const hcr_launch_args_t& a, void* const* ptrs);

/// Enqueues the call on `lane`'s stream (with lane's enqueue mutex held). Factorizations copy their
/// status word into `info` (pinned host memory, read when the operation completes; see
/// factor_error); the others ignore it.
void enqueue_blas(Lane& lane, const BlasCall& call, int* info);

/// The launch's error for a factorization whose status word came back non-zero: a leading minor
/// that is not positive definite (potrf), a zero pivot (getrf_nopiv), both INVALID_ARGUMENT.
hcr_error_t* factor_error(const BlasCall& call, int info);

/// A first guess of the call's time on `gpu`, before the cost model has measured anything.
double estimate_seconds(const BlasCall& call, const GpuInfo& gpu);

}  // namespace hcr::cuda
