// The host's built-in kernels: checks of each launch against plugin.h's contract, then CBLAS (row
// major, as plugin.h lays matrices out) and OpenBLAS's LAPACK potrf, all from the OpenBLAS this
// library is linked with (a private copy, held at one thread: the workers are the parallelism).
// getrf without pivoting, which no LAPACK offers, is a blocked right-looking loop over the same
// BLAS.
#include "host_blas.hpp"

#include <hcr/sdk/backend.hpp>

#include <cblas.h>

#include <algorithm>
#include <climits>

// OpenBLAS's LAPACK entries, Fortran calling convention: every argument by address, and the
// length of each character argument appended (gfortran's hidden argument; OpenBLAS's own potrf,
// written in C, ignores it). No header of the package declares them.
extern "C" {
void spotrf_(const char* uplo, const blasint* n, float* a, const blasint* lda, blasint* info,
             size_t uplo_len);
void dpotrf_(const char* uplo, const blasint* n, double* a, const blasint* lda, blasint* info,
             size_t uplo_len);
}

namespace hcr::host_blas {
namespace {

using sdk::Error;

[[noreturn]] void invalid(const Call& c, const std::string& what) {
  throw Error(HCR_ERROR_INVALID_ARGUMENT, name(c.kernel) + ": " + what);
}

std::string shape(const hcr_arg_t& a) {
  return std::to_string(a.rows) + "x" + std::to_string(a.cols);
}

// ---- BLAS by element type -------------------------------------------------------------------

CBLAS_TRANSPOSE trans_of(bool t) { return t ? CblasTrans : CblasNoTrans; }
CBLAS_UPLO uplo_of(bool upper) { return upper ? CblasUpper : CblasLower; }

template <class T>
struct Blas;

template <>
struct Blas<float> {
  static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k,
                   double alpha, const float* a, blasint lda, const float* b, blasint ldb,
                   double beta, float* c, blasint ldc) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha), a, lda, b, ldb,
                static_cast<float>(beta), c, ldc);
  }
  static void syrk(CBLAS_UPLO u, CBLAS_TRANSPOSE t, blasint n, blasint k, double alpha,
                   const float* a, blasint lda, double beta, float* c, blasint ldc) {
    cblas_ssyrk(CblasRowMajor, u, t, n, k, static_cast<float>(alpha), a, lda,
                static_cast<float>(beta), c, ldc);
  }
  static void trsm(CBLAS_SIDE s, CBLAS_UPLO u, CBLAS_TRANSPOSE t, CBLAS_DIAG d, blasint m,
                   blasint n, double alpha, const float* a, blasint lda, float* b, blasint ldb) {
    cblas_strsm(CblasRowMajor, s, u, t, d, m, n, static_cast<float>(alpha), a, lda, b, ldb);
  }
  static void ger(blasint m, blasint n, double alpha, const float* x, blasint incx, const float* y,
                  blasint incy, float* a, blasint lda) {
    cblas_sger(CblasRowMajor, m, n, static_cast<float>(alpha), x, incx, y, incy, a, lda);
  }
  static void potrf(char uplo, blasint n, float* a, blasint lda, blasint* info) {
    spotrf_(&uplo, &n, a, &lda, info, 1);
  }
};

template <>
struct Blas<double> {
  static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k,
                   double alpha, const double* a, blasint lda, const double* b, blasint ldb,
                   double beta, double* c, blasint ldc) {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  static void syrk(CBLAS_UPLO u, CBLAS_TRANSPOSE t, blasint n, blasint k, double alpha,
                   const double* a, blasint lda, double beta, double* c, blasint ldc) {
    cblas_dsyrk(CblasRowMajor, u, t, n, k, alpha, a, lda, beta, c, ldc);
  }
  static void trsm(CBLAS_SIDE s, CBLAS_UPLO u, CBLAS_TRANSPOSE t, CBLAS_DIAG d, blasint m,
                   blasint n, double alpha, const double* a, blasint lda, double* b, blasint ldb) {
    cblas_dtrsm(CblasRowMajor, s, u, t, d, m, n, alpha, a, lda, b, ldb);
  }
  static void ger(blasint m, blasint n, double alpha, const double* x, blasint incx,
                  const double* y, blasint incy, double* a, blasint lda) {
    cblas_dger(CblasRowMajor, m, n, alpha, x, incx, y, incy, a, lda);
  }
  static void potrf(char uplo, blasint n, double* a, blasint lda, blasint* info) {
    dpotrf_(&uplo, &n, a, &lda, info, 1);
  }
};

// A matrix argument as BLAS takes it: its data and a leading dimension BLAS accepts (it insists
// on ld >= max(1, columns) even where a single row makes ld meaningless, and prints when it
// disagrees; plugins never print).
template <class T>
struct Mat {
  T* data;
  blasint ld;
};

// Blocked right-looking LU without pivoting of the n x n row-major matrix at `a`: each block
// column's panel (diagonal block and everything below it) unblocked, then U12 = L11^-1 A12 and
// A22 -= L21 U12 with level-3 BLAS. Throws at an exactly zero pivot, naming its row from 1.
template <class T>
void getrf_nopiv(const Call& c, blasint n, T* a, blasint ld) {
  constexpr blasint kBlock = 64;
  auto at = [&](blasint r, blasint col) { return a + static_cast<size_t>(r) * ld + col; };
  for (blasint j = 0; j < n; j += kBlock) {
    const blasint jb = std::min(kBlock, n - j);
    for (blasint col = j; col < j + jb; ++col) {
      const T pivot = *at(col, col);
      if (pivot == T(0))
        invalid(c, "zero pivot in row " + std::to_string(col + 1) + " of " + std::to_string(n) +
                       " (counting from 1): the matrix has no LU factorization without pivoting");
      for (blasint r = col + 1; r < n; ++r) *at(r, col) /= pivot;
      if (col + 1 < n && col + 1 < j + jb)
        Blas<T>::ger(n - col - 1, j + jb - col - 1, -1.0, at(col + 1, col), ld, at(col, col + 1), 1,
                     at(col + 1, col + 1), ld);
    }
    if (j + jb < n) {
      Blas<T>::trsm(CblasLeft, CblasLower, CblasNoTrans, CblasUnit, jb, n - j - jb, 1.0, at(j, j),
                    ld, at(j, j + jb), ld);
      Blas<T>::gemm(CblasNoTrans, CblasNoTrans, n - j - jb, n - j - jb, jb, -1.0, at(j + jb, j), ld,
                    at(j, j + jb), ld, 1.0, at(j + jb, j + jb), ld);
    }
  }
}

// Cuts [0, n) into `parts` ranges of nearly equal length, the first ones one longer.
struct Ranges {
  uint64_t n, parts;
  uint64_t begin(uint64_t i) const noexcept { return i * (n / parts) + std::min(i, n % parts); }
  uint64_t end(uint64_t i) const noexcept { return begin(i + 1); }
};

// run_split's blocks (see host_blas.hpp); false when the call is not worth cutting (fewer than
// two blocks) or cannot be (the factorizations).
template <class T>
bool run_blocks(const Call& c, const Mat<T>* m, const Split& split) {
  const uint64_t grain = std::max<uint64_t>(1, split.grain);
  auto b = [](uint64_t x) { return static_cast<blasint>(x); };
  switch (c.kernel.op) {
    case Op::gemm: {
      // By rows of C: op(A)'s rows go with them (A's rows, or its columns when transposed). C
      // too short for two blocks of rows: by its columns, with op(B)'s.
      const bool by_rows = c.m >= 2 * grain || c.m >= c.n;
      const uint64_t len = by_rows ? c.m : c.n;
      if (len < 2 * grain) return false;
      const Ranges r{len, len / grain};
      const bool ta = c.params.trans_a, tb = c.params.trans_b;
      split.for_each(r.parts, [&](size_t i) {
        const uint64_t x0 = r.begin(i), x1 = r.end(i);
        const T* a = m[0].data;
        const T* bm = m[1].data;
        T* cm = m[2].data;
        uint64_t rows = c.m, cols = c.n;
        if (by_rows) {
          a += ta ? x0 : x0 * static_cast<uint64_t>(m[0].ld);
          cm += x0 * static_cast<uint64_t>(m[2].ld);
          rows = x1 - x0;
        } else {
          bm += tb ? x0 * static_cast<uint64_t>(m[1].ld) : x0;
          cm += x0;
          cols = x1 - x0;
        }
        Blas<T>::gemm(trans_of(c.params.trans_a), trans_of(c.params.trans_b), b(rows), b(cols),
                      b(c.k), c.params.alpha, a, m[0].ld, bm, m[1].ld, c.params.beta, cm, m[2].ld);
      });
      return true;
    }
    case Op::syrk: {
      // Block rows of C's triangle: the part beside the diagonal block is a gemm of op(A)'s rows
      // against the other rows of op(A), the diagonal block a syrk of its own rows. op(A)'s rows
      // are A's rows, or A's columns when transposed.
      if (c.n < 2 * grain) return false;
      const Ranges r{c.n, c.n / grain};
      const bool t = c.params.trans_a, lower = !c.params.upper;
      const T* a = m[0].data;
      const blasint lda = m[0].ld, ldc = m[1].ld;
      auto rows_of_a = [&](uint64_t x) { return a + (t ? x : x * static_cast<uint64_t>(lda)); };
      split.for_each(r.parts, [&](size_t i) {
        const uint64_t x0 = r.begin(i), x1 = r.end(i), rows = x1 - x0;
        T* crow = m[1].data + x0 * static_cast<uint64_t>(ldc);
        // Beside the diagonal: columns [0, x0) left of it (lower), [x1, n) right of it (upper).
        const uint64_t c0 = lower ? 0 : x1, cols = lower ? x0 : c.n - x1;
        if (cols > 0)
          Blas<T>::gemm(t ? CblasTrans : CblasNoTrans, t ? CblasNoTrans : CblasTrans, b(rows),
                        b(cols), b(c.k), c.params.alpha, rows_of_a(x0), lda, rows_of_a(c0), lda,
                        c.params.beta, crow + c0, ldc);
        Blas<T>::syrk(uplo_of(c.params.upper), trans_of(c.params.trans_a), b(rows), b(c.k),
                      c.params.alpha, rows_of_a(x0), lda, c.params.beta, crow + x0, ldc);
      });
      return true;
    }
    case Op::trsm: {
      // op(A) X = alpha B (left): B's columns are independent; X op(A) = alpha B (right): its rows.
      const bool left = !c.params.right;
      const uint64_t len = left ? c.n : c.m;
      if (len < 2 * grain) return false;
      const Ranges r{len, len / grain};
      split.for_each(r.parts, [&](size_t i) {
        const uint64_t x0 = r.begin(i), x1 = r.end(i);
        T* bm = m[1].data + (left ? x0 : x0 * static_cast<uint64_t>(m[1].ld));
        Blas<T>::trsm(left ? CblasLeft : CblasRight, uplo_of(c.params.upper),
                      trans_of(c.params.trans_a), c.params.unit ? CblasUnit : CblasNonUnit,
                      b(left ? c.m : x1 - x0), b(left ? x1 - x0 : c.n), c.params.alpha, m[0].data,
                      m[0].ld, bm, m[1].ld);
      });
      return true;
    }
    case Op::potrf:
    case Op::getrf_nopiv: return false;
  }
  return false;
}

template <class T>
void run_typed(const Call& c, const hcr_arg_t* args, const Split* split = nullptr) {
  const sdk::BlasOperands s = sdk::blas_operands(c.kernel.op);
  Mat<T> m[3] = {};
  for (size_t i = 0; i < s.count; ++i) {
    const hcr_arg_t& x = sdk::element(args, i);
    if (x.host == nullptr && x.rows != 0 && x.cols != 0)
      invalid(c, std::string(s.names[i]) + " is not in host memory");
    const uint64_t ld = std::max<uint64_t>(x.ld, std::max<uint64_t>(1, x.cols));
    if (x.rows > INT_MAX || x.cols > INT_MAX || ld > INT_MAX)
      invalid(c, std::string(s.names[i]) + " (" + shape(x) + ", leading dimension " +
                     std::to_string(x.ld) + ") is too large for BLAS's 32-bit indices");
    m[i] = {static_cast<T*>(x.host), static_cast<blasint>(ld)};
  }
  const auto M = static_cast<blasint>(c.m), N = static_cast<blasint>(c.n),
             K = static_cast<blasint>(c.k);
  if (split != nullptr && c.flops() >= split->min_flops && run_blocks<T>(c, m, *split)) return;
  switch (c.kernel.op) {
    case Op::gemm:
      if (M == 0 || N == 0) return;
      Blas<T>::gemm(trans_of(c.params.trans_a), trans_of(c.params.trans_b), M, N, K, c.params.alpha,
                    m[0].data, m[0].ld, m[1].data, m[1].ld, c.params.beta, m[2].data, m[2].ld);
      return;
    case Op::syrk:
      if (N == 0) return;
      Blas<T>::syrk(uplo_of(c.params.upper), trans_of(c.params.trans_a), N, K, c.params.alpha,
                    m[0].data, m[0].ld, c.params.beta, m[1].data, m[1].ld);
      return;
    case Op::trsm:
      if (M == 0 || N == 0) return;
      Blas<T>::trsm(c.params.right ? CblasRight : CblasLeft, uplo_of(c.params.upper),
                    trans_of(c.params.trans_a), c.params.unit ? CblasUnit : CblasNonUnit, M, N,
                    c.params.alpha, m[0].data, m[0].ld, m[1].data, m[1].ld);
      return;
    case Op::potrf: {
      if (N == 0) return;
      // A row-major matrix is its transpose in column-major order: the lower triangle LAPACK
      // sees as the upper one, and A = L L^T (row-major) is A = U^T U (column-major), U = L^T,
      // in the same memory. Calling LAPACK on the transposed view copies nothing (LAPACKE's
      // row-major interface transposes into a scratch matrix and back).
      blasint info = 0;
      Blas<T>::potrf(c.params.upper ? 'L' : 'U', N, m[0].data, m[0].ld, &info);
      if (info > 0)
        invalid(c, "the leading minor of order " + std::to_string(info) + " (of " +
                       std::to_string(N) + ") is not positive definite: no Cholesky factor");
      if (info < 0)
        throw Error(HCR_ERROR_INTERNAL,
                    name(c.kernel) + ": LAPACK refused argument " + std::to_string(-info));
      return;
    }
    case Op::getrf_nopiv: getrf_nopiv<T>(c, N, m[0].data, m[0].ld); return;
  }
}

}  // namespace

std::optional<Builtin> find(std::string_view name) noexcept { return sdk::find_blas_builtin(name); }

std::string name(Builtin kernel) { return sdk::blas_builtin_name(kernel); }

double Call::flops() const noexcept {
  const double M = static_cast<double>(m), N = static_cast<double>(n), K = static_cast<double>(k);
  switch (kernel.op) {
    case Op::gemm: return 2 * M * N * K;
    case Op::syrk: return N * N * K;
    case Op::trsm: return params.right ? M * N * N : M * M * N;
    case Op::potrf: return N * N * N / 3;
    case Op::getrf_nopiv: return 2 * N * N * N / 3;
  }
  return 0;
}

Call check(Builtin kernel, const hcr_arg_t* args, size_t num_args, const void* params,
           size_t params_size) {
  Call c;
  c.kernel = kernel;
  const sdk::BlasOperands s = sdk::blas_operands(kernel.op);
  if (num_args != s.count)
    invalid(c, "takes " + std::to_string(s.count) + (s.count == 1 ? " buffer (" : " buffers (") +
                   s.list + "), got " + std::to_string(num_args));
  if (num_args > 0 && args == nullptr) invalid(c, "args is NULL");
  hcr_arg_t x[3] = {};
  for (size_t i = 0; i < s.count; ++i) {
    x[i] = sdk::read_struct(&sdk::element(args, i));
    if (x[i].dtype != kernel.dtype)
      invalid(c, std::string(s.names[i]) + " (argument " + std::to_string(i) + ", " + shape(x[i]) +
                     " " + sdk::dtype_name(x[i].dtype) + ") is not an " +
                     sdk::dtype_name(kernel.dtype) + " matrix");
  }
  auto square = [&](size_t i) {
    if (x[i].rows != x[i].cols)
      invalid(c, std::string(s.names[i]) + " is " + shape(x[i]) + ", not square");
    return x[i].rows;
  };
  // The parameter block (gemm's may be absent: alpha 1, beta 0, no transposes), then the shapes.
  c.params = sdk::read_blas_params(kernel.op, name(kernel), params, params_size,
                                   sdk::BlasParamsRules::host);
  switch (kernel.op) {
    case Op::gemm: {
      const bool ta = c.params.trans_a, tb = c.params.trans_b;
      c.m = ta ? x[0].cols : x[0].rows;
      c.k = ta ? x[0].rows : x[0].cols;
      const uint64_t kb = tb ? x[1].cols : x[1].rows;
      c.n = tb ? x[1].rows : x[1].cols;
      if (kb != c.k || x[2].rows != c.m || x[2].cols != c.n)
        invalid(c, "shapes do not match: A is " + shape(x[0]) + ", B is " + shape(x[1]) +
                       ", C is " + shape(x[2]) + " (trans_a " + std::to_string(ta) + ", trans_b " +
                       std::to_string(tb) + ": need op(A) m x k, op(B) k x n, C m x n)");
      break;
    }
    case Op::syrk: {
      c.n = square(1);
      const bool t = c.params.trans_a;
      c.k = t ? x[0].rows : x[0].cols;
      if ((t ? x[0].cols : x[0].rows) != c.n)
        invalid(c, "shapes do not match: A is " + shape(x[0]) + ", C is " + shape(x[1]) +
                       " (trans " + std::to_string(t) + ": need op(A) n x k, C n x n)");
      break;
    }
    case Op::trsm: {
      c.m = x[1].rows;
      c.n = x[1].cols;
      const bool left = !c.params.right;
      const uint64_t order = square(0);
      if (order != (left ? c.m : c.n))
        invalid(c, "shapes do not match: A is " + shape(x[0]) + ", B is " + shape(x[1]) +
                       (left ? " (side left: need A m x m, B m x n)"
                             : " (side right: need A n x n, B m x n)"));
      break;
    }
    case Op::potrf:
    case Op::getrf_nopiv: c.n = square(0); break;
  }
  return c;
}

void run(const Call& call, const hcr_arg_t* args, int threads) {
  if (threads != 1)
    throw Error(HCR_ERROR_UNSUPPORTED,
                name(call.kernel) + ": " + std::to_string(threads) +
                    " BLAS threads asked for; hcr's OpenBLAS runs each call on its caller alone");
  // The private copy's count, set once before its first call (it is that copy's alone: the
  // application's OpenBLAS keeps its own). Its threaded build locks its buffer pool, so workers'
  // calls may overlap; Debian's serial build does not, and overlapping calls there go wrong.
  static const bool one_thread = (openblas_set_num_threads(1), true);
  (void)one_thread;
  if (call.kernel.dtype == HCR_DTYPE_F32) run_typed<float>(call, args);
  else run_typed<double>(call, args);
}

void run_split(const Call& call, const hcr_arg_t* args, const Split& split) {
  static const bool one_thread = (openblas_set_num_threads(1), true);  // as in run()
  (void)one_thread;
  if (call.kernel.dtype == HCR_DTYPE_F32) run_typed<float>(call, args, &split);
  else run_typed<double>(call, args, &split);
}

}  // namespace hcr::host_blas
