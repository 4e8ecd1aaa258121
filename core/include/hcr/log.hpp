/// \file log.hpp
/// The runtime's one logger: a level and a pluggable sink. Default: warn and above to stderr;
/// `HCR_LOG=debug` raises it. Plugins log through the host services and land here too.
/// Thread-safe.
#pragma once

#include <hcr/export.hpp>
#include <hcr/types.hpp>

#include <functional>
#include <optional>
#include <string_view>

namespace hcr::log {

using Sink = std::function<void(LogLevel, std::string_view)>;

HCR_API void set_level(LogLevel level) noexcept;
HCR_API LogLevel level() noexcept;
inline bool enabled(LogLevel l) noexcept { return l >= level(); }
/// Replaces the sink (nullptr restores stderr). Returns the previous one.
HCR_API Sink set_sink(Sink sink);
HCR_API void write(LogLevel level, std::string_view message);
/// "trace", "debug", "info", "warn", "error", "off"; nullopt otherwise.
HCR_API std::optional<LogLevel> parse_level(std::string_view text) noexcept;
HCR_API std::string_view level_name(LogLevel level) noexcept;

}  // namespace hcr::log
