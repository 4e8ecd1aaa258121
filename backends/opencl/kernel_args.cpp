// A user kernel's arguments (argument info and probed sizes) and the check of each launch against
// them: see kernel_args.hpp.
#include "kernel_args.hpp"

#include <hcr/sdk/backend.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

namespace hcr::opencl {
namespace {

using sdk::Error;

// The largest OpenCL C built-in value: a long16 or double16.
constexpr size_t kLargestBuiltin = 128;
// The largest alignment assumed for a parameter whose size is unknown (a struct).
constexpr size_t kLargestAlignment = 128;

std::string bytes_text(size_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

std::string arg_string(cl_kernel kernel, cl_uint index, cl_kernel_arg_info what) {
  size_t size = 0;
  if (clGetKernelArgInfo(kernel, index, what, 0, nullptr, &size) != CL_SUCCESS || size == 0)
    return "";
  std::string s(size, '\0');
  if (clGetKernelArgInfo(kernel, index, what, size, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// The one size clSetKernelArg accepts for argument `index` (zeros as the value): the sizes of the
// built-in types first, then every size up to the device's limit (a struct). 0 when it accepts
// none (a __local pointer, a sampler) or several (a driver that does not check, or does not for
// structs, as PoCL). PoCL also takes 3/4 of a size (a 3-vector's 3 components), which only the
// powers of two tried first keep out of the answer.
size_t probe_size(cl_kernel kernel, cl_uint index, const std::vector<unsigned char>& zeros) {
  auto accepted = [&](size_t size) {
    return clSetKernelArg(kernel, index, size, zeros.data()) == CL_SUCCESS;
  };
  size_t found = 0;
  for (size_t size = 1; size <= kLargestBuiltin && size <= zeros.size(); size *= 2)
    if (accepted(size)) {
      if (found != 0) return 0;
      found = size;
    }
  if (found != 0) return found;
  for (size_t size = 3; size <= zeros.size(); ++size) {
    if ((size & (size - 1)) == 0 && size <= kLargestBuiltin) continue;  // tried above
    if (accepted(size)) {
      if (found != 0) return 0;
      found = size;
    }
  }
  return found;
}

// Whether the bytes [begin, end) of `params` can be a value of `size` bytes followed by the
// runtime's padding before the next parameter, one of `next_size` bytes (0: unknown): the padding
// is zero (the runtime zero-fills it) and rounds begin + size up to a power of two that divides
// the next value's size (C++ makes a type's size a multiple of its alignment).
bool padding_fits(const unsigned char* params, size_t begin, size_t end, size_t size,
                  size_t next_size) {
  const size_t value_end = begin + size;
  for (size_t i = value_end; i < end; ++i)
    if (params[i] != 0) return false;
  const size_t largest = next_size == 0 ? kLargestAlignment : next_size & (~next_size + 1);
  for (size_t align = 1; align <= largest; align *= 2)
    if ((value_end + align - 1) / align * align == end) return true;
  return false;
}

// What to give for an argument: the C++ type with the same bytes as its OpenCL C type.
std::string what_to_give(const ArgSpec& s) {
  static const std::pair<const char*, const char*> kCpp[] = {
      {"float", "a float (2.0f, not 2.0)"},
      {"double", "a double"},
      {"char", "an int8_t"},
      {"uchar", "a uint8_t"},
      {"short", "an int16_t"},
      {"ushort", "a uint16_t"},
      {"int", "an int32_t (an int)"},
      {"uint", "a uint32_t"},
      {"long", "an int64_t"},
      {"ulong", "a uint64_t"},
      {"half", "a 2-byte half (its bits as a uint16_t)"},
  };
  for (const auto& [type, give] : kCpp)
    if (s.type == type) return give;
  if (!s.type.empty() && builtin_type_size(s.type, 8) != 0 && s.type != "size_t")
    return "a cl_" + s.type + " (" + bytes_text(s.size) + ")";
  return "a value of exactly " + bytes_text(s.size);
}

std::string layout(const hcr_launch_args_t& a) {
  return " (a task's buffers come first, then its parameters: this one gives " +
         std::to_string(a.num_args) + " buffer(s) and " + std::to_string(a.num_params) +
         " parameter(s))";
}

}  // namespace

size_t builtin_type_size(const std::string& type, size_t address_bytes) {
  if (type == "size_t" || type == "ptrdiff_t" || type == "intptr_t" || type == "uintptr_t")
    return address_bytes;
  static const std::pair<const char*, size_t> kScalars[] = {
      {"char", 1},   {"uchar", 1},          {"unsigned char", 1}, {"short", 2},
      {"ushort", 2}, {"unsigned short", 2}, {"half", 2},          {"int", 4},
      {"uint", 4},   {"unsigned int", 4},   {"float", 4},         {"long", 8},
      {"ulong", 8},  {"unsigned long", 8},  {"double", 8},
  };
  size_t digits = type.size();
  while (digits > 0 && type[digits - 1] >= '0' && type[digits - 1] <= '9') --digits;
  const std::string base = type.substr(0, digits);
  size_t lanes = 1;
  if (digits < type.size()) {
    const std::string n = type.substr(digits);
    if (n == "2" || n == "4" || n == "8" || n == "16") lanes = std::stoul(n);
    else if (n == "3") lanes = 4;  // a 3-vector takes the room of a 4-vector
    else return 0;
  }
  for (const auto& [name, size] : kScalars)
    if (base == name) return size * lanes;
  return 0;
}

std::vector<ArgSpec> read_arg_specs(cl_kernel kernel, cl_uint num_args, size_t max_parameter_bytes,
                                    size_t address_bytes) {
  std::vector<ArgSpec> specs(num_args);
  const std::vector<unsigned char> zeros(std::max<size_t>(max_parameter_bytes, kLargestBuiltin), 0);
  for (cl_uint i = 0; i < num_args; ++i) {
    ArgSpec& s = specs[i];
    cl_kernel_arg_address_qualifier address = 0;
    if (clGetKernelArgInfo(kernel, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof address, &address,
                           nullptr) == CL_SUCCESS) {
      s.name = arg_string(kernel, i, CL_KERNEL_ARG_NAME);
      s.type = arg_string(kernel, i, CL_KERNEL_ARG_TYPE_NAME);
      if (address == CL_KERNEL_ARG_ADDRESS_GLOBAL || address == CL_KERNEL_ARG_ADDRESS_CONSTANT)
        s.kind = ArgSpec::Kind::buffer;
      else if (address == CL_KERNEL_ARG_ADDRESS_LOCAL || s.type == "sampler_t")
        s.kind = ArgSpec::Kind::other;
      else s.kind = ArgSpec::Kind::value;
    }
    if (s.kind == ArgSpec::Kind::buffer || s.kind == ArgSpec::Kind::other) continue;
    s.size = probe_size(kernel, i, zeros);
    if (s.size == 0) s.size = builtin_type_size(s.type, address_bytes);
  }
  return specs;
}

std::string describe_arg(size_t index, const ArgSpec& s) {
  std::string out = "argument " + std::to_string(index);
  if (!s.name.empty()) out += " '" + s.name + "'";
  std::string what = s.type;
  if (s.size != 0) what += (what.empty() ? "" : ", ") + bytes_text(s.size);
  if (!what.empty()) out += " (" + what + ")";
  return out;
}

std::string describe_bytes(const unsigned char* data, size_t size) {
  std::string out = bytes_text(size);
  if (size == 1 || size == 2 || size == 4 || size == 8) {
    uint64_t bits = 0;
    std::memcpy(&bits, data, size);
    char hex[24];
    std::snprintf(hex, sizeof hex, "0x%0*llx", static_cast<int>(2 * size),
                  static_cast<unsigned long long>(bits));
    out += std::string(" (") + hex + ": ";
    char num[64];
    auto text = [&](auto v) {
      auto r = std::to_chars(num, num + sizeof num, v);
      return std::string(num, r.ptr);
    };
    switch (size) {
      case 1: return out + text(static_cast<int8_t>(bits)) + " as an int8)";
      case 2: return out + text(static_cast<int16_t>(bits)) + " as an int16)";
      case 4: {
        float f;
        std::memcpy(&f, data, 4);
        return out + text(f) + " as a float, " + text(static_cast<int32_t>(bits)) + " as an int32)";
      }
      default: {
        double d;
        std::memcpy(&d, data, 8);
        return out + text(d) + " as a double, " + text(static_cast<int64_t>(bits)) +
               " as an int64)";
      }
    }
  }
  out += " (bytes";
  for (size_t i = 0; i < size && i < 16; ++i) {
    char b[4];
    std::snprintf(b, sizeof b, " %02x", data[i]);
    out += b;
  }
  return out + (size > 16 ? " ...)" : ")");
}

void check_launch(const std::string& kernel, const std::vector<ArgSpec>& specs,
                  const hcr_launch_args_t& a) {
  // Built only for a message: this runs on every launch.
  auto who = [&] { return "kernel '" + kernel + "': "; };
  for (size_t i = 0; i < a.num_args && i < specs.size(); ++i) {
    const ArgSpec& s = specs[i];
    if (s.kind == ArgSpec::Kind::value ||
        (s.kind == ArgSpec::Kind::unknown && s.size != 0 && s.size != sizeof(cl_mem)))
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  who() + describe_arg(i, s) +
                      " is a value, not a buffer, but the task gives buffer " + std::to_string(i) +
                      " there" + layout(a));
    if (s.kind == ArgSpec::Kind::other)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  who() + describe_arg(i, s) +
                      " is a __local pointer or a sampler, which a task cannot pass (buffer " +
                      std::to_string(i) + " is given there)");
  }
  if (a.num_params == 0) return;
  if (a.param_offsets == nullptr || a.params == nullptr)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, who() + "parameters without offsets or data");
  const auto* params = static_cast<const unsigned char*>(a.params);
  for (size_t j = a.num_params; j-- > 0;) {
    const size_t begin = a.param_offsets[j];
    const bool last = j + 1 == a.num_params;
    const size_t end = last ? a.params_size : a.param_offsets[j + 1];
    if (end <= begin || end > a.params_size)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  who() + "parameter " + std::to_string(j) + " has no bytes");
    const size_t index = a.num_args + j;
    if (index >= specs.size()) continue;  // the caller checked the count
    const ArgSpec& s = specs[index];
    if (s.kind == ArgSpec::Kind::buffer || s.kind == ArgSpec::Kind::other)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  who() + describe_arg(index, s) +
                      (s.kind == ArgSpec::Kind::buffer ? " is a buffer"
                                                       : " is a __local pointer or a sampler") +
                      ", not a value, but the task gives parameter " + std::to_string(j) +
                      " there" + layout(a));
    if (s.size == 0) continue;  // unknown: clSetKernelArg decides
    const size_t span = end - begin;
    if (span == s.size) continue;
    if (span > s.size && !last) {
      const size_t next = index + 1 < specs.size() ? specs[index + 1].size : 0;
      if (padding_fits(params, begin, end, s.size, next)) continue;
    }
    throw Error(
        HCR_ERROR_INVALID_ARGUMENT,
        who() + describe_arg(index, s) + " is given parameter " + std::to_string(j) +
            (last ? " of " : ", which runs up to parameter " + std::to_string(j + 1) + " over ") +
            describe_bytes(params + begin, span) +
            "; Task::param passes a value's bytes unconverted: give " + what_to_give(s));
  }
}

}  // namespace hcr::opencl
