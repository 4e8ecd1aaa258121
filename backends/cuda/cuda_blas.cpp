// Built-in BLAS kernels on cuBLAS and cuSOLVER. The ABI's matrices are row-major; both libraries
// are column-major. A row-major matrix is its transpose in column-major, so every call maps onto
// the transposed problem with the same memory and leading dimensions — no copy:
//   gemm   C = op(A) op(B)        ->  C^T = op(B)^T op(A)^T: swap the operands (and m with n), each
//                                     keeping its own transpose flag;
//   syrk   C = op(A) op(A)^T      ->  C^T = C: flip trans (A's storage is A^T) and uplo (the lower
//                                     triangle of C is the upper one of C^T);
//   trsm   B = op(A)^-1 B (left)  ->  B^T = B^T op(A^T)^-1 (right): flip side and uplo, keep trans
//                                     and diag, swap m and n;
// The factorizations are the exceptions: the tile is transposed into scratch memory
// (cublas<t>geam), factored there in its own triangle, and transposed back — two n x n copies,
// small beside the n^3 of the factorization. getrf_nopiv must: factoring A^T gives A = U^T L^T,
// whose unit diagonal sits on the wrong factor. potrf could factor A^T in the other triangle, but
// cuSOLVER is much slower at that form (see enqueue_potrf).
#include "cuda_blas.hpp"

#include "cuda_libs.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

namespace hcr::cuda {
namespace {

using sdk::Error;

std::string shape(const hcr_arg_t& a) {
  return std::to_string(a.rows) + "x" + std::to_string(a.cols);
}

int to_int(const std::string& kname, uint64_t v, const char* what) {
  if (v > static_cast<uint64_t>(INT_MAX))
    throw Error(HCR_ERROR_INVALID_ARGUMENT, kname + ": " + what + " = " + std::to_string(v) +
                                                " exceeds cuBLAS's limit of 2^31-1");
  return static_cast<int>(v);
}

cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }
cublasFillMode_t fill(bool upper) {
  return upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
}

void enqueue_gemm(cublasHandle_t h, const BlasCall& g) {
  const CublasLib& lib = cublas();
  const sdk::BlasParams& p = g.params;
  // Column-major C^T (n x m) = op(B)^T (n x k) op(A)^T (k x m).
  const cublasOperation_t ta = op(p.trans_a), tb = op(p.trans_b);
  const void *A = g.ptr[0], *B = g.ptr[1];
  void* C = g.ptr[2];
  switch (g.kernel.dtype) {
    case HCR_DTYPE_F32: {
      const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
      HCR_CUBLAS_CHECK(lib.sgemm(h, tb, ta, g.n, g.m, g.k, &alpha, static_cast<const float*>(B),
                                 g.ld[1], static_cast<const float*>(A), g.ld[0], &beta,
                                 static_cast<float*>(C), g.ld[2]));
      break;
    }
    case HCR_DTYPE_F64: {
      HCR_CUBLAS_CHECK(lib.dgemm(h, tb, ta, g.n, g.m, g.k, &p.alpha, static_cast<const double*>(B),
                                 g.ld[1], static_cast<const double*>(A), g.ld[0], &p.beta,
                                 static_cast<double*>(C), g.ld[2]));
      break;
    }
    case HCR_DTYPE_F16:
    case HCR_DTYPE_BF16: {
      // 16-bit inputs and output, f32 accumulation and scalars: the tensor-core path.
      const cudaDataType t = g.kernel.dtype == HCR_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
      const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
      HCR_CUBLAS_CHECK(lib.gemm_ex(h, tb, ta, g.n, g.m, g.k, &alpha, B, t, g.ld[1], A, t, g.ld[0],
                                   &beta, C, t, g.ld[2], CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      break;
    }
    default: throw Error(HCR_ERROR_INTERNAL, "gemm of an unsupported type");
  }
}

void enqueue_syrk(cublasHandle_t h, const BlasCall& s) {
  const CublasLib& lib = cublas();
  const sdk::BlasParams& p = s.params;
  // A's storage is op(A)^T's when trans is set, and op(A)'s transpose otherwise; C keeps its
  // values (symmetric) but its triangles swap names.
  const cublasFillMode_t uplo = fill(!p.upper);
  const cublasOperation_t trans = op(!p.trans_a);
  if (s.kernel.dtype == HCR_DTYPE_F32) {
    const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
    HCR_CUBLAS_CHECK(lib.ssyrk(h, uplo, trans, s.n, s.k, &alpha,
                               static_cast<const float*>(s.ptr[0]), s.ld[0], &beta,
                               static_cast<float*>(s.ptr[1]), s.ld[1]));
  } else {
    HCR_CUBLAS_CHECK(lib.dsyrk(h, uplo, trans, s.n, s.k, &p.alpha,
                               static_cast<const double*>(s.ptr[0]), s.ld[0], &p.beta,
                               static_cast<double*>(s.ptr[1]), s.ld[1]));
  }
}

void enqueue_trsm(cublasHandle_t h, const BlasCall& t) {
  const CublasLib& lib = cublas();
  const sdk::BlasParams& p = t.params;
  // Column-major B^T is n x m; A^T is the triangle of the other name, on the other side.
  const cublasSideMode_t side = p.right ? CUBLAS_SIDE_LEFT : CUBLAS_SIDE_RIGHT;
  const cublasFillMode_t uplo = fill(!p.upper);
  const cublasDiagType_t diag = p.unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
  if (t.kernel.dtype == HCR_DTYPE_F32) {
    const float alpha = static_cast<float>(p.alpha);
    HCR_CUBLAS_CHECK(lib.strsm(h, side, uplo, op(p.trans_a), diag, t.n, t.m, &alpha,
                               static_cast<const float*>(t.ptr[0]), t.ld[0],
                               static_cast<float*>(t.ptr[1]), t.ld[1]));
  } else {
    HCR_CUBLAS_CHECK(lib.dtrsm(h, side, uplo, op(p.trans_a), diag, t.n, t.m, &p.alpha,
                               static_cast<const double*>(t.ptr[0]), t.ld[0],
                               static_cast<double*>(t.ptr[1]), t.ld[1]));
  }
}

// Bytes rounded up to the 256 that cuBLAS and cuSOLVER like their operands aligned to.
size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// dst (n x n, leading dimension ldd) = src^T (leading dimension lds), column-major, on the lane's
// stream. geam's second operand is src again with beta 0: whether or not cuBLAS reads it, it holds
// nothing but the tile (scratch memory could hold NaN from an earlier operation, and 0 * NaN is
// NaN), and dst overlaps neither operand.
template <class T>
void transpose(cublasHandle_t h, int n, const T* src, int lds, T* dst, int ldd) {
  const CublasLib& lib = cublas();
  const T one = 1, zero = 0;
  if constexpr (sizeof(T) == 4)
    HCR_CUBLAS_CHECK(
        lib.sgeam(h, CUBLAS_OP_T, CUBLAS_OP_T, n, n, &one, src, lds, &zero, src, lds, dst, ldd));
  else
    HCR_CUBLAS_CHECK(
        lib.dgeam(h, CUBLAS_OP_T, CUBLAS_OP_T, n, n, &one, src, lds, &zero, src, lds, dst, ldd));
}

// The tile, transposed, at the head of the lane's scratch memory, followed by `work_elems`
// elements of library workspace.
template <class T>
std::pair<T*, T*> transposed_scratch(Lane& l, int n, int work_elems) {
  const size_t tile = aligned(static_cast<size_t>(n) * n * sizeof(T));
  char* scratch = static_cast<char*>(
      l.scratch(tile + aligned(static_cast<size_t>(std::max(work_elems, 1)) * sizeof(T))));
  return {reinterpret_cast<T*>(scratch), reinterpret_cast<T*>(scratch + tile)};
}

// potrf works on the tile's column-major transpose W = A (two geam copies, as getrf_nopiv): the
// row-major lower factor is then cuSOLVER's lower factorization, the form it is fastest at. Its
// upper form, on the tile as it lies (no copy), was 2.0x (n 1024) to 2.65x (n 4096) slower on an
// H200 (CUDA 13, f64; bench/cuda_bench BM_Potrf's cusolver_upper_GFLOPs), and the plugin's potrf
// went from 0.44x/0.36x of a direct cuSOLVER call to 0.62x/0.78x with the copies. W's other
// triangle is copied back unchanged.
template <class T>
void enqueue_potrf(Lane& l, const BlasCall& f, int* info) {
  const CusolverLib& lib = cusolver();
  cublasHandle_t bh = l.blas();
  cusolverDnHandle_t h = l.solver();
  const int n = f.n;
  // The tile's own triangle: W is not transposed.
  const cublasFillMode_t uplo = fill(f.params.upper);
  T* A = static_cast<T*>(f.ptr[0]);
  int lwork = 0;  // asked for the dense tile it will factor (the query reads no element)
  if constexpr (sizeof(T) == 4)
    HCR_CUSOLVER_CHECK(lib.spotrf_buffer_size(h, uplo, n, A, n, &lwork));
  else HCR_CUSOLVER_CHECK(lib.dpotrf_buffer_size(h, uplo, n, A, n, &lwork));
  auto [W, work] = transposed_scratch<T>(l, n, lwork);
  int* dev_info = l.device_info();
  transpose(bh, n, A, f.ld[0], W, n);
  if constexpr (sizeof(T) == 4)
    HCR_CUSOLVER_CHECK(lib.spotrf(h, uplo, n, W, n, work, lwork, dev_info));
  else HCR_CUSOLVER_CHECK(lib.dpotrf(h, uplo, n, W, n, work, lwork, dev_info));
  transpose(bh, n, W, n, A, f.ld[0]);
  HCR_CUDA_CHECK(cudaMemcpyAsync(info, dev_info, sizeof(int), cudaMemcpyDeviceToHost, l.stream()));
}

template <class T>
void enqueue_getrf_nopiv(Lane& l, const BlasCall& f, int* info) {
  const CusolverLib& lib = cusolver();
  cublasHandle_t bh = l.blas();
  cusolverDnHandle_t h = l.solver();
  const int n = f.n;
  T* A = static_cast<T*>(f.ptr[0]);  // column-major: A^T, leading dimension ld
  int lwork = 0;  // asked for the dense tile it will factor (the query reads no element)
  if constexpr (sizeof(T) == 4) HCR_CUSOLVER_CHECK(lib.sgetrf_buffer_size(h, n, n, A, n, &lwork));
  else HCR_CUSOLVER_CHECK(lib.dgetrf_buffer_size(h, n, n, A, n, &lwork));
  auto [W, work] = transposed_scratch<T>(l, n, lwork);
  int* dev_info = l.device_info();
  transpose(bh, n, A, f.ld[0], W, n);  // W = (A^T)^T, the tile in column-major
  // devIpiv = NULL: no pivoting (cuSOLVER's documented form), A = L U.
  if constexpr (sizeof(T) == 4)
    HCR_CUSOLVER_CHECK(lib.sgetrf(h, n, n, W, n, work, nullptr, dev_info));
  else HCR_CUSOLVER_CHECK(lib.dgetrf(h, n, n, W, n, work, nullptr, dev_info));
  transpose(bh, n, W, n, A, f.ld[0]);
  HCR_CUDA_CHECK(cudaMemcpyAsync(info, dev_info, sizeof(int), cudaMemcpyDeviceToHost, l.stream()));
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
  throw Error(HCR_ERROR_INVALID_ARGUMENT,
              "unknown element type " + std::to_string(static_cast<int>(t)));
}

std::optional<Builtin> builtin(const std::string& name) {
  return sdk::find_blas_builtin(name, /*half_gemm=*/true);
}

bool needs_cusolver(BlasOp op) noexcept { return op == BlasOp::potrf || op == BlasOp::getrf_nopiv; }

BlasCall make_call(const Builtin& kernel, const hcr_launch_args_t& a, void* const* ptrs) {
  BlasCall c;
  c.kernel = kernel;
  c.name = sdk::blas_builtin_name(kernel);
  const std::string& kname = c.name;
  const sdk::BlasOperands operands = sdk::blas_operands(kernel.op);
  const char* const* role = operands.names;
  const size_t want = operands.count;
  if (a.num_args != want)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, kname + " takes " + std::to_string(want) + " buffer" +
                                                (want > 1 ? "s" : "") + " (" + operands.list +
                                                "), got " + std::to_string(a.num_args));
  for (size_t i = 0; i < want; ++i) {
    const hcr_arg_t& x = a.args[i];
    if (x.dtype != kernel.dtype)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, kname + " argument " + std::to_string(i) + " (" +
                                                  role[i] + ") is " + sdk::dtype_name(x.dtype) +
                                                  ", expected " + sdk::dtype_name(kernel.dtype));
    if (x.rows > 1 && x.ld < x.cols)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, kname + " argument " + std::to_string(i) + " (" +
                                                  role[i] + ", " + shape(x) + ") has ld " +
                                                  std::to_string(x.ld) + " < its " +
                                                  std::to_string(x.cols) + " columns");
    // cuBLAS wants ld >= max(1, leading extent) even for a single row or an empty matrix.
    c.ld[i] = to_int(kname, std::max<uint64_t>({x.ld, x.cols, 1}),
                     i == 0   ? "lda"
                     : i == 1 ? "ldb"
                              : "ldc");
    c.ptr[i] = ptrs[i];
  }

  // The parameter block (plugin.h's defaults where none was sent), then the shapes.
  c.params = sdk::read_blas_params(kernel.op, kname, a);
  const sdk::BlasParams& p = c.params;
  switch (kernel.op) {
    case BlasOp::gemm: {
      const hcr_arg_t &A = a.args[0], &B = a.args[1], &C = a.args[2];
      const uint64_t am = p.trans_a ? A.cols : A.rows, ak = p.trans_a ? A.rows : A.cols;
      const uint64_t bk = p.trans_b ? B.cols : B.rows, bn = p.trans_b ? B.rows : B.cols;
      if (bk != ak || C.rows != am || C.cols != bn) {
        std::string trans;
        if (p.trans_a || p.trans_b)
          trans = std::string(" with ") + (p.trans_a ? "A" : "") +
                  (p.trans_a && p.trans_b ? " and " : "") + (p.trans_b ? "B" : "") + " transposed";
        throw Error(HCR_ERROR_INVALID_ARGUMENT, "gemm shapes do not match: A is " + shape(A) +
                                                    ", B is " + shape(B) + ", C is " + shape(C) +
                                                    trans);
      }
      c.m = to_int(kname, am, "m");
      c.k = to_int(kname, ak, "k");
      c.n = to_int(kname, bn, "n");
      break;
    }
    case BlasOp::syrk: {
      const hcr_arg_t &A = a.args[0], &C = a.args[1];
      const uint64_t an = p.trans_a ? A.cols : A.rows, ak = p.trans_a ? A.rows : A.cols;
      if (C.rows != C.cols || an != C.rows)
        throw Error(HCR_ERROR_INVALID_ARGUMENT, kname + " shapes do not match: A is " + shape(A) +
                                                    ", C is " + shape(C) +
                                                    " (C must be n x n and A n x k" +
                                                    (p.trans_a ? ", transposed: k x n" : "") + ")");
      c.n = to_int(kname, an, "n");
      c.k = to_int(kname, ak, "k");
      break;
    }
    case BlasOp::trsm: {
      const hcr_arg_t &A = a.args[0], &B = a.args[1];
      const uint64_t order = p.right ? B.cols : B.rows;
      if (A.rows != A.cols || A.rows != order)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    kname + " shapes do not match: A is " + shape(A) + ", B is " + shape(B) +
                        " (A must be square with B's " + (p.right ? "columns" : "rows") +
                        " as its order: side is " + (p.right ? "right" : "left") + ")");
      c.m = to_int(kname, B.rows, "m");
      c.n = to_int(kname, B.cols, "n");
      break;
    }
    case BlasOp::potrf:
    case BlasOp::getrf_nopiv: {
      const hcr_arg_t& A = a.args[0];
      if (A.rows != A.cols)
        throw Error(HCR_ERROR_INVALID_ARGUMENT, kname + ": A is " + shape(A) + ", not square");
      c.n = to_int(kname, A.rows, "n");
      break;
    }
  }
  return c;
}

void enqueue_blas(Lane& l, const BlasCall& c, int* info) {
  const bool f32 = c.kernel.dtype == HCR_DTYPE_F32;
  switch (c.kernel.op) {
    case BlasOp::gemm:
      if (c.m > 0 && c.n > 0) enqueue_gemm(l.blas(), c);  // else nothing to write
      return;
    case BlasOp::syrk:
      if (c.n > 0) enqueue_syrk(l.blas(), c);
      return;
    case BlasOp::trsm:
      if (c.m > 0 && c.n > 0) enqueue_trsm(l.blas(), c);
      return;
    case BlasOp::potrf:
      if (c.n == 0) return;  // the status slot stays 0
      if (f32) enqueue_potrf<float>(l, c, info);
      else enqueue_potrf<double>(l, c, info);
      return;
    case BlasOp::getrf_nopiv:
      if (c.n == 0) return;
      if (f32) enqueue_getrf_nopiv<float>(l, c, info);
      else enqueue_getrf_nopiv<double>(l, c, info);
      return;
  }
}

hcr_error_t* factor_error(const BlasCall& c, int info) {
  const char* uplo = c.kernel.op != BlasOp::potrf ? "" : c.params.upper ? ", upper" : ", lower";
  const std::string what =
      c.name + " (" + std::to_string(c.n) + "x" + std::to_string(c.n) + uplo + ")";
  if (info < 0)  // an argument cuSOLVER refused: ours to get right, not the caller's
    return sdk::make_error(HCR_ERROR_INTERNAL, what + ": cuSOLVER refused its argument " +
                                                   std::to_string(-info) + " (devInfo " +
                                                   std::to_string(info) + ")");
  if (c.kernel.op == BlasOp::potrf)
    return sdk::make_error(HCR_ERROR_INVALID_ARGUMENT,
                           what +
                               ": the matrix is not positive definite: its leading minor of "
                               "order " +
                               std::to_string(info) + " is not (LAPACK info " +
                               std::to_string(info) + ")");
  return sdk::make_error(HCR_ERROR_INVALID_ARGUMENT,
                         what + ": zero pivot in row " + std::to_string(info) +
                             " (counting from 1; LU without pivoting needs every leading minor "
                             "nonsingular)");
}

double estimate_seconds(const BlasCall& c, const GpuInfo& gpu) {
  // Throughput relative to the FP32 FMA peak, from NVIDIA's datasheets: FP64 runs at full rate on
  // the tensor cores of sm_80/sm_90, half on sm_70/sm_100, 1/64 on the gaming parts; dense
  // f16/bf16 with f32 accumulation at ~16x (sm_80), ~15x (sm_90), ~28x (sm_100), ~4x elsewhere.
  const int cc = gpu.cc_major * 10 + gpu.cc_minor;
  const hcr_dtype_t t = c.kernel.dtype;
  double ratio = 1;
  if (t == HCR_DTYPE_F64)
    ratio = (cc == 80 || cc == 90) ? 1.0 : (cc == 70 || cc == 100) ? 0.5 : 1.0 / 64;
  else if (t == HCR_DTYPE_F16 || t == HCR_DTYPE_BF16)
    ratio = cc == 80 ? 16 : cc == 90 ? 15 : cc == 100 ? 28 : cc == 70 ? 8 : 4;
  const double m = c.m, n = c.n, k = std::max(c.k, 1);
  double flops = 0, efficiency = 0.7, latency = 10e-6;  // gemm reaches ~70% of peak
  switch (c.kernel.op) {
    case BlasOp::gemm: flops = 2 * m * n * k; break;
    case BlasOp::syrk: flops = n * n * k; break;
    case BlasOp::trsm: flops = (c.params.right ? n : m) * m * n; break;
    // The factorizations are sequences of small panel steps: far from peak on one tile, and a
    // few launches each.
    case BlasOp::potrf:
      flops = n * n * n / 3;
      efficiency = 0.2;
      latency = 50e-6;
      break;
    case BlasOp::getrf_nopiv:
      flops = 2 * n * n * n / 3;
      efficiency = 0.2;
      latency = 60e-6;
      break;
  }
  const double rate = std::max(gpu.peak_gflops, 1.0) * 1e9 * ratio * efficiency;
  return flops / rate + latency;
}

}  // namespace hcr::cuda
