// Opens cuBLAS, cuSOLVER, NVRTC and the driver library with dlopen and resolves the entries the
// backend uses.
// Search: the loader's own (LD_LIBRARY_PATH, ld.so.cache), then the toolkit this plugin was built
// against, then $CUDA_HOME / $CUDA_PATH and /usr/local/cuda.
#include "cuda_libs.hpp"

#include <cuda.h>  // only for the CUresult/CUdevice types of the two driver entries
#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#ifndef HCR_CUDA_TOOLKIT_LIB_DIR
#define HCR_CUDA_TOOLKIT_LIB_DIR ""
#endif

namespace hcr::cuda {
namespace {

// The soname majors of the toolkit the plugin was built against: an older or newer cuBLAS has
// another ABI, so only these names are tried.
const std::string kCudaMajor = std::to_string(CUDART_VERSION / 1000);
const std::string kCublasMajor = std::to_string(CUBLAS_VER_MAJOR);
// cuSOLVER numbers its sonames on its own (libcusolver.so.12 ships with CUDA 13).
const std::string kCusolverMajor = std::to_string(CUSOLVER_VER_MAJOR);

std::vector<std::string> lib_dirs() {
  std::vector<std::string> dirs;
  auto add = [&](std::string d) {
    if (d.empty()) return;
    for (auto& x : dirs)
      if (x == d) return;
    dirs.push_back(std::move(d));
  };
  add(HCR_CUDA_TOOLKIT_LIB_DIR);
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(env); v && *v) {
      add(std::string(v) + "/lib64");
      add(std::string(v) + "/lib");
    }
  add("/usr/local/cuda/lib64");
  return dirs;
}

// Opens `file`: first by name, then in each toolkit directory. `error` lists every attempt.
void* open_library(const std::string& file, std::string& path, std::string& error) {
  std::string tried;
  auto attempt = [&](const std::string& p) -> void* {
    dlerror();
    void* h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) {
      path = p;
      return h;
    }
    const char* e = dlerror();
    tried += (tried.empty() ? "" : "; ") + std::string(e ? e : p + ": unknown dlopen error");
    return nullptr;
  };
  if (void* h = attempt(file)) return h;
  for (const std::string& d : lib_dirs())
    if (void* h = attempt(d + "/" + file)) return h;
  error = "cannot open " + file + " (" + tried + ")";
  return nullptr;
}

// Resolves `name` into `fn`; records the first missing symbol.
template <class F>
void resolve(void* handle, const char* name, F& fn, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(handle, name));
  if (fn == nullptr && missing.empty()) missing = name;
}

CublasLib load_cublas() {
  CublasLib lib;
  void* h = open_library("libcublas.so." + kCublasMajor, lib.path, lib.error);
  if (h == nullptr) return lib;
  std::string missing;
  resolve(h, "cublasCreate_v2", lib.create, missing);
  resolve(h, "cublasDestroy_v2", lib.destroy, missing);
  resolve(h, "cublasSetStream_v2", lib.set_stream, missing);
  resolve(h, "cublasSetMathMode", lib.set_math_mode, missing);
  resolve(h, "cublasGetVersion_v2", lib.get_version, missing);
  resolve(h, "cublasGetStatusString", lib.status_string, missing);
  resolve(h, "cublasSgemm_v2", lib.sgemm, missing);
  resolve(h, "cublasDgemm_v2", lib.dgemm, missing);
  resolve(h, "cublasGemmEx", lib.gemm_ex, missing);
  resolve(h, "cublasSsyrk_v2", lib.ssyrk, missing);
  resolve(h, "cublasDsyrk_v2", lib.dsyrk, missing);
  resolve(h, "cublasStrsm_v2", lib.strsm, missing);
  resolve(h, "cublasDtrsm_v2", lib.dtrsm, missing);
  resolve(h, "cublasSgeam", lib.sgeam, missing);
  resolve(h, "cublasDgeam", lib.dgeam, missing);
  if (!missing.empty()) {
    lib.error = lib.path + " lacks " + missing;
    return lib;  // the handle stays open: harmless, and closing cuBLAS is what we avoid
  }
  lib.ok = true;
  return lib;
}

CusolverLib load_cusolver() {
  CusolverLib lib;
  void* h = open_library("libcusolver.so." + kCusolverMajor, lib.path, lib.error);
  if (h == nullptr) return lib;
  std::string missing;
  resolve(h, "cusolverDnCreate", lib.create, missing);
  resolve(h, "cusolverDnDestroy", lib.destroy, missing);
  resolve(h, "cusolverDnSetStream", lib.set_stream, missing);
  resolve(h, "cusolverDnSpotrf_bufferSize", lib.spotrf_buffer_size, missing);
  resolve(h, "cusolverDnDpotrf_bufferSize", lib.dpotrf_buffer_size, missing);
  resolve(h, "cusolverDnSpotrf", lib.spotrf, missing);
  resolve(h, "cusolverDnDpotrf", lib.dpotrf, missing);
  resolve(h, "cusolverDnSgetrf_bufferSize", lib.sgetrf_buffer_size, missing);
  resolve(h, "cusolverDnDgetrf_bufferSize", lib.dgetrf_buffer_size, missing);
  resolve(h, "cusolverDnSgetrf", lib.sgetrf, missing);
  resolve(h, "cusolverDnDgetrf", lib.dgetrf, missing);
  if (!missing.empty()) {
    lib.error = lib.path + " lacks " + missing;
    return lib;  // left open, as cuBLAS is
  }
  lib.ok = true;
  return lib;
}

NvrtcLib load_nvrtc() {
  NvrtcLib lib;
  void* h = open_library("libnvrtc.so." + kCudaMajor, lib.path, lib.error);
  if (h == nullptr) return lib;
  std::string missing;
  resolve(h, "nvrtcGetErrorString", lib.error_string, missing);
  resolve(h, "nvrtcVersion", lib.version, missing);
  resolve(h, "nvrtcGetNumSupportedArchs", lib.num_supported_archs, missing);
  resolve(h, "nvrtcGetSupportedArchs", lib.supported_archs, missing);
  resolve(h, "nvrtcCreateProgram", lib.create_program, missing);
  resolve(h, "nvrtcDestroyProgram", lib.destroy_program, missing);
  resolve(h, "nvrtcCompileProgram", lib.compile_program, missing);
  resolve(h, "nvrtcAddNameExpression", lib.add_name_expression, missing);
  resolve(h, "nvrtcGetLoweredName", lib.get_lowered_name, missing);
  resolve(h, "nvrtcGetProgramLogSize", lib.get_program_log_size, missing);
  resolve(h, "nvrtcGetProgramLog", lib.get_program_log, missing);
  resolve(h, "nvrtcGetCUBINSize", lib.get_cubin_size, missing);
  resolve(h, "nvrtcGetCUBIN", lib.get_cubin, missing);
  resolve(h, "nvrtcGetPTXSize", lib.get_ptx_size, missing);
  resolve(h, "nvrtcGetPTX", lib.get_ptx, missing);
  if (!missing.empty()) {
    lib.error = lib.path + " lacks " + missing;
    return lib;
  }
  if (lib.version(&lib.major, &lib.minor) != NVRTC_SUCCESS) {
    lib.error = lib.path + ": nvrtcVersion failed";
    return lib;
  }
  lib.ok = true;
  return lib;
}

struct Driver {
  void* handle = nullptr;
  CUresult (*primary_ctx_get_state)(CUdevice, unsigned int*, int*) = nullptr;
};

const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    // The runtime has opened the driver already when we get here; never load it ourselves.
    r.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (r.handle != nullptr)
      r.primary_ctx_get_state = reinterpret_cast<decltype(r.primary_ctx_get_state)>(
          dlsym(r.handle, "cuDevicePrimaryCtxGetState"));
    return r;
  }();
  return d;
}

}  // namespace

const CublasLib& cublas() {
  static const CublasLib lib = load_cublas();
  return lib;
}

const CusolverLib& cusolver() {
  static const CusolverLib lib = load_cusolver();
  return lib;
}

const NvrtcLib& nvrtc() {
  static const NvrtcLib lib = load_nvrtc();
  return lib;
}

bool primary_context_active(int ordinal) noexcept {
  const Driver& d = driver();
  if (d.primary_ctx_get_state == nullptr) return true;
  unsigned int flags = 0;
  int active = 0;
  // CUdevice is the ordinal for every driver that ships the primary-context API.
  if (d.primary_ctx_get_state(static_cast<CUdevice>(ordinal), &flags, &active) != CUDA_SUCCESS)
    return true;
  return active != 0;
}

bool driver_library_present() noexcept {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

}  // namespace hcr::cuda
