// The CUDA backend's BLAS built-ins beyond plain gemm (plugin.h, "Built-in kernels"): gemm with
// transposes and the ABI 1.0 parameter block, syrk, trsm, potrf and getrf_nopiv, in f32 and f64
// (gemm in f16 and bf16 too), through the plugin's C table against a double-precision reference at
// odd sizes, with padded leading dimensions and offsets, in every trans/uplo/side/diag combination.
// The triangles a kernel must not read hold NaN and those it must not write are checked untouched,
// so a wrong row-major to column-major mapping shows. Factorizations that fail report the minor or
// pivot through their status word; the plugin declines them where cuSOLVER is missing.
//
// Like cuda_backend_test.cpp: CudaGpu/... on a GPU (skipped without one), FakeCuda/... against the
// plugin linked with the fake CUDA runtime, cuBLAS and cuSOLVER (fake/), on any machine.
#include "cuda_test_plugin.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace hcr {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- element types -----------------------------------------------------------------------------

size_t esize(hcr_dtype_t t) { return t == HCR_DTYPE_F64 ? 8 : t == HCR_DTYPE_F32 ? 4 : 2; }

/// The unit roundoff of the storage type.
double unit(hcr_dtype_t t) {
  switch (t) {
    case HCR_DTYPE_F64: return std::ldexp(1.0, -53);
    case HCR_DTYPE_F32: return std::ldexp(1.0, -24);
    case HCR_DTYPE_F16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -8);
  }
}

void put(hcr_dtype_t t, double x, unsigned char* at) {
  switch (t) {
    case HCR_DTYPE_F64: std::memcpy(at, &x, 8); break;
    case HCR_DTYPE_F32: {
      const float f = static_cast<float>(x);
      std::memcpy(at, &f, 4);
      break;
    }
    case HCR_DTYPE_F16: {
      const uint16_t h = test_f32_to_f16(static_cast<float>(x));
      std::memcpy(at, &h, 2);
      break;
    }
    default: {
      const uint16_t h = test_f32_to_bf16(static_cast<float>(x));
      std::memcpy(at, &h, 2);
    }
  }
}

double get(hcr_dtype_t t, const unsigned char* at) {
  switch (t) {
    case HCR_DTYPE_F64: {
      double d;
      std::memcpy(&d, at, 8);
      return d;
    }
    case HCR_DTYPE_F32: {
      float f;
      std::memcpy(&f, at, 4);
      return f;
    }
    default: {
      uint16_t h;
      std::memcpy(&h, at, 2);
      return t == HCR_DTYPE_F16 ? test_f16_to_f32(h) : test_bf16_to_f32(h);
    }
  }
}

const char* type_name(hcr_dtype_t t) {
  return t == HCR_DTYPE_F64   ? "f64"
         : t == HCR_DTYPE_F32 ? "f32"
         : t == HCR_DTYPE_F16 ? "f16"
                              : "bf16";
}

std::string kernel_name(const char* op, hcr_dtype_t t) {
  return std::string(op) + "_" + type_name(t);
}

// ---- matrices in device memory -----------------------------------------------------------------

/// A rows x cols matrix of `t` in device memory, `ld` elements between row starts, from byte
/// `offset` of its own allocation. The host keeps the image it uploaded: the padding between rows
/// and the bytes before the matrix hold a pattern that must come back unchanged.
struct DevMat {
  hcr_dtype_t t = HCR_DTYPE_F64;
  uint64_t rows = 0, cols = 0, ld = 0, offset = 0;
  hcr_memory_t* mem = nullptr;
  std::vector<unsigned char> image;

  size_t at(uint64_t i, uint64_t j) const { return offset + (i * ld + j) * esize(t); }
  double operator()(uint64_t i, uint64_t j) const { return get(t, &image[at(i, j)]); }
  hcr_arg_t arg(hcr_access_t access) const {
    hcr_arg_t a{};
    a.struct_size = HCR_ARG_STRUCT_SIZE;
    a.memory = mem;
    a.offset = offset;
    a.dtype = t;
    a.access = access;
    a.rows = rows;
    a.cols = cols;
    a.ld = ld;
    return a;
  }
};

/// Uploads value(i, j) (rounded to `t`) with `pad` elements of padding per row and 40 bytes before.
DevMat upload(Plugin& p, hcr_dtype_t t, uint64_t rows, uint64_t cols, uint64_t pad,
              const std::function<double(uint64_t, uint64_t)>& value) {
  DevMat m;
  m.t = t;
  m.rows = rows;
  m.cols = cols;
  m.ld = cols + pad;
  m.offset = 40;
  m.image.resize(m.offset + std::max<uint64_t>(rows * m.ld, 1) * esize(t));
  for (size_t i = 0; i < m.image.size(); ++i) m.image[i] = static_cast<unsigned char>(i * 37 + 11);
  for (uint64_t i = 0; i < rows; ++i)
    for (uint64_t j = 0; j < cols; ++j) put(t, value(i, j), &m.image[m.at(i, j)]);
  m.mem = p.alloc(0, m.image.size());
  const uint64_t bytes = m.image.size();
  EXPECT_TRUE(p.upload(0, m.mem, 0, bytes, m.image.data(), bytes, bytes, 1).ok);
  return m;
}

/// The matrix as the device holds it now (same layout); the padding is checked unchanged.
DevMat download(Plugin& p, const DevMat& m) {
  DevMat out = m;
  EXPECT_TRUE(p.download(0, out.image.data(), out.image.size(), m.mem, 0, out.image.size(),
                         out.image.size(), 1)
                  .ok);
  size_t touched = 0;
  for (size_t b = 0; b < m.offset; ++b) touched += out.image[b] != m.image[b];
  for (uint64_t i = 0; i < m.rows; ++i)
    for (uint64_t j = m.cols; j < m.ld; ++j)
      touched += std::memcmp(&out.image[m.at(i, j)], &m.image[m.at(i, j)], esize(m.t)) != 0;
  EXPECT_EQ(touched, 0u) << "bytes outside the matrix (padding between rows, before it) changed";
  return out;
}

std::mt19937& rng() {
  static std::mt19937 g(20240915);
  return g;
}

double uniform() { return std::uniform_real_distribution<double>(-1, 1)(rng()); }

// ---- the fixture -------------------------------------------------------------------------------

class CudaBlas : public PluginFixture {
 protected:
  /// Launches built-in `name` on device 0 with `args` and `params` (a block of `size` bytes) and
  /// waits for it; measured, so the timing path runs too.
  Outcome run(const std::string& name, std::vector<hcr_arg_t> args, const void* params,
              size_t size) {
    return run_on(p(), name, std::move(args), params, size);
  }
  Outcome run_on(Plugin& q, const std::string& name, std::vector<hcr_arg_t> args,
                 const void* params, size_t size) {
    hcr_kernel_t* k = q.builtin(0, name.c_str());
    EXPECT_NE(k, nullptr) << name;
    if (k == nullptr) return {};
    hcr_launch_args_t la{};
    la.kernel = k;
    la.args = args.data();
    la.num_args = args.size();
    la.params = params;
    la.params_size = size;
    la.flags = HCR_LAUNCH_MEASURE;
    Outcome o = q.launch(la);
    if (o.ok) {
      EXPECT_GE(o.seconds, 0.0) << "HCR_LAUNCH_MEASURE asks for device_seconds";
    }
    q.release(k);
    return o;
  }
  template <class P>
  Outcome run(const std::string& name, std::vector<hcr_arg_t> args, const P& params) {
    return run(name, std::move(args), &params, sizeof params);
  }
  void free(DevMat& m) {
    p().free(0, m.mem);
    m.mem = nullptr;
  }
  /// Odd sizes: small ones everywhere, larger ones on a GPU (the fake computes on one host core).
  std::vector<uint64_t> orders() const {
    std::vector<uint64_t> v = {1, 7, 33, 65};
    if (!fake()) v.insert(v.end(), {257, 513});
    return v;
  }
};

INSTANTIATE_TEST_SUITE_P(CudaGpu, CudaBlas, ::testing::Values(Target{false}),
                         [](const auto&) { return std::string("gpu"); });
INSTANTIATE_TEST_SUITE_P(FakeCuda, CudaBlas, ::testing::Values(Target{true}),
                         [](const auto&) { return std::string("fake"); });

/// Counts the elements outside tolerance, reporting the first few.
class Mismatches {
 public:
  void check(double got, double want, double tol, uint64_t i, uint64_t j) {
    if (std::abs(got - want) <= tol) return;
    if (count_++ < 5)
      ADD_FAILURE() << "(" << i << "," << j << ") = " << got << ", want " << want << " +- " << tol;
  }
  /// An element that must still be what it was (NaN stays NaN).
  void same(double got, double before, uint64_t i, uint64_t j) {
    if (got == before || (std::isnan(got) && std::isnan(before))) return;
    if (count_++ < 5)
      ADD_FAILURE() << "(" << i << "," << j << ") = " << got << " changed from " << before
                    << " (outside the triangle the kernel may write)";
  }
  size_t count() const { return count_; }

 private:
  size_t count_ = 0;
};

// ---- gemm --------------------------------------------------------------------------------------

// C = alpha op(A) op(B) + beta C for every pair of transposes; with beta = 0, C starts as NaN and
// must not be read.
using GemmRun = std::function<Outcome(std::vector<hcr_arg_t>, const hcr_gemm_params_t&)>;

void check_gemm(Plugin& p, hcr_dtype_t dt, uint64_t m, uint64_t k, uint64_t n, bool ta, bool tb,
                double beta, const GemmRun& run) {
  SCOPED_TRACE(kernel_name("gemm", dt) + " " + std::to_string(m) + "x" + std::to_string(k) + "x" +
               std::to_string(n) + " trans_a " + std::to_string(ta) + " trans_b " +
               std::to_string(tb) + " beta " + std::to_string(beta));
  const double alpha = 1.5;
  DevMat A = upload(p, dt, ta ? k : m, ta ? m : k, 3, [](auto, auto) { return uniform(); });
  DevMat B = upload(p, dt, tb ? n : k, tb ? k : n, 1, [](auto, auto) { return uniform(); });
  DevMat C = upload(p, dt, m, n, 5, [&](auto, auto) { return beta == 0 ? kNaN : uniform(); });
  hcr_gemm_params_t params{HCR_GEMM_PARAMS_STRUCT_SIZE, alpha, beta, ta ? HCR_TRANS : HCR_NO_TRANS,
                           tb ? HCR_TRANS : HCR_NO_TRANS};
  Outcome o =
      run({A.arg(HCR_ACCESS_READ), B.arg(HCR_ACCESS_READ), C.arg(HCR_ACCESS_READ_WRITE)}, params);
  ASSERT_TRUE(o.ok) << o.message;
  DevMat out = download(p, C);
  const bool half = dt == HCR_DTYPE_F16 || dt == HCR_DTYPE_BF16;
  Mismatches bad;
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t j = 0; j < n; ++j) {
      double want = beta == 0 ? 0 : beta * C(i, j), scale = std::abs(want);
      for (uint64_t q = 0; q < k; ++q) {
        const double x = alpha * (ta ? A(q, i) : A(i, q)) * (tb ? B(j, q) : B(q, j));
        want += x;
        scale += std::abs(x);
      }
      // As in cuda_backend_test.cpp: f32/f64 accumulation error, doubled; for 16-bit types f32
      // accumulation (with a margin for the tensor cores' adders) and one rounding to storage.
      const double u = unit(dt);
      const double tol = half ? 2 * u * std::abs(want) + (k + 2) * std::ldexp(1.0, -18) * scale
                              : 2.0 * (k + 2) * u * scale + 1e-300;
      bad.check(out(i, j), want, tol, i, j);
    }
  EXPECT_EQ(bad.count(), 0u);
  p.free(0, A.mem);
  p.free(0, B.mem);
  p.free(0, C.mem);
}

TEST_P(CudaBlas, GemmWithEveryTransposeInEveryPrecision) {
  auto launch = [&](hcr_dtype_t dt) {
    return [this, dt](std::vector<hcr_arg_t> args, const hcr_gemm_params_t& params) {
      return run(kernel_name("gemm", dt), std::move(args), params);
    };
  };
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> sizes = {
      {1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {65, 130, 33}, {5, 0, 7}};
  if (!fake()) sizes.insert(sizes.end(), {{513, 257, 129}, {129, 513, 257}});
  for (hcr_dtype_t dt : {HCR_DTYPE_F64, HCR_DTYPE_F32, HCR_DTYPE_F16, HCR_DTYPE_BF16})
    for (auto [m, k, n] : sizes)
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (double beta : {-0.5, 0.0}) check_gemm(p(), dt, m, k, n, ta, tb, beta, launch(dt));
}

// An ABI 1.0 caller's block ends at beta: it means no transposes, whatever lies past its end.
TEST_P(CudaBlas, GemmAcceptsTheAbi10ParameterBlock) {
  const uint64_t m = 9, k = 6, n = 5;
  DevMat A = upload(p(), HCR_DTYPE_F64, m, k, 2, [](auto i, auto j) { return 1.0 + i - 0.5 * j; });
  DevMat B = upload(p(), HCR_DTYPE_F64, k, n, 0, [](auto i, auto j) { return 0.25 * i + j; });
  // trans_a and trans_b set past the block's end: a 1.1 plugin must not read them.
  hcr_gemm_params_t params{HCR_GEMM_PARAMS_STRUCT_SIZE_1_0, 2.0, 0.0, HCR_TRANS, HCR_TRANS};
  for (size_t size : {size_t{HCR_GEMM_PARAMS_STRUCT_SIZE_1_0}, sizeof params}) {
    SCOPED_TRACE("params_size " + std::to_string(size));
    DevMat C = upload(p(), HCR_DTYPE_F64, m, n, 1, [](auto, auto) { return kNaN; });
    Outcome o = run("gemm_f64",
                    {A.arg(HCR_ACCESS_READ), B.arg(HCR_ACCESS_READ), C.arg(HCR_ACCESS_READ_WRITE)},
                    &params, size);
    ASSERT_TRUE(o.ok) << o.message;
    DevMat out = download(p(), C);
    Mismatches bad;
    for (uint64_t i = 0; i < m; ++i)
      for (uint64_t j = 0; j < n; ++j) {
        double want = 0;
        for (uint64_t q = 0; q < k; ++q) want += 2.0 * A(i, q) * B(q, j);
        bad.check(out(i, j), want, 1e-12 * (1 + std::abs(want)), i, j);
      }
    EXPECT_EQ(bad.count(), 0u);
    free(C);
  }
  // No parameters at all: C = A B.
  DevMat C = upload(p(), HCR_DTYPE_F64, m, n, 0, [](auto, auto) { return kNaN; });
  ASSERT_TRUE(run("gemm_f64",
                  {A.arg(HCR_ACCESS_READ), B.arg(HCR_ACCESS_READ), C.arg(HCR_ACCESS_READ_WRITE)},
                  nullptr, 0)
                  .ok);
  DevMat out = download(p(), C);
  double want = 0;
  for (uint64_t q = 0; q < k; ++q) want += A(m - 1, q) * B(q, n - 1);
  EXPECT_NEAR(out(m - 1, n - 1), want, 1e-12 * (1 + std::abs(want)));
  free(A);
  free(B);
  free(C);
}

// ---- syrk --------------------------------------------------------------------------------------

TEST_P(CudaBlas, SyrkInEveryUploAndTrans) {
  std::vector<std::pair<uint64_t, uint64_t>> sizes = {{1, 1}, {7, 3}, {33, 65}, {65, 17}, {6, 0}};
  if (!fake()) sizes.insert(sizes.end(), {{257, 129}, {129, 513}});
  for (hcr_dtype_t dt : {HCR_DTYPE_F64, HCR_DTYPE_F32})
    for (auto [n, k] : sizes)
      for (bool upper : {false, true})
        for (bool trans : {false, true})
          for (double beta : {0.75, 0.0}) {
            SCOPED_TRACE(kernel_name("syrk", dt) + " n " + std::to_string(n) + " k " +
                         std::to_string(k) + (upper ? " upper" : " lower") +
                         (trans ? " trans" : "") + " beta " + std::to_string(beta));
            const double alpha = -1.25;
            DevMat A = upload(p(), dt, trans ? k : n, trans ? n : k, 2,
                              [](auto, auto) { return uniform(); });
            // The triangle syrk does not touch holds NaN: it must be neither read nor written.
            // With beta = 0 the whole of C is NaN: not read at all.
            DevMat C = upload(p(), dt, n, n, 3, [&](uint64_t i, uint64_t j) {
              const bool in = upper ? i <= j : i >= j;
              return in && beta != 0 ? uniform() : kNaN;
            });
            hcr_syrk_params_t params{HCR_SYRK_PARAMS_STRUCT_SIZE, alpha, beta,
                                     upper ? HCR_UPPER : HCR_LOWER,
                                     trans ? HCR_TRANS : HCR_NO_TRANS};
            Outcome o = run(kernel_name("syrk", dt),
                            {A.arg(HCR_ACCESS_READ), C.arg(HCR_ACCESS_READ_WRITE)}, params);
            ASSERT_TRUE(o.ok) << o.message;
            DevMat out = download(p(), C);
            Mismatches bad;
            for (uint64_t i = 0; i < n; ++i)
              for (uint64_t j = 0; j < n; ++j) {
                if (upper ? i > j : i < j) {
                  bad.same(out(i, j), C(i, j), i, j);
                  continue;
                }
                double want = beta == 0 ? 0 : beta * C(i, j), scale = std::abs(want);
                for (uint64_t q = 0; q < k; ++q) {
                  const double x = alpha * (trans ? A(q, i) * A(q, j) : A(i, q) * A(j, q));
                  want += x;
                  scale += std::abs(x);
                }
                bad.check(out(i, j), want, 2.0 * (k + 2) * unit(dt) * scale + 1e-300, i, j);
              }
            EXPECT_EQ(bad.count(), 0u);
            free(A);
            free(C);
          }
}

// ---- trsm --------------------------------------------------------------------------------------

TEST_P(CudaBlas, TrsmInEverySideUploTransAndDiag) {
  std::vector<std::pair<uint64_t, uint64_t>> sizes = {{1, 1}, {5, 7}, {33, 17}, {4, 0}};
  if (!fake()) sizes.insert(sizes.end(), {{257, 129}, {129, 513}});
  for (hcr_dtype_t dt : {HCR_DTYPE_F64, HCR_DTYPE_F32})
    for (auto [m, n] : sizes)
      for (bool right : {false, true})
        for (bool upper : {false, true})
          for (bool trans : {false, true})
            for (bool unit_diag : {false, true}) {
              SCOPED_TRACE(kernel_name("trsm", dt) + " " + std::to_string(m) + "x" +
                           std::to_string(n) + (right ? " right" : " left") +
                           (upper ? " upper" : " lower") + (trans ? " trans" : "") +
                           (unit_diag ? " unit" : " non-unit"));
              const uint64_t order = right ? n : m;
              const double alpha = 0.5;
              // Well conditioned: a dominant diagonal. What trsm must not read is NaN: the other
              // triangle, and the diagonal when it is taken as unit.
              DevMat A = upload(p(), dt, order, order, 1, [&](uint64_t i, uint64_t j) {
                if (i == j) return unit_diag ? kNaN : (order + 1.0 + uniform()) * (i % 2 ? -1 : 1);
                return (upper ? i < j : i > j) ? uniform() : kNaN;
              });
              DevMat B = upload(p(), dt, m, n, 2, [](auto, auto) { return uniform(); });
              hcr_trsm_params_t params{
                  HCR_TRSM_PARAMS_STRUCT_SIZE,      alpha,
                  right ? HCR_RIGHT : HCR_LEFT,     upper ? HCR_UPPER : HCR_LOWER,
                  trans ? HCR_TRANS : HCR_NO_TRANS, unit_diag ? HCR_UNIT : HCR_NON_UNIT};
              Outcome o = run(kernel_name("trsm", dt),
                              {A.arg(HCR_ACCESS_READ), B.arg(HCR_ACCESS_READ_WRITE)}, params);
              ASSERT_TRUE(o.ok) << o.message;
              DevMat X = download(p(), B);
              // op(A) as the solve saw it: its triangle, a unit diagonal where asked.
              auto opa = [&](uint64_t i, uint64_t j) {
                const uint64_t r = trans ? j : i, c = trans ? i : j;
                if (r == c) return unit_diag ? 1.0 : A(r, c);
                return (upper ? r < c : r > c) ? A(r, c) : 0.0;
              };
              // The residual: op(A) X (left) or X op(A) (right) against alpha B.
              Mismatches bad;
              for (uint64_t i = 0; i < m; ++i)
                for (uint64_t j = 0; j < n; ++j) {
                  double lhs = 0, scale = std::abs(alpha * B(i, j));
                  for (uint64_t q = 0; q < order; ++q) {
                    const double x = right ? X(i, q) * opa(q, j) : opa(i, q) * X(q, j);
                    lhs += x;
                    scale += std::abs(x);
                  }
                  bad.check(lhs, alpha * B(i, j), 8.0 * (order + 2) * unit(dt) * scale, i, j);
                }
              EXPECT_EQ(bad.count(), 0u);
              free(A);
              free(B);
            }
}

// ---- potrf -------------------------------------------------------------------------------------

/// A symmetric positive definite matrix, M M^T + n I, with NaN outside the `upper` (else lower)
/// triangle: potrf must neither read nor write there.
DevMat spd(Plugin& p, hcr_dtype_t dt, uint64_t n, bool upper) {
  std::vector<double> mm(n * n);
  for (auto& x : mm) x = uniform();
  return upload(p, dt, n, n, 3, [&, n](uint64_t i, uint64_t j) {
    if (upper ? i > j : i < j) return kNaN;
    double s = i == j ? static_cast<double>(n) : 0.0;
    for (uint64_t q = 0; q < n; ++q) s += mm[i * n + q] * mm[j * n + q];
    return s;
  });
}

TEST_P(CudaBlas, PotrfInEitherUplo) {
  for (hcr_dtype_t dt : {HCR_DTYPE_F64, HCR_DTYPE_F32})
    for (uint64_t n : orders())
      for (bool upper : {false, true}) {
        SCOPED_TRACE(kernel_name("potrf", dt) + " n " + std::to_string(n) +
                     (upper ? " upper" : " lower"));
        DevMat A = spd(p(), dt, n, upper);
        hcr_potrf_params_t params{HCR_POTRF_PARAMS_STRUCT_SIZE, upper ? HCR_UPPER : HCR_LOWER};
        Outcome o = run(kernel_name("potrf", dt), {A.arg(HCR_ACCESS_READ_WRITE)}, params);
        ASSERT_TRUE(o.ok) << o.message;
        DevMat F = download(p(), A);
        // L(i, j), i >= j: the lower factor, or the transpose of the upper one.
        auto L = [&](uint64_t i, uint64_t j) { return upper ? F(j, i) : F(i, j); };
        Mismatches bad;
        for (uint64_t i = 0; i < n; ++i)
          for (uint64_t j = 0; j < n; ++j) {
            if (upper ? i > j : i < j) {
              bad.same(F(i, j), A(i, j), i, j);
              continue;
            }
            const uint64_t r = std::max(i, j), c = std::min(i, j);  // A(i, j) = (L L^T)(r, c)
            double got = 0, scale = 0;
            for (uint64_t q = 0; q <= c; ++q) {
              got += L(r, q) * L(c, q);
              scale += std::abs(L(r, q) * L(c, q));
            }
            bad.check(got, A(i, j), 8.0 * (n + 2) * unit(dt) * scale, i, j);
          }
        EXPECT_EQ(bad.count(), 0u);
        free(A);
      }
}

// A matrix that is not positive definite fails the launch through the completion path, naming the
// leading minor (LAPACK's info) — and the device carries on.
TEST_P(CudaBlas, PotrfOfAnIndefiniteMatrixNamesTheMinor) {
  for (hcr_dtype_t dt : {HCR_DTYPE_F64, HCR_DTYPE_F32})
    for (bool upper : {false, true}) {
      SCOPED_TRACE(kernel_name("potrf", dt) + (upper ? " upper" : " lower"));
      const uint64_t n = 6;
      // The identity with -1 at (2, 2): leading minors of order 1 and 2 are positive, 3 is not.
      DevMat A = upload(p(), dt, n, n, 1, [](uint64_t i, uint64_t j) {
        return i != j ? 0.0 : i == 2 ? -1.0 : 1.0;
      });
      hcr_potrf_params_t params{HCR_POTRF_PARAMS_STRUCT_SIZE, upper ? HCR_UPPER : HCR_LOWER};
      Outcome o = run(kernel_name("potrf", dt), {A.arg(HCR_ACCESS_READ_WRITE)}, params);
      EXPECT_FALSE(o.ok);
      EXPECT_EQ(o.code, HCR_ERROR_INVALID_ARGUMENT) << o.message;
      EXPECT_NE(o.message.find("leading minor of order 3"), std::string::npos) << o.message;
      EXPECT_NE(o.message.find(kernel_name("potrf", dt)), std::string::npos) << o.message;
      free(A);
      // The same device factors the next matrix.
      DevMat B = spd(p(), dt, 5, upper);
      EXPECT_TRUE(run(kernel_name("potrf", dt), {B.arg(HCR_ACCESS_READ_WRITE)}, params).ok);
      free(B);
    }
}

// Many factorizations in flight on every stream, some failing: each reports its own status (the
// status words are per operation, not per stream), and the rest are right.
TEST_P(CudaBlas, ConcurrentFactorizationsReportTheirOwnStatus) {
  const size_t kLaunches = 48;
  const uint64_t n = fake() ? 12 : 96;
  struct One {
    DevMat a;
    int bad_order = 0;  // 0: positive definite
  };
  std::vector<One> all(kLaunches);
  std::vector<std::unique_ptr<Waiter>> waiters;
  hcr_kernel_t* k = p().builtin(0, "potrf_f64");
  ASSERT_NE(k, nullptr);
  hcr_potrf_params_t params{HCR_POTRF_PARAMS_STRUCT_SIZE, HCR_LOWER};
  std::vector<hcr_arg_t> args(kLaunches);
  for (size_t i = 0; i < kLaunches; ++i) {
    One& one = all[i];
    one.bad_order = i % 3 == 1 ? static_cast<int>(1 + i % n) : 0;
    one.a = upload(p(), HCR_DTYPE_F64, n, n, 0, [&](uint64_t r, uint64_t c) {
      if (r != c) return 0.0;
      return static_cast<int>(r) + 1 == one.bad_order ? -2.0 : 4.0;
    });
    waiters.push_back(std::make_unique<Waiter>(p().api()));
    args[i] = one.a.arg(HCR_ACCESS_READ_WRITE);
    hcr_launch_args_t la{};
    la.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
    la.kernel = k;
    la.args = &args[i];
    la.num_args = 1;
    la.params = &params;
    la.params_size = sizeof params;
    la.done = &Waiter::on_done;
    la.done_user_data = waiters.back().get();
    ASSERT_TRUE(p().check(p().api()->launch(p().get(), &la)).ok);
  }
  for (size_t i = 0; i < kLaunches; ++i) {
    SCOPED_TRACE("launch " + std::to_string(i));
    const Outcome o = waiters[i]->wait(1)[0];
    if (all[i].bad_order == 0) {
      EXPECT_TRUE(o.ok) << o.message;
      DevMat F = download(p(), all[i].a);
      EXPECT_EQ(F(n - 1, n - 1), 2.0);  // sqrt(4)
    } else {
      EXPECT_FALSE(o.ok);
      EXPECT_NE(o.message.find("leading minor of order " + std::to_string(all[i].bad_order) + " "),
                std::string::npos)
          << o.message;
    }
    free(all[i].a);
  }
  p().release(k);
}

// ---- getrf_nopiv -------------------------------------------------------------------------------

TEST_P(CudaBlas, GetrfWithoutPivoting) {
  // One stream, whose scratch memory the factorizations share, and a potrf first: its workspace
  // (which the fake cuSOLVER fills with NaN) is where getrf_nopiv's transposed tile goes next.
  auto one = make(Options{{"streams", "1"}, {"cache_dir", ""}});
  ASSERT_TRUE(one->ok()) << one->create_error();
  Plugin& q = *one;
  for (hcr_dtype_t dt : {HCR_DTYPE_F64, HCR_DTYPE_F32})
    for (uint64_t n : orders()) {
      SCOPED_TRACE(kernel_name("getrf_nopiv", dt) + " n " + std::to_string(n));
      DevMat S = spd(q, dt, n, false);
      hcr_potrf_params_t lower{HCR_POTRF_PARAMS_STRUCT_SIZE, HCR_LOWER};
      ASSERT_TRUE(
          run_on(q, kernel_name("potrf", dt), {S.arg(HCR_ACCESS_READ_WRITE)}, &lower, sizeof lower)
              .ok);
      q.free(0, S.mem);
      // Diagonally dominant: no pivoting needed. Unsymmetric, so a transposed factorization
      // (A^T = L U) would not pass for A's.
      DevMat A = upload(q, dt, n, n, 2, [&](uint64_t i, uint64_t j) {
        return i == j ? n + 2.0 : uniform() + (i < j ? 0.5 : 0.0);
      });
      Outcome o =
          run_on(q, kernel_name("getrf_nopiv", dt), {A.arg(HCR_ACCESS_READ_WRITE)}, nullptr, 0);
      ASSERT_TRUE(o.ok) << o.message;
      DevMat F = download(q, A);
      auto L = [&](uint64_t i, uint64_t j) { return i == j ? 1.0 : i > j ? F(i, j) : 0.0; };
      auto U = [&](uint64_t i, uint64_t j) { return i <= j ? F(i, j) : 0.0; };
      Mismatches bad;
      for (uint64_t i = 0; i < n; ++i)
        for (uint64_t j = 0; j < n; ++j) {
          double got = 0, scale = 0;
          for (uint64_t q = 0; q <= std::min(i, j); ++q) {
            got += L(i, q) * U(q, j);
            scale += std::abs(L(i, q) * U(q, j));
          }
          bad.check(got, A(i, j), 8.0 * (n + 2) * unit(dt) * scale, i, j);
        }
      EXPECT_EQ(bad.count(), 0u);
      q.free(0, A.mem);
    }
}

TEST_P(CudaBlas, GetrfZeroPivotNamesTheRow) {
  for (hcr_dtype_t dt : {HCR_DTYPE_F64, HCR_DTYPE_F32}) {
    SCOPED_TRACE(kernel_name("getrf_nopiv", dt));
    // Rows 0 and 1 agree in their first two columns: after one step of elimination U(1,1) = 0.
    DevMat A = upload(p(), dt, 5, 5, 0, [](uint64_t i, uint64_t j) {
      if (i < 2 && j < 2) return 1.0;
      return i == j ? 3.0 : i < 2 ? 0.0 : 0.5;
    });
    Outcome o = run(kernel_name("getrf_nopiv", dt), {A.arg(HCR_ACCESS_READ_WRITE)}, nullptr, 0);
    EXPECT_FALSE(o.ok);
    EXPECT_EQ(o.code, HCR_ERROR_INVALID_ARGUMENT) << o.message;
    EXPECT_NE(o.message.find("zero pivot in row 2 "), std::string::npos) << o.message;
    free(A);
  }
}

// ---- what is offered, mistakes, estimates ------------------------------------------------------

TEST_P(CudaBlas, EveryBuiltinIsOfferedAndNoOther) {
  for (const char* op : {"gemm", "syrk", "trsm", "potrf", "getrf_nopiv"})
    for (hcr_dtype_t dt : {HCR_DTYPE_F32, HCR_DTYPE_F64}) {
      CallError e;
      hcr_kernel_t* k = p().builtin(0, kernel_name(op, dt).c_str(), &e);
      EXPECT_NE(k, nullptr) << kernel_name(op, dt) << ": " << e.message;
      if (k != nullptr) p().release(k);
    }
  for (const char* name : {"syrk_f16", "trsm_bf16", "potrf_f16", "getrf_f64", "getrf_nopiv_i32",
                           "potrf", "herk_f32", "gemm_"}) {
    CallError e;
    EXPECT_EQ(p().builtin(0, name, &e), nullptr) << name;
    EXPECT_EQ(e.code, HCR_ERROR_NOT_FOUND) << name << ": " << e.message;
  }
}

TEST_P(CudaBlas, MistakesAreRefusedNamingThem) {
  DevMat A = upload(p(), HCR_DTYPE_F32, 4, 4, 0, [](auto i, auto j) { return i == j ? 2.0 : 0.0; });
  DevMat B = upload(p(), HCR_DTYPE_F32, 4, 6, 0, [](auto, auto) { return 1.0; });
  DevMat R = upload(p(), HCR_DTYPE_F32, 3, 4, 0, [](auto, auto) { return 1.0; });
  auto expect = [](const Outcome& o, const std::string& text) {
    EXPECT_FALSE(o.ok) << text;
    EXPECT_EQ(o.code, HCR_ERROR_INVALID_ARGUMENT) << o.message;
    EXPECT_NE(o.message.find(text), std::string::npos) << o.message;
  };
  const hcr_arg_t a = A.arg(HCR_ACCESS_READ), b = B.arg(HCR_ACCESS_READ_WRITE),
                  r = R.arg(HCR_ACCESS_READ_WRITE);

  hcr_gemm_params_t g{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0, 2, HCR_NO_TRANS};
  expect(run("gemm_f32", {a, a, A.arg(HCR_ACCESS_READ_WRITE)}, g),
         "gemm_f32 parameter trans_a = 2: must be HCR_NO_TRANS (0) or HCR_TRANS (1)");
  g = {HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0, HCR_NO_TRANS, HCR_TRANS};
  expect(run("gemm_f32", {a, b, r}, g),
         "gemm shapes do not match: A is 4x4, B is 4x6, C is 3x4 with B transposed");
  g.struct_size = 8;
  expect(run("gemm_f32", {a, a, A.arg(HCR_ACCESS_READ_WRITE)}, g),
         "gemm_f32 parameters: struct_size = 8 in a block of 32 bytes, expected an "
         "hcr_gemm_params_t of at least 24 bytes");
  expect(run("gemm_f32", {a, a, A.arg(HCR_ACCESS_READ_WRITE)}, &g, 16),
         "gemm_f32 parameters: 16 bytes, expected an hcr_gemm_params_t of at least 24 bytes");

  hcr_syrk_params_t s{HCR_SYRK_PARAMS_STRUCT_SIZE, 1, 0, HCR_LOWER, HCR_NO_TRANS};
  expect(run("syrk_f32", {b, r}, s), "syrk_f32 shapes do not match: A is 4x6, C is 3x4");
  expect(run("syrk_f32", {a}, s), "syrk_f32 takes 2 buffers (A, C), got 1");
  s.uplo = 5;
  expect(run("syrk_f32", {a, A.arg(HCR_ACCESS_READ_WRITE)}, s),
         "syrk_f32 parameter uplo = 5: must be HCR_LOWER (0) or HCR_UPPER (1)");
  expect(run("syrk_f32", {a, A.arg(HCR_ACCESS_READ_WRITE)}, &s, 24),
         "syrk_f32 parameters: 24 bytes, expected an hcr_syrk_params_t of at least 32 bytes");

  hcr_trsm_params_t t{
      HCR_TRSM_PARAMS_STRUCT_SIZE, 1, HCR_RIGHT, HCR_LOWER, HCR_NO_TRANS, HCR_NON_UNIT};
  expect(run("trsm_f32", {a, b}, t),
         "trsm_f32 shapes do not match: A is 4x4, B is 4x6 (A must be square with B's columns as "
         "its order: side is right)");
  t.side = HCR_LEFT;
  t.diag = -1;
  expect(run("trsm_f32", {a, b}, t), "trsm_f32 parameter diag = -1");
  t.diag = HCR_UNIT;
  EXPECT_TRUE(run("trsm_f32", {a, b}, t).ok) << "a left solve with a 4x4 A fits a 4x6 B";

  hcr_potrf_params_t f{HCR_POTRF_PARAMS_STRUCT_SIZE, HCR_LOWER};
  expect(run("potrf_f32", {r}, f), "potrf_f32: A is 3x4, not square");
  expect(run("potrf_f64", {A.arg(HCR_ACCESS_READ_WRITE)}, f),
         "potrf_f64 argument 0 (A) is f32, expected f64");
  expect(run("getrf_nopiv_f32", {a, b}, nullptr, 0), "getrf_nopiv_f32 takes 1 buffer (A), got 2");
  free(A);
  free(B);
  free(R);
}

TEST_P(CudaBlas, EstimatesEveryBuiltin) {
  auto estimate = [&](const char* name, std::vector<hcr_arg_t> args) {
    hcr_kernel_t* k = p().builtin(0, name);
    hcr_launch_args_t la{};
    la.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
    la.kernel = k;
    la.args = args.data();
    la.num_args = args.size();
    double s = -1;
    CallError e = p().check(p().api()->estimate(p().get(), &la, &s));
    EXPECT_TRUE(e.ok) << name << ": " << e.message;
    p().release(k);
    return s;
  };
  auto sq = [](uint64_t n, hcr_access_t access) {
    hcr_arg_t a{};
    a.struct_size = HCR_ARG_STRUCT_SIZE;
    a.dtype = HCR_DTYPE_F64;
    a.access = access;
    a.rows = a.cols = a.ld = n;
    return a;
  };
  for (uint64_t n : {64u, 1024u}) {
    EXPECT_GT(estimate("syrk_f64", {sq(n, HCR_ACCESS_READ), sq(n, HCR_ACCESS_READ_WRITE)}), 0.0);
    EXPECT_GT(estimate("trsm_f64", {sq(n, HCR_ACCESS_READ), sq(n, HCR_ACCESS_READ_WRITE)}), 0.0);
    EXPECT_GT(estimate("getrf_nopiv_f64", {sq(n, HCR_ACCESS_READ_WRITE)}), 0.0);
  }
  EXPECT_LT(estimate("potrf_f64", {sq(64, HCR_ACCESS_READ_WRITE)}),
            estimate("potrf_f64", {sq(4096, HCR_ACCESS_READ_WRITE)}));
}

// ---- through hcr::Runtime ----------------------------------------------------------------------

class CudaBlasRuntime : public RuntimeFixture {};

INSTANTIATE_TEST_SUITE_P(CudaGpu, CudaBlasRuntime, ::testing::Values(Target{false}),
                         [](const auto&) { return std::string("gpu"); });
INSTANTIATE_TEST_SUITE_P(FakeCuda, CudaBlasRuntime, ::testing::Values(Target{true}),
                         [](const auto&) { return std::string("fake"); });

// The Cholesky factorization of a 2 x 2 block matrix as four tasks — potrf, trsm, syrk, potrf —
// with their parameter blocks, placed by the scheduler and the tiles moved by the data manager.
TEST_P(CudaBlasRuntime, BlockCholeskyAsTasks) {
  const size_t b1 = fake() ? 13 : 301, b2 = fake() ? 9 : 200, n = b1 + b2;
  std::vector<double> m(n * n), a(n * n);
  for (auto& x : m) x = uniform();
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      double s = i == j ? static_cast<double>(n) : 0.0;
      for (size_t q = 0; q < n; ++q) s += m[i * n + q] * m[j * n + q];
      a[i * n + j] = s;
    }
  auto tile = [&](size_t r0, size_t rows, size_t c0, size_t cols) {
    auto t = rt().buffer<double>(rows, cols);
    {
      auto v = t.acquire(Access::write);
      for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < cols; ++j) v(i, j) = a[(r0 + i) * n + c0 + j];
    }
    return t;
  };
  auto A11 = tile(0, b1, 0, b1), A21 = tile(b1, b2, 0, b1), A22 = tile(b1, b2, b1, b2);
  const hcr_potrf_params_t lower{HCR_POTRF_PARAMS_STRUCT_SIZE, HCR_LOWER};
  const hcr_trsm_params_t solve{
      HCR_TRSM_PARAMS_STRUCT_SIZE, 1.0, HCR_RIGHT, HCR_LOWER, HCR_TRANS, HCR_NON_UNIT};
  const hcr_syrk_params_t update{HCR_SYRK_PARAMS_STRUCT_SIZE, -1.0, 1.0, HCR_LOWER, HCR_NO_TRANS};
  rt().submit(Task(rt().kernel("potrf_f64")).read_write(A11).param(lower));
  rt().submit(Task(rt().kernel("trsm_f64")).read(A11).read_write(A21).param(solve));
  rt().submit(Task(rt().kernel("syrk_f64")).read(A21).read_write(A22).param(update));
  rt().submit(Task(rt().kernel("potrf_f64")).read_write(A22).param(lower)).get();
  auto l11 = A11.to_vector(), l21 = A21.to_vector(), l22 = A22.to_vector();
  auto L = [&](size_t i, size_t j) -> double {
    if (j > i) return 0;
    if (i < b1) return l11[i * b1 + j];
    if (j < b1) return l21[(i - b1) * b1 + j];
    return l22[(i - b1) * b2 + (j - b1)];
  };
  Mismatches bad;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j <= i; ++j) {
      double got = 0, scale = 0;
      for (size_t q = 0; q <= j; ++q) {
        got += L(i, q) * L(j, q);
        scale += std::abs(L(i, q) * L(j, q));
      }
      bad.check(got, a[i * n + j], 8.0 * (n + 2) * std::ldexp(1.0, -53) * scale, i, j);
    }
  EXPECT_EQ(bad.count(), 0u);
  EXPECT_EQ(rt().stats().failed, 0u);
}

// ---- without cuSOLVER --------------------------------------------------------------------------

// Without cuSOLVER the plugin declines potrf and getrf_nopiv (so the runtime never places them on
// its devices) and still offers the cuBLAS built-ins. cuSOLVER is opened once per process, so the
// check runs in a child process of this test binary that first loads a cuSOLVER lacking an entry
// under the name the plugin asks for: the plugin's dlopen then gets that library.
TEST(FakeCudaPlugin, WithoutCusolverTheFactorizationsAreDeclined) {
  if (std::getenv("HCR_TEST_NO_CUSOLVER_CHILD") != nullptr) {
    void* stub = dlopen(HCR_TEST_FAKE_CUSOLVER_INCOMPLETE, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(stub, nullptr) << dlerror();
    Plugin p(Options{{"cache_dir", ""}}, kFakePluginFile);
    ASSERT_TRUE(p.ok()) << p.create_error();
    for (const char* name : {"potrf_f32", "potrf_f64", "getrf_nopiv_f32", "getrf_nopiv_f64"}) {
      CallError e;
      EXPECT_EQ(p.builtin(0, name, &e), nullptr) << name;
      EXPECT_EQ(e.code, HCR_ERROR_UNSUPPORTED) << name;
      EXPECT_NE(e.message.find("needs cuSOLVER"), std::string::npos) << e.message;
      EXPECT_NE(e.message.find("lacks cusolverDnDpotrf"), std::string::npos) << e.message;
    }
    for (const char* name : {"gemm_f32", "gemm_bf16", "syrk_f64", "trsm_f32"}) {
      hcr_kernel_t* k = p.builtin(0, name);
      EXPECT_NE(k, nullptr) << name;
      if (k != nullptr) p.release(k);
    }
    p.destroy();

    Config c = cuda_config({{"cache_dir", ""}});
    c.plugin_paths = {HCR_TEST_FAKE_CUDA_DIR};
    Runtime rt(c);
    ASSERT_EQ(rt.devices().size(), static_cast<size_t>(kFakeDevices));
    auto A = rt.buffer<double>(3, 3), B = rt.buffer<double>(3, 2);
    {
      auto v = A.acquire(Access::write);
      for (size_t i = 0; i < 3; ++i)
        for (size_t j = 0; j < 3; ++j) v(i, j) = i == j ? 2.0 : 0.0;
      auto w = B.acquire(Access::write);
      for (size_t i = 0; i < 3; ++i)
        for (size_t j = 0; j < 2; ++j) w(i, j) = 1.0;
    }
    const hcr_potrf_params_t lower{HCR_POTRF_PARAMS_STRUCT_SIZE, HCR_LOWER};
    Error e = test::expect_error(
        [&] { rt.submit(Task(rt.kernel("potrf_f64")).read_write(A).param(lower)).get(); });
    EXPECT_EQ(e.code(), ErrorCode::no_device) << e.what();
    const hcr_trsm_params_t solve{
        HCR_TRSM_PARAMS_STRUCT_SIZE, 1.0, HCR_LEFT, HCR_LOWER, HCR_NO_TRANS, HCR_NON_UNIT};
    auto A2 = rt.buffer<double>(3, 3);
    {
      auto v = A2.acquire(Access::write);
      for (size_t i = 0; i < 3; ++i)
        for (size_t j = 0; j < 3; ++j) v(i, j) = i == j ? 2.0 : 0.0;
    }
    rt.submit(Task(rt.kernel("trsm_f64")).read(A2).read_write(B).param(solve)).get();
    for (double x : B.to_vector()) EXPECT_EQ(x, 0.5);
    return;
  }
  test::TempDir dir;
  const std::string cmd =
      "HCR_TEST_NO_CUSOLVER_CHILD=1 /proc/" + std::to_string(::getpid()) +
      "/exe --gtest_filter=FakeCudaPlugin.WithoutCusolverTheFactorizationsAreDeclined > '" +
      (dir.path() / "child.log").string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream logf(dir.path() / "child.log");
  std::string log((std::istreambuf_iterator<char>(logf)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << log;
  EXPECT_NE(log.find("[  PASSED  ] 1 test"), std::string::npos) << log;
}

}  // namespace
}  // namespace hcr
