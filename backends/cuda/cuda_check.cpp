// CUDA, cuBLAS, cuSOLVER and NVRTC status codes to hcr::sdk::Error, with each API's own error text.
#include "cuda_check.hpp"

#include "cuda_libs.hpp"

namespace hcr::cuda {

bool is_sticky(cudaError_t e) noexcept {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable:
    case cudaErrorCudartUnloading: return true;
    default: return false;
  }
}

hcr_error_code_t error_code(cudaError_t e) noexcept {
  if (e == cudaErrorMemoryAllocation) return HCR_ERROR_OUT_OF_MEMORY;
  if (is_sticky(e) || e == cudaErrorNoDevice) return HCR_ERROR_DEVICE_LOST;
  return HCR_ERROR_BACKEND;
}

std::string error_text(cudaError_t e) {
  const char* name = cudaGetErrorName(e);
  const char* text = cudaGetErrorString(e);
  return std::string(name ? name : "cudaError") + ": " + (text ? text : "unknown error");
}

std::string error_text(cublasStatus_t s) {
  const CublasLib& lib = cublas();
  const char* text = lib.ok ? lib.status_string(s) : nullptr;
  return "cuBLAS status " + std::to_string(static_cast<int>(s)) +
         (text ? std::string(": ") + text : "");
}

std::string error_text(nvrtcResult r) {
  const NvrtcLib& lib = nvrtc();
  const char* text = lib.error_string ? lib.error_string(r) : nullptr;
  return text ? std::string(text) : "NVRTC status " + std::to_string(static_cast<int>(r));
}

std::string error_text(cusolverStatus_t s) {
  const char* name = nullptr;
  switch (s) {
    case CUSOLVER_STATUS_SUCCESS: name = "CUSOLVER_STATUS_SUCCESS"; break;
    case CUSOLVER_STATUS_NOT_INITIALIZED: name = "CUSOLVER_STATUS_NOT_INITIALIZED"; break;
    case CUSOLVER_STATUS_ALLOC_FAILED: name = "CUSOLVER_STATUS_ALLOC_FAILED"; break;
    case CUSOLVER_STATUS_INVALID_VALUE: name = "CUSOLVER_STATUS_INVALID_VALUE"; break;
    case CUSOLVER_STATUS_ARCH_MISMATCH: name = "CUSOLVER_STATUS_ARCH_MISMATCH"; break;
    case CUSOLVER_STATUS_EXECUTION_FAILED: name = "CUSOLVER_STATUS_EXECUTION_FAILED"; break;
    case CUSOLVER_STATUS_INTERNAL_ERROR: name = "CUSOLVER_STATUS_INTERNAL_ERROR"; break;
    case CUSOLVER_STATUS_NOT_SUPPORTED: name = "CUSOLVER_STATUS_NOT_SUPPORTED"; break;
    case CUSOLVER_STATUS_INVALID_WORKSPACE: name = "CUSOLVER_STATUS_INVALID_WORKSPACE"; break;
    default: break;
  }
  return std::string(name ? name : "cuSOLVER status") + " (" + std::to_string(static_cast<int>(s)) +
         ")";
}

void throw_cuda(cudaError_t e, const char* call) {
  // A non-sticky error also stays in the thread's "last error" slot; clear it so that a user
  // kernel later asking cudaGetLastError() on this thread is not blamed for ours.
  if (!is_sticky(e)) (void)cudaGetLastError();
  throw sdk::Error(error_code(e), std::string(call) + " failed: " + error_text(e));
}

void throw_cublas(cublasStatus_t s, const char* call) {
  hcr_error_code_t code = s == CUBLAS_STATUS_ALLOC_FAILED    ? HCR_ERROR_OUT_OF_MEMORY
                          : s == CUBLAS_STATUS_NOT_SUPPORTED ? HCR_ERROR_UNSUPPORTED
                          : s == CUBLAS_STATUS_INVALID_VALUE ? HCR_ERROR_INVALID_ARGUMENT
                                                             : HCR_ERROR_BACKEND;
  throw sdk::Error(code, std::string(call) + " failed: " + error_text(s));
}

void throw_cusolver(cusolverStatus_t s, const char* call) {
  hcr_error_code_t code = s == CUSOLVER_STATUS_ALLOC_FAILED    ? HCR_ERROR_OUT_OF_MEMORY
                          : s == CUSOLVER_STATUS_NOT_SUPPORTED ? HCR_ERROR_UNSUPPORTED
                          : s == CUSOLVER_STATUS_INVALID_VALUE ? HCR_ERROR_INVALID_ARGUMENT
                                                               : HCR_ERROR_BACKEND;
  throw sdk::Error(code, std::string(call) + " failed: " + error_text(s));
}

void throw_nvrtc(nvrtcResult r, const char* call) {
  throw sdk::Error(HCR_ERROR_BACKEND, std::string(call) + " failed: " + error_text(r));
}

}  // namespace hcr::cuda
