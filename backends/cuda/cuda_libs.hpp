// cuBLAS, cuSOLVER, NVRTC and two CUDA driver entries, opened with dlopen on first use rather than
// linked.
//
// Why: the plugin must load — and report its devices, or none with the CUDA error — on machines
// where these libraries are missing or not on the loader's path (CI, a driver-only node). Linked
// dynamically, a missing libcublas would make dlopen of the whole plugin fail with only the
// loader's terse message. Opened here, a missing library only disables what needs it (the BLAS
// built-ins, the factorizations, source kernels), with a message that says which files were tried.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#include <nvrtc.h>

#include <string>

namespace hcr::cuda {

/// The cuBLAS entries the backend uses. `ok` false: `error` says why (files tried, dlerror).
struct CublasLib {
  bool ok = false;
  std::string error;
  std::string path;  ///< the file opened
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t) = nullptr;
  cublasStatus_t (*get_version)(cublasHandle_t, int*) = nullptr;
  const char* (*status_string)(cublasStatus_t) = nullptr;
  cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                          const float*, const float*, int, const float*, int, const float*, float*,
                          int) = nullptr;
  cublasStatus_t (*dgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                          const double*, const double*, int, const double*, int, const double*,
                          double*, int) = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*ssyrk)(cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int,
                          const float*, const float*, int, const float*, float*, int) = nullptr;
  cublasStatus_t (*dsyrk)(cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int,
                          const double*, const double*, int, const double*, double*, int) = nullptr;
  cublasStatus_t (*strsm)(cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t,
                          cublasDiagType_t, int, int, const float*, const float*, int, float*,
                          int) = nullptr;
  cublasStatus_t (*dtrsm)(cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t,
                          cublasDiagType_t, int, int, const double*, const double*, int, double*,
                          int) = nullptr;
  // C = alpha op(A) + beta op(B): the out-of-place transposes around getrf_nopiv.
  cublasStatus_t (*sgeam)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                          const float*, const float*, int, const float*, const float*, int, float*,
                          int) = nullptr;
  cublasStatus_t (*dgeam)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                          const double*, const double*, int, const double*, const double*, int,
                          double*, int) = nullptr;
};

/// The cuSOLVER (dense) entries the backend uses: Cholesky and LU of one tile.
struct CusolverLib {
  bool ok = false;
  std::string error;
  std::string path;
  cusolverStatus_t (*create)(cusolverDnHandle_t*) = nullptr;
  cusolverStatus_t (*destroy)(cusolverDnHandle_t) = nullptr;
  cusolverStatus_t (*set_stream)(cusolverDnHandle_t, cudaStream_t) = nullptr;
  cusolverStatus_t (*spotrf_buffer_size)(cusolverDnHandle_t, cublasFillMode_t, int, float*, int,
                                         int*) = nullptr;
  cusolverStatus_t (*dpotrf_buffer_size)(cusolverDnHandle_t, cublasFillMode_t, int, double*, int,
                                         int*) = nullptr;
  cusolverStatus_t (*spotrf)(cusolverDnHandle_t, cublasFillMode_t, int, float*, int, float*, int,
                             int*) = nullptr;
  cusolverStatus_t (*dpotrf)(cusolverDnHandle_t, cublasFillMode_t, int, double*, int, double*, int,
                             int*) = nullptr;
  cusolverStatus_t (*sgetrf_buffer_size)(cusolverDnHandle_t, int, int, float*, int, int*) = nullptr;
  cusolverStatus_t (*dgetrf_buffer_size)(cusolverDnHandle_t, int, int, double*, int,
                                         int*) = nullptr;
  cusolverStatus_t (*sgetrf)(cusolverDnHandle_t, int, int, float*, int, float*, int*,
                             int*) = nullptr;
  cusolverStatus_t (*dgetrf)(cusolverDnHandle_t, int, int, double*, int, double*, int*,
                             int*) = nullptr;
};

/// The NVRTC entries the backend uses.
struct NvrtcLib {
  bool ok = false;
  std::string error;
  std::string path;
  int major = 0, minor = 0;  ///< nvrtcVersion
  const char* (*error_string)(nvrtcResult) = nullptr;
  nvrtcResult (*version)(int*, int*) = nullptr;
  nvrtcResult (*num_supported_archs)(int*) = nullptr;
  nvrtcResult (*supported_archs)(int*) = nullptr;
  nvrtcResult (*create_program)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                const char* const*) = nullptr;
  nvrtcResult (*destroy_program)(nvrtcProgram*) = nullptr;
  nvrtcResult (*compile_program)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*add_name_expression)(nvrtcProgram, const char*) = nullptr;
  nvrtcResult (*get_lowered_name)(nvrtcProgram, const char*, const char**) = nullptr;
  nvrtcResult (*get_program_log_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*get_program_log)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*get_cubin_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*get_cubin)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*get_ptx_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*get_ptx)(nvrtcProgram, char*) = nullptr;
};

/// Opened once per process on first call (thread-safe), never closed: unloading cuBLAS while its
/// own static teardown may still run at exit is a known source of crashes, and a second runtime in
/// the same process reuses the handle.
const CublasLib& cublas();
const CusolverLib& cusolver();
const NvrtcLib& nvrtc();

/// Whether device `ordinal` already has an active primary context (the driver's
/// cuDevicePrimaryCtxGetState). Unknown (no driver entry): true.
bool primary_context_active(int ordinal) noexcept;

/// Whether the NVIDIA driver library (libcuda.so.1) can be opened at all: tells "no driver" from
/// "a driver too old for this runtime" when cudaGetDeviceCount fails.
bool driver_library_present() noexcept;

}  // namespace hcr::cuda
