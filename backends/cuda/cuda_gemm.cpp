// Built-in gemm on cuBLAS. The ABI's matrices are row-major; cuBLAS is column-major. A row-major
// matrix is its transpose in column-major, so C = A B is computed as C^T = B^T A^T: swap the
// operands and m with n, keep every leading dimension — no transposition or copy.
#include "cuda_gemm.hpp"

#include "cuda_libs.hpp"

#include <algorithm>
#include <climits>

namespace hcr::cuda {
namespace {

std::string shape(const hcr_arg_t& a) {
  return std::to_string(a.rows) + "x" + std::to_string(a.cols);
}

int to_int(uint64_t v, const char* what) {
  if (v > static_cast<uint64_t>(INT_MAX))
    throw sdk::Error(HCR_ERROR_INVALID_ARGUMENT, std::string("gemm: ") + what + " = " +
                                                     std::to_string(v) +
                                                     " exceeds cuBLAS's limit of 2^31-1");
  return static_cast<int>(v);
}

}  // namespace

size_t dtype_size(hcr_dtype_t t) {
  switch (t) {
    case HCR_DTYPE_BYTES:
    case HCR_DTYPE_U8: return 1;
    case HCR_DTYPE_F16:
    case HCR_DTYPE_BF16: return 2;
    case HCR_DTYPE_F32:
    case HCR_DTYPE_I32: return 4;
    case HCR_DTYPE_F64:
    case HCR_DTYPE_I64: return 8;
  }
  throw sdk::Error(HCR_ERROR_INVALID_ARGUMENT,
                   "unknown element type " + std::to_string(static_cast<int>(t)));
}

std::optional<hcr_dtype_t> gemm_dtype(const std::string& name) {
  if (name == "gemm_f32") return HCR_DTYPE_F32;
  if (name == "gemm_f64") return HCR_DTYPE_F64;
  if (name == "gemm_f16") return HCR_DTYPE_F16;
  if (name == "gemm_bf16") return HCR_DTYPE_BF16;
  return std::nullopt;
}

GemmCall make_gemm(hcr_dtype_t dtype, const hcr_launch_args_t& a, void* const ptrs[3]) {
  const std::string kname = std::string("gemm_") + sdk::dtype_name(dtype);
  if (a.num_args != 3)
    throw sdk::Error(HCR_ERROR_INVALID_ARGUMENT, kname + " takes 3 buffers (A, B, C), got " +
                                                     std::to_string(a.num_args));
  static const char* const role[3] = {"A", "B", "C"};
  for (size_t i = 0; i < 3; ++i)
    if (a.args[i].dtype != dtype)
      throw sdk::Error(HCR_ERROR_INVALID_ARGUMENT,
                       kname + " argument " + std::to_string(i) + " (" + role[i] + ") is " +
                           sdk::dtype_name(a.args[i].dtype) + ", expected " +
                           sdk::dtype_name(dtype));
  const hcr_arg_t &A = a.args[0], &B = a.args[1], &C = a.args[2];
  if (B.rows != A.cols || C.rows != A.rows || C.cols != B.cols)
    throw sdk::Error(HCR_ERROR_INVALID_ARGUMENT, "gemm shapes do not match: A is " + shape(A) +
                                                     ", B is " + shape(B) + ", C is " + shape(C));
  for (size_t i = 0; i < 3; ++i) {
    const hcr_arg_t& x = a.args[i];
    if (x.rows > 1 && x.ld < x.cols)
      throw sdk::Error(HCR_ERROR_INVALID_ARGUMENT,
                       kname + " argument " + std::to_string(i) + " (" + role[i] + ", " +
                           shape(x) + ") has ld " + std::to_string(x.ld) + " < its " +
                           std::to_string(x.cols) + " columns");
  }
  GemmCall g;
  g.dtype = dtype;
  g.m = to_int(A.rows, "m");
  g.k = to_int(A.cols, "k");
  g.n = to_int(B.cols, "n");
  // cuBLAS wants ld >= max(1, leading extent) even for a single row or an empty matrix.
  auto ld = [](const hcr_arg_t& x, const char* what) {
    return to_int(std::max<uint64_t>({x.ld, x.cols, 1}), what);
  };
  g.lda = ld(A, "lda");
  g.ldb = ld(B, "ldb");
  g.ldc = ld(C, "ldc");
  g.a = ptrs[0];
  g.b = ptrs[1];
  g.c = ptrs[2];
  if (a.params_size >= HCR_GEMM_PARAMS_STRUCT_SIZE && a.params != nullptr) {
    auto p = sdk::read_struct(static_cast<const hcr_gemm_params_t*>(a.params));
    g.alpha = p.alpha;
    g.beta = p.beta;
  } else if (a.params_size != 0) {
    throw sdk::Error(HCR_ERROR_INVALID_ARGUMENT,
                     kname + " parameters: " + std::to_string(a.params_size) +
                         " bytes, expected an hcr_gemm_params_t (" +
                         std::to_string(HCR_GEMM_PARAMS_STRUCT_SIZE) + ")");
  }
  return g;
}

void enqueue_gemm(cublasHandle_t h, const GemmCall& g) {
  const CublasLib& lib = cublas();
  if (g.m == 0 || g.n == 0) return;  // nothing to write
  const cublasOperation_t N = CUBLAS_OP_N;
  switch (g.dtype) {
    case HCR_DTYPE_F32: {
      const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
      HCR_CUBLAS_CHECK(lib.sgemm(h, N, N, g.n, g.m, g.k, &alpha, static_cast<const float*>(g.b),
                                 g.ldb, static_cast<const float*>(g.a), g.lda, &beta,
                                 static_cast<float*>(g.c), g.ldc));
      break;
    }
    case HCR_DTYPE_F64: {
      HCR_CUBLAS_CHECK(lib.dgemm(h, N, N, g.n, g.m, g.k, &g.alpha, static_cast<const double*>(g.b),
                                 g.ldb, static_cast<const double*>(g.a), g.lda, &g.beta,
                                 static_cast<double*>(g.c), g.ldc));
      break;
    }
    case HCR_DTYPE_F16:
    case HCR_DTYPE_BF16: {
      // 16-bit inputs and output, f32 accumulation and scalars: the tensor-core path.
      const cudaDataType t = g.dtype == HCR_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
      const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
      HCR_CUBLAS_CHECK(lib.gemm_ex(h, N, N, g.n, g.m, g.k, &alpha, g.b, t, g.ldb, g.a, t, g.lda,
                                   &beta, g.c, t, g.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      break;
    }
    default:
      throw sdk::Error(HCR_ERROR_INTERNAL, "gemm of an unsupported type");
  }
}

double gemm_estimate_seconds(const GemmCall& g, const GpuInfo& gpu) {
  // Throughput relative to the FP32 FMA peak, from NVIDIA's datasheets: FP64 runs at full rate on
  // the tensor cores of sm_80/sm_90, half on sm_70/sm_100, 1/64 on the gaming parts; dense
  // f16/bf16 with f32 accumulation at ~16x (sm_80), ~15x (sm_90), ~28x (sm_100), ~4x elsewhere.
  const int cc = gpu.cc_major * 10 + gpu.cc_minor;
  double ratio = 1;
  if (g.dtype == HCR_DTYPE_F64)
    ratio = (cc == 80 || cc == 90) ? 1.0 : (cc == 70 || cc == 100) ? 0.5 : 1.0 / 64;
  else if (g.dtype == HCR_DTYPE_F16 || g.dtype == HCR_DTYPE_BF16)
    ratio = cc == 80 ? 16 : cc == 90 ? 15 : cc == 100 ? 28 : cc == 70 ? 8 : 4;
  const double rate = std::max(gpu.peak_gflops, 1.0) * 1e9 * ratio * 0.7;  // ~70% of peak reached
  const double flops = 2.0 * g.m * g.n * std::max(g.k, 1);
  return flops / rate + 10e-6;  // plus launch latency
}

}  // namespace hcr::cuda
