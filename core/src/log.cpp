// The process-wide logger: an atomic level read on every check, a sink behind a mutex.
#include <hcr/log.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace hcr::log {

namespace {

LogLevel initial_level() noexcept {
  if (const char* v = std::getenv("HCR_LOG"); v && *v)
    if (auto l = parse_level(v)) return *l;
  return LogLevel::warn;
}

std::atomic<LogLevel>& level_ref() noexcept {
  static std::atomic<LogLevel> l{initial_level()};
  return l;
}

struct SinkHolder {
  std::mutex mutex;
  Sink sink;
};
SinkHolder& holder() {
  static SinkHolder h;
  return h;
}

}  // namespace

void set_level(LogLevel l) noexcept { level_ref().store(l, std::memory_order_relaxed); }
LogLevel level() noexcept { return level_ref().load(std::memory_order_relaxed); }

Sink set_sink(Sink sink) {
  std::lock_guard<std::mutex> lock(holder().mutex);
  std::swap(holder().sink, sink);
  return sink;
}

void write(LogLevel l, std::string_view message) {
  if (!enabled(l) || l == LogLevel::off) return;
  std::lock_guard<std::mutex> lock(holder().mutex);
  if (holder().sink) {
    holder().sink(l, message);
    return;
  }
  std::string line = "hcr: " + std::string(level_name(l)) + ": " + std::string(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

std::optional<LogLevel> parse_level(std::string_view t) noexcept {
  if (t == "trace") return LogLevel::trace;
  if (t == "debug") return LogLevel::debug;
  if (t == "info") return LogLevel::info;
  if (t == "warn" || t == "warning") return LogLevel::warn;
  if (t == "error") return LogLevel::error;
  if (t == "off") return LogLevel::off;
  return std::nullopt;
}

std::string_view level_name(LogLevel l) noexcept {
  switch (l) {
    case LogLevel::trace: return "trace";
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warn: return "warn";
    case LogLevel::error: return "error";
    case LogLevel::off: return "off";
  }
  return "?";
}

}  // namespace hcr::log
