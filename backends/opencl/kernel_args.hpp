// What the arguments of a user kernel are, learnt once when the kernel is made, and the check of a
// launch's buffers and scalar parameters against them. Task::param passes a value's bytes
// unconverted and the ABI carries no type, only where each parameter starts: without this check a
// double given for a float argument would be cut to its low half (0 for 2.0) without a word.
#pragma once

#include "cl_api.hpp"

#include <hcr/plugin.h>

#include <cstddef>
#include <string>
#include <vector>

namespace hcr::opencl {

/// One argument of a kernel, as far as the driver says.
struct ArgSpec {
  enum class Kind : unsigned char {
    unknown,  ///< no argument info: its size alone says what it takes
    value,    ///< passed by value (__private): a scalar, a vector or a struct
    buffer,   ///< a __global or __constant pointer (or an image): a cl_mem
    other,    ///< a __local pointer or a sampler: nothing hcr passes fits it
  };
  Kind kind = Kind::unknown;
  /// Bytes of the value the kernel takes: the one size clSetKernelArg accepts, else the size of
  /// its built-in type name; 0 when unknown (a struct the driver does not check, a driver that
  /// checks no size). Never set for buffers.
  size_t size = 0;
  std::string name;  ///< "" without argument info
  std::string type;  ///< OpenCL C type name ("float", "uint4", "float*"); "" without argument info
};

/// What `kernel` says of each of its `num_args` arguments: kind, name and type where its program
/// keeps argument info (built with -cl-kernel-arg-info), the size of each value from what
/// clSetKernelArg accepts (probed with zeros, up to `max_parameter_bytes`: the device's
/// CL_DEVICE_MAX_PARAMETER_SIZE). Never fails: what the driver does not answer stays unknown.
/// Sets the kernel's arguments while probing: call it before the kernel is shared.
std::vector<ArgSpec> read_arg_specs(cl_kernel kernel, cl_uint num_args, size_t max_parameter_bytes,
                                    size_t address_bytes);

/// Bytes of OpenCL C built-in type `type` ("float" 4, "uint4" 16, "double3" 32, "size_t" the
/// device's `address_bytes`); 0 for any other name (structs, typedefs, pointers, images).
size_t builtin_type_size(const std::string& type, size_t address_bytes);

/// "argument 1 'f' (float, 4 bytes)", or "argument 1 (4 bytes)" without argument info.
std::string describe_arg(size_t index, const ArgSpec& spec);

/// "8 bytes (0x4000000000000000: 2 as a double, 4611686018427387904 as an int64)".
std::string describe_bytes(const unsigned char* data, size_t size);

/// Checks launch `a` of kernel `kernel` against its arguments `specs` (as many as the task gives
/// buffers and parameters: the caller checked the count) and throws sdk::Error
/// (HCR_ERROR_INVALID_ARGUMENT) naming the kernel, the argument (index, name, type, size) and what
/// was given, where:
/// - a buffer lands on an argument passed by value, or a parameter on a pointer;
/// - a parameter's bytes cannot be a value of its argument's size. The ABI gives where each
///   parameter starts, not its size: the span up to the next one may hold padding. The last
///   parameter's span is its size; another may exceed the argument's size only by zero bytes
///   that align the next parameter (whose alignment divides its size, as C++ requires). The
///   parameters are checked from the last, so that the one blamed is the one that is wrong.
/// A parameter given where the size is unknown is left to clSetKernelArg.
void check_launch(const std::string& kernel, const std::vector<ArgSpec>& specs,
                  const hcr_launch_args_t& a);

}  // namespace hcr::opencl
