// Launches in flight: the slot each one holds (launch_slots.hpp) until its plugin answers, the
// first answer ending the attempt and any later one reported as the plugin's protocol error, and
// the watchdog that gives up on a launch past its deadline ([runtime] task_timeout). Attempts end
// through AttemptEnd.
//
// Thread safety: arming happens on the device's pumper (one at a time per device); answers come
// from any thread; the watchdog runs on a thread of its own while task_timeout > 0.
#pragma once

#include "device_table.hpp"

#include <hcr/plugin.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace hcr::detail {

struct TaskNode;
class DataManager;

/// Where an attempt on a device ends: the plugin answered (`error` null: success), or the
/// watchdog gave up on it (`timed_out`, with no plugin error).
class AttemptEnd {
 public:
  virtual void launch_done(TaskNode* t, hcr_error_t* error, const hcr_completion_info_t* info,
                           const char* timed_out) noexcept = 0;

 protected:
  ~AttemptEnd() = default;
};

class Launches {
 public:
  /// `task_timeout` > 0 starts the watchdog over `devices`.
  Launches(DeviceTable& devices, AttemptEnd& end, DataManager& data, double task_timeout);
  ~Launches() { stop(); }
  Launches(const Launches&) = delete;
  Launches& operator=(const Launches&) = delete;
  /// Stops the watchdog (idempotent).
  void stop() noexcept;
  double task_timeout() const noexcept { return task_timeout_; }

  /// Arms a slot of device `d` for `t` (its launch_token set); false when the device or the
  /// process has no free slot left (launches given up on that never came back).
  bool arm(DeviceState& d, TaskNode* t) noexcept;
  /// A launch that never reached the plugin gives its slot back.
  static void disarm(TaskNode* t) noexcept;
  /// From now on the watchdog keeps an eye on the launch of `token` (nothing without a timeout).
  void watch(void* token) const noexcept;
  /// The plugin's done (hcr_launch_args_t::done) and an error returned from launch (`returned`):
  /// the first answer for a launch ends it; a later one is a protocol error, reported, ignored.
  static void on_done(void* token, hcr_error_t* error, const hcr_completion_info_t* info);
  static void answered(void* token, hcr_error_t* error, const hcr_completion_info_t* info,
                       bool returned) noexcept;
  /// Lets go of what a launch given up on held, once it is back (`answered`) or its plugin ended
  /// without answering (its scratch blocks then go with the plugin's memory).
  static void release_hung(HungLaunch* h, bool answered) noexcept;
  /// Shutdown, the watchdog stopped: each of `plugins` with launches given up on that have not
  /// come back is synchronized on a helper thread for a bounded time (a few timeouts, at least a
  /// second); those still not back are returned, named in an error log line (left running).
  std::vector<PluginInstance*> settle_hung(
      const std::vector<std::unique_ptr<PluginInstance>>& plugins) noexcept;
  /// Shutdown, device d's plugin gone: its slots go back to the process's table.
  static void return_slots(DeviceState& d) noexcept;
  /// Runs f(slot) for every slot device d holds.
  template <class F>
  static void for_each_slot(DeviceState& d, F&& f) {
    const uint32_t chunks = d.slot_chunks_used.load(std::memory_order_acquire);
    for (uint32_t c = 0; c < chunks; ++c) {
      LaunchSlot* s =
          LaunchTable::slot(d.slot_chunks[c].load(std::memory_order_relaxed) * LaunchTable::kChunk);
      for (uint32_t i = 0; i < LaunchTable::kChunk; ++i) f(s[i]);
    }
  }

 private:
  static bool try_arm(uint32_t index, TaskNode* t) noexcept;
  static void protocol_error(LaunchSlot& s, uint64_t generation, hcr_error_t* error,
                             bool returned) noexcept;
  void watchdog() noexcept;

  DeviceTable& devices_;
  AttemptEnd& end_;
  DataManager& data_;  // scratch a hung launch may still use
  const double task_timeout_;
  const std::chrono::steady_clock::duration task_timeout_duration_;
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_cv_;
  bool watchdog_stop_ = false;
  std::thread watchdog_thread_;
};

}  // namespace hcr::detail
