// Sizes and memory limits with units.
#include "units.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

namespace hcr::detail {

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}
std::optional<double> number_prefix(std::string_view& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  try {
    size_t used = 0;
    double v = std::stod(std::string(s.substr(0, i)), &used);
    if (used != i || !std::isfinite(v) || v < 0) return std::nullopt;
    s.remove_prefix(i);
    return v;
  } catch (...) {
    return std::nullopt;
  }
}
}  // namespace

std::optional<uint64_t> parse_bytes(std::string_view text) {
  std::string_view s = trim(text);
  auto v = number_prefix(s);
  if (!v) return std::nullopt;
  s = trim(s);
  double mult = 1;
  static const std::pair<std::string_view, double> units[] = {
      {"", 1},          {"B", 1},          {"KB", 1e3},          {"MB", 1e6},
      {"GB", 1e9},      {"TB", 1e12},      {"KiB", 1024.0},      {"MiB", 1048576.0},
      {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  bool known = false;
  for (auto& [u, m] : units)
    if (s == u) {
      mult = m;
      known = true;
    }
  if (!known) return std::nullopt;
  double bytes = *v * mult;
  if (bytes > 1.8e19) return std::nullopt;  // below 2^64: the conversion is exact and defined
  return static_cast<uint64_t>(std::round(bytes));  // (llround stops at 2^63)
}

std::optional<MemoryLimit> parse_memory_limit(std::string_view text) {
  std::string_view s = trim(text);
  if (!s.empty() && s.back() == '%') {
    s.remove_suffix(1);
    s = trim(s);
    auto v = number_prefix(s);
    if (!v || !s.empty() || *v <= 0 || *v > 100) return std::nullopt;
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
