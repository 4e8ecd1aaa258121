/// \file linalg.hpp
/// Tiled dense linear algebra on hcr tasks (hcr::linalg, target `hcr::linalg`): gemm with
/// transposes, syrk, trsm, Cholesky (potrf) and its solve (potrs), LU without pivoting.
///
/// \code
/// #include <hcr/linalg.hpp>
/// namespace la = hcr::linalg;
/// auto a = rt.buffer<double>(n, n), b = rt.buffer<double>(n, 1);  // A: SPD, filled by the caller
/// la::potrf(rt, la::Uplo::lower, a, 256);           // A = L L^T, L in A's lower triangle
/// la::potrs(rt, la::Uplo::lower, a, b, 256).get();  // B = A^-1 B, once the factor is there
/// \endcode
///
/// Each call takes whole buffers (row-major, as every hcr buffer), partitions them into tile x tile
/// tiles (the last row and column of tiles smaller when tile does not divide the sizes), submits
/// one task per tile operation — the built-in kernels "gemm_<t>", "syrk_<t>", "trsm_<t>",
/// "potrf_<t>", "getrf_nopiv_<t>" (t = f32, f64) of <hcr/builtin_params.h> — and joins the tiles
/// again before it returns. It returns at once: dependencies follow from the tiles' access order,
/// so calls chain without waiting (a potrs after a potrf waits for the factor), and the returned
/// Event completes when the output buffer is whole again. A tile task that fails (a matrix that is
/// not positive definite: the potrf of a diagonal tile names the order of its leading minor) fails
/// that Event with ErrorCode::dependency carrying the kernel's message. The scheduler places each
/// tile task on any device whose plugin offers its kernel.
///
/// Misuse throws Error(invalid_argument) at the call, before any buffer is partitioned, naming the
/// values: shapes that do not fit, a tile of 0, an output aliasing an input, an empty handle, a
/// buffer of another runtime or one partitioned already (unpartition it first). A tile of a
/// partitioned buffer is a buffer like any other. Thread safety: calls may come from any thread,
/// and calls made one after the other on one thread are ordered as their tasks are. A buffer is
/// partitioned from the start of a call until it returns: a call from another thread using the
/// same buffer meanwhile fails as for a partitioned buffer.
#pragma once

#include <hcr/buffer.hpp>
#include <hcr/builtin_params.h>
#include <hcr/event.hpp>
#include <hcr/runtime.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#if defined(_WIN32)
#define HCR_LINALG_API
#else
#define HCR_LINALG_API __attribute__((visibility("default")))
#endif

namespace hcr::linalg {

/// op(X): X itself or its transpose. Values match hcr_blas_trans_t.
enum class Op : int32_t { no_trans = HCR_NO_TRANS, trans = HCR_TRANS };
/// Which triangle of a matrix is read or written. Values match hcr_blas_uplo_t.
enum class Uplo : int32_t { lower = HCR_LOWER, upper = HCR_UPPER };
/// Whether the triangular matrix of trsm stands left or right of X. Values match hcr_blas_side_t.
enum class Side : int32_t { left = HCR_LEFT, right = HCR_RIGHT };
/// Whether a triangular matrix has a unit diagonal (not read). Values match hcr_blas_diag_t.
enum class Diag : int32_t { non_unit = HCR_NON_UNIT, unit = HCR_UNIT };

/// The element types hcr::linalg works on.
template <class T>
concept Real = std::is_same_v<T, float> || std::is_same_v<T, double>;

/// The scalar arguments take the buffers' element type without taking part in deduction:
/// `gemm(rt, ..., 1.0, a, b, 0.0, c, 256)` works for Buffer<float> too.
template <class T>
using Scalar = std::type_identity_t<T>;

/// C = alpha * op(A) * op(B) + beta * C: op(A) m x k (A is k x m under Op::trans), op(B) k x n, C
/// m x n. One task per C tile and k step ("gemm_<t>"): each C tile's k steps form a chain, the
/// tiles are independent. With beta == 0, C's old contents are not read (NaN there does not
/// leak). C must not alias A or B; A may be B.
template <Real T>
Event gemm(Runtime& rt, Op trans_a, Op trans_b, Scalar<T> alpha, const Buffer<T>& a,
           const Buffer<T>& b, Scalar<T> beta, const Buffer<T>& c, size_t tile);

/// C = alpha * op(A) * op(A)^T + beta * C on the `uplo` triangle of the n x n matrix C (the other
/// triangle is neither read nor written); op(A) n x k (A is k x n under Op::trans). Diagonal
/// tiles are "syrk_<t>" tasks, the others "gemm_<t>". C must not alias A.
template <Real T>
Event syrk(Runtime& rt, Uplo uplo, Op trans, Scalar<T> alpha, const Buffer<T>& a, Scalar<T> beta,
           const Buffer<T>& c, size_t tile);

/// Solves op(A) * X = alpha * B (Side::left, A m x m) or X * op(A) = alpha * B (Side::right, A
/// n x n) for the m x n matrix X, which overwrites B. Only the `uplo` triangle of A is read, and
/// with Diag::unit not its diagonal. Diagonal tiles of A are "trsm_<t>" tasks, the updates of B
/// "gemm_<t>" (Chameleon's pztrsm). B must not alias A.
template <Real T>
Event trsm(Runtime& rt, Side side, Uplo uplo, Op trans, Diag diag, Scalar<T> alpha,
           const Buffer<T>& a, const Buffer<T>& b, size_t tile);

/// Cholesky factorisation of the symmetric positive definite n x n matrix A, of which only the
/// `uplo` triangle is read: A = L * L^T with L lower (Uplo::lower) or A = U^T * U with U upper;
/// the factor overwrites that triangle, the other triangle is left as it was. Right-looking: step
/// k factors diagonal tile k ("potrf_<t>"), solves the tiles below it (or right of it, upper)
/// ("trsm_<t>"), then updates the trailing matrix ("syrk_<t>" on the diagonal, "gemm_<t>"
/// elsewhere). Tasks carry StarPU's cholesky_implicit priorities, 2N - 2k for potrf(k),
/// 2N - 2k - m for trsm(m, k), 2N - 2k - m - n for the update of tile (m, n) (N tiles per side),
/// raised by 2N so that all are positive (dmda reorders its queues by positive priorities only):
/// the critical path first, under the policies that honour priorities. Where every device of the
/// runtime is of one architecture (a CPU-only machine), only the panel and the look-ahead (the
/// updates of the next panel's column, n = k + 1) carry them; the other updates have priority 0
/// and run in the order they became ready, while the panel tiles they read are still in cache.
template <Real T>
Event potrf(Runtime& rt, Uplo uplo, const Buffer<T>& a, size_t tile);

/// Solves A * X = B from the Cholesky factor that potrf(rt, uplo, A, ...) left in A: two
/// triangular sweeps (trsm), X overwriting the n x r matrix B. Call it right after potrf: it
/// waits for the factor. B must not alias A.
template <Real T>
Event potrs(Runtime& rt, Uplo uplo, const Buffer<T>& a, const Buffer<T>& b, size_t tile);

/// LU factorisation without pivoting of the n x n matrix A: A = L * U in place, L unit lower (its
/// diagonal not stored), U upper. Right-looking, tiled as potrf ("getrf_nopiv_<t>" on diagonal
/// tiles, "trsm_<t>", "gemm_<t>"), priorities likewise. Stable without pivoting only for matrices
/// such as diagonally dominant ones; a zero pivot fails the Event naming its row within its tile.
template <Real T>
Event getrf_nopiv(Runtime& rt, const Buffer<T>& a, size_t tile);

#define HCR_LINALG_DECLARE(T)                                                                  \
  extern template HCR_LINALG_API Event gemm<T>(Runtime&, Op, Op, T, const Buffer<T>&,          \
                                               const Buffer<T>&, T, const Buffer<T>&, size_t); \
  extern template HCR_LINALG_API Event syrk<T>(Runtime&, Uplo, Op, T, const Buffer<T>&, T,     \
                                               const Buffer<T>&, size_t);                      \
  extern template HCR_LINALG_API Event trsm<T>(Runtime&, Side, Uplo, Op, Diag, T,              \
                                               const Buffer<T>&, const Buffer<T>&, size_t);    \
  extern template HCR_LINALG_API Event potrf<T>(Runtime&, Uplo, const Buffer<T>&, size_t);     \
  extern template HCR_LINALG_API Event potrs<T>(Runtime&, Uplo, const Buffer<T>&,              \
                                                const Buffer<T>&, size_t);                     \
  extern template HCR_LINALG_API Event getrf_nopiv<T>(Runtime&, const Buffer<T>&, size_t);
HCR_LINALG_DECLARE(float)
HCR_LINALG_DECLARE(double)
#undef HCR_LINALG_DECLARE

}  // namespace hcr::linalg
