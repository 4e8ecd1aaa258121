/// Tiled dense linear algebra over distributed tiles: hcr::linalg's algorithms, each tile task
/// submitted to a Cluster instead of one Runtime (owner computes: a task runs on the rank that owns
/// the tile it writes, and each tile version crosses each link at most once).
///
///   Tiles<double> a = m.partition(512, 512);
///   cluster.distribute_2d(a, p, q);             // every rank, the same calls
///   hcr::mpi::potrf(cluster, hcr::linalg::Uplo::lower, a);
///   cluster.wait_all();                         // the factor's tiles are home on their owners
///
/// The operands are tile grids whose every tile is registered with the cluster (distribute,
/// distribute_1d, distribute_2d); grids and tiles must conform as the single-runtime calls require
/// (hcr::linalg::gemm...). Every rank makes the same calls in the same order; a call returns once
/// its tasks are submitted. The shapes are checked on every rank before anything is submitted: a
/// mistake throws Error(invalid_argument) naming the call, the tiles and their shapes, on every
/// rank alike. Priorities are those of hcr::linalg (StarPU's cholesky_implicit ones for potrf).
#pragma once

#include <hcr/linalg.hpp>
#include <hcr/mpi.hpp>

namespace hcr::mpi {

using hcr::linalg::Diag;
using hcr::linalg::Op;
using hcr::linalg::Side;
using hcr::linalg::Uplo;

/// C = alpha op(A) op(B) + beta C over tile grids ("gemm_<t>" tasks, one per C tile and k step).
template <class T>
HCR_MPI_API void gemm(Cluster& cluster, Op trans_a, Op trans_b, double alpha, const Tiles<T>& a,
                      const Tiles<T>& b, double beta, const Tiles<T>& c);

/// The `uplo` triangle of C = alpha op(A) op(A)^T + beta C ("syrk_<t>" on the diagonal tiles,
/// "gemm_<t>" on the others of that triangle).
template <class T>
HCR_MPI_API void syrk(Cluster& cluster, Uplo uplo, Op trans, double alpha, const Tiles<T>& a,
                      double beta, const Tiles<T>& c);

/// Right-looking tiled Cholesky of the square tile grid A (square diagonal tiles): the factor
/// overwrites A's `uplo` triangle ("potrf_<t>", "trsm_<t>", "syrk_<t>", "gemm_<t>").
template <class T>
HCR_MPI_API void potrf(Cluster& cluster, Uplo uplo, const Tiles<T>& a);

/// A X = B from the factor potrf left in A: two triangular sweeps, X overwriting B.
template <class T>
HCR_MPI_API void potrs(Cluster& cluster, Uplo uplo, const Tiles<T>& a, const Tiles<T>& b);

}  // namespace hcr::mpi
