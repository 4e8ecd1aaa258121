// The devices' drivers: each device is fed from the policy while its window has room (one
// pumper at a time, no thread of its own: the submitting threads and the completions pump), its
// tasks' inputs are acquired on its memory node, and a task whose data is there is launched
// into its plugin. A task whose copies have landed waits for room in the window, first in line.
//
// Thread safety: every member may be called from any thread; per device, one pumper at a time.
#pragma once

#include "attempt_observers.hpp"
#include "device_table.hpp"
#include "launches.hpp"

#include <atomic>
#include <cstdint>
#include <exception>

namespace hcr::detail {

class DataManager;
class Placement;
struct DeviceGraph;

/// Where the driver hands on an attempt that ends before its plugin runs it.
class DriverStages {
 public:
  /// `t` ends on `d` before reaching the plugin (no memory, a failed copy, no launch slot).
  virtual void failed_before_launch(TaskNode* t, DeviceState& d, std::exception_ptr e) noexcept = 0;
  /// `t`, taken by `d` and never launched, goes back to placement (`d` left scheduling).
  virtual void give_back(TaskNode* t, DeviceState& d) noexcept = 0;
  /// A join or host access whose copies home completed.
  virtual void host_task_ready(TaskNode* t) noexcept = 0;

 protected:
  ~DriverStages() = default;
};

class DeviceDriver {
 public:
  /// `launch_flags`: HCR_LAUNCH_MEASURE when someone uses execution times; `timing`: the policy
  /// learns them; `observers`: start times are taken too when one wants times.
  DeviceDriver(DeviceTable& devices, Placement& placement, DataManager& data, Launches& launches,
               DriverStages& stages, const AttemptObservers& observers,
               const std::atomic<uint32_t>& launch_flags, const std::atomic<bool>& timing)
      : devices_(devices),
        placement_(placement),
        data_(data),
        launches_(launches),
        stages_(stages),
        observers_(observers),
        launch_flags_(launch_flags),
        timing_(timing) {}
  DeviceDriver(const DeviceDriver&) = delete;
  DeviceDriver& operator=(const DeviceDriver&) = delete;

  /// Feeds device `d` from the policy while it has room; returns how many it launched (1 when
  /// another thread is feeding it: that one sees this request before it stops).
  uint32_t pump(DeviceState& d) noexcept;
  /// Takes `t` (popped for `d`, its slot armed) to `d`: acquires its inputs there, then starts it.
  void launch(TaskNode* t, DeviceState& d) noexcept;
  /// The copies `t` waited for completed (the data manager).
  void data_ready(TaskNode* t) noexcept;
  /// Memory may have been freed on the node `t` waits for: its acquire again.
  void retry_acquire(TaskNode* t) noexcept;
  /// `d` left scheduling: the tasks whose copies landed there, never started, go back.
  void give_back_landed(DeviceState& d) noexcept;

 private:
  void pump_woken() noexcept;
  // Data in place: hands the kernel to the plugin.
  void start_kernel(TaskNode* t, DeviceState& d) noexcept;
  // ... of a replay run as a device graph (engine/device_graphs.hpp).
  void start_graph(TaskNode* t, DeviceGraph& g, DeviceState& d) noexcept;

  DeviceTable& devices_;
  Placement& placement_;
  DataManager& data_;
  Launches& launches_;
  DriverStages& stages_;
  const AttemptObservers& observers_;
  const std::atomic<uint32_t>& launch_flags_;
  const std::atomic<bool>& timing_;
};

}  // namespace hcr::detail
