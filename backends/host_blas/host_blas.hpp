// The built-in BLAS and LAPACK kernels of <hcr/plugin.h> computed on the host, for the backends
// whose kernels see host pointers (cpu, sim): each launch's arguments and parameter block checked
// against the kernel's contract, its flop count, and the calls into hcr's own single-threaded
// OpenBLAS. Thread-safe: calls on different threads share nothing.
#pragma once

#include <hcr/plugin.h>
#include <hcr/sdk/blas.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace hcr::host_blas {

using Op = sdk::BlasOp;

/// A built-in kernel: the operation and its element type (f32 or f64).
using Builtin = sdk::BlasBuiltin;

/// The built-in named `name` ("gemm_f32", "syrk_f64", ..., "getrf_nopiv_f64"), or nullopt.
std::optional<Builtin> find(std::string_view name) noexcept;

/// The kernel's name: "trsm_f32".
std::string name(Builtin kernel);

/// A launch checked and decoded. Dimensions, by operation: gemm C (m x n) += op(A) (m x k) op(B);
/// syrk C n x n, op(A) n x k; trsm B m x n (A m x m on the left, n x n on the right); potrf and
/// getrf_nopiv A n x n. The parameter block decoded (an older caller's block reads as if the fields
/// it lacks were 0: the defaults).
struct Call {
  Builtin kernel{};
  uint64_t m = 0, n = 0, k = 0;
  sdk::BlasParams params{};

  /// Floating-point operations, as the simulated devices' cost model counts them: gemm 2mnk, syrk
  /// n²k, trsm m²n (left) or mn² (right), potrf n³/3, getrf_nopiv 2n³/3.
  double flops() const noexcept;
};

/// Checks a launch of `kernel` against its contract in plugin.h: the number of buffers, their
/// element types and shapes, the parameter block (size, struct_size, enumeration values).
/// Throws sdk::Error(HCR_ERROR_INVALID_ARGUMENT) naming what does not fit. `args` is the host's
/// array (stepped through by its own struct_size).
Call check(Builtin kernel, const hcr_arg_t* args, size_t num_args, const void* params,
           size_t params_size);

/// Runs a checked call on the calling thread, on host pointers (args[i].host, already resolved by
/// the backend), with `threads` BLAS threads: 1 is all this build offers (hcr's private OpenBLAS
/// is held at one thread; more throws HCR_ERROR_UNSUPPORTED). Threads may call it at once. Throws
/// sdk::Error: an argument not in host memory or too large for BLAS's 32-bit indices, and, as
/// plugin.h says, HCR_ERROR_INVALID_ARGUMENT for a matrix potrf finds not positive definite (naming
/// the order of the minor) or a zero pivot in getrf_nopiv (naming its row).
void run(const Call& call, const hcr_arg_t* args, int threads);

/// How a call may be cut into independent blocks and who runs them: `for_each(n, body)` calls
/// body(0) ... body(n - 1), in any order and on any threads, and returns when all have returned.
/// The cpu backend runs them as a TBB parallel_for in its own arena, so that workers with nothing
/// else to run join a big tile's call (StarPU's parallel tasks, with the width set by whoever is
/// idle rather than fixed).
struct Split {
  std::function<void(size_t, const std::function<void(size_t)>&)> for_each;
  uint64_t grain = 128;    ///< rows (or columns) per block, at least
  double min_flops = 3e7;  ///< calls below this run whole: a block would not pay for its hand-off
};

/// As run(call, args, 1), cut into blocks where the operation allows it: gemm by rows of C (or
/// columns, when C is short), syrk by block rows of its triangle (a gemm beside a smaller syrk on
/// the diagonal), trsm by the columns of B (left side) or its rows (right side). potrf and
/// getrf_nopiv run whole. Every block is a single-threaded call of this library's OpenBLAS on
/// disjoint parts of the output, so the result is what run() computes, up to the order of sums
/// within syrk's blocks.
void run_split(const Call& call, const hcr_arg_t* args, const Split& split);

}  // namespace hcr::host_blas
