// A fake cuBLAS (built as libcublas.so.<major> beside the fake CUDA runtime) for the CUDA backend's
// tests without a GPU: the entries the plugin opens, with cuBLAS's column-major semantics and
// argument checks, computed on the host on the handle's stream of the fake runtime. What it checks
// for real is the plugin's mapping of row-major ABI matrices onto column-major cuBLAS calls.
#include <cublas_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

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
    default:
      std::memcpy(p, &v, 8);
  }
}

struct Gemm {
  int m, n, k;
  double alpha, beta;
  const void *a, *b;
  void* c;
  int lda, ldb, ldc;
  cudaDataType type;
  bool wide;  // accumulate in double (f64) rather than float

  static void run(void* self) {
    auto* g = static_cast<Gemm*>(self);
    for (int j = 0; j < g->n; ++j)
      for (int i = 0; i < g->m; ++i) {
        double acc_d = 0;
        float acc_f = 0;
        for (int p = 0; p < g->k; ++p) {
          const double x = load(g->type, g->a, i + static_cast<size_t>(p) * g->lda) *
                           load(g->type, g->b, p + static_cast<size_t>(j) * g->ldb);
          if (g->wide) acc_d += x;
          else acc_f += static_cast<float>(x);
        }
        const size_t at = i + static_cast<size_t>(j) * g->ldc;
        double r = g->alpha * (g->wide ? acc_d : acc_f);
        if (g->beta != 0) r += g->beta * load(g->type, g->c, at);  // beta 0: C is not read
        store(g->type, g->c, at, g->wide ? r : static_cast<float>(r));
      }
    delete g;
  }
};

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, double alpha, const void* A, int lda, const void* B, int ldb,
                    double beta, void* C, int ldc, cudaDataType type) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (ta != CUBLAS_OP_N || tb != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;
  // cuBLAS's own checks for op N: lda >= max(1, m), ldb >= max(1, k), ldc >= max(1, m).
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, m) || ldb < std::max(1, k) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const size_t es = type_size(type);
  // What the GPU would touch must be device memory of the fake runtime, else it faults.
  if ((k > 0 && (!hcr_fake_device_range(A, ((static_cast<size_t>(k) - 1) * lda + m) * es) ||
                 !hcr_fake_device_range(B, ((static_cast<size_t>(n) - 1) * ldb + k) * es))) ||
      !hcr_fake_device_range(C, ((static_cast<size_t>(n) - 1) * ldc + m) * es)) {
    hcr_fake_fault();
    return CUBLAS_STATUS_SUCCESS;  // the launch itself "succeeds"; the stream faults
  }
  auto* g = new Gemm{m, n, k, alpha, beta, A, B, C, lda, ldb, ldc, type, type == CUDA_R_64F};
  hcr_fake_enqueue(h->stream, &Gemm::run, g);
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

__attribute__((visibility("default"))) cublasStatus_t cublasGetVersion_v2(cublasHandle_t,
                                                                          int* v) {
  *v = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

__attribute__((visibility("default"))) const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
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

}  // extern "C"
