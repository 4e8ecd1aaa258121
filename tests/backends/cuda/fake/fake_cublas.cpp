// A fake cuBLAS (built as libcublas.so.<major> beside the fake CUDA runtime) for the CUDA backend's
// tests without a GPU: the entries the plugin opens (gemm with transposes, syrk, trsm, geam), with
// cuBLAS's column-major semantics and argument checks, computed on the host with naive loops on the
// handle's stream of the fake runtime. What it checks for real is the plugin's mapping of row-major
// ABI matrices onto column-major cuBLAS calls: a wrong flag, triangle or leading dimension gives
// wrong numbers, reads a triangle the test filled with NaN, or fails cuBLAS's checks.
#include <cublas_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

extern "C" void hcr_fake_enqueue(cudaStream_t stream, void (*fn)(void*), void* ctx);
extern "C" int hcr_fake_device_range(const void* p, size_t bytes);
extern "C" void hcr_fake_fault();
extern "C" void hcr_fake_track(int delta);

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = man;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((m & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (man ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t h = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  const uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

size_t type_size(cudaDataType t) {
  switch (t) {
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    case CUDA_R_32F: return 4;
    case CUDA_R_64F: return 8;
    default: return 0;
  }
}

double load(cudaDataType t, const void* base, size_t i) {
  const char* p = static_cast<const char*>(base) + i * type_size(t);
  switch (t) {
    case CUDA_R_16F: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return half_to_float(h);
    }
    case CUDA_R_16BF: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_float(h);
    }
    case CUDA_R_32F: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
  }
}

void store(cudaDataType t, void* base, size_t i, double v) {
  char* p = static_cast<char*>(base) + i * type_size(t);
  switch (t) {
    case CUDA_R_16F: {
      uint16_t h = float_to_half(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case CUDA_R_16BF: {
      uint16_t h = float_to_bf16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case CUDA_R_32F: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    default: std::memcpy(p, &v, 8);
  }
}

// Whether an m x n column-major operand with leading dimension ld lies in device memory, as the
// GPU would need it to; an empty one touches nothing.
bool on_device(const void* p, int rows, int cols, int ld, size_t es) {
  if (rows <= 0 || cols <= 0) return true;
  return hcr_fake_device_range(p, ((static_cast<size_t>(cols) - 1) * ld + rows) * es) != 0;
}

// Column-major element (i, j) of `op(X)` stored with leading dimension ld.
double at(cudaDataType t, const void* x, int ld, bool trans, int i, int j) {
  return trans ? load(t, x, j + static_cast<size_t>(i) * ld)
               : load(t, x, i + static_cast<size_t>(j) * ld);
}

struct Gemm {
  int m, n, k;
  double alpha, beta;
  const void *a, *b;
  void* c;
  int lda, ldb, ldc;
  bool ta, tb;
  cudaDataType type;
  bool wide;  // accumulate in double (f64) rather than float

  static void run(void* self) {
    auto* g = static_cast<Gemm*>(self);
    for (int j = 0; j < g->n; ++j)
      for (int i = 0; i < g->m; ++i) {
        double acc_d = 0;
        float acc_f = 0;
        for (int p = 0; p < g->k; ++p) {
          const double x =
              at(g->type, g->a, g->lda, g->ta, i, p) * at(g->type, g->b, g->ldb, g->tb, p, j);
          if (g->wide) acc_d += x;
          else acc_f += static_cast<float>(x);
        }
        const size_t to = i + static_cast<size_t>(j) * g->ldc;
        double r = g->alpha * (g->wide ? acc_d : acc_f);
        if (g->beta != 0) r += g->beta * load(g->type, g->c, to);  // beta 0: C is not read
        store(g->type, g->c, to, g->wide ? r : static_cast<float>(r));
      }
    delete g;
  }
};

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, double alpha, const void* A, int lda, const void* B, int ldb,
                    double beta, void* C, int ldc, cudaDataType type) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
    return CUBLAS_STATUS_NOT_SUPPORTED;  // no conjugate transposes of real matrices here
  const bool tra = ta == CUBLAS_OP_T, trb = tb == CUBLAS_OP_T;
  // cuBLAS's own checks: lda >= max(1, rows of A as stored), likewise ldb; ldc >= max(1, m).
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, tra ? k : m) || ldb < std::max(1, trb ? n : k) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const size_t es = type_size(type);
  // What the GPU would touch must be device memory of the fake runtime, else it faults.
  if ((k > 0 && (!on_device(A, tra ? k : m, tra ? m : k, lda, es) ||
                 !on_device(B, trb ? n : k, trb ? k : n, ldb, es))) ||
      !on_device(C, m, n, ldc, es)) {
    hcr_fake_fault();
    return CUBLAS_STATUS_SUCCESS;  // the launch itself "succeeds"; the stream faults
  }
  auto* g =
      new Gemm{m, n, k, alpha, beta, A, B, C, lda, ldb, ldc, tra, trb, type, type == CUDA_R_64F};
  hcr_fake_enqueue(h->stream, &Gemm::run, g);
  return CUBLAS_STATUS_SUCCESS;
}

// C = alpha op(A) op(A)^T + beta C on the `upper` (else lower) triangle of C only.
struct Syrk {
  bool upper, trans;
  int n, k;
  double alpha, beta;
  const void* a;
  int lda;
  void* c;
  int ldc;
  cudaDataType type;

  static void run(void* self) {
    auto* s = static_cast<Syrk*>(self);
    for (int j = 0; j < s->n; ++j)
      for (int i = s->upper ? 0 : j; i < (s->upper ? j + 1 : s->n); ++i) {
        double acc = 0;
        for (int p = 0; p < s->k; ++p)
          acc +=
              at(s->type, s->a, s->lda, s->trans, i, p) * at(s->type, s->a, s->lda, s->trans, j, p);
        const size_t to = i + static_cast<size_t>(j) * s->ldc;
        double r = s->alpha * acc;
        if (s->beta != 0) r += s->beta * load(s->type, s->c, to);
        store(s->type, s->c, to, r);
      }
    delete s;
  }
};

cublasStatus_t syrk(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, int n, int k,
                    double alpha, const void* A, int lda, double beta, void* C, int ldc,
                    cudaDataType type) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if ((uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER) ||
      (trans != CUBLAS_OP_N && trans != CUBLAS_OP_T))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool tr = trans == CUBLAS_OP_T;
  // op(A) is n x k: A itself is n x k (lda >= n), or k x n when transposed (lda >= k).
  if (n < 0 || k < 0 || lda < std::max(1, tr ? k : n) || ldc < std::max(1, n))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (n == 0) return CUBLAS_STATUS_SUCCESS;
  const size_t es = type_size(type);
  if ((k > 0 && !on_device(A, tr ? k : n, tr ? n : k, lda, es)) || !on_device(C, n, n, ldc, es)) {
    hcr_fake_fault();
    return CUBLAS_STATUS_SUCCESS;
  }
  hcr_fake_enqueue(
      h->stream, &Syrk::run,
      new Syrk{uplo == CUBLAS_FILL_MODE_UPPER, tr, n, k, alpha, beta, A, lda, C, ldc, type});
  return CUBLAS_STATUS_SUCCESS;
}

// op(A) X = alpha B (left) or X op(A) = alpha B (right); X overwrites B. Only A's `upper` (else
// lower) triangle is read, and its diagonal only when not `unit`.
struct Trsm {
  bool right, upper, trans, unit;
  int m, n;
  double alpha;
  const void* a;
  int lda;
  void* b;
  int ldb;
  cudaDataType type;

  static void run(void* self) {
    auto* t = static_cast<Trsm*>(self);
    const int order = t->right ? t->n : t->m;
    const size_t N = static_cast<size_t>(order);
    // T = op(A) as a dense matrix, zero outside its triangle.
    std::vector<double> T(N * N, 0.0);
    if (t->alpha != 0)
      for (int j = 0; j < order; ++j)
        for (int i = 0; i < order; ++i) {
          if (t->upper ? i > j : i < j) continue;  // the triangle that is not read
          const size_t from = i + static_cast<size_t>(j) * t->lda;
          const double v = i == j && t->unit ? 1.0 : load(t->type, t->a, from);
          if (t->trans) T[j + N * i] = v;
          else T[i + N * j] = v;
        }
    const bool lower = t->upper == t->trans;  // op(A)'s triangle
    // One system per column of B (left: T x = alpha b) or per row (right: T^T x = alpha b^T).
    const int systems = t->right ? t->m : t->n;
    std::vector<double> x(N);
    for (int s = 0; s < systems; ++s) {
      auto idx = [&](int e) {
        return t->right ? s + static_cast<size_t>(e) * t->ldb : e + static_cast<size_t>(s) * t->ldb;
      };
      if (t->alpha == 0) {
        for (int e = 0; e < order; ++e) store(t->type, t->b, idx(e), 0.0);  // A is not read
        continue;
      }
      for (int e = 0; e < order; ++e) x[e] = t->alpha * load(t->type, t->b, idx(e));
      // M x = rhs with M = T (left) or T^T (right); M lower when T is lower xor right.
      auto M = [&](int i, int j) { return t->right ? T[j + N * i] : T[i + N * j]; };
      if (lower != t->right) {
        for (int i = 0; i < order; ++i) {
          for (int j = 0; j < i; ++j) x[i] -= M(i, j) * x[j];
          x[i] /= M(i, i);
        }
      } else {
        for (int i = order - 1; i >= 0; --i) {
          for (int j = i + 1; j < order; ++j) x[i] -= M(i, j) * x[j];
          x[i] /= M(i, i);
        }
      }
      for (int e = 0; e < order; ++e) store(t->type, t->b, idx(e), x[e]);
    }
    delete t;
  }
};

cublasStatus_t trsm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,
                    cublasOperation_t trans, cublasDiagType_t diag, int m, int n, double alpha,
                    const void* A, int lda, void* B, int ldb, cudaDataType type) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if ((side != CUBLAS_SIDE_LEFT && side != CUBLAS_SIDE_RIGHT) ||
      (uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER) ||
      (trans != CUBLAS_OP_N && trans != CUBLAS_OP_T) ||
      (diag != CUBLAS_DIAG_NON_UNIT && diag != CUBLAS_DIAG_UNIT))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool right = side == CUBLAS_SIDE_RIGHT;
  const int order = right ? n : m;
  if (m < 0 || n < 0 || lda < std::max(1, order) || ldb < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const size_t es = type_size(type);
  if (!on_device(A, order, order, lda, es) || !on_device(B, m, n, ldb, es)) {
    hcr_fake_fault();
    return CUBLAS_STATUS_SUCCESS;
  }
  hcr_fake_enqueue(h->stream, &Trsm::run,
                   new Trsm{right, uplo == CUBLAS_FILL_MODE_UPPER, trans == CUBLAS_OP_T,
                            diag == CUBLAS_DIAG_UNIT, m, n, alpha, A, lda, B, ldb, type});
  return CUBLAS_STATUS_SUCCESS;
}

// C = alpha op(A) + beta op(B), m x n. B is read even when beta is 0: cuBLAS's documentation does
// not promise otherwise for geam, so a NaN there (0 * NaN) shows a caller that relies on it.
struct Geam {
  bool ta, tb;
  int m, n;
  double alpha, beta;
  const void *a, *b;
  int lda, ldb;
  void* c;
  int ldc;
  cudaDataType type;

  static void run(void* self) {
    auto* g = static_cast<Geam*>(self);
    // Into a copy first: C may be A or B (cuBLAS's in-place forms).
    std::vector<double> out(static_cast<size_t>(g->m) * g->n);
    for (int j = 0; j < g->n; ++j)
      for (int i = 0; i < g->m; ++i) {
        double r = g->alpha == 0 ? 0 : g->alpha * at(g->type, g->a, g->lda, g->ta, i, j);
        r += g->beta * at(g->type, g->b, g->ldb, g->tb, i, j);
        out[i + static_cast<size_t>(j) * g->m] = r;
      }
    for (int j = 0; j < g->n; ++j)
      for (int i = 0; i < g->m; ++i)
        store(g->type, g->c, i + static_cast<size_t>(j) * g->ldc,
              out[i + static_cast<size_t>(j) * g->m]);
    delete g;
  }
};

cublasStatus_t geam(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    double alpha, const void* A, int lda, double beta, const void* B, int ldb,
                    void* C, int ldc, cudaDataType type) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool tra = ta == CUBLAS_OP_T, trb = tb == CUBLAS_OP_T;
  if (m < 0 || n < 0 || lda < std::max(1, tra ? n : m) || ldb < std::max(1, trb ? n : m) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  // cuBLAS's in-place forms: C may be A or B only untransposed and with the same ld.
  if ((C == A && (tra || lda != ldc)) || (C == B && (trb || ldb != ldc)))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const size_t es = type_size(type);
  if (!on_device(A, tra ? n : m, tra ? m : n, lda, es) ||
      !on_device(B, trb ? n : m, trb ? m : n, ldb, es) || !on_device(C, m, n, ldc, es)) {
    hcr_fake_fault();
    return CUBLAS_STATUS_SUCCESS;
  }
  hcr_fake_enqueue(h->stream, &Geam::run,
                   new Geam{tra, trb, m, n, alpha, beta, A, B, lda, ldb, C, ldc, type});
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  *h = new cublasContext;
  hcr_fake_track(1);
  return CUBLAS_STATUS_SUCCESS;
}

__attribute__((visibility("default"))) cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  delete h;
  hcr_fake_track(-1);
  return CUBLAS_STATUS_SUCCESS;
}

__attribute__((visibility("default"))) cublasStatus_t cublasSetStream_v2(cublasHandle_t h,
                                                                         cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

__attribute__((visibility("default"))) cublasStatus_t cublasSetMathMode(cublasHandle_t,
                                                                        cublasMath_t) {
  return CUBLAS_STATUS_SUCCESS;
}

__attribute__((visibility("default"))) cublasStatus_t cublasGetVersion_v2(cublasHandle_t, int* v) {
  *v = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

__attribute__((visibility("default"))) const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    default: return "CUBLAS_STATUS_(fake)";
  }
}

__attribute__((visibility("default"))) cublasStatus_t cublasSgemm_v2(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
    float* C, int ldc) {
  return gemm(h, ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc, CUDA_R_32F);
}

__attribute__((visibility("default"))) cublasStatus_t cublasDgemm_v2(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const double* alpha, const double* A, int lda, const double* B, int ldb, const double* beta,
    double* C, int ldc) {
  return gemm(h, ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc, CUDA_R_64F);
}

__attribute__((visibility("default"))) cublasStatus_t cublasGemmEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt,
    int ldb, const void* beta, void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
    cublasGemmAlgo_t) {
  if (at != bt || at != ct || (at != CUDA_R_16F && at != CUDA_R_16BF) ||
      compute != CUBLAS_COMPUTE_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  float a, b;  // CUBLAS_COMPUTE_32F: the scalars are floats
  std::memcpy(&a, alpha, 4);
  std::memcpy(&b, beta, 4);
  return gemm(h, ta, tb, m, n, k, a, A, lda, B, ldb, b, C, ldc, at);
}

__attribute__((visibility("default"))) cublasStatus_t cublasSsyrk_v2(
    cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, int n, int k,
    const float* alpha, const float* A, int lda, const float* beta, float* C, int ldc) {
  return syrk(h, uplo, trans, n, k, *alpha, A, lda, *beta, C, ldc, CUDA_R_32F);
}

__attribute__((visibility("default"))) cublasStatus_t cublasDsyrk_v2(
    cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, int n, int k,
    const double* alpha, const double* A, int lda, const double* beta, double* C, int ldc) {
  return syrk(h, uplo, trans, n, k, *alpha, A, lda, *beta, C, ldc, CUDA_R_64F);
}

__attribute__((visibility("default"))) cublasStatus_t cublasStrsm_v2(
    cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t trans,
    cublasDiagType_t diag, int m, int n, const float* alpha, const float* A, int lda, float* B,
    int ldb) {
  return trsm(h, side, uplo, trans, diag, m, n, *alpha, A, lda, B, ldb, CUDA_R_32F);
}

__attribute__((visibility("default"))) cublasStatus_t cublasDtrsm_v2(
    cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t trans,
    cublasDiagType_t diag, int m, int n, const double* alpha, const double* A, int lda, double* B,
    int ldb) {
  return trsm(h, side, uplo, trans, diag, m, n, *alpha, A, lda, B, ldb, CUDA_R_64F);
}

__attribute__((visibility("default"))) cublasStatus_t cublasSgeam(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, const float* alpha,
    const float* A, int lda, const float* beta, const float* B, int ldb, float* C, int ldc) {
  return geam(h, ta, tb, m, n, *alpha, A, lda, *beta, B, ldb, C, ldc, CUDA_R_32F);
}

__attribute__((visibility("default"))) cublasStatus_t cublasDgeam(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, const double* alpha,
    const double* A, int lda, const double* beta, const double* B, int ldb, double* C, int ldc) {
  return geam(h, ta, tb, m, n, *alpha, A, lda, *beta, B, ldb, C, ldc, CUDA_R_64F);
}

}  // extern "C"
