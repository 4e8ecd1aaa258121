// The CUDA backend against the libraries it wraps, in one process, on GPU 0:
//
//   build/bin/cuda_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only
//
// - BM_Gemm/<n>/<type>: each iteration runs one direct cuBLAS gemm (cublasSgemm, or cublasGemmEx
//   bf16 with f32 accumulation) and then the same product through the plugin's built-in kernel,
//   launch to done callback, on the same sizes. Read hcr_over_cublas (1.0 = no overhead) and the
//   two GFLOP/s counters. type 0 = f32, 1 = bf16.
// - BM_GemmRuntime/<n>/<type>: the same, the hcr side being one task submitted to hcr::Runtime
//   (scheduler, data manager, plugin) and waited for; its buffers stay on the GPU after the
//   warm-up, as in a pipeline, so no transfer is timed.
// - BM_TiledGpuCpu/<n>: hcr::blas::gemm in f32 tiles (HCR_CUDA_BENCH_TILE, default 2048) from
//   host matrices to the product home, on the GPU alone, the CPU alone and both under dmda
//   (HCR_CUDA_BENCH_POLICY names another), interleaved after warm-up; read both_over_best (>= 1:
//   the pair is never slower than the better device alone). n from HCR_CUDA_BENCH_TILED_N (default
//   8192).
// - BM_Copy/<MiB>/<dir>/<host>: the plugin's copy (launch to done) against cudaMemcpy from pinned
//   memory, same bytes, interleaved. dir 0 = host to device, 1 = device to host; host 0 = pinned
//   (the plugin's host_alloc), 1 = pageable (through the plugin's staging buffers). Read
//   hcr_over_cuda and the GB/s counters; cudaMemcpy from pageable memory is shown too.
// - BM_Potrf/<n>: the Cholesky factorization of one n x n f64 tile, direct cusolverDnDpotrf against
//   the plugin's potrf_f64 (launch to done, its status word read back), from the same symmetric
//   positive definite matrix, restored before each call and not timed. Read hcr_over_cusolver and
//   the GFLOP/s counters (n^3/3 flops). The baseline a tiled Cholesky is measured against.
// - BM_CholeskyHost/<n>: tiled Cholesky f64 through hcr::linalg on the GPU and the CPU (peft,
//   tiles HCR_CUDA_BENCH_CHOL_TILE, default 4096) against one cusolverDnDpotrf with its copies,
//   the matrix starting and ending in host memory on both sides (hcr_over_cusolver).
//   cusolver_upper_GFLOPs: the same direct call asked for the upper triangle (column-major), the
//   form a row-major lower tile maps to without a transpose.
//
// Chains of small kernels, one by one against one device graph (BM_TaskChain, BM_DeviceGraph):
// cuda_graph_bench.
//
// BM_Gemm, BM_Copy and BM_Potrf drive the plugin through its C table (dlopen of libhcr-cuda.so from
// the build tree, or from $HCR_CUDA_BENCH_PLUGIN_DIR), as the runtime does: the backend alone.
// Sizes: HCR_CUDA_BENCH_GEMM_N="4096,8192", HCR_CUDA_BENCH_COPY_MIB="64,1024" and
// HCR_CUDA_BENCH_POTRF_N="1024,4096". Without a GPU every
// benchmark reports an error and the program exits 0.
#include "cuda_bench_support.hpp"

#include <hcr/hcr.hpp>
#include <hcr/linalg.hpp>
#include <hcr/plugin.h>

#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

#define CHECK_CUDA(expr)                                                               \
  do {                                                                                 \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess) {                                  \
      state.SkipWithError((#expr ": " + std::string(cudaGetErrorString(e_))).c_str()); \
      return;                                                                          \
    }                                                                                  \
  } while (0)

// ---- gemm --------------------------------------------------------------------------------------

void BM_Gemm(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const size_t n = static_cast<size_t>(state.range(0));
  const bool bf16 = state.range(1) == 1;
  const size_t es = bf16 ? 2 : 4, bytes = n * n * es;
  Plugin& pl = plugin();

  // Direct side: the bench's own allocations, stream and handle.
  void *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMalloc(&c, bytes));
  // 0x3c bytes: 0.0115 in f32 and bf16, a normal number; the timing does not depend on values.
  CHECK_CUDA(cudaMemset(a, 0x3c, bytes));
  CHECK_CUDA(cudaMemset(b, 0x3c, bytes));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError("cublasCreate failed");
    return;
  }
  cublasSetStream(handle, stream);
  const float alpha = 1, beta = 0;
  const int ni = static_cast<int>(n);
  auto direct = [&] {
    cublasStatus_t s =
        bf16 ? cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, b, CUDA_R_16BF,
                            ni, a, CUDA_R_16BF, ni, &beta, c, CUDA_R_16BF, ni, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT)
             : cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha,
                           static_cast<const float*>(b), ni, static_cast<const float*>(a), ni,
                           &beta, static_cast<float*>(c), ni);
    cudaStreamSynchronize(stream);
    return s == CUBLAS_STATUS_SUCCESS;
  };

  // hcr side: the plugin's memory, filled the same way through its copy.
  hcr_memory_t* ma = pl.alloc(bytes);
  hcr_memory_t* mb = pl.alloc(bytes);
  hcr_memory_t* mc = pl.alloc(bytes);
  if (!ma || !mb || !mc) {
    state.SkipWithError(("plugin mem_alloc: " + pl.why).c_str());
    return;
  }
  {
    std::vector<unsigned char> fill(bytes, 0x3c);
    for (hcr_memory_t* m : {ma, mb})
      if (std::string e = pl.copy(m, fill.data(), bytes, true); !e.empty()) {
        state.SkipWithError(("plugin copy: " + e).c_str());
        return;
      }
  }
  hcr_kernel_desc_t desc{};
  desc.struct_size = HCR_KERNEL_DESC_STRUCT_SIZE;
  desc.name = bf16 ? "gemm_bf16" : "gemm_f32";
  desc.kind = HCR_IMPL_BUILTIN;
  hcr_kernel_get_args_t kg{};
  kg.struct_size = HCR_KERNEL_GET_ARGS_STRUCT_SIZE;
  kg.desc = &desc;
  if (hcr_error_t* e = pl.api->kernel_get(pl.p, &kg)) {
    state.SkipWithError(("kernel_get: " + pl.take(e)).c_str());
    return;
  }
  const hcr_dtype_t t = bf16 ? HCR_DTYPE_BF16 : HCR_DTYPE_F32;
  hcr_arg_t args[3];
  hcr_memory_t* mems[3] = {ma, mb, mc};
  for (int i = 0; i < 3; ++i) {
    args[i] = {};
    args[i].struct_size = HCR_ARG_STRUCT_SIZE;
    args[i].memory = mems[i];
    args[i].dtype = t;
    args[i].access = i == 2 ? HCR_ACCESS_READ_WRITE : HCR_ACCESS_READ;
    args[i].rows = args[i].cols = args[i].ld = n;
  }
  hcr_gemm_params_t params{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
  std::string failure;
  auto through_hcr = [&] {
    Done d;
    d.api = pl.api;
    hcr_launch_args_t la{};
    la.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
    la.kernel = kg.kernel;
    la.args = args;
    la.num_args = 3;
    la.params = &params;
    la.params_size = sizeof params;
    la.done = &Done::cb;
    la.done_user_data = &d;
    if (hcr_error_t* e = pl.api->launch(pl.p, &la)) {
      failure = pl.take(e);
      return false;
    }
    d.wait();
    failure = d.error;
    return failure.empty();
  };

  // Warm-up: cuBLAS picks and loads its kernels on the first call of each shape.
  if (!direct() || !through_hcr()) {
    state.SkipWithError(("warm-up failed: " + failure).c_str());
    return;
  }
  double t_direct = 0, t_hcr = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    bool ok = direct();
    const double d = seconds_since(t0);
    t0 = Clock::now();
    ok = through_hcr() && ok;
    const double h = seconds_since(t0);
    if (!ok) {
      state.SkipWithError(("gemm failed: " + failure).c_str());
      break;
    }
    t_direct += d;
    t_hcr += h;
    state.SetIterationTime(d + h);
  }
  const double flops = 2.0 * n * n * n * static_cast<double>(state.iterations());
  if (t_hcr > 0 && t_direct > 0) {
    state.counters["cublas_GFLOPs"] = flops / t_direct * 1e-9;
    state.counters["hcr_GFLOPs"] = flops / t_hcr * 1e-9;
    state.counters["hcr_over_cublas"] = t_direct / t_hcr;
  }
  state.SetLabel(std::string(bf16 ? "bf16" : "f32") + " n=" + std::to_string(n));

  pl.api->kernel_release(pl.p, kg.kernel);
  for (hcr_memory_t* m : mems) pl.api->mem_free(pl.p, 0, m);
  cublasDestroy(handle);
  cudaStreamDestroy(stream);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

// ---- potrf -------------------------------------------------------------------------------------

// One n x n f64 tile on GPU 0 and what cusolverDnDpotrf needs for it, in either triangle: the
// direct side of BM_Potrf and BM_CholeskyHost. error() is empty once it is set up.
class DirectPotrf {
 public:
  explicit DirectPotrf(size_t n) : n_(n) {
    cuda(cudaSetDevice(0), "cudaSetDevice");
    cuda(cudaMalloc(&a_, bytes()), "cudaMalloc");
    cuda(cudaMalloc(&info_, sizeof(int)), "cudaMalloc");
    cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    if (!error_.empty()) return;
    if (cusolverDnCreate(&solver_) != CUSOLVER_STATUS_SUCCESS) {
      error_ = "cusolverDnCreate failed";
      return;
    }
    cusolverDnSetStream(solver_, stream_);
    const int ni = static_cast<int>(n);
    int lower = 0, upper = 0;
    cusolverDnDpotrf_bufferSize(solver_, CUBLAS_FILL_MODE_LOWER, ni, a_, ni, &lower);
    cusolverDnDpotrf_bufferSize(solver_, CUBLAS_FILL_MODE_UPPER, ni, a_, ni, &upper);
    lwork_ = std::max({lower, upper, 1});
    cuda(cudaMalloc(&work_, static_cast<size_t>(lwork_) * sizeof(double)), "cudaMalloc");
  }
  ~DirectPotrf() {
    if (solver_ != nullptr) cusolverDnDestroy(solver_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    cudaFree(a_);
    cudaFree(work_);
    cudaFree(info_);
  }
  DirectPotrf(const DirectPotrf&) = delete;
  DirectPotrf& operator=(const DirectPotrf&) = delete;

  const std::string& error() const noexcept { return error_; }
  double* tile() const noexcept { return a_; }
  cudaStream_t stream() const noexcept { return stream_; }
  size_t bytes() const noexcept { return n_ * n_ * sizeof(double); }

  /// Factors the tile in `uplo` and reads the status word back (as the plugin reports: once the
  /// status is on the host); with `from` / `to`, copies the matrix in from and the factor out to
  /// that host memory on the same stream. True when cuSOLVER succeeded and the matrix was SPD.
  bool factor(cublasFillMode_t uplo = CUBLAS_FILL_MODE_LOWER, const double* from = nullptr,
              double* to = nullptr) {
    if (from != nullptr) cudaMemcpyAsync(a_, from, bytes(), cudaMemcpyHostToDevice, stream_);
    const int ni = static_cast<int>(n_);
    const cusolverStatus_t s = cusolverDnDpotrf(solver_, uplo, ni, a_, ni, work_, lwork_, info_);
    int status = -1;
    cudaMemcpyAsync(&status, info_, sizeof(int), cudaMemcpyDeviceToHost, stream_);
    if (to != nullptr) cudaMemcpyAsync(to, a_, bytes(), cudaMemcpyDeviceToHost, stream_);
    cudaStreamSynchronize(stream_);
    return s == CUSOLVER_STATUS_SUCCESS && status == 0;
  }

 private:
  void cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess && error_.empty())
      error_ = std::string(what) + ": " + cudaGetErrorString(e);
  }
  size_t n_;
  double *a_ = nullptr, *work_ = nullptr;
  int* info_ = nullptr;
  int lwork_ = 1;
  cudaStream_t stream_ = nullptr;
  cusolverDnHandle_t solver_ = nullptr;
  std::string error_;
};

void BM_Potrf(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const size_t n = static_cast<size_t>(state.range(0));
  const size_t bytes = n * n * sizeof(double);
  Plugin& pl = plugin();
  // n I + 0.5 everywhere: symmetric positive definite, so neither side stops early.
  std::vector<double> spd(n * n, 0.5);
  for (size_t i = 0; i < n; ++i) spd[i * n + i] += static_cast<double>(n);

  // Direct side: a pristine copy and the working tile.
  DirectPotrf direct(n);
  if (!direct.error().empty()) {
    state.SkipWithError(direct.error().c_str());
    return;
  }
  double* pristine = nullptr;
  CHECK_CUDA(cudaMalloc(&pristine, bytes));
  CHECK_CUDA(cudaMemcpy(pristine, spd.data(), bytes, cudaMemcpyHostToDevice));
  auto restore_direct = [&] {
    cudaMemcpyAsync(direct.tile(), pristine, bytes, cudaMemcpyDeviceToDevice, direct.stream());
    cudaStreamSynchronize(direct.stream());
  };

  // hcr side: the plugin's memory, the pristine matrix copied in once and restored on the device.
  hcr_memory_t* mp = pl.alloc(bytes);
  hcr_memory_t* ma = pl.alloc(bytes);
  if (!mp || !ma) {
    state.SkipWithError(("plugin mem_alloc: " + pl.why).c_str());
    return;
  }
  if (std::string e = pl.copy(mp, spd.data(), bytes, true); !e.empty()) {
    state.SkipWithError(("plugin copy: " + e).c_str());
    return;
  }
  std::string failure;
  auto restore_hcr = [&] {
    Done d;
    d.api = pl.api;
    hcr_copy_args_t c{};
    c.struct_size = HCR_COPY_ARGS_STRUCT_SIZE;
    c.src_memory = mp;
    c.dst_memory = ma;
    c.width = bytes;
    c.rows = 1;
    c.done = &Done::cb;
    c.done_user_data = &d;
    if (hcr_error_t* e = pl.api->copy(pl.p, &c)) {
      failure = pl.take(e);
      return false;
    }
    d.wait();
    failure = d.error;
    return failure.empty();
  };
  hcr_kernel_desc_t desc{};
  desc.struct_size = HCR_KERNEL_DESC_STRUCT_SIZE;
  desc.name = "potrf_f64";
  desc.kind = HCR_IMPL_BUILTIN;
  hcr_kernel_get_args_t kg{};
  kg.struct_size = HCR_KERNEL_GET_ARGS_STRUCT_SIZE;
  kg.desc = &desc;
  if (hcr_error_t* e = pl.api->kernel_get(pl.p, &kg)) {
    state.SkipWithError(("kernel_get: " + pl.take(e)).c_str());
    return;
  }
  hcr_arg_t arg{};
  arg.struct_size = HCR_ARG_STRUCT_SIZE;
  arg.memory = ma;
  arg.dtype = HCR_DTYPE_F64;
  arg.access = HCR_ACCESS_READ_WRITE;
  arg.rows = arg.cols = arg.ld = n;
  hcr_potrf_params_t params{HCR_POTRF_PARAMS_STRUCT_SIZE, HCR_LOWER};
  auto through_hcr = [&] {
    Done d;
    d.api = pl.api;
    hcr_launch_args_t la{};
    la.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
    la.kernel = kg.kernel;
    la.args = &arg;
    la.num_args = 1;
    la.params = &params;
    la.params_size = sizeof params;
    la.done = &Done::cb;
    la.done_user_data = &d;
    if (hcr_error_t* e = pl.api->launch(pl.p, &la)) {
      failure = pl.take(e);
      return false;
    }
    d.wait();
    failure = d.error;
    return failure.empty();
  };

  // Warm-up: cuSOLVER's first call of each shape, and the plugin's handle and scratch memory.
  restore_direct();
  if (!direct.factor() || !restore_hcr() || !through_hcr()) {
    state.SkipWithError(("warm-up failed: " + failure).c_str());
    return;
  }
  double t_direct = 0, t_hcr = 0, t_upper = 0;
  for (auto _ : state) {
    restore_direct();
    auto t0 = Clock::now();
    bool ok = direct.factor();
    const double d = seconds_since(t0);
    // The same factorization asked for in cuSOLVER's other triangle (not in the iteration time).
    restore_direct();
    t0 = Clock::now();
    ok = direct.factor(CUBLAS_FILL_MODE_UPPER) && ok;
    t_upper += seconds_since(t0);
    ok = restore_hcr() && ok;
    t0 = Clock::now();
    ok = through_hcr() && ok;
    const double h = seconds_since(t0);
    if (!ok) {
      state.SkipWithError(("potrf failed: " + failure).c_str());
      break;
    }
    t_direct += d;
    t_hcr += h;
    state.SetIterationTime(d + h);
  }
  const double flops = static_cast<double>(n) * n * n / 3 * static_cast<double>(state.iterations());
  if (t_hcr > 0 && t_direct > 0) {
    state.counters["cusolver_GFLOPs"] = flops / t_direct * 1e-9;
    state.counters["hcr_GFLOPs"] = flops / t_hcr * 1e-9;
    state.counters["hcr_over_cusolver"] = t_direct / t_hcr;
    state.counters["cusolver_upper_GFLOPs"] = flops / t_upper * 1e-9;
  }
  state.SetLabel("f64 n=" + std::to_string(n));

  pl.api->kernel_release(pl.p, kg.kernel);
  pl.api->mem_free(pl.p, 0, mp);
  pl.api->mem_free(pl.p, 0, ma);
  cudaFree(pristine);
}

// ---- gemm through the runtime -----------------------------------------------------------------

template <class T>
void gemm_runtime(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const bool bf16 = sizeof(T) == 2;
  const size_t bytes = n * n * sizeof(T);
  hcr::Runtime& rt = runtime();
  if (rt.devices().empty()) {
    state.SkipWithError("the runtime found no CUDA device");
    return;
  }

  void *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMalloc(&c, bytes));
  CHECK_CUDA(cudaMemset(a, 0x3c, bytes));
  CHECK_CUDA(cudaMemset(b, 0x3c, bytes));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError("cublasCreate failed");
    return;
  }
  cublasSetStream(handle, stream);
  const float alpha = 1, beta = 0;
  const int ni = static_cast<int>(n);
  auto direct = [&] {
    cublasStatus_t s =
        bf16 ? cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, b, CUDA_R_16BF,
                            ni, a, CUDA_R_16BF, ni, &beta, c, CUDA_R_16BF, ni, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT)
             : cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha,
                           static_cast<const float*>(b), ni, static_cast<const float*>(a), ni,
                           &beta, static_cast<float*>(c), ni);
    cudaStreamSynchronize(stream);
    return s == CUBLAS_STATUS_SUCCESS;
  };

  std::string failure;
  {
    auto A = rt.buffer<T>(n, n), B = rt.buffer<T>(n, n), C = rt.buffer<T>(n, n);
    for (auto* buf : {&A, &B}) {
      auto v = buf->acquire(hcr::Access::write);
      std::memset(static_cast<void*>(v.data()), 0x3c, bytes);  // the same values as the direct side
    }
    hcr::Kernel kernel = rt.kernel(bf16 ? "gemm_bf16" : "gemm_f32");
    hcr_gemm_params_t params{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
    auto through_hcr = [&] {
      try {
        rt.submit(hcr::Task(kernel).read(A).read(B).write(C).param(params).on(0)).get();
        return true;
      } catch (const std::exception& e) {
        failure = e.what();
        return false;
      }
    };
    // Warm-up: cuBLAS's first call, and the data manager copying A and B to the GPU.
    if (!direct() || !through_hcr()) {
      state.SkipWithError(("warm-up failed: " + failure).c_str());
      return;
    }
    double t_direct = 0, t_hcr = 0;
    for (auto _ : state) {
      auto t0 = Clock::now();
      bool ok = direct();
      const double d = seconds_since(t0);
      t0 = Clock::now();
      ok = through_hcr() && ok;
      const double h = seconds_since(t0);
      if (!ok) {
        state.SkipWithError(("gemm failed: " + failure).c_str());
        break;
      }
      t_direct += d;
      t_hcr += h;
      state.SetIterationTime(d + h);
    }
    const double flops = 2.0 * n * n * n * static_cast<double>(state.iterations());
    if (t_hcr > 0 && t_direct > 0) {
      state.counters["cublas_GFLOPs"] = flops / t_direct * 1e-9;
      state.counters["hcr_GFLOPs"] = flops / t_hcr * 1e-9;
      state.counters["hcr_over_cublas"] = t_direct / t_hcr;
    }
    state.SetLabel(std::string(bf16 ? "bf16" : "f32") + " n=" + std::to_string(n) + ", runtime");
  }  // the buffers go, and their GPU replicas with them
  cublasDestroy(handle);
  cudaStreamDestroy(stream);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

void BM_GemmRuntime(benchmark::State& state) {
  if (!have_gpu(state)) return;
  if (state.range(1) == 1) gemm_runtime<hcr::bfloat16>(state);
  else gemm_runtime<float>(state);
}

// ---- tiled gemm across the GPU and the CPU ------------------------------------------------------

std::vector<int64_t> sizes(const char* env, std::vector<int64_t> fallback);

// One runtime per machine shape, over the plugins of the build tree (or
// $HCR_CUDA_BENCH_PLUGIN_DIR): "gpu" the CUDA backend alone, "cpu" the CPU backend alone, "both"
// the two under dmda.
hcr::Config tiled_config(bool gpu, bool cpu, const std::string& model_dir) {
  hcr::Config c;
  c.use_environment = false;
  const char* dir = std::getenv("HCR_CUDA_BENCH_PLUGIN_DIR");
  c.plugin_paths = {dir && *dir ? dir : HCR_BENCH_PLUGIN_DIR};
  const char* policy = std::getenv("HCR_CUDA_BENCH_POLICY");
  c.policy = policy && *policy ? policy : "dmda";
  c.model_dir = model_dir;
  if (gpu) c.backends.push_back({"cuda", true, {}, "cuda_bench"});
  if (cpu) c.backends.push_back({"cpu", true, {}, "cuda_bench"});
  return c;
}

// BM_TiledGpuCpu/<n>: C = A B in f32, tile x tile tasks (HCR_CUDA_BENCH_TILE, default 2048), on the
// GPU alone, the CPU alone and both under dmda, interleaved: each iteration runs the three, from
// host matrices to the product back on the host (A and B stay where they were copied, as in a
// pipeline). Warm-up iterations first, so that dmda has measured both devices. Read
// both_over_best (>= 1: the pair is at least as fast as the faster device alone) and the GFLOP/s
// of each; the pair's product is checked against the GPU's.
void BM_TiledGpuCpu(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const size_t n = static_cast<size_t>(state.range(0));
  const size_t tile = static_cast<size_t>(sizes("HCR_CUDA_BENCH_TILE", {2048}).front());
  char dir_template[] = "/tmp/hcr-cuda-bench-XXXXXX";
  const char* model_dir = mkdtemp(dir_template);
  if (model_dir == nullptr) {
    state.SkipWithError("mkdtemp failed");
    return;
  }
  struct Shape {
    const char* name;
    std::unique_ptr<hcr::Runtime> rt;
    std::unique_ptr<hcr::Buffer<float>> a, b, c;
    double seconds = 0;
  };
  std::vector<Shape> shapes;
  std::string failure;
  try {
    shapes.push_back({"gpu", std::make_unique<hcr::Runtime>(tiled_config(true, false, "off"))});
    shapes.push_back({"cpu", std::make_unique<hcr::Runtime>(tiled_config(false, true, "off"))});
    shapes.push_back({"both", std::make_unique<hcr::Runtime>(tiled_config(true, true, model_dir))});
    for (Shape& s : shapes) {
      if (s.rt->devices().empty()) throw std::runtime_error(std::string(s.name) + ": no device");
      s.a = std::make_unique<hcr::Buffer<float>>(s.rt->buffer<float>(n, n));
      s.b = std::make_unique<hcr::Buffer<float>>(s.rt->buffer<float>(n, n));
      s.c = std::make_unique<hcr::Buffer<float>>(s.rt->buffer<float>(n, n));
      auto va = s.a->acquire(hcr::Access::write), vb = s.b->acquire(hcr::Access::write);
      for (size_t i = 0; i < n * n; ++i) {
        va.data()[i] = static_cast<float>((i * 7) % 13) / 13.0f - 0.5f;
        vb.data()[i] = static_cast<float>((i * 5) % 11) / 11.0f - 0.5f;
      }
    }
  } catch (const std::exception& e) {
    state.SkipWithError(("set-up failed: " + std::string(e.what())).c_str());
    shapes.clear();  // the runtimes first: dmda saves its model into model_dir as it ends
    std::filesystem::remove_all(model_dir);
    return;
  }
  auto run = [&](Shape& s) {
    const auto t0 = Clock::now();
    hcr::blas::gemm(*s.rt, *s.a, *s.b, *s.c, tile).get();
    { auto v = s.c->acquire(hcr::Access::read); }  // the product home
    return seconds_since(t0);
  };
  try {
    for (int i = 0; i < 3; ++i)  // dmda's calibration of both devices, cuBLAS's first calls
      for (Shape& s : shapes) run(s);
    for (auto _ : state) {
      double both = 0;
      for (Shape& s : shapes) {
        const double t = run(s);
        s.seconds += t;
        if (std::string(s.name) == "both") both = t;
      }
      state.SetIterationTime(both);
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!failure.empty()) {
    state.SkipWithError(("gemm failed: " + failure).c_str());
  } else {
    // The pair's product against the GPU's (tiles may have run on either device).
    std::vector<float> gpu = shapes[0].c->to_vector(), both = shapes[2].c->to_vector();
    double worst = 0;
    for (size_t i = 0; i < gpu.size(); ++i)
      worst = std::max(worst, std::abs(double(gpu[i]) - double(both[i])) /
                                  std::max(1.0, std::abs(double(gpu[i]))));
    if (!(worst < 1e-3)) state.SkipWithError(("products differ: " + std::to_string(worst)).c_str());
    const double flops = 2.0 * n * n * n * static_cast<double>(state.iterations());
    for (const Shape& s : shapes)
      state.counters[std::string(s.name) + "_GFLOPs"] = flops / s.seconds * 1e-9;
    const double best = std::min(shapes[0].seconds, shapes[1].seconds);
    state.counters["both_over_best"] = best / shapes[2].seconds;
    const hcr::RuntimeStats st = shapes[2].rt->stats();
    const std::vector<hcr::Device> devices = shapes[2].rt->devices();
    std::string placed;
    for (size_t d = 0; d < st.devices.size() && d < devices.size(); ++d)
      placed += " " + devices[d].name + ":" + std::to_string(st.devices[d].tasks);
    state.SetLabel("f32 n=" + std::to_string(n) + " tile " + std::to_string(tile) + ", " +
                   std::string(shapes[2].rt->policy()) + " tasks" + placed);
  }
  for (Shape& s : shapes) {  // buffers before their runtime
    s.a.reset();
    s.b.reset();
    s.c.reset();
    s.rt.reset();
  }
  std::filesystem::remove_all(model_dir);
}

// ---- tiled Cholesky from host memory ------------------------------------------------------------

// BM_CholeskyHost/<n>: the Cholesky factor of an n x n f64 SPD matrix that starts and ends in host
// memory, like for like. Direct: cudaMemcpy from pinned memory to the GPU, one
// cusolverDnDpotrf (lower), the factor copied back. hcr: hcr::linalg::potrf in tiles
// (HCR_CUDA_BENCH_CHOL_TILE, default 4096) on the GPU and the CPU under peft (or
// HCR_CUDA_BENCH_POLICY), then a read of the factor on the host. The matrix is restored before
// each timed run, not timed. Read hcr_over_cusolver (>= 1: hcr at least as fast) and the
// GFLOP/s counters (n^3/3 flops). n from HCR_CUDA_BENCH_CHOL_N (default 16384).
void BM_CholeskyHost(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const size_t n = static_cast<size_t>(state.range(0));
  const size_t tile = static_cast<size_t>(sizes("HCR_CUDA_BENCH_CHOL_TILE", {4096}).front());
  const size_t bytes = n * n * sizeof(double);
  std::vector<double> spd(n * n, 0.5);  // n I + 0.5 everywhere: SPD
  for (size_t i = 0; i < n; ++i) spd[i * n + i] += static_cast<double>(n);

  // Direct side: the matrix in pinned host memory, copied in and the factor out by each run.
  DirectPotrf potrf(n);
  if (!potrf.error().empty()) {
    state.SkipWithError(potrf.error().c_str());
    return;
  }
  double* host = nullptr;
  CHECK_CUDA(cudaMallocHost(&host, bytes));
  auto direct = [&] { return potrf.factor(CUBLAS_FILL_MODE_LOWER, host, host); };

  // hcr side.
  char dir_template[] = "/tmp/hcr-cuda-bench-XXXXXX";
  const char* model_dir = mkdtemp(dir_template);
  std::string failure;
  double t_direct = 0, t_hcr = 0;
  std::string placed;
  if (model_dir == nullptr) {
    failure = "mkdtemp failed";
  } else {
    try {
      hcr::Config c = tiled_config(true, true, model_dir);
      const char* policy = std::getenv("HCR_CUDA_BENCH_POLICY");
      c.policy = policy && *policy ? policy : "peft";
      hcr::Runtime rt(c);
      {
        auto m = rt.buffer<double>(n, n);
        auto restore = [&] {
          std::memcpy(host, spd.data(), bytes);
          auto v = m.acquire(hcr::Access::write);
          std::memcpy(v.data(), spd.data(), bytes);
        };
        auto through_hcr = [&] {
          hcr::linalg::potrf<double>(rt, hcr::linalg::Uplo::lower, m, tile).get();
          auto v = m.acquire(hcr::Access::read);  // the factor home
        };
        for (int i = 0; i < 2; ++i) {  // warm-up: calibration, cuBLAS/cuSOLVER's first calls
          restore();
          if (!direct()) throw std::runtime_error("direct potrf failed");
          through_hcr();
        }
        for (auto _ : state) {
          restore();
          auto t0 = Clock::now();
          if (!direct()) throw std::runtime_error("direct potrf failed");
          const double d = seconds_since(t0);
          t0 = Clock::now();
          through_hcr();
          const double h = seconds_since(t0);
          t_direct += d;
          t_hcr += h;
          state.SetIterationTime(d + h);
        }
        // hcr's factor against cuSOLVER's (the last iteration's, both from the same matrix).
        auto v = m.acquire(hcr::Access::read);
        double worst = 0;
        for (size_t i = 0; i < n; ++i)
          for (size_t j = 0; j <= i; ++j)
            worst = std::max(worst, std::abs(v(i, j) - host[j * n + i]) /
                                        std::max(1.0, std::abs(host[j * n + i])));
        if (!(worst < 1e-9)) failure = "the factors differ by " + std::to_string(worst);
      }
      const hcr::RuntimeStats st = rt.stats();
      const std::vector<hcr::Device> devices = rt.devices();
      for (size_t d = 0; d < st.devices.size() && d < devices.size(); ++d)
        placed += " " + devices[d].name + ":" + std::to_string(st.devices[d].tasks);
      placed = std::string(rt.policy()) + " tasks" + placed;
    } catch (const std::exception& e) {
      failure = e.what();
    }
    std::filesystem::remove_all(model_dir);
  }
  if (!failure.empty()) {
    state.SkipWithError(("Cholesky: " + failure).c_str());
  } else if (t_direct > 0 && t_hcr > 0) {
    const double flops =
        static_cast<double>(n) * n * n / 3 * static_cast<double>(state.iterations());
    state.counters["cusolver_GFLOPs"] = flops / t_direct * 1e-9;
    state.counters["hcr_GFLOPs"] = flops / t_hcr * 1e-9;
    state.counters["hcr_over_cusolver"] = t_direct / t_hcr;
    state.SetLabel("f64 n=" + std::to_string(n) + " tile " + std::to_string(tile) + " from host, " +
                   placed);
  }
  cudaFreeHost(host);
}

// ---- host <-> device bandwidth ------------------------------------------------------------------

void BM_Copy(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const size_t bytes = static_cast<size_t>(state.range(0)) << 20;
  const bool to_device = state.range(1) == 0;
  const bool pageable = state.range(2) == 1;
  Plugin& pl = plugin();

  CHECK_CUDA(cudaSetDevice(0));
  void *pinned = nullptr, *dev = nullptr;
  CHECK_CUDA(cudaMallocHost(&pinned, bytes));
  CHECK_CUDA(cudaMalloc(&dev, bytes));
  std::memset(pinned, 1, bytes);
  auto direct = [&](void* host) {
    return cudaMemcpy(to_device ? dev : host, to_device ? host : dev, bytes,
                      to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost) == cudaSuccess;
  };

  hcr_memory_t* m = pl.alloc(bytes);
  void* host = nullptr;
  std::vector<unsigned char> pageable_buf;
  if (pageable) {
    pageable_buf.assign(bytes, 1);  // touched: no page faults inside the timing
    host = pageable_buf.data();
  } else if (hcr_error_t* e = pl.api->host_alloc(pl.p, bytes, &host)) {
    state.SkipWithError(("host_alloc: " + pl.take(e)).c_str());
    return;
  } else {
    std::memset(host, 1, bytes);
  }
  if (m == nullptr) {
    state.SkipWithError(("plugin mem_alloc: " + pl.why).c_str());
    return;
  }
  // Warm-up, and the plugin's staging buffers allocated.
  if (!direct(pinned) || !pl.copy(m, host, bytes, to_device).empty()) {
    state.SkipWithError("warm-up copy failed");
    return;
  }
  double t_direct = 0, t_hcr = 0, t_pageable = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    bool ok = direct(pinned);
    const double d = seconds_since(t0);
    t0 = Clock::now();
    std::string err = pl.copy(m, host, bytes, to_device);
    const double h = seconds_since(t0);
    if (!ok || !err.empty()) {
      state.SkipWithError(("copy failed: " + err).c_str());
      break;
    }
    if (pageable) {  // the CUDA runtime's own pageable path, for reference
      t0 = Clock::now();
      direct(host);
      t_pageable += seconds_since(t0);
    }
    t_direct += d;
    t_hcr += h;
    state.SetIterationTime(h);
  }
  const double moved = static_cast<double>(bytes) * static_cast<double>(state.iterations());
  if (t_hcr > 0 && t_direct > 0) {
    state.counters["cuda_pinned_GBps"] = moved / t_direct * 1e-9;
    state.counters["hcr_GBps"] = moved / t_hcr * 1e-9;
    state.counters["hcr_over_cuda"] = t_direct / t_hcr;
    if (pageable) state.counters["cuda_pageable_GBps"] = moved / t_pageable * 1e-9;
  }
  state.SetLabel(std::string(to_device ? "H2D " : "D2H ") + (pageable ? "pageable" : "pinned"));
  state.SetBytesProcessed(static_cast<int64_t>(moved));

  pl.api->mem_free(pl.p, 0, m);
  if (!pageable) pl.api->host_free(pl.p, host);
  cudaFreeHost(pinned);
  cudaFree(dev);
}
// "8192,16384" -> {8192, 16384}; the fallback when the variable is unset or unreadable.
std::vector<int64_t> sizes(const char* env, std::vector<int64_t> fallback) {
  const char* v = std::getenv(env);
  if (v == nullptr || *v == '\0') return fallback;
  std::vector<int64_t> out;
  for (const char* p = v; *p;) {
    char* end = nullptr;
    long long x = std::strtoll(p, &end, 10);
    if (end == p || x <= 0) return fallback;
    out.push_back(x);
    p = *end == ',' ? end + 1 : end;
  }
  return out.empty() ? fallback : out;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("BM_Gemm", BM_Gemm)
      ->ArgsProduct({sizes("HCR_CUDA_BENCH_GEMM_N", {8192, 16384}), {0, 1}})
      ->ArgNames({"n", "bf16"})
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(5);
  benchmark::RegisterBenchmark("BM_GemmRuntime", BM_GemmRuntime)
      ->ArgsProduct({sizes("HCR_CUDA_BENCH_GEMM_N", {8192, 16384}), {0, 1}})
      ->ArgNames({"n", "bf16"})
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(5);
  benchmark::RegisterBenchmark("BM_TiledGpuCpu", BM_TiledGpuCpu)
      ->Args({sizes("HCR_CUDA_BENCH_TILED_N", {8192}).front()})
      ->ArgNames({"n"})
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
  benchmark::RegisterBenchmark("BM_Potrf", BM_Potrf)
      ->ArgsProduct({sizes("HCR_CUDA_BENCH_POTRF_N", {1024, 4096})})
      ->ArgNames({"n"})
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(10);
  benchmark::RegisterBenchmark("BM_CholeskyHost", BM_CholeskyHost)
      ->Args({sizes("HCR_CUDA_BENCH_CHOL_N", {16384}).front()})
      ->ArgNames({"n"})
      ->Iterations(3)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_Copy", BM_Copy)
      ->ArgsProduct({sizes("HCR_CUDA_BENCH_COPY_MIB", {256}), {0, 1}, {0, 1}})
      ->ArgNames({"MiB", "d2h", "pageable"})
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(10);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
