// What watches attempts end. Features that only observe the pipeline — the trace's task bars,
// the models' prediction accuracy, energy accounting (core/src/observers/) — attach here while
// they are on, instead of branching inside Completion: with none attached, an attempt's end
// costs one relaxed load more than with no observers at all.
//
// Thread safety: attach and detach from any thread (rare: under a lock); notify from any thread.
// An observer stays alive as long as the list (the engine owns both), so one detached while an
// attempt is being told may still hear of it once.
#pragma once

#include "device_state.hpp"
#include "../task_node.hpp"

#include <hcr/plugin.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace hcr::detail {

/// An attempt that reached its plugin ended (answered, or given up on by the watchdog).
struct AttemptRecord {
  TaskNode* task;
  DeviceState& device;
  const hcr_completion_info_t* info;  // what the plugin reported (null: nothing)
  double measured;                    // device seconds the plugin reported; < 0: it did not say
  double seconds;    // `measured`, or the wall time when the policy learns times; < 0: unknown
  double predicted;  // the policy's prediction (when an observer wants it); < 0: none
  std::chrono::steady_clock::time_point end;  // set when an observer wants times
  bool failed;
};

class AttemptObserver {
 public:
  virtual void attempt_ended(const AttemptRecord& r) noexcept = 0;

 protected:
  ~AttemptObserver() = default;
};

class AttemptObservers {
 public:
  /// What an observer needs taken for it (bits).
  static constexpr uint32_t kTimes = 1;       // start and end times (`TaskNode::start`, `end`)
  static constexpr uint32_t kPrediction = 2;  // the policy's prediction (`predicted`)
  static constexpr uint32_t kAny = 4;         // set while any observer is attached

  /// Attaches `o` (again: no change) with what it `needs`.
  void attach(AttemptObserver* o, uint32_t needs) noexcept {
    std::lock_guard<std::mutex> g(mutex_);
    size_t free = kSlots;
    for (size_t i = 0; i < kSlots; ++i) {
      if (slots_[i].load(std::memory_order_relaxed) == o) return;
      if (free == kSlots && slots_[i].load(std::memory_order_relaxed) == nullptr) free = i;
    }
    if (free == kSlots) return;  // (kSlots is the number of observers there are)
    needs_[free] = needs | kAny;
    slots_[free].store(o, std::memory_order_release);
    publish();
  }
  void detach(AttemptObserver* o) noexcept {
    std::lock_guard<std::mutex> g(mutex_);
    for (size_t i = 0; i < kSlots; ++i)
      if (slots_[i].load(std::memory_order_relaxed) == o) {
        slots_[i].store(nullptr, std::memory_order_release);
        needs_[i] = 0;
      }
    publish();
  }
  /// The union of what attached observers need (0: none attached).
  uint32_t wants() const noexcept { return wants_.load(std::memory_order_relaxed); }
  void notify(const AttemptRecord& r) const noexcept {
    for (const auto& s : slots_)
      if (AttemptObserver* o = s.load(std::memory_order_acquire)) o->attempt_ended(r);
  }

 private:
  void publish() noexcept {
    uint32_t w = 0;
    for (uint32_t n : needs_) w |= n;
    wants_.store(w, std::memory_order_relaxed);
  }
  static constexpr size_t kSlots = 4;
  std::mutex mutex_;
  std::array<std::atomic<AttemptObserver*>, kSlots> slots_{};
  std::array<uint32_t, kSlots> needs_{};
  std::atomic<uint32_t> wants_{0};
};

}  // namespace hcr::detail
