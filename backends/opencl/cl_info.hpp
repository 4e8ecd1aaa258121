// Small typed wrappers over clGet*Info, shared by the plugin and hcr-opencl-compile.
#pragma once

#include "cl_api.hpp"

#include <string>
#include <vector>

namespace hcr::opencl {

/// Every platform of the ICD loader; empty when there is none (CL_PLATFORM_NOT_FOUND_KHR).
std::vector<cl_platform_id> list_platforms();
/// The platform's devices of `type`; empty when it has none.
std::vector<cl_device_id> list_devices(cl_platform_id platform, cl_device_type type);

std::string platform_string(cl_platform_id platform, cl_platform_info what);
std::string device_string(cl_device_id device, cl_device_info what);

template <class T>
T device_value(cl_device_id device, cl_device_info what);

/// The compiler's log of the last build of `program` for `device` (trimmed).
std::string build_log(cl_program program, cl_device_id device);
/// The program binary (CL_PROGRAM_BINARIES) of a program built for exactly one device.
std::vector<unsigned char> program_binary(cl_program program);
/// The kernel names a built program holds, comma-separated.
std::string program_kernel_names(cl_program program);

/// Lower-case copy.
std::string lower(std::string s);
/// Case-insensitive substring test; an empty needle matches everything.
bool contains_icase(const std::string& haystack, const std::string& needle);

}  // namespace hcr::opencl
