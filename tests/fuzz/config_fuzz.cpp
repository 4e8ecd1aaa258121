// libFuzzer target: hcr::Config::parse on arbitrary bytes. Either a Config that keeps every
// documented invariant comes back, or hcr::Error(ErrorCode::config) whose message names the
// origin. Any other exception, a crash, undefined behaviour or a leak is a finding.
#include <hcr/config.hpp>
#include <hcr/error.hpp>

#include "fuzz_check.hpp"
#include "units.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>

namespace {
constexpr const char* kOrigin = "fuzz-devices.toml";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  hcr::Config c;
  try {
    c = hcr::Config::parse(text, kOrigin);
  } catch (const hcr::Error& e) {
    std::string_view what = e.what();
    HCR_FUZZ_CHECK(e.code() == hcr::ErrorCode::config, "a configuration error has code config");
    HCR_FUZZ_CHECK(what.rfind(kOrigin, 0) == 0,
                   "the message starts with the origin: " + std::string(what));
    HCR_FUZZ_CHECK(what.size() > std::string_view(kOrigin).size() + 2,
                   "the message says what is wrong: " + std::string(what));
    return 0;
  }
  // What parsed keeps the ranges the runtime relies on (and checks again in a hand-built Config,
  // validated() in core/src/runtime.cpp).
  HCR_FUZZ_CHECK(c.origin == kOrigin, "origin");
  for (auto& p : c.plugin_paths)
    HCR_FUZZ_CHECK(std::filesystem::path(p).is_absolute(), "plugin path " + p + " is absolute");
  HCR_FUZZ_CHECK(c.calibrate == "auto" || c.calibrate == "force" || c.calibrate == "off",
                 "calibrate " + c.calibrate);
  HCR_FUZZ_CHECK(c.calibrate_samples >= 1 && c.calibrate_samples <= 1000, "calibrate_samples");
  HCR_FUZZ_CHECK(c.lookahead >= -1 && c.lookahead <= 1024, "lookahead");
  HCR_FUZZ_CHECK(c.writeback == "lazy" || c.writeback == "eager", "writeback " + c.writeback);
  HCR_FUZZ_CHECK(c.quarantine_failures >= 1 && c.quarantine_failures <= 1000000,
                 "quarantine_failures");
  // Seconds the runtime compares and turns into steady_clock durations (int64 nanoseconds).
  HCR_FUZZ_CHECK(std::isfinite(c.quarantine_window) && c.quarantine_window > 0,
                 "quarantine_window " + std::to_string(c.quarantine_window));
  HCR_FUZZ_CHECK(c.task_timeout >= 0 && c.task_timeout <= 1e9,
                 "task_timeout " + std::to_string(c.task_timeout));
  for (auto& b : c.backends) {
    HCR_FUZZ_CHECK(!b.name.empty(), "every backend has a name");
    HCR_FUZZ_CHECK(b.origin.rfind(kOrigin, 0) == 0, "backend origin " + b.origin);
    if (!b.memory_limit.empty())
      HCR_FUZZ_CHECK(hcr::detail::parse_memory_limit(b.memory_limit).has_value(),
                     "memory_limit " + b.memory_limit);
  }
  return 0;
}
