// Option values with units. Strict on purpose: a typo in a machine description ("8GB/S", "10 sec")
// must be an error at start, not a device that silently runs a thousand times too fast.
#include "sim_units.hpp"

#include <hcr/sdk/backend.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace hcr::sim {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Splits "12.5 GiB" into its number and its unit (either may be empty).
bool split_number(std::string_view s, double& number, std::string_view& unit) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const char* first = s.data();
  const char* last = s.data() + s.size();
  auto [end, ec] = std::from_chars(first, last, number);
  if (ec != std::errc() || end == first || !std::isfinite(number)) return false;
  unit = trim(std::string_view(end, static_cast<size_t>(last - end)));
  return true;
}

struct Unit {
  std::string_view name;
  double scale;
};

constexpr Unit kByteUnits[] = {
    {"B", 1},          {"kB", 1e3},        {"KB", 1e3},          {"MB", 1e6},
    {"GB", 1e9},       {"TB", 1e12},       {"KiB", 1024.0},      {"MiB", 1048576.0},
    {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
};
constexpr Unit kTimeUnits[] = {
    {"ns", 1e-9}, {"us", 1e-6}, {"\xC2\xB5s", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"min", 60},
};

template <size_t N>
bool scale_of(const Unit (&units)[N], std::string_view unit, double& scale) {
  for (const Unit& u : units)
    if (u.name == unit) {
      scale = u.scale;
      return true;
    }
  return false;
}

constexpr const char* kBytesWant =
    "a size: bytes, or a number with B, kB, MB, GB, TB, KiB, MiB, GiB or TiB";

}  // namespace

void bad_value(std::string_view key, std::string_view value, std::string_view want) {
  throw sdk::Error(HCR_ERROR_INVALID_ARGUMENT, "option '" + std::string(key) + "' = '" +
                                                   std::string(value) + "' is not " +
                                                   std::string(want));
}

double parse_number(std::string_view key, std::string_view value) {
  double v = 0;
  std::string_view unit;
  if (!split_number(value, v, unit) || !unit.empty()) bad_value(key, value, "a number");
  return v;
}

uint64_t parse_count(std::string_view key, std::string_view value) {
  std::string_view s = trim(value);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    bad_value(key, value, "a non-negative integer");
  return v;
}

int64_t parse_integer(std::string_view key, std::string_view value) {
  std::string_view s = trim(value);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    bad_value(key, value, "an integer");
  return v;
}

bool parse_bool(std::string_view key, std::string_view value) {
  std::string_view s = trim(value);
  if (s == "true") return true;
  if (s == "false") return false;
  bad_value(key, value, "true or false");
}

double parse_probability(std::string_view key, std::string_view value) {
  double v = 0;
  std::string_view unit;
  if (!split_number(value, v, unit) || !unit.empty() || v < 0 || v > 1)
    bad_value(key, value, "a probability between 0 and 1");
  return v;
}

uint64_t parse_bytes(std::string_view key, std::string_view value) {
  double v = 0, scale = 1;
  std::string_view unit;
  if (!split_number(value, v, unit) || v < 0 || (!unit.empty() && !scale_of(kByteUnits, unit, scale)))
    bad_value(key, value, kBytesWant);
  double bytes = std::round(v * scale);
  if (bytes >= 1.8e19) bad_value(key, value, "a size below 16 EiB");
  return static_cast<uint64_t>(bytes);
}

double parse_rate(std::string_view key, std::string_view value) {
  constexpr const char* want =
      "a rate: bytes per second, or a size per second such as \"20GB/s\" or \"900MiB/s\"";
  double v = 0, scale = 1;
  std::string_view unit;
  if (!split_number(value, v, unit) || v < 0) bad_value(key, value, want);
  if (!unit.empty()) {
    if (unit.size() < 2 || unit.substr(unit.size() - 2) != "/s") bad_value(key, value, want);
    if (!scale_of(kByteUnits, trim(unit.substr(0, unit.size() - 2)), scale))
      bad_value(key, value, want);
  }
  return v * scale;
}

double parse_duration(std::string_view key, std::string_view value) {
  double v = 0, scale = 1;
  std::string_view unit;
  if (!split_number(value, v, unit) || v < 0 || (!unit.empty() && !scale_of(kTimeUnits, unit, scale)))
    bad_value(key, value,
              "a duration: seconds, or a number with ns, us, ms, s or min such as \"10us\"");
  return v * scale;
}

std::vector<std::string> parse_list(std::string_view key, std::string_view value) {
  std::vector<std::string> out;
  std::string_view rest = value;
  for (;;) {
    size_t comma = rest.find(',');
    std::string_view item = trim(rest.substr(0, comma));
    if (item.empty()) bad_value(key, value, "a list of names without empty entries");
    out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

std::string format_seconds(double seconds) {
  char buf[64];
  if (std::isinf(seconds)) return "never";
  if (seconds >= 1 || seconds == 0) std::snprintf(buf, sizeof buf, "%g s", seconds);
  else if (seconds >= 1e-3) std::snprintf(buf, sizeof buf, "%g ms", seconds * 1e3);
  else if (seconds >= 1e-6) std::snprintf(buf, sizeof buf, "%g us", seconds * 1e6);
  else std::snprintf(buf, sizeof buf, "%g ns", seconds * 1e9);
  return buf;
}

}  // namespace hcr::sim
