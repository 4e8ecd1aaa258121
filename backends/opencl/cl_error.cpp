// Names of OpenCL and CLBlast status codes, and the exceptions the check macros throw.
#include "cl_error.hpp"

namespace hcr::opencl {

const char* cl_error_name(cl_int code) noexcept {
  switch (code) {
    case 0: return "CL_SUCCESS";
    case -1: return "CL_DEVICE_NOT_FOUND";
    case -2: return "CL_DEVICE_NOT_AVAILABLE";
    case -3: return "CL_COMPILER_NOT_AVAILABLE";
    case -4: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case -5: return "CL_OUT_OF_RESOURCES";
    case -6: return "CL_OUT_OF_HOST_MEMORY";
    case -7: return "CL_PROFILING_INFO_NOT_AVAILABLE";
    case -8: return "CL_MEM_COPY_OVERLAP";
    case -9: return "CL_IMAGE_FORMAT_MISMATCH";
    case -10: return "CL_IMAGE_FORMAT_NOT_SUPPORTED";
    case -11: return "CL_BUILD_PROGRAM_FAILURE";
    case -12: return "CL_MAP_FAILURE";
    case -13: return "CL_MISALIGNED_SUB_BUFFER_OFFSET";
    case -14: return "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST";
    case -15: return "CL_COMPILE_PROGRAM_FAILURE";
    case -16: return "CL_LINKER_NOT_AVAILABLE";
    case -17: return "CL_LINK_PROGRAM_FAILURE";
    case -18: return "CL_DEVICE_PARTITION_FAILED";
    case -19: return "CL_KERNEL_ARG_INFO_NOT_AVAILABLE";
    case -30: return "CL_INVALID_VALUE";
    case -31: return "CL_INVALID_DEVICE_TYPE";
    case -32: return "CL_INVALID_PLATFORM";
    case -33: return "CL_INVALID_DEVICE";
    case -34: return "CL_INVALID_CONTEXT";
    case -35: return "CL_INVALID_QUEUE_PROPERTIES";
    case -36: return "CL_INVALID_COMMAND_QUEUE";
    case -37: return "CL_INVALID_HOST_PTR";
    case -38: return "CL_INVALID_MEM_OBJECT";
    case -39: return "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR";
    case -40: return "CL_INVALID_IMAGE_SIZE";
    case -41: return "CL_INVALID_SAMPLER";
    case -42: return "CL_INVALID_BINARY";
    case -43: return "CL_INVALID_BUILD_OPTIONS";
    case -44: return "CL_INVALID_PROGRAM";
    case -45: return "CL_INVALID_PROGRAM_EXECUTABLE";
    case -46: return "CL_INVALID_KERNEL_NAME";
    case -47: return "CL_INVALID_KERNEL_DEFINITION";
    case -48: return "CL_INVALID_KERNEL";
    case -49: return "CL_INVALID_ARG_INDEX";
    case -50: return "CL_INVALID_ARG_VALUE";
    case -51: return "CL_INVALID_ARG_SIZE";
    case -52: return "CL_INVALID_KERNEL_ARGS";
    case -53: return "CL_INVALID_WORK_DIMENSION";
    case -54: return "CL_INVALID_WORK_GROUP_SIZE";
    case -55: return "CL_INVALID_WORK_ITEM_SIZE";
    case -56: return "CL_INVALID_GLOBAL_OFFSET";
    case -57: return "CL_INVALID_EVENT_WAIT_LIST";
    case -58: return "CL_INVALID_EVENT";
    case -59: return "CL_INVALID_OPERATION";
    case -60: return "CL_INVALID_GL_OBJECT";
    case -61: return "CL_INVALID_BUFFER_SIZE";
    case -62: return "CL_INVALID_MIP_LEVEL";
    case -63: return "CL_INVALID_GLOBAL_WORK_SIZE";
    case -64: return "CL_INVALID_PROPERTY";
    case -65: return "CL_INVALID_IMAGE_DESCRIPTOR";
    case -66: return "CL_INVALID_COMPILER_OPTIONS";
    case -67: return "CL_INVALID_LINKER_OPTIONS";
    case -68: return "CL_INVALID_DEVICE_PARTITION_COUNT";
    case -69: return "CL_INVALID_PIPE_SIZE";
    case -70: return "CL_INVALID_DEVICE_QUEUE";
    case -71: return "CL_INVALID_SPEC_ID";
    case -72: return "CL_MAX_SIZE_RESTRICTION_EXCEEDED";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "CL_UNKNOWN_ERROR";
  }
}

const char* clblast_status_name(clblast::StatusCode status) noexcept {
  using S = clblast::StatusCode;
  switch (status) {
    case S::kNotImplemented: return "kNotImplemented";
    case S::kInvalidMatrixA: return "kInvalidMatrixA";
    case S::kInvalidMatrixB: return "kInvalidMatrixB";
    case S::kInvalidMatrixC: return "kInvalidMatrixC";
    case S::kInvalidVectorX: return "kInvalidVectorX";
    case S::kInvalidVectorY: return "kInvalidVectorY";
    case S::kInvalidDimension: return "kInvalidDimension";
    case S::kInvalidLeadDimA: return "kInvalidLeadDimA";
    case S::kInvalidLeadDimB: return "kInvalidLeadDimB";
    case S::kInvalidLeadDimC: return "kInvalidLeadDimC";
    case S::kInvalidIncrementX: return "kInvalidIncrementX";
    case S::kInvalidIncrementY: return "kInvalidIncrementY";
    case S::kInsufficientMemoryA: return "kInsufficientMemoryA";
    case S::kInsufficientMemoryB: return "kInsufficientMemoryB";
    case S::kInsufficientMemoryC: return "kInsufficientMemoryC";
    case S::kInsufficientMemoryX: return "kInsufficientMemoryX";
    case S::kInsufficientMemoryY: return "kInsufficientMemoryY";
    case S::kInsufficientMemoryTemp: return "kInsufficientMemoryTemp";
    case S::kInvalidBatchCount: return "kInvalidBatchCount";
    case S::kInvalidOverrideKernel: return "kInvalidOverrideKernel";
    case S::kMissingOverrideParameter: return "kMissingOverrideParameter";
    case S::kInvalidLocalMemUsage: return "kInvalidLocalMemUsage";
    case S::kNoHalfPrecision: return "kNoHalfPrecision";
    case S::kNoDoublePrecision: return "kNoDoublePrecision";
    case S::kInvalidVectorScalar: return "kInvalidVectorScalar";
    case S::kInsufficientMemoryScalar: return "kInsufficientMemoryScalar";
    case S::kDatabaseError: return "kDatabaseError";
    case S::kUnknownError: return "kUnknownError";
    case S::kUnexpectedError: return "kUnexpectedError";
    default: return cl_error_name(static_cast<cl_int>(status));  // shared with OpenCL
  }
}

hcr_error_code_t hcr_code_of(cl_int code) noexcept {
  switch (code) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_OUT_OF_HOST_MEMORY: return HCR_ERROR_OUT_OF_MEMORY;
    case CL_DEVICE_NOT_AVAILABLE: return HCR_ERROR_DEVICE_LOST;
    default: return HCR_ERROR_BACKEND;
  }
}

std::string cl_error_text(const char* what, cl_int code) {
  return std::string(what) + ": " + cl_error_name(code) + " (" + std::to_string(code) + ")";
}

void throw_cl(cl_int code, const char* what) {
  throw sdk::Error(hcr_code_of(code), cl_error_text(what, code));
}

void throw_clblast(clblast::StatusCode status, const char* what) {
  using S = clblast::StatusCode;
  hcr_error_code_t code = HCR_ERROR_BACKEND;
  switch (status) {
    case S::kNoDoublePrecision:
    case S::kNoHalfPrecision:
    case S::kNotImplemented: code = HCR_ERROR_UNSUPPORTED; break;
    case S::kTempBufferAllocFailure:
    case S::kOpenCLOutOfResources:
    case S::kOpenCLOutOfHostMemory: code = HCR_ERROR_OUT_OF_MEMORY; break;
    case S::kInvalidDimension:
    case S::kInvalidLeadDimA:
    case S::kInvalidLeadDimB:
    case S::kInvalidLeadDimC:
    case S::kInsufficientMemoryA:
    case S::kInsufficientMemoryB:
    case S::kInsufficientMemoryC: code = HCR_ERROR_INVALID_ARGUMENT; break;
    default: break;
  }
  const int n = static_cast<int>(status);
  throw sdk::Error(code, std::string(what) + ": CLBlast " + clblast_status_name(status) + " (" +
                             std::to_string(n) + ")");
}

std::string call_name(const char* expr) {
  std::string s(expr);
  auto paren = s.find('(');
  if (paren != std::string::npos) s.resize(paren);
  auto scope = s.rfind("::");
  if (scope != std::string::npos) s.erase(0, scope + 2);
  while (!s.empty() && (s.back() == ' ' || s.back() == '<')) s.pop_back();
  return s;
}

}  // namespace hcr::opencl
