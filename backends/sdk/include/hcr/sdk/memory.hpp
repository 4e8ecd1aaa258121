// hcr backend SDK: what a backend with device memory checks the same way whatever the device —
// byte counts computed without wrapping (the ABI's sizes, offsets and pitches are 64-bit values a
// caller may get wrong), rows that must lie within an allocation, and a copy's two ends.
//
//   uint64_t end = 0;
//   if (!hcr::sdk::span_end(offset, rows, pitch, width, end)) ...   // would wrap
//   hcr::sdk::check_span(mem.bytes, a.src_offset, a.rows, a.src_pitch, a.width, "copy source");
//
// Header-only, as the rest of the SDK. Every function is thread-safe (none holds state).
#pragma once

#include <hcr/sdk/backend.hpp>

#include <cstdint>
#include <string>

namespace hcr::sdk {

/// a * b + c without wrapping; false (and `out` untouched) when it would.
inline bool mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t& out) noexcept {
  if (a != 0 && b > (~uint64_t{0} - c) / a) return false;
  out = a * b + c;
  return true;
}

/// End (exclusive) of `rows` rows of `width` bytes `pitch` apart from `offset`: `offset` itself for
/// no rows or no width. False when the end would not fit in 64 bits.
inline bool span_end(uint64_t offset, uint64_t rows, uint64_t pitch, uint64_t width,
                     uint64_t& end) noexcept {
  if (rows == 0 || width == 0) {
    end = offset;
    return true;
  }
  uint64_t last = 0;
  return mul_add(rows - 1, pitch, width, last) && mul_add(1, offset, last, end);
}

/// Throws Error(HCR_ERROR_INVALID_ARGUMENT) unless `rows` rows of `width` bytes `pitch` apart from
/// `offset` lie within an allocation of `allocation_bytes`; `what` starts the message ("copy
/// source: 4 row(s) of 16 bytes, 32 apart, from offset 8 overrun the allocation of 64 bytes").
inline void check_span(uint64_t allocation_bytes, uint64_t offset, uint64_t rows, uint64_t pitch,
                       uint64_t width, const std::string& what) {
  uint64_t end = 0;
  if (!span_end(offset, rows, pitch, width, end) || end > allocation_bytes)
    throw Error(HCR_ERROR_INVALID_ARGUMENT,
                what + ": " + std::to_string(rows) + " row(s) of " + std::to_string(width) +
                    " bytes, " + std::to_string(pitch) + " apart, from offset " +
                    std::to_string(offset) + " overrun the allocation of " +
                    std::to_string(allocation_bytes) + " bytes");
}

/// Throws Error(HCR_ERROR_INVALID_ARGUMENT) unless copy `a` has exactly one source (memory or host
/// pointer) and one destination, not both on the host, and pitches of at least the width where it
/// moves more than one row. `host_to_host` says why the device refuses a copy between two host
/// pointers ("an OpenCL device copies to or from its memory").
inline void check_copy_ends(const hcr_copy_args_t& a, const char* host_to_host) {
  if ((a.src_memory == nullptr) == (a.src_host == nullptr))
    throw Error(HCR_ERROR_INVALID_ARGUMENT,
                "copy: the source must be exactly one of src_memory and src_host");
  if ((a.dst_memory == nullptr) == (a.dst_host == nullptr))
    throw Error(HCR_ERROR_INVALID_ARGUMENT,
                "copy: the destination must be exactly one of dst_memory and dst_host");
  if (a.src_host != nullptr && a.dst_host != nullptr)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, std::string("copy: host to host; ") + host_to_host);
  if (a.rows > 1 && (a.src_pitch < a.width || a.dst_pitch < a.width))
    throw Error(HCR_ERROR_INVALID_ARGUMENT, "copy: pitches " + std::to_string(a.src_pitch) +
                                                " (source) and " + std::to_string(a.dst_pitch) +
                                                " (destination) must be at least the width " +
                                                std::to_string(a.width));
}

}  // namespace hcr::sdk
