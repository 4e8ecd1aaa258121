// Error checks for the CUDA backend: one macro per native API (CUDA runtime, cuBLAS, cuSOLVER,
// NVRTC) that turns a failed status into hcr::sdk::Error carrying the API's own error text. The SDK
// adapter turns that exception into an ABI error at the plugin boundary.
#pragma once

#include <hcr/sdk/backend.hpp>

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <cusolver_common.h>
#include <nvrtc.h>

#include <string>

namespace hcr::cuda {

/// True for the errors after which a CUDA context is unusable for the rest of the process
/// ("sticky" errors: an illegal address, a device-side assert, an ECC failure...).
bool is_sticky(cudaError_t e) noexcept;

/// The ABI code for a CUDA runtime error: OUT_OF_MEMORY, DEVICE_LOST for sticky errors, else
/// BACKEND.
hcr_error_code_t error_code(cudaError_t e) noexcept;

/// "cudaErrorMemoryAllocation: out of memory".
std::string error_text(cudaError_t e);

/// cuBLAS's and NVRTC's status texts. NVRTC's text needs the library loaded (see cuda_libs.hpp).
std::string error_text(cublasStatus_t s);
std::string error_text(nvrtcResult r);
/// cuSOLVER has no status-text entry: "CUSOLVER_STATUS_INVALID_VALUE (3)".
std::string error_text(cusolverStatus_t s);

[[noreturn]] void throw_cuda(cudaError_t e, const char* call);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* call);
[[noreturn]] void throw_cusolver(cusolverStatus_t s, const char* call);
[[noreturn]] void throw_nvrtc(nvrtcResult r, const char* call);

}  // namespace hcr::cuda

// The call text goes into the message: it names the operation that failed without extra context.
#define HCR_CUDA_CHECK(expr)                                                               \
  do {                                                                                     \
    cudaError_t hcr_cuda_status_ = (expr);                                                 \
    if (hcr_cuda_status_ != cudaSuccess) ::hcr::cuda::throw_cuda(hcr_cuda_status_, #expr); \
  } while (0)

#define HCR_CUBLAS_CHECK(expr)                              \
  do {                                                      \
    cublasStatus_t hcr_cublas_status_ = (expr);             \
    if (hcr_cublas_status_ != CUBLAS_STATUS_SUCCESS)        \
      ::hcr::cuda::throw_cublas(hcr_cublas_status_, #expr); \
  } while (0)

#define HCR_CUSOLVER_CHECK(expr)                                \
  do {                                                          \
    cusolverStatus_t hcr_cusolver_status_ = (expr);             \
    if (hcr_cusolver_status_ != CUSOLVER_STATUS_SUCCESS)        \
      ::hcr::cuda::throw_cusolver(hcr_cusolver_status_, #expr); \
  } while (0)

#define HCR_NVRTC_CHECK(expr)                                                                   \
  do {                                                                                          \
    nvrtcResult hcr_nvrtc_status_ = (expr);                                                     \
    if (hcr_nvrtc_status_ != NVRTC_SUCCESS) ::hcr::cuda::throw_nvrtc(hcr_nvrtc_status_, #expr); \
  } while (0)
