// Owns what the data manager and the engine say to each other (DataEvents, DeviceStatusView).
// The engine implements these (RuntimeCore); the data manager knows nothing else of the engine.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

namespace hcr::detail {

struct TaskNode;

/// What happened to the data of tasks and devices. Called without the data manager's lock, from
/// whichever thread completed a copy (a plugin's callback) or released memory.
class DataEvents {
 public:
  /// The copies `t` waited for have completed, or one failed (t->transfer_error says which).
  virtual void data_ready(TaskNode* t) noexcept = 0;
  /// Memory may have been freed on the node `t` waits for: try its acquire again.
  virtual void retry_acquire(TaskNode* t) noexcept = 0;
  /// An eager write-through of what `t` wrote ended: `t` finishes, or is placed again when the
  /// copy failed (`error`).
  virtual void written_through(TaskNode* t, std::exception_ptr error) noexcept = 0;

  /// A copy that landed, for the transfer model and the trace.
  struct Transferred {
    uint32_t from, to;  // memory nodes
    uint64_t bytes;
    double seconds;          // as the plugin measured it, or as seen from here
    int64_t earliest_start;  // TraceRecorder::now_ns() clock: when it was handed to the plugin
  };
  virtual void transferred(const Transferred& copy) noexcept = 0;
  /// Device `device` (Device::id)'s plugin said it is gone while copying: it leaves scheduling,
  /// and the data only it held is reported lost. Called before the tasks that waited for the
  /// copy are released, so that none goes back to it.
  virtual void device_lost(uint32_t device, const std::string& why) noexcept = 0;
  /// Device `device`'s plugin answered a copy a second time (ignored): counted with its launch
  /// protocol errors. Returns how many it has made so far.
  virtual uint64_t protocol_error(uint32_t device) noexcept = 0;

 protected:
  ~DataEvents() = default;
};

/// The one thing the data manager reads of a device's state: whether it takes work. A device out
/// of scheduling (withheld, quarantined, lost, removed) gets no copy ahead of a task.
class DeviceStatusView {
 public:
  virtual bool in_scheduling(uint32_t device) const noexcept = 0;

 protected:
  ~DeviceStatusView() = default;
};

}  // namespace hcr::detail
