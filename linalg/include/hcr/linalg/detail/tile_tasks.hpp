// The tiled algorithms as loops of tile tasks over partitioned operands: what the entry points of
// linalg.cpp run once their operands are checked and partitioned. An installed detail header
// (header-only, hcr::linalg's internals): hcr::mpi includes it for its own sink; not an API.
#pragma once

#include <hcr/builtin_params.h>
#include <hcr/linalg/detail/tiling.hpp>

#include <optional>
#include <vector>

namespace hcr::linalg::detail {

/// Where the tile tasks go: one Runtime. hcr::mpi's ClusterSink (mpi/src/linalg.cpp) sends them
/// to a Cluster instead, whose Task has the same builder: a sink names its task type and offers
/// kernel(name), submit(task) and runtime() (the local runtime, whose devices set the priorities).
struct RuntimeSink {
  using TaskType = Task;
  RuntimeSink(Runtime& r) : rt(r) {}  // NOLINT(google-explicit-constructor): TileTasks<T> t(rt)
  Kernel kernel(const std::string& name) { return rt.kernel(name); }
  void submit(TaskType& t) { rt.submit(t); }
  Runtime& runtime() { return rt; }
  Runtime& rt;
};

/// Whether every device of `rt` is of one architecture (a CPU-only machine, or identical GPUs):
/// see update_priority.
inline bool one_architecture(const Runtime& rt) {
  const std::vector<Device> devices = rt.devices();
  for (const Device& d : devices)
    if (d.arch != devices.front().arch) return false;
  return true;
}

/// Submits one tile task per call, with the built-in kernel's parameter block. Kernels are looked
/// up by name once per algorithm call.
template <class T, class Sink = RuntimeSink>
class TileTasks {
 public:
  using TaskType = typename Sink::TaskType;
  explicit TileTasks(Sink sink) : sink_(sink) {}

  /// Whether the trailing updates beyond the look-ahead go without priority (update_priority).
  /// Asked by the factorisations only, so other calls never list the devices.
  bool look_ahead_only() {
    if (!look_ahead_) look_ahead_ = one_architecture(sink_.runtime());
    return *look_ahead_;
  }

  const Kernel& kernel(Kernel& k, const char* op) {
    if (!k.valid()) k = sink_.kernel(kernel_name<T>(op));
    return k;
  }
  const Kernel& gemm_kernel() { return kernel(gemm_, "gemm"); }
  const Kernel& syrk_kernel() { return kernel(syrk_, "syrk"); }
  const Kernel& trsm_kernel() { return kernel(trsm_, "trsm"); }
  const Kernel& potrf_kernel() { return kernel(potrf_, "potrf"); }
  const Kernel& getrf_kernel() { return kernel(getrf_, "getrf_nopiv"); }

  /// C = alpha op(A) op(B) + beta C. With beta == 0 C is only written: a device with its own
  /// memory then needs no copy of C's old contents (the kernel must not read them).
  void gemm(Op ta, Op tb, double alpha, const Buffer<T>& a, const Buffer<T>& b, double beta,
            const Buffer<T>& c, int priority = 0) {
    const hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, alpha, beta, static_cast<int32_t>(ta),
                              static_cast<int32_t>(tb)};
    TaskType t(gemm_kernel());
    t.read(a).read(b);
    if (beta == 0) t.write(c);
    else t.read_write(c);
    sink_.submit(t.param(p).priority(priority));
  }
  /// The `uplo` triangle of C = alpha op(A) op(A)^T + beta C. Read-write even with beta == 0:
  /// the other triangle must come back as it was.
  void syrk(Uplo uplo, Op trans, double alpha, const Buffer<T>& a, double beta, const Buffer<T>& c,
            int priority = 0) {
    const hcr_syrk_params_t p{HCR_SYRK_PARAMS_STRUCT_SIZE, alpha, beta, static_cast<int32_t>(uplo),
                              static_cast<int32_t>(trans)};
    TaskType t(syrk_kernel());
    sink_.submit(t.read(a).read_write(c).param(p).priority(priority));
  }
  /// B = alpha op(A)^-1 B (left) or alpha B op(A)^-1 (right).
  void trsm(Side side, Uplo uplo, Op trans, Diag diag, double alpha, const Buffer<T>& a,
            const Buffer<T>& b, int priority = 0) {
    const hcr_trsm_params_t p{HCR_TRSM_PARAMS_STRUCT_SIZE, alpha,
                              static_cast<int32_t>(side),  static_cast<int32_t>(uplo),
                              static_cast<int32_t>(trans), static_cast<int32_t>(diag)};
    TaskType t(trsm_kernel());
    sink_.submit(t.read(a).read_write(b).param(p).priority(priority));
  }
  void potrf(Uplo uplo, const Buffer<T>& a, int priority) {
    const hcr_potrf_params_t p{HCR_POTRF_PARAMS_STRUCT_SIZE, static_cast<int32_t>(uplo)};
    TaskType t(potrf_kernel());
    sink_.submit(t.read_write(a).param(p).priority(priority));
  }
  void getrf(const Buffer<T>& a, int priority) {
    TaskType t(getrf_kernel());
    sink_.submit(t.read_write(a).priority(priority));
  }

 private:
  Sink sink_;
  std::optional<bool> look_ahead_;
  Kernel gemm_, syrk_, trsm_, potrf_, getrf_;
};

/// C = alpha op(A) op(B) + beta C over tiles: each C tile's k steps form a chain (beta on the
/// first step, 1 after), the C tiles are independent.
template <class T, class S>
void gemm_tiles(TileTasks<T, S>& t, Op ta, Op tb, double alpha, const Tiles<T>& a,
                const Tiles<T>& b, double beta, const Tiles<T>& c) {
  const bool na = ta == Op::no_trans, nb = tb == Op::no_trans;
  const size_t kt = na ? a.cols() : a.rows();
  for (size_t i = 0; i < c.rows(); ++i)
    for (size_t j = 0; j < c.cols(); ++j)
      for (size_t k = 0; k < kt; ++k)
        t.gemm(ta, tb, alpha, na ? a(i, k) : a(k, i), nb ? b(k, j) : b(j, k), k == 0 ? beta : 1.0,
               c(i, j));
}

/// The `uplo` triangle of C = alpha op(A) op(A)^T + beta C over tiles: syrk on the diagonal
/// tiles, gemm on the others of that triangle; tiles of the other triangle are not touched.
template <class T, class S>
void syrk_tiles(TileTasks<T, S>& t, Uplo uplo, Op trans, double alpha, const Tiles<T>& a,
                double beta, const Tiles<T>& c) {
  const bool nt = trans == Op::no_trans;
  const size_t n = c.rows(), kt = nt ? a.cols() : a.rows();
  // op(A)'s tile (i, k): A's, or A's tile (k, i) transposed.
  auto op_a = [&](size_t i, size_t k) { return nt ? a(i, k) : a(k, i); };
  for (size_t i = 0; i < n; ++i)
    for (size_t j = uplo == Uplo::lower ? 0 : i; j < (uplo == Uplo::lower ? i + 1 : n); ++j)
      for (size_t k = 0; k < kt; ++k) {
        const double b = k == 0 ? beta : 1.0;
        if (i == j) {
          t.syrk(uplo, trans, alpha, op_a(i, k), b, c(i, i));
        } else {
          // C(i, j) += alpha op(A)(i, k) op(A)(j, k)^T: A(i,k) A(j,k)^T, or A(k,i)^T A(k,j).
          t.gemm(nt ? Op::no_trans : Op::trans, nt ? Op::trans : Op::no_trans, alpha, op_a(i, k),
                 op_a(j, k), b, c(i, j));
        }
      }
}

/// op(A) X = alpha B (left) or X op(A) = alpha B (right) over tiles, X overwriting B (as
/// Chameleon's pztrsm): block substitution, a trsm per tile of the block row (column) of B being
/// solved, then gemm updates of the rows (columns) still to solve. B is scaled by alpha at the
/// first step only: the trsm's alpha there, the updates' beta for every other tile.
template <class T, class S>
void trsm_tiles(TileTasks<T, S>& t, Side side, Uplo uplo, Op trans, Diag diag, double alpha,
                const Tiles<T>& a, const Tiles<T>& b) {
  const bool nt = trans == Op::no_trans;
  // op(A)'s tile (i, j): A's, or A's tile (j, i) transposed.
  auto op_a = [&](size_t i, size_t j) { return nt ? a(i, j) : a(j, i); };
  const size_t mt = b.rows(), ntiles = b.cols();
  if (side == Side::left) {
    // op(A) lower: block rows from the first (forward substitution); upper: from the last.
    const bool forward = (uplo == Uplo::lower) == nt;
    for (size_t s = 0; s < mt; ++s) {
      const size_t k = forward ? s : mt - 1 - s;
      const double scale = s == 0 ? alpha : 1.0;
      for (size_t j = 0; j < ntiles; ++j) t.trsm(side, uplo, trans, diag, scale, a(k, k), b(k, j));
      // B(i, :) = scale B(i, :) - op(A)(i, k) X(k, :) for the rows still to solve.
      for (size_t i = forward ? k + 1 : 0; i < (forward ? mt : k); ++i)
        for (size_t j = 0; j < ntiles; ++j)
          t.gemm(trans, Op::no_trans, -1.0, op_a(i, k), b(k, j), scale, b(i, j));
    }
  } else {
    // op(A) upper: block columns from the first; lower: from the last.
    const bool forward = (uplo == Uplo::upper) == nt;
    for (size_t s = 0; s < ntiles; ++s) {
      const size_t k = forward ? s : ntiles - 1 - s;
      const double scale = s == 0 ? alpha : 1.0;
      for (size_t i = 0; i < mt; ++i) t.trsm(side, uplo, trans, diag, scale, a(k, k), b(i, k));
      // B(:, j) = scale B(:, j) - X(:, k) op(A)(k, j) for the columns still to solve.
      for (size_t j = forward ? k + 1 : 0; j < (forward ? ntiles : k); ++j)
        for (size_t i = 0; i < mt; ++i)
          t.gemm(Op::no_trans, trans, -1.0, b(i, k), op_a(k, j), scale, b(i, j));
    }
  }
}

/// StarPU's cholesky_implicit priority for step k, tiles (m, n) of an N x N grid (2N - 2k - m - n;
/// potrf passes m = n = 0, trsm n = 0), raised by 2N so that every one is positive: dmda puts
/// only tasks of positive priority ahead of others in its queues. Its least value is 6.
inline int critical_path_priority(size_t grid, size_t k, size_t m, size_t n) {
  return static_cast<int>(4 * grid - 2 * k - m - n);
}

/// The priority of an update at step k of potrf or getrf. The updates the next panel needs
/// (`next_panel`: tiles of column k + 1, and of row k + 1 for LU: the look-ahead) always carry the
/// critical path's priority. The others carry it only where devices differ (`look_ahead_only`
/// false): there the whole trailing update ranked by the critical path lets the fast devices keep
/// to it (a simulated GPU + CPU machine, n = 16384, tiles of 1024: 8-10% faster under dmda and
/// dmdas, 3% under peft, than with the look-ahead alone). Where every device is alike they carry
/// none (0) and run in the order they became ready, each soon after the panel tile it reads was
/// made, while that tile is still in the cache of the core that made it: ranking all of them
/// interleaves the steps and reads cold tiles (tiled Cholesky n = 8192 on 2 cores, dmda: gemm
/// tiles of 256 took 317 us instead of 280, the factorisation 10% longer). That is PLASMA's
/// look-ahead on multicore, and StarPU's cholesky_implicit with bounded priorities.
inline int update_priority(size_t grid, size_t k, size_t m, size_t n, bool next_panel,
                           bool look_ahead_only) {
  return next_panel || !look_ahead_only ? critical_path_priority(grid, k, m, n) : 0;
}

/// Right-looking tiled Cholesky, as StarPU's cholesky_implicit submits it.
template <class T, class S>
void potrf_tiles(TileTasks<T, S>& t, Uplo uplo, const Tiles<T>& a) {
  const size_t n = a.rows();
  const bool lower = uplo == Uplo::lower;
  for (size_t k = 0; k < n; ++k) {
    t.potrf(uplo, a(k, k), critical_path_priority(n, k, 0, 0));
    // The panel: L(m, k) = A(m, k) L(k, k)^-T below the diagonal tile (lower), or
    // U(k, m) = U(k, k)^-T A(k, m) right of it (upper).
    for (size_t m = k + 1; m < n; ++m) {
      const int p = critical_path_priority(n, k, m, 0);
      if (lower)
        t.trsm(Side::right, Uplo::lower, Op::trans, Diag::non_unit, 1.0, a(k, k), a(m, k), p);
      else t.trsm(Side::left, Uplo::upper, Op::trans, Diag::non_unit, 1.0, a(k, k), a(k, m), p);
    }
    // The trailing matrix, tile (m, j) with m >= j > k of the lower triangle (its mirror (j, m)
    // for upper): minus L(m, k) L(j, k)^T, or U(k, j)^T U(k, m).
    for (size_t j = k + 1; j < n; ++j) {
      const int pd = update_priority(n, k, j, j, j == k + 1, t.look_ahead_only());
      if (lower) t.syrk(Uplo::lower, Op::no_trans, -1.0, a(j, k), 1.0, a(j, j), pd);
      else t.syrk(Uplo::upper, Op::trans, -1.0, a(k, j), 1.0, a(j, j), pd);
      for (size_t m = j + 1; m < n; ++m) {
        const int p = update_priority(n, k, m, j, j == k + 1, t.look_ahead_only());
        if (lower) t.gemm(Op::no_trans, Op::trans, -1.0, a(m, k), a(j, k), 1.0, a(m, j), p);
        else t.gemm(Op::trans, Op::no_trans, -1.0, a(k, j), a(k, m), 1.0, a(j, m), p);
      }
    }
  }
}

/// A X = B from the Cholesky factor in A: L Y = B then L^T X = Y (lower), U^T Y = B then U X = Y
/// (upper).
template <class T, class S>
void potrs_tiles(TileTasks<T, S>& t, Uplo uplo, const Tiles<T>& a, const Tiles<T>& b) {
  const bool lower = uplo == Uplo::lower;
  trsm_tiles(t, Side::left, uplo, lower ? Op::no_trans : Op::trans, Diag::non_unit, 1.0, a, b);
  trsm_tiles(t, Side::left, uplo, lower ? Op::trans : Op::no_trans, Diag::non_unit, 1.0, a, b);
}

/// Right-looking tiled LU without pivoting, with the priorities of potrf_tiles (the look-ahead:
/// row and column k + 1).
template <class T, class S>
void getrf_tiles(TileTasks<T, S>& t, const Tiles<T>& a) {
  const size_t n = a.rows();
  for (size_t k = 0; k < n; ++k) {
    t.getrf(a(k, k), critical_path_priority(n, k, 0, 0));
    for (size_t m = k + 1; m < n; ++m) {
      const int p = critical_path_priority(n, k, m, 0);
      // U(k, m) = L(k, k)^-1 A(k, m); L(m, k) = A(m, k) U(k, k)^-1.
      t.trsm(Side::left, Uplo::lower, Op::no_trans, Diag::unit, 1.0, a(k, k), a(k, m), p);
      t.trsm(Side::right, Uplo::upper, Op::no_trans, Diag::non_unit, 1.0, a(k, k), a(m, k), p);
    }
    for (size_t m = k + 1; m < n; ++m)
      for (size_t j = k + 1; j < n; ++j)
        t.gemm(Op::no_trans, Op::no_trans, -1.0, a(m, k), a(k, j), 1.0, a(m, j),
               update_priority(n, k, m, j, m == k + 1 || j == k + 1, t.look_ahead_only()));
  }
}

}  // namespace hcr::linalg::detail
