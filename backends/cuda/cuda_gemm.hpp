// The built-in gemm kernels (gemm_f32, gemm_f64, gemm_f16, gemm_bf16) on cuBLAS.
#pragma once

#include "cuda_device.hpp"

#include <hcr/plugin.h>

#include <optional>
#include <string>

namespace hcr::cuda {

/// Bytes per element; throws INVALID_ARGUMENT for an unknown dtype.
size_t dtype_size(hcr_dtype_t t);

/// The built-in gemm named `name` ("gemm_f32", ...): its element type, or nullopt.
std::optional<hcr_dtype_t> gemm_dtype(const std::string& name);

/// One row-major product C = alpha A B + beta C, checked and ready for cuBLAS.
struct GemmCall {
  hcr_dtype_t dtype = HCR_DTYPE_F32;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 1;
  const void* b = nullptr;
  int ldb = 1;
  void* c = nullptr;
  int ldc = 1;
  double alpha = 1, beta = 0;
};

/// Checks the launch's arguments against the plugin.h gemm contract (3 buffers of `dtype`, shapes
/// m x k, k x n, m x n, ld >= cols, dimensions within cuBLAS's int range, gemm params) and builds
/// the call. `ptrs` are the three device pointers (NULL allowed for empty matrices). Throws
/// INVALID_ARGUMENT with a message naming the shapes or the argument at fault.
GemmCall make_gemm(hcr_dtype_t dtype, const hcr_launch_args_t& a, void* const ptrs[3]);

/// Enqueues the product on the handle's stream (f16/bf16 on the tensor cores, f32 accumulation).
void enqueue_gemm(cublasHandle_t handle, const GemmCall& g);

/// A first guess of the product's time on `gpu`, before the cost model has measured anything.
double gemm_estimate_seconds(const GemmCall& g, const GpuInfo& gpu);

}  // namespace hcr::cuda
