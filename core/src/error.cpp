// hcr::Error and the names of codes, types and kinds.
#include <hcr/error.hpp>
#include <hcr/types.hpp>

namespace hcr {

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

std::string_view error_code_name(ErrorCode c) noexcept {
  switch (c) {
    case ErrorCode::unknown: return "unknown";
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::not_found: return "not found";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::out_of_memory: return "out of memory";
    case ErrorCode::device_lost: return "device lost";
    case ErrorCode::backend: return "backend error";
    case ErrorCode::internal: return "internal error";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::kernel: return "kernel error";
    case ErrorCode::config: return "configuration error";
    case ErrorCode::plugin: return "plugin error";
    case ErrorCode::dependency: return "dependency failed";
    case ErrorCode::shutdown: return "runtime ended";
    case ErrorCode::no_device: return "no device";
    case ErrorCode::communication: return "communication";
  }
  return "unknown";
}

size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::bytes: return 1;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 1;
}

std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::bytes: return "bytes";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

std::string_view kind_name(DeviceKind k) noexcept {
  switch (k) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::gpu: return "gpu";
    case DeviceKind::accelerator: return "accelerator";
    case DeviceKind::sim: return "sim";
  }
  return "?";
}

}  // namespace hcr
