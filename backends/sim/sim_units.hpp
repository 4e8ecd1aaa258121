// Parsing of option values with units (sizes, rates, durations) for the simulated backend. Every
// error is an hcr::sdk::Error(HCR_ERROR_INVALID_ARGUMENT) naming the option and the value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hcr::sim {

/// A real number (plain decimal or exponent notation), finite.
double parse_number(std::string_view key, std::string_view value);
/// A non-negative integer.
uint64_t parse_count(std::string_view key, std::string_view value);
/// A signed integer.
int64_t parse_integer(std::string_view key, std::string_view value);
/// `true` or `false`.
bool parse_bool(std::string_view key, std::string_view value);
/// A probability in [0, 1].
double parse_probability(std::string_view key, std::string_view value);
/// Bytes: a plain number, or a number with B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB,
/// TiB (powers of 1024): "8GiB", "512 MiB", "1.5GB", "4096".
uint64_t parse_bytes(std::string_view key, std::string_view value);
/// Bytes per second: a byte size per second ("20GB/s", "900 MiB/s") or a plain number.
double parse_rate(std::string_view key, std::string_view value);
/// Seconds: a number with ns, us, ms, s or min ("10us", "0.5s"), or a plain number of seconds.
double parse_duration(std::string_view key, std::string_view value);
/// A comma-separated list (the runtime joins TOML arrays with commas); items trimmed, empty items
/// rejected.
std::vector<std::string> parse_list(std::string_view key, std::string_view value);

/// Throws the standard "option 'key' = 'value' is not <want>" error.
[[noreturn]] void bad_value(std::string_view key, std::string_view value, std::string_view want);

/// "0.05 s", "12 ms", "3 us": for messages.
std::string format_seconds(double seconds);

}  // namespace hcr::sim
