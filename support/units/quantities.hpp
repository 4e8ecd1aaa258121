// Quantities written with units in configuration text: sizes ("4GiB", "512 MB", "4096"), rates
// ("20GB/s"), durations ("10us", "0.5s") and percentages ("75%"). Only the reading of the text
// lives here; the caller decides what a value may be (a memory limit above zero, a size below 16
// EiB) and how a mistake is reported (hcr::Error in the runtime, sdk::Error in a plugin).
//
//   auto b = hcr::units::bytes("1.5 GiB", hcr::units::kConfigSyntax);   // 1610612736.0
//   auto r = hcr::units::rate("20GB/s", hcr::units::kMachineSyntax);     // 2e10
//
// Header-only and stateless (thread-safe), with no dependency beyond the C++ standard library, so
// that the runtime (core/src/units.*) and the sim backend's plugin (backends/sim/sim_units.*) both
// compile it in without either including the other's headers.
#pragma once

#include <cctype>
#include <charconv>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

namespace hcr::units {

/// How numbers and units are written. Two dialects are in use, and each caller keeps its own so
/// that what it accepts does not change (a configuration that loads keeps loading):
struct Syntax {
  /// "+1.5e9" (a leading '+', exponents, as std::from_chars reads them) besides "1.5"; else digits
  /// and '.' only.
  bool signs_and_exponents = false;
  /// White space around the number and the unit: ' ' and '\t' only; else whatever isspace takes.
  bool blanks_only = false;
  /// "kB" besides "KB" for 1000 bytes.
  bool lower_case_kilo = false;
};

/// The runtime's configuration ([[backend]] memory_limit, [runtime] sizes): "12.5 GiB", "75%".
inline constexpr Syntax kConfigSyntax{};
/// The sim backend's machine descriptions ([[backend.device]] memory, bandwidth, latency...).
inline constexpr Syntax kMachineSyntax{true, true, true};

/// A unit and what one of it is worth in the base unit (bytes, seconds).
struct Unit {
  std::string_view name;
  double scale;
};

/// Byte sizes: powers of 1000 (B, kB, KB, MB, GB, TB) and of 1024 (KiB, MiB, GiB, TiB).
inline constexpr Unit kByteUnits[] = {
    {"B", 1},
    {"kB", 1e3},
    {"KB", 1e3},
    {"MB", 1e6},
    {"GB", 1e9},
    {"TB", 1e12},
    {"KiB", 1024.0},
    {"MiB", 1048576.0},
    {"GiB", 1073741824.0},
    {"TiB", 1099511627776.0},
};
/// Durations, in seconds.
inline constexpr Unit kTimeUnits[] = {
    {"ns", 1e-9}, {"us", 1e-6}, {"\xC2\xB5s", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"min", 60},
};

/// `s` without the white space `syntax` allows around it.
inline std::string_view trim(std::string_view s, const Syntax& syntax) noexcept {
  auto blank = [&](char c) {
    return syntax.blanks_only ? c == ' ' || c == '\t'
                              : std::isspace(static_cast<unsigned char>(c)) != 0;
  };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

/// A number and the unit written after it ("12.5 GiB": 12.5 and "GiB"; either may be empty).
struct Quantity {
  double number = 0;
  std::string_view unit;  ///< trimmed; a view into the text
};

/// Splits `text` into its leading number (finite; negative only where `syntax` reads signs) and
/// the rest; nullopt when it does not start with a number.
inline std::optional<Quantity> split(std::string_view text, const Syntax& syntax) {
  std::string_view s = trim(text, syntax);
  Quantity q;
  size_t used = 0;
  if (syntax.signs_and_exponents) {
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), q.number);
    if (ec != std::errc() || end == s.data() || !std::isfinite(q.number)) return std::nullopt;
    used = static_cast<size_t>(end - s.data());
  } else {
    while (used < s.size() &&
           (std::isdigit(static_cast<unsigned char>(s[used])) != 0 || s[used] == '.'))
      ++used;
    if (used == 0) return std::nullopt;
    try {  // the whole run of digits and points is the number: "1.2.3" is none
      size_t read = 0;
      q.number = std::stod(std::string(s.substr(0, used)), &read);
      if (read != used || !std::isfinite(q.number)) return std::nullopt;
    } catch (...) {  // "." alone, or out of range
      return std::nullopt;
    }
  }
  q.unit = trim(s.substr(used), syntax);
  return q;
}

/// The scale of `unit` in `table` ("kB" only where `syntax` takes it); nullopt when it is none
/// of them (the empty unit included).
inline std::optional<double> scale_of(std::span<const Unit> table, std::string_view unit,
                                      const Syntax& syntax) noexcept {
  if (unit == "kB" && !syntax.lower_case_kilo) return std::nullopt;
  for (const Unit& u : table)
    if (u.name == unit) return u.scale;
  return std::nullopt;
}

/// A non-negative number with one of `table`'s units, in the base unit, or a plain number (already
/// in it). nullopt when malformed.
inline std::optional<double> scaled(std::string_view text, std::span<const Unit> table,
                                    const Syntax& syntax) {
  const auto q = split(text, syntax);
  if (!q || q->number < 0) return std::nullopt;
  if (q->unit.empty()) return q->number;
  const auto scale = scale_of(table, q->unit, syntax);
  if (!scale) return std::nullopt;
  return q->number * *scale;
}

/// Bytes, not rounded: "8GiB", "512 MiB", "1.5GB", "4096" (kByteUnits). nullopt when malformed.
inline std::optional<double> bytes(std::string_view text, const Syntax& syntax) {
  return scaled(text, kByteUnits, syntax);
}

/// Bytes per second: a size per second ("20GB/s", "900 MiB/s") or a plain number. nullopt when
/// malformed.
inline std::optional<double> rate(std::string_view text, const Syntax& syntax) {
  const auto q = split(text, syntax);
  if (!q || q->number < 0) return std::nullopt;
  if (q->unit.empty()) return q->number;
  if (!q->unit.ends_with("/s")) return std::nullopt;
  const auto scale =
      scale_of(kByteUnits, trim(q->unit.substr(0, q->unit.size() - 2), syntax), syntax);
  if (!scale) return std::nullopt;
  return q->number * *scale;
}

/// Seconds: "10us", "0.5s", "2" (kTimeUnits). nullopt when malformed.
inline std::optional<double> duration(std::string_view text, const Syntax& syntax) {
  return scaled(text, kTimeUnits, syntax);
}

/// A percentage: "75%", "12.5 %" as 75, 12.5 (no range checked). nullopt when malformed.
inline std::optional<double> percent(std::string_view text, const Syntax& syntax) {
  const auto q = split(text, syntax);
  if (!q || q->number < 0 || q->unit != "%") return std::nullopt;
  return q->number;
}

}  // namespace hcr::units
