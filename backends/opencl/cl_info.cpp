// clGet*Info wrappers: sizes first, then the value; errors through HCR_CL_CHECK.
#include "cl_info.hpp"

#include "cl_error.hpp"

#include <algorithm>
#include <cctype>

namespace hcr::opencl {

namespace {
std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\0' || std::isspace(static_cast<unsigned char>(s.back()))))
    s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}
}  // namespace

std::vector<cl_platform_id> list_platforms() {
  cl_uint n = 0;
  cl_int err = clGetPlatformIDs(0, nullptr, &n);
  if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (err == CL_SUCCESS && n == 0)) return {};
  if (err != CL_SUCCESS) throw_cl(err, "clGetPlatformIDs");
  std::vector<cl_platform_id> ids(n);
  HCR_CL_CHECK(clGetPlatformIDs(n, ids.data(), nullptr));
  return ids;
}

std::vector<cl_device_id> list_devices(cl_platform_id platform, cl_device_type type) {
  cl_uint n = 0;
  cl_int err = clGetDeviceIDs(platform, type, 0, nullptr, &n);
  if (err == CL_DEVICE_NOT_FOUND || (err == CL_SUCCESS && n == 0)) return {};
  if (err != CL_SUCCESS) throw_cl(err, "clGetDeviceIDs");
  std::vector<cl_device_id> ids(n);
  HCR_CL_CHECK(clGetDeviceIDs(platform, type, n, ids.data(), nullptr));
  return ids;
}

std::string platform_string(cl_platform_id platform, cl_platform_info what) {
  size_t size = 0;
  HCR_CL_CHECK(clGetPlatformInfo(platform, what, 0, nullptr, &size));
  std::string s(size, '\0');
  HCR_CL_CHECK(clGetPlatformInfo(platform, what, size, s.data(), nullptr));
  return trimmed(std::move(s));
}

std::string device_string(cl_device_id device, cl_device_info what) {
  size_t size = 0;
  HCR_CL_CHECK(clGetDeviceInfo(device, what, 0, nullptr, &size));
  std::string s(size, '\0');
  HCR_CL_CHECK(clGetDeviceInfo(device, what, size, s.data(), nullptr));
  return trimmed(std::move(s));
}

template <class T>
T device_value(cl_device_id device, cl_device_info what) {
  T v{};
  HCR_CL_CHECK(clGetDeviceInfo(device, what, sizeof v, &v, nullptr));
  return v;
}
template cl_uint device_value<cl_uint>(cl_device_id, cl_device_info);
template cl_ulong device_value<cl_ulong>(cl_device_id, cl_device_info);

std::string build_log(cl_program program, cl_device_id device) {
  size_t size = 0;
  if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size) !=
          CL_SUCCESS ||
      size == 0)
    return {};
  std::string s(size, '\0');
  if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, s.data(), nullptr) !=
      CL_SUCCESS)
    return {};
  return trimmed(std::move(s));
}

std::vector<unsigned char> program_binary(cl_program program) {
  cl_uint devices = 0;
  HCR_CL_CHECK(
      clGetProgramInfo(program, CL_PROGRAM_NUM_DEVICES, sizeof devices, &devices, nullptr));
  if (devices != 1)
    throw sdk::Error(HCR_ERROR_INTERNAL,
                     "program built for " + std::to_string(devices) + " devices, expected one");
  size_t size = 0;
  HCR_CL_CHECK(clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr));
  std::vector<unsigned char> bin(size);
  unsigned char* ptr = bin.data();
  if (size > 0)
    HCR_CL_CHECK(clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof ptr, &ptr, nullptr));
  return bin;
}

std::string program_kernel_names(cl_program program) {
  size_t size = 0;
  if (clGetProgramInfo(program, CL_PROGRAM_KERNEL_NAMES, 0, nullptr, &size) != CL_SUCCESS)
    return {};
  std::string s(size, '\0');
  if (clGetProgramInfo(program, CL_PROGRAM_KERNEL_NAMES, size, s.data(), nullptr) != CL_SUCCESS)
    return {};
  s = trimmed(std::move(s));
  std::replace(s.begin(), s.end(), ';', ',');
  return s;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains_icase(const std::string& haystack, const std::string& needle) {
  return lower(haystack).find(lower(needle)) != std::string::npos;
}

}  // namespace hcr::opencl
