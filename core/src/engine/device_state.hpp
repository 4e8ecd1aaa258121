// One device and its driver's state: the window of tasks handed to its plugin, the tasks that
// landed (their copies done) waiting for room, its health and faults, its launch slots, counters.
#pragma once

#include "landed_tasks.hpp"
#include "../launch_slots.hpp"
#include "../plugins/plugin_loader.hpp"

#include <hcr/detail/spin_lock.hpp>
#include <hcr/device.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>

namespace hcr::detail {

class AttemptEnd;

/// One device and its driver state. The driver has no thread: the submitting thread and the
/// completion callbacks pump tasks from the policy into the plugin, one pumper at a time.
struct DeviceState {
  Device info;
  PluginInstance* plugin = nullptr;
  AttemptEnd* attempts = nullptr;  // where its launches end (the engine's completion)
  size_t index = 0;                // the plugin's device index
  uint32_t flags = 0;
  uint32_t window = 1;  // tasks handed to the plugin at once

  alignas(64) std::atomic<uint32_t> in_flight{0};
  // Of those, tasks not handed to the plugin yet: waiting for their copies, or with their copies
  // done (landed) and waiting for room in the window. They do not hold the window, so that a task
  // whose data is there already runs meanwhile (up to twice the window taken in all).
  std::atomic<uint32_t> fetching{0};
  LandedTasks landed;
  std::atomic<uint32_t> pump_requests{0};
  std::atomic<bool> pumping{false};
  std::atomic<bool> wake_requested{false};  // the policy asked for a pump (Context::wake)
  alignas(64) std::atomic<uint64_t> tasks{0};
  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> busy_ns{0};  // execution time the plugin reported

  // Health: active, or out of scheduling (quarantined after repeated failures, lost, removed).
  // The values of DeviceHealth.
  // kWithheld: the node arbiter gave it to another process for now (set_withheld); it comes
  // back as kActive.
  enum Status : uint8_t { kActive = 0, kQuarantined = 1, kLost = 2, kRemoved = 3, kWithheld = 4 };
  std::atomic<uint8_t> status{kActive};
  SpinLock fault_lock;
  std::deque<double> fault_times;  // recent failures, within the quarantine window
  std::string last_fault;

  // Launch slots (launch_slots.hpp): chunks of the process-wide table this device holds. Armed by
  // the pumper only (one at a time), round robin; it takes another chunk when every slot is busy
  // (launches the watchdog gave up on keep theirs until the plugin's done arrives).
  static constexpr uint32_t kMaxSlotChunks = 256;
  std::atomic<uint32_t> slot_chunks_used{0};
  std::atomic<uint32_t> slot_chunks[kMaxSlotChunks] = {};
  uint32_t slot_cursor = 0;
  // Completions of its plugin that broke the launch protocol (done twice, an error returned from
  // launch after done): ignored, counted, the first one logged.
  std::atomic<uint64_t> protocol_errors{0};
};

}  // namespace hcr::detail
