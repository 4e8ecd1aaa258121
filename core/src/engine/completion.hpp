// Completion: what happens when an attempt ends. A launch the plugin answered (or the watchdog
// gave up on) is recorded — the policy's model, and whatever observes attempts (the trace,
// prediction accuracy, energy: attempt_observers.hpp) — and then the task is written home (eager
// write-back), placed elsewhere (a device-side error) or finished. An attempt that ended before
// reaching the plugin, a task a leaving device gives back, and the tasks that run nowhere (joins,
// host access) end here too.
//
// Thread safety: every member may be called from any thread (plugins answer from theirs).
#pragma once

#include "attempt_observers.hpp"
#include "device_driver.hpp"
#include "launches.hpp"
#include "task_end.hpp"

#include <hcr/detail/spin_lock.hpp>
#include <hcr/error.hpp>
#include <hcr/runtime.hpp>

#include <atomic>
#include <string>

namespace hcr::detail {

class DataManager;
class HealthKeeper;
class HostAccesses;
class Placement;
class TaskGraph;

class Completion final : public TaskEnd, public AttemptEnd, public DriverStages {
 public:
  struct Parts {
    DeviceTable& devices;
    Placement& placement;
    DeviceDriver& driver;
    HealthKeeper& health;
    DataManager& data;
    TaskGraph& graph;
    HostAccesses& host;
    const AttemptObservers& observers;  // told of each attempt that reached its plugin
    const std::atomic<bool>& timing;    // execution times are measured (the policy learns them)
  };
  explicit Completion(Parts parts) : p_(parts) {}
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  // TaskEnd: ends `t` (success when `e` is null): its writes commit, its successors go on.
  void finish(TaskNode* t, std::exception_ptr e) noexcept override;
  // AttemptEnd: the plugin answered, or the watchdog gave up on the launch (`timed_out`).
  void launch_done(TaskNode* t, hcr_error_t* error, const hcr_completion_info_t* info,
                   const char* timed_out) noexcept override;
  // DriverStages
  void failed_before_launch(TaskNode* t, DeviceState& d, std::exception_ptr e) noexcept override;
  void give_back(TaskNode* t, DeviceState& d) noexcept override;
  void host_task_ready(TaskNode* t) noexcept override;
  /// A write-through (DataManager) ended: `t` finishes, or is placed again if the copy failed.
  void written_through(TaskNode* t, std::exception_ptr error) noexcept;

 private:
  // After a device-side failure: notes it against the device and places `t` again without that
  // device. False when the error is the task's own (the kernel threw, bad arguments, data lost).
  bool place_elsewhere(TaskNode* t, DeviceState& d, ErrorCode code,
                       const std::string& why) noexcept;
  // Clears `t`'s attempt (errors, device, pinned inputs) and hands it to placement again.
  void place_again(TaskNode* t) noexcept;
  // A copy home failed for a task that runs nowhere: the device that did it is charged and the
  // data fetched again, at most kHostCopyRetries times. False when that cannot help.
  bool fetch_home_again(TaskNode* t) noexcept;
  static constexpr uint8_t kHostCopyRetries = 8;

  Parts p_;
  std::atomic<uint64_t> retries_{0};
};

}  // namespace hcr::detail
