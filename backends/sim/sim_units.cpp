// Option values with units. Strict on purpose: a typo in a machine description ("8GB/S", "10 sec")
// must be an error at start, not a device that silently runs a thousand times too fast. The text
// is read by hcr::units (support/units) in the machine descriptions' dialect; this file says what
// was expected when it is not one.
#include "sim_units.hpp"

#include "quantities.hpp"

#include <hcr/sdk/backend.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>

namespace hcr::sim {

namespace {

std::string_view trim(std::string_view s) { return units::trim(s, units::kMachineSyntax); }

constexpr const char* kBytesWant =
    "a size: bytes, or a number with B, kB, MB, GB, TB, KiB, MiB, GiB or TiB";

}  // namespace

void bad_value(std::string_view key, std::string_view value, std::string_view want) {
  throw sdk::Error(HCR_ERROR_INVALID_ARGUMENT, "option '" + std::string(key) + "' = '" +
                                                   std::string(value) + "' is not " +
                                                   std::string(want));
}

double parse_number(std::string_view key, std::string_view value) {
  const auto q = units::split(value, units::kMachineSyntax);
  if (!q || !q->unit.empty()) bad_value(key, value, "a number");
  return q->number;
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
  const auto q = units::split(value, units::kMachineSyntax);
  if (!q || !q->unit.empty() || q->number < 0 || q->number > 1)
    bad_value(key, value, "a probability between 0 and 1");
  return q->number;
}

uint64_t parse_bytes(std::string_view key, std::string_view value) {
  const auto v = units::bytes(value, units::kMachineSyntax);
  if (!v) bad_value(key, value, kBytesWant);
  const double bytes = std::round(*v);
  if (bytes >= 1.8e19) bad_value(key, value, "a size below 16 EiB");
  return static_cast<uint64_t>(bytes);
}

double parse_rate(std::string_view key, std::string_view value) {
  const auto v = units::rate(value, units::kMachineSyntax);
  if (!v)
    bad_value(key, value,
              "a rate: bytes per second, or a size per second such as \"20GB/s\" or \"900MiB/s\"");
  return *v;
}

double parse_duration(std::string_view key, std::string_view value) {
  const auto v = units::duration(value, units::kMachineSyntax);
  if (!v)
    bad_value(key, value,
              "a duration: seconds, or a number with ns, us, ms, s or min such as \"10us\"");
  return *v;
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
