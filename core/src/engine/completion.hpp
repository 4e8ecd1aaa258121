// Completion: what happens when an attempt ends. A launch the plugin answered (or the watchdog
// gave up on) is recorded — the policy's model, the trace, prediction accuracy, energy — and
// then the task is written home (eager write-back), placed again without a device that failed it
// (a device-side error), or finished. An attempt that ended before reaching the plugin, a task a
// leaving device never started, and the tasks that run nowhere (joins, host access) end here too.
//
// Thread safety: every member may be called from any thread (plugins answer from theirs).
#pragma once

#include "device_driver.hpp"
#include "launches.hpp"
#include "task_end.hpp"

#include <hcr/detail/spin_lock.hpp>
#include <hcr/error.hpp>
#include <hcr/runtime.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hcr::detail {

class DataManager;
class EnergyAccount;
class HealthKeeper;
class HostAccesses;
class Placement;
class TaskGraph;
class TraceRecorder;

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
    EnergyAccount& energy;
    TraceRecorder& trace;
    const std::atomic<bool>& timing;  // execution times are measured (the policy learns them)
    std::function<double()> now;      // the runtime's clock
    std::function<std::string(uint32_t)> kernel_name;  // a kernel's name by its id
  };
  explicit Completion(Parts parts) : p_(std::move(parts)) {}
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  /// The policy learns energy costs (Policy::wants_energy).
  void set_energy_policy(bool on) noexcept { energy_policy_ = on; }

  // TaskEnd: ends `t` (success when `e` is null): its writes commit, its successors go on.
  void finish(TaskNode* t, std::exception_ptr e) noexcept override;
  // AttemptEnd: the plugin answered, or the watchdog gave up on the launch (`timed_out`).
  void launch_done(TaskNode* t, hcr_error_t* error, const hcr_completion_info_t* info,
                   const char* timed_out) noexcept override;
  // DriverStages
  void abandon(TaskNode* t, DeviceState& d, std::exception_ptr e) noexcept override;
  void give_back(TaskNode* t, DeviceState& d) noexcept override;
  void host_task_ready(TaskNode* t) noexcept override;
  /// A write-through (DataManager) ended: `t` finishes, or is placed again if the copy failed.
  void written_through(TaskNode* t, std::exception_ptr error) noexcept;

  /// RuntimeStats::accuracy: the median prediction error per (kernel, device).
  void accuracy(std::vector<ModelAccuracy>& out) const;

 private:
  // After a device-side failure: notes it against the device and places `t` again without that
  // device. False when the error is the task's own (the kernel threw, bad arguments, data lost).
  bool retry_elsewhere(TaskNode* t, DeviceState& d, ErrorCode code, const std::string& why) noexcept;
  // Clears `t`'s attempt (errors, device, pinned inputs) and hands it to placement again.
  void place_again(TaskNode* t) noexcept;
  // A copy home failed for a task that runs nowhere: the device that did it is charged and the
  // data fetched again, at most kHostCopyRetries times. False when that cannot help.
  bool retry_host_copy(TaskNode* t) noexcept;
  static constexpr uint8_t kHostCopyRetries = 8;
  // A task done on d: its share of d's energy, for the policy's model (EnergyAccount).
  void account_energy(TaskNode* t, DeviceState& d, const hcr_completion_info_t* info,
                      double seconds) noexcept;
  void record_accuracy(const TaskNode* t, uint32_t device, double predicted, double measured);

  Parts p_;
  bool energy_policy_ = false;
  std::atomic<uint64_t> retries_{0};
  // Prediction errors per (kernel id, device), for the accuracy counters: a ring of the latest.
  struct Accuracy {
    std::vector<float> errors;
    size_t next = 0;
  };
  mutable SpinLock accuracy_lock_;
  std::map<std::pair<uint32_t, uint32_t>, Accuracy> accuracy_;
};

}  // namespace hcr::detail
