// OpenCL and CLBlast status codes turned into hcr::sdk::Error, with their names: a message that
// says "CL_INVALID_WORK_GROUP_SIZE" is actionable, "-54" is not.
#pragma once

#include "cl_api.hpp"

#include <hcr/sdk/backend.hpp>

#include <clblast.h>

#include <string>

namespace hcr::opencl {

/// "CL_INVALID_VALUE" for -30; "CL_UNKNOWN_ERROR" for a code this build does not know.
const char* cl_error_name(cl_int code) noexcept;
/// "kInvalidDimension" for CLBlast's -1017; OpenCL names for the codes CLBlast shares with OpenCL.
const char* clblast_status_name(clblast::StatusCode status) noexcept;

/// The hcr error code an OpenCL failure maps to (out of memory, device lost, backend).
hcr_error_code_t hcr_code_of(cl_int code) noexcept;

/// "clEnqueueWriteBuffer: CL_INVALID_VALUE (-30)".
std::string cl_error_text(const char* what, cl_int code);

[[noreturn]] void throw_cl(cl_int code, const char* what);
[[noreturn]] void throw_clblast(clblast::StatusCode status, const char* what);

/// The OpenCL function's name from a stringized call ("clFoo(a, b)" -> "clFoo").
std::string call_name(const char* expr);

/// Runs an OpenCL function that reports through an `errcode_ret` out-parameter, checking it.
template <class F>
auto cl_create(const char* what, F&& f) {
  cl_int err = CL_SUCCESS;
  auto r = f(&err);
  if (err != CL_SUCCESS) throw_cl(err, what);
  return r;
}

}  // namespace hcr::opencl

/// Checks an OpenCL call that returns cl_int; throws hcr::sdk::Error naming the call and the error.
#define HCR_CL_CHECK(expr)                                                              \
  do {                                                                                  \
    const cl_int hcr_cl_status_ = (expr);                                               \
    if (hcr_cl_status_ != CL_SUCCESS)                                                   \
      ::hcr::opencl::throw_cl(hcr_cl_status_, ::hcr::opencl::call_name(#expr).c_str()); \
  } while (0)

/// Checks a CLBlast call; throws hcr::sdk::Error naming the call and the status.
#define HCR_CLBLAST_CHECK(expr)                                                                   \
  do {                                                                                            \
    const ::clblast::StatusCode hcr_clblast_status_ = (expr);                                     \
    if (hcr_clblast_status_ != ::clblast::StatusCode::kSuccess)                                   \
      ::hcr::opencl::throw_clblast(hcr_clblast_status_, ::hcr::opencl::call_name(#expr).c_str()); \
  } while (0)
