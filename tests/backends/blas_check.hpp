// Runs the built-in BLAS and LAPACK kernels (plugin.h: gemm, syrk, trsm, potrf, getrf_nopiv) on one
// device and checks each result against a reference computed here in double precision with plain
// loops. Shared by the CPU and simulated backends' tests and the conformance suite.
//
// Every matrix is host memory the test owns (Runtime::wrap) with a leading dimension wider than
// its columns, the padding holding a sentinel that must survive. What a kernel must not read (the
// other triangle of a triangular or symmetric input, a unit diagonal) holds NaN, which would
// poison the result if read; what it must not write (the other triangle of syrk's C or potrf's A)
// holds a sentinel compared bit for bit. With beta 0, C starts as NaN: BLAS semantics say it is
// not read. Tolerances scale with the inner dimension and the element type's epsilon.
#pragma once

#include "../test_support.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace hcr::test {

/// A rows x cols matrix in host memory with `pad` extra elements per row (ld = cols + pad).
template <class T>
struct HostMatrix {
  static constexpr T kPad = T(-7777);  // the padding: never touched

  HostMatrix(size_t r, size_t c, size_t pad = 3)
      : rows(r), cols(c), ld(c + pad), v(r * (c + pad), kPad) {}
  T& operator()(size_t r, size_t c) { return v[r * ld + c]; }
  T operator()(size_t r, size_t c) const { return v[r * ld + c]; }
  double d(size_t r, size_t c) const { return static_cast<double>((*this)(r, c)); }

  size_t rows, cols, ld;
  std::vector<T> v;
};

/// A dense double matrix for the references.
struct Ref {
  Ref(size_t r, size_t c) : rows(r), cols(c), v(r * c, 0.0) {}
  double& operator()(size_t r, size_t c) { return v[r * cols + c]; }
  double operator()(size_t r, size_t c) const { return v[r * cols + c]; }
  size_t rows, cols;
  std::vector<double> v;
};

class BlasCheck {
 public:
  BlasCheck(Runtime& rt, uint32_t device) : rt_(rt), device_(device) {}

  /// Whether the device runs built-in `name`: a well-formed 1x1 task pinned to it fails with
  /// ErrorCode::no_device where it does not.
  bool offers(const std::string& name) {
    const bool f64 = name.ends_with("_f64");
    return f64 ? offers_typed<double>(name) : offers_typed<float>(name);
  }

  // ---- gemm: C = alpha op(A) op(B) + beta C ------------------------------------------------
  template <class T>
  void gemm(int ta, int tb, size_t m, size_t n, size_t k, double alpha, double beta) {
    SCOPED_TRACE(label<T>("gemm") + " trans_a " + std::to_string(ta) + " trans_b " +
                 std::to_string(tb) + " m " + std::to_string(m) + " n " + std::to_string(n) +
                 " k " + std::to_string(k) + " alpha " + num(alpha) + " beta " + num(beta));
    HostMatrix<T> A(ta ? k : m, ta ? m : k), B(tb ? n : k, tb ? k : n), C(m, n);
    fill(A, 1);
    fill(B, 2);
    if (beta == 0) fill_value(C, std::numeric_limits<T>::quiet_NaN());
    else fill(C, 3);
    const HostMatrix<T> C0 = C;
    Ref want(m, n), scale(m, n);
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < n; ++j) {
        double s = 0, a = 0;
        for (size_t q = 0; q < k; ++q) {
          const double x = ta ? A.d(q, i) : A.d(i, q), y = tb ? B.d(j, q) : B.d(q, j);
          s += x * y;
          a += std::abs(x * y);
        }
        want(i, j) = alpha * s + (beta == 0 ? 0.0 : beta * C0.d(i, j));
        scale(i, j) = std::abs(alpha) * a + (beta == 0 ? 0.0 : std::abs(beta * C0.d(i, j)));
      }
    hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, alpha, beta, ta, tb};
    {
      auto a = wrap(A), b = wrap(B), c = wrap(C);
      run(Task(rt_.kernel(name<T>("gemm")))
              .read(a)
              .read(b)
              .arg(c, beta == 0 ? Access::write : Access::read_write)
              .param(p),
          {c});
    }
    expect_padding(A, "A");
    expect_padding(B, "B");
    expect_padding(C, "C");
    expect_close(C, want, scale, k, [](size_t, size_t) { return true; });
  }

  // ---- syrk: C = alpha op(A) op(A)^T + beta C on the uplo triangle ---------------------------
  template <class T>
  void syrk(int uplo, int trans, size_t n, size_t k, double alpha, double beta) {
    SCOPED_TRACE(label<T>("syrk") + " uplo " + std::to_string(uplo) + " trans " +
                 std::to_string(trans) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                 " alpha " + num(alpha) + " beta " + num(beta));
    HostMatrix<T> A(trans ? k : n, trans ? n : k), C(n, n);
    fill(A, 4);
    auto in_tri = [uplo](size_t i, size_t j) { return uplo == HCR_UPPER ? j >= i : j <= i; };
    const T nan = std::numeric_limits<T>::quiet_NaN();
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j)
        C(i, j) = in_tri(i, j) ? (beta == 0 ? nan : value<T>(i, j, 5)) : kKeep<T>;
    const HostMatrix<T> C0 = C;
    Ref want(n, n), scale(n, n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) {
        if (!in_tri(i, j)) continue;
        double s = 0, a = 0;
        for (size_t q = 0; q < k; ++q) {
          const double x = trans ? A.d(q, i) : A.d(i, q), y = trans ? A.d(q, j) : A.d(j, q);
          s += x * y;
          a += std::abs(x * y);
        }
        want(i, j) = alpha * s + (beta == 0 ? 0.0 : beta * C0.d(i, j));
        scale(i, j) = std::abs(alpha) * a + (beta == 0 ? 0.0 : std::abs(beta * C0.d(i, j)));
      }
    hcr_syrk_params_t p{HCR_SYRK_PARAMS_STRUCT_SIZE, alpha, beta, uplo, trans};
    {
      auto a = wrap(A), c = wrap(C);
      run(Task(rt_.kernel(name<T>("syrk"))).read(a).read_write(c).param(p), {c});
    }
    expect_padding(A, "A");
    expect_padding(C, "C");
    expect_kept(
        C, C0, [&](size_t i, size_t j) { return !in_tri(i, j); }, "C's other triangle");
    expect_close(C, want, scale, k, in_tri);
  }

  // ---- trsm: B = alpha op(A)^-1 B (left) or alpha B op(A)^-1 (right) -------------------------
  template <class T>
  void trsm(int side, int uplo, int trans, int diag, size_t m, size_t n, double alpha) {
    SCOPED_TRACE(label<T>("trsm") + " side " + std::to_string(side) + " uplo " +
                 std::to_string(uplo) + " trans " + std::to_string(trans) + " diag " +
                 std::to_string(diag) + " m " + std::to_string(m) + " n " + std::to_string(n) +
                 " alpha " + num(alpha));
    const size_t order = side == HCR_LEFT ? m : n;
    HostMatrix<T> A(order, order), B(m, n);
    // Well conditioned: off-diagonal entries at most 1/order, the diagonal in [1, 2]. What the
    // kernel must not read is NaN.
    const T nan = std::numeric_limits<T>::quiet_NaN();
    Ref tri(order, order);  // the triangle as the kernel should see it
    for (size_t i = 0; i < order; ++i)
      for (size_t j = 0; j < order; ++j) {
        const bool stored = uplo == HCR_UPPER ? j > i : j < i;
        if (i == j) {
          A(i, j) = diag == HCR_UNIT ? nan : static_cast<T>(1.5 + 0.5 * unit(i, j, 6));
          tri(i, j) = diag == HCR_UNIT ? 1.0 : A.d(i, j);
        } else if (stored) {
          A(i, j) = static_cast<T>(unit(i, j, 7) / static_cast<double>(order));
          tri(i, j) = A.d(i, j);
        } else {
          A(i, j) = nan;
        }
      }
    fill(B, 8);
    // op(A) as a dense matrix, then X solving op(A) X = alpha B or X op(A) = alpha B.
    Ref opa(order, order);
    for (size_t i = 0; i < order; ++i)
      for (size_t j = 0; j < order; ++j) opa(i, j) = trans ? tri(j, i) : tri(i, j);
    const bool lower = (uplo == HCR_LOWER) != (trans == HCR_TRANS);  // op(A)'s triangle
    Ref want(m, n);
    if (side == HCR_LEFT) {
      for (size_t c = 0; c < n; ++c)
        for (size_t s = 0; s < m; ++s) {
          const size_t i = lower ? s : m - 1 - s;
          double x = alpha * B.d(i, c);
          for (size_t j = 0; j < m; ++j)
            if (lower ? j < i : j > i) x -= opa(i, j) * want(j, c);
          want(i, c) = x / opa(i, i);
        }
    } else {  // X op(A) = alpha B: row r of X solves op(A)^T x = alpha B(r, :)
      for (size_t r = 0; r < m; ++r)
        for (size_t s = 0; s < n; ++s) {
          const size_t j = lower ? n - 1 - s : s;
          double x = alpha * B.d(r, j);
          for (size_t q = 0; q < n; ++q)
            if (lower ? q > j : q < j) x -= want(r, q) * opa(q, j);
          want(r, j) = x / opa(j, j);
        }
    }
    Ref scale(m, n);
    double top = 0;
    for (double x : want.v) top = std::max(top, std::abs(x));
    for (double& s : scale.v) s = top;
    hcr_trsm_params_t p{HCR_TRSM_PARAMS_STRUCT_SIZE, alpha, side, uplo, trans, diag};
    {
      auto a = wrap(A), b = wrap(B);
      run(Task(rt_.kernel(name<T>("trsm"))).read(a).read_write(b).param(p), {b});
    }
    expect_padding(A, "A");
    expect_padding(B, "B");
    expect_close(B, want, scale, 4 * order, [](size_t, size_t) { return true; });
  }

  // ---- potrf: the uplo triangle of an SPD A becomes its Cholesky factor ----------------------
  template <class T>
  void potrf(int uplo, size_t n) {
    SCOPED_TRACE(label<T>("potrf") + " uplo " + std::to_string(uplo) + " n " + std::to_string(n));
    // A = M M^T + n I: symmetric positive definite, condition number below ~5.
    Ref M(n, n), S(n, n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) M(i, j) = unit(i, j, 9);
    HostMatrix<T> A(n, n);
    auto in_tri = [uplo](size_t i, size_t j) { return uplo == HCR_UPPER ? j >= i : j <= i; };
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) {
        double s = i == j ? static_cast<double>(n) : 0.0;
        for (size_t q = 0; q < n; ++q) s += M(i, q) * M(j, q);
        A(i, j) = in_tri(i, j) ? static_cast<T>(s) : kKeep<T>;
      }
    for (size_t i = 0; i < n; ++i)  // what the kernel sees: the triangle, rounded to T
      for (size_t j = 0; j < n; ++j) S(i, j) = in_tri(i, j) ? A.d(i, j) : A.d(j, i);
    const HostMatrix<T> A0 = A;
    // L L^T = S; the upper factor is U = L^T.
    Ref L(n, n);
    for (size_t j = 0; j < n; ++j) {
      double d = S(j, j);
      for (size_t q = 0; q < j; ++q) d -= L(j, q) * L(j, q);
      L(j, j) = std::sqrt(d);
      for (size_t i = j + 1; i < n; ++i) {
        double s = S(i, j);
        for (size_t q = 0; q < j; ++q) s -= L(i, q) * L(j, q);
        L(i, j) = s / L(j, j);
      }
    }
    Ref want(n, n), scale(n, n);
    double top = 0;
    for (double x : L.v) top = std::max(top, std::abs(x));
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) {
        want(i, j) = uplo == HCR_UPPER ? L(j, i) : L(i, j);
        scale(i, j) = top;
      }
    hcr_potrf_params_t p{HCR_POTRF_PARAMS_STRUCT_SIZE, uplo};
    {
      auto a = wrap(A);
      run(Task(rt_.kernel(name<T>("potrf"))).read_write(a).param(p), {a});
    }
    expect_padding(A, "A");
    expect_kept(
        A, A0, [&](size_t i, size_t j) { return !in_tri(i, j); }, "A's other triangle");
    expect_close(A, want, scale, 4 * n, in_tri);
  }

  // ---- getrf_nopiv: A = L U in place, L unit lower ---------------------------------------------
  template <class T>
  void getrf_nopiv(size_t n) {
    SCOPED_TRACE(label<T>("getrf_nopiv") + " n " + std::to_string(n));
    HostMatrix<T> A(n, n);
    // Diagonally dominant: stable without pivoting.
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j)
        A(i, j) =
            static_cast<T>(i == j ? static_cast<double>(n) + 1 + unit(i, j, 10) : unit(i, j, 11));
    Ref lu(n, n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) lu(i, j) = A.d(i, j);
    for (size_t c = 0; c < n; ++c)
      for (size_t r = c + 1; r < n; ++r) {
        lu(r, c) /= lu(c, c);
        for (size_t j = c + 1; j < n; ++j) lu(r, j) -= lu(r, c) * lu(c, j);
      }
    Ref scale(n, n);
    double top = 0;
    for (double x : lu.v) top = std::max(top, std::abs(x));
    for (double& s : scale.v) s = top;
    {
      auto a = wrap(A);
      run(Task(rt_.kernel(name<T>("getrf_nopiv"))).read_write(a), {a});
    }
    expect_padding(A, "A");
    expect_close(A, lu, scale, 4 * n, [](size_t, size_t) { return true; });
  }

  /// Every kernel, every trans/uplo/side/diag combination, at the given sizes, for T.
  template <class T>
  void all(const std::vector<size_t>& sizes) {
    const std::string t = sizeof(T) == 4 ? "_f32" : "_f64";
    for (size_t a = 0; a < sizes.size(); ++a) {
      // Three different sizes for the three dimensions, cycling through the list.
      const size_t s0 = sizes[a], s1 = sizes[(a + 1) % sizes.size()],
                   s2 = sizes[(a + 2) % sizes.size()];
      for (int x : {0, 1})
        for (int y : {0, 1}) {
          gemm<T>(x, y, s0, s1, s2, 1.0, 0.0);
          gemm<T>(x, y, s0, s2, s1, -1.5, 0.5);
          syrk<T>(x, y, s0, s1, 1.0, 0.0);
          syrk<T>(x, y, s0, s2, -0.5, 2.0);
          for (int side : {0, 1})
            for (int diag : {0, 1}) trsm<T>(side, x, y, diag, s0, s1, 0.75);
        }
      for (int uplo : {0, 1}) potrf<T>(uplo, s0);
      getrf_nopiv<T>(s0);
    }
  }

 private:
  template <class T>
  static constexpr T kKeep = T(4242);  // must not be written

  template <class T>
  static std::string name(const char* op) {
    return std::string(op) + (sizeof(T) == 4 ? "_f32" : "_f64");
  }
  template <class T>
  static std::string label(const char* op) {
    return name<T>(op);
  }
  static std::string num(double x) {
    std::ostringstream os;
    os << x;
    return os.str();
  }
  // Deterministic values in [-1, 1) per position and stream.
  static double unit(size_t i, size_t j, unsigned stream) {
    std::mt19937_64 g((i * 1000003u + j) * 31u + stream);
    return std::uniform_real_distribution<double>(-1, 1)(g);
  }
  template <class T>
  static T value(size_t i, size_t j, unsigned stream) {
    return static_cast<T>(unit(i, j, stream));
  }
  template <class T>
  static void fill(HostMatrix<T>& m, unsigned stream) {
    for (size_t i = 0; i < m.rows; ++i)
      for (size_t j = 0; j < m.cols; ++j) m(i, j) = value<T>(i, j, stream);
  }
  template <class T>
  static void fill_value(HostMatrix<T>& m, T x) {
    for (size_t i = 0; i < m.rows; ++i)
      for (size_t j = 0; j < m.cols; ++j) m(i, j) = x;
  }

  template <class T>
  Buffer<T> wrap(HostMatrix<T>& m) {
    return rt_.wrap(m.v.data(), m.rows, m.cols, m.ld);
  }

  // Submits pinned to the device, waits, and brings the outputs home (a device with its own memory
  // keeps them until asked, and would copy them into the host memory later, when it may be gone).
  template <class T>
  void run(Task& task, std::initializer_list<Buffer<T>> outputs) {
    rt_.submit(task.on(device_)).get();
    for (const Buffer<T>& b : outputs) b.acquire(Access::read).release();
  }

  template <class T>
  bool offers_typed(const std::string& kernel) {
    HostMatrix<T> a(1, 1), b(1, 1), c(1, 1);
    a(0, 0) = T(4);
    b(0, 0) = T(2);
    c(0, 0) = T(1);
    Task t(rt_.kernel(kernel));
    auto ba = wrap(a), bb = wrap(b), bc = wrap(c);
    if (kernel.starts_with("gemm")) {
      t.read(ba).read(bb).write(bc);
    } else if (kernel.starts_with("syrk")) {
      t.read(ba).read_write(bc).param(hcr_syrk_params_t{HCR_SYRK_PARAMS_STRUCT_SIZE, 1, 0, 0, 0});
    } else if (kernel.starts_with("trsm")) {
      t.read(ba).read_write(bb).param(
          hcr_trsm_params_t{HCR_TRSM_PARAMS_STRUCT_SIZE, 1, 0, 0, 0, 0});
    } else if (kernel.starts_with("potrf")) {
      t.read_write(ba).param(hcr_potrf_params_t{HCR_POTRF_PARAMS_STRUCT_SIZE, 0});
    } else {
      t.read_write(ba);
    }
    Event e = rt_.submit(t.on(device_));
    e.wait();
    if (!e.error()) {
      // The results home before the host memory goes (a device with its own memory would copy
      // them there later).
      for (const Buffer<T>* x : {&ba, &bb, &bc}) x->acquire(Access::read).release();
      return true;
    }
    try {
      e.get();
    } catch (const Error& err) {
      if (err.code() == ErrorCode::no_device) return false;
      throw;
    }
    return true;
  }

  template <class T>
  void expect_padding(const HostMatrix<T>& m, const char* what) {
    for (size_t i = 0; i < m.rows; ++i)
      for (size_t j = m.cols; j < m.ld; ++j)
        if (!(m(i, j) == HostMatrix<T>::kPad)) {
          ADD_FAILURE() << what << ": element (" << i << ", " << j << ") beyond its " << m.cols
                        << " columns (leading dimension " << m.ld << ") was written: " << m(i, j);
          return;
        }
  }

  template <class T, class Where>
  void expect_kept(const HostMatrix<T>& m, const HostMatrix<T>& before, Where where,
                   const char* what) {
    for (size_t i = 0; i < m.rows; ++i)
      for (size_t j = 0; j < m.cols; ++j)
        if (where(i, j) &&
            std::memcmp(&m.v[i * m.ld + j], &before.v[i * m.ld + j], sizeof(T)) != 0) {
          ADD_FAILURE() << what << " was written at (" << i << ", " << j << "): " << m(i, j)
                        << ", was " << before(i, j);
          return;
        }
  }

  // |got - want| <= 4 (depth + 2) eps scale at every position `where` says, NaN never.
  template <class T, class Where>
  void expect_close(const HostMatrix<T>& got, const Ref& want, const Ref& scale, size_t depth,
                    Where where) {
    const double eps = std::numeric_limits<T>::epsilon();
    for (size_t i = 0; i < got.rows; ++i)
      for (size_t j = 0; j < got.cols; ++j) {
        if (!where(i, j)) continue;
        const double g = got.d(i, j), w = want(i, j);
        const double tol = 4.0 * static_cast<double>(depth + 2) * eps * scale(i, j) + 1e-300;
        if (!(std::abs(g - w) <= tol)) {
          ADD_FAILURE() << "at (" << i << ", " << j << "): got " << g << ", want " << w
                        << " (tolerance " << tol << ")";
          return;
        }
      }
  }

  Runtime& rt_;
  uint32_t device_;
};

}  // namespace hcr::test
