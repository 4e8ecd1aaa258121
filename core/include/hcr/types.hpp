/// \file types.hpp
/// Element types, access modes, device kinds and log levels shared by the whole API.
#pragma once

#include <hcr/export.hpp>
#include <hcr/plugin.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hcr {

/// Element type of a buffer. Values match hcr_dtype_t of the plugin ABI.
enum class DType : uint8_t {
  bytes = HCR_DTYPE_BYTES,
  f16 = HCR_DTYPE_F16,
  bf16 = HCR_DTYPE_BF16,
  f32 = HCR_DTYPE_F32,
  f64 = HCR_DTYPE_F64,
  i32 = HCR_DTYPE_I32,
  i64 = HCR_DTYPE_I64,
  u8 = HCR_DTYPE_U8,
};

/// IEEE binary16 storage (arithmetic happens on the device).
struct half {
  uint16_t bits;
};
/// bfloat16 storage (arithmetic happens on the device).
struct bfloat16 {
  uint16_t bits;
};

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct dtype_of<std::byte> {
  static constexpr DType value = DType::bytes;
};
template <>
struct dtype_of<half> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::bf16;
};
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

/// Bytes per element.
HCR_API size_t dtype_size(DType t) noexcept;
/// "f32", "f64", ...
HCR_API std::string_view dtype_name(DType t) noexcept;

/// How a task uses a buffer. read, write and read_write match hcr_access_t.
///
/// `commute` is a read_write whose order among its neighbours does not matter (StarPU's
/// STARPU_RW | STARPU_COMMUTE): consecutive commute accesses to a buffer, in submission order, all
/// wait for what came before them but not for each other, and run one at a time in whichever
/// order they become ready; the next access of another mode waits for all of them. Kernels see a
/// read_write (HCR_ACCESS_READ_WRITE); host views (Buffer::acquire) do not take it.
///
/// `reduce` contributes to the buffer through the reduction declared on it
/// (Buffer::set_reduction; StarPU's STARPU_REDUX): each task reducing into the buffer gets a
/// private copy of its own, set to the reduction's identity, which its kernel updates as a
/// read_write; consecutive reduce accesses wait for nothing and do not wait for each other. The
/// next access of another mode (a task, a host view, partition, unpartition, Runtime::wait_all)
/// first combines the copies into the buffer, through combine tasks the runtime submits. Host views
/// do not take it.
enum class Access : uint8_t {
  read = HCR_ACCESS_READ,
  write = HCR_ACCESS_WRITE,
  read_write = HCR_ACCESS_READ_WRITE,
  commute = HCR_ACCESS_READ_WRITE | 4,
  reduce = HCR_ACCESS_READ_WRITE | 8,
};
inline constexpr bool reads(Access a) noexcept { return (static_cast<int>(a) & 1) != 0; }
inline constexpr bool writes(Access a) noexcept { return (static_cast<int>(a) & 2) != 0; }
/// Whether `a` is Access::commute.
inline constexpr bool commutes(Access a) noexcept { return (static_cast<int>(a) & 4) != 0; }
/// Whether `a` is Access::reduce.
inline constexpr bool reduces(Access a) noexcept { return (static_cast<int>(a) & 8) != 0; }
/// What a plugin is told of access `a` (commute and reduce are a read_write there).
inline constexpr hcr_access_t abi_access(Access a) noexcept {
  return static_cast<hcr_access_t>(static_cast<int>(a) & HCR_ACCESS_READ_WRITE);
}

/// The built-in reductions a buffer can declare (Buffer::set_reduction) for Access::reduce, over
/// f32, f64, i32 and i64: `sum` (identity 0), `min` (identity +infinity, or the type's largest
/// value), `max` (identity -infinity, or the type's lowest value).
enum class Reduction : uint8_t { sum, min, max };

/// Kind of device. Values match hcr_device_kind_t.
enum class DeviceKind : uint8_t {
  cpu = HCR_DEVICE_CPU,
  gpu = HCR_DEVICE_GPU,
  accelerator = HCR_DEVICE_ACCELERATOR,
  sim = HCR_DEVICE_SIM,
};
HCR_API std::string_view kind_name(DeviceKind k) noexcept;

/// Log levels. Values match hcr_log_level_t.
enum class LogLevel : uint8_t {
  trace = HCR_LOG_TRACE,
  debug = HCR_LOG_DEBUG,
  info = HCR_LOG_INFO,
  warn = HCR_LOG_WARN,
  error = HCR_LOG_ERROR,
  off = HCR_LOG_OFF,
};

}  // namespace hcr
