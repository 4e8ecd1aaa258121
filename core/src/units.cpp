// Sizes and memory limits with units: the configuration's dialect of hcr::units
// (support/units/quantities.hpp), with the runtime's limits on what a value may be.
#include "units.hpp"

#include "quantities.hpp"

#include <cmath>
#include <cstdio>
#include <string>

namespace hcr::detail {

std::optional<uint64_t> parse_bytes(std::string_view text) {
  const auto bytes = units::bytes(text, units::kConfigSyntax);
  if (!bytes || *bytes > 1.8e19) return std::nullopt;  // below 2^64: the conversion is exact
  return static_cast<uint64_t>(std::round(*bytes));    // and defined (llround stops at 2^63)
}

std::optional<MemoryLimit> parse_memory_limit(std::string_view text) {
  const std::string_view s = units::trim(text, units::kConfigSyntax);
  if (!s.empty() && s.back() == '%') {
    const auto v = units::percent(s, units::kConfigSyntax);
    if (!v || *v <= 0 || *v > 100) return std::nullopt;
    return MemoryLimit{true, *v};
  }
  auto b = parse_bytes(s);
  if (!b || *b == 0) return std::nullopt;
  return MemoryLimit{false, static_cast<double>(*b)};
}

std::string format_seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", seconds);
  return text;
}

}  // namespace hcr::detail
