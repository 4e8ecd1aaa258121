// Trace recording: fixed-size records appended under a short lock while tracing is on; names and
// units are resolved only when the trace is read.
#pragma once

#include <hcr/detail/spin_lock.hpp>
#include <hcr/trace.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace hcr::detail {

struct RawEvent {
  uint8_t kind;  // TraceEvent::Kind
  bool failed;
  uint16_t context;  // task: its context's index (0: the default context); in the padding
  uint32_t a;        // task: device; transfer: from node
  uint32_t b;        // transfer: to node; task: its priority (an int32_t)
  uint32_t kernel;   // kernel id
  uint64_t footprint;
  uint64_t bytes;
  int64_t start_ns, end_ns;   // steady clock
  float predicted, measured;  // seconds, -1 none
};

class TraceRecorder {
 public:
  static int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  bool on() const noexcept { return on_.load(std::memory_order_relaxed); }
  void start() {
    std::lock_guard<SpinLock> g(lock_);
    events_.clear();
    events_.reserve(1 << 16);
    on_.store(true, std::memory_order_release);
  }
  void stop() noexcept { on_.store(false, std::memory_order_release); }
  void add(const RawEvent& e) {
    std::lock_guard<SpinLock> g(lock_);
    events_.push_back(e);
  }
  std::vector<RawEvent> snapshot() const {
    std::lock_guard<SpinLock> g(lock_);
    return events_;
  }

 private:
  std::atomic<bool> on_{false};
  mutable SpinLock lock_;
  std::vector<RawEvent> events_;
};

/// Chrome/Perfetto trace JSON of `events` (device and node names by index).
std::string trace_json(const std::vector<TraceEvent>& events,
                       const std::vector<std::string>& devices, const std::vector<uint32_t>& slots,
                       const std::vector<std::string>& nodes);
/// An SVG Gantt chart of `events`.
std::string gantt_svg(const std::vector<TraceEvent>& events,
                      const std::vector<std::string>& devices, const std::vector<uint32_t>& slots,
                      const std::vector<std::string>& nodes);

}  // namespace hcr::detail
