// Quantities written with units in configuration files: sizes ("512MiB", "4GB", "1048576") and
// memory limits (a size, or "75%" of the device).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hcr::detail {

/// Bytes: a non-negative number with an optional unit B, KB/MB/GB/TB (powers of 1000) or
/// KiB/MiB/GiB/TiB (powers of 1024). nullopt when malformed.
std::optional<uint64_t> parse_bytes(std::string_view text);

struct MemoryLimit {
  bool percent = false;
  double value = 0;  // percent (0, 100] or bytes
  uint64_t apply(uint64_t device_bytes) const {
    return percent ? static_cast<uint64_t>(static_cast<double>(device_bytes) * value / 100.0)
                   : static_cast<uint64_t>(value);
  }
};
/// "75%" or a size as parse_bytes reads it; nullopt when malformed or zero.
std::optional<MemoryLimit> parse_memory_limit(std::string_view text);

/// Seconds for messages: "0.05 s", "10 s", "2.5e-06 s".
std::string format_seconds(double seconds);

}  // namespace hcr::detail
