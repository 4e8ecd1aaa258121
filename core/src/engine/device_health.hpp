// Device health: which devices take work. A device leaves scheduling when its faults come too
// often (quarantined), when its plugin says it is gone (lost), when the application removes it,
// or, for a while, when the node arbiter gives it to another process (withheld); tasks only such
// a withheld device could run are parked until it comes back.
//
// Thread safety: every member may be called from any thread; a device's state changes by
// compare-and-swap, so each change happens once.
#pragma once

#include <hcr/error.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace hcr::detail {

class DataManager;
struct DeviceState;
struct TaskNode;

/// What health changes mean for the stages around it.
class HealthListener {
 public:
  /// Device `d` left scheduling: what is queued or landed for it is placed again.
  virtual void left_scheduling(DeviceState& d) noexcept = 0;
  /// Device `d` takes work again: it is fed.
  virtual void back_in_scheduling(DeviceState& d) noexcept = 0;
  /// A parked task: to placement again.
  virtual void place_again(TaskNode* t) noexcept = 0;
  /// Seconds on the runtime's clock (fault windows).
  virtual double now() const noexcept = 0;

 protected:
  ~HealthListener() = default;
};

class HealthKeeper {
 public:
  HealthKeeper(HealthListener& listener, DataManager& data, int quarantine_failures,
               double quarantine_window)
      : listener_(listener),
        data_(data),
        quarantine_failures_(quarantine_failures),
        quarantine_window_(quarantine_window) {}
  HealthKeeper(const HealthKeeper&) = delete;
  HealthKeeper& operator=(const HealthKeeper&) = delete;

  /// A device joined (active).
  void joined(uint32_t id) noexcept;
  /// Counts a failure on `d`; quarantines it when they come too often, retires it as lost for
  /// ErrorCode::device_lost.
  void note_fault(DeviceState& d, ErrorCode code, const std::string& why) noexcept;
  /// Takes `d` out of scheduling with `status` (DeviceState::kQuarantined, kLost, kRemoved). A
  /// device already out stays so, except that one quarantined or being removed may become lost.
  void retire(DeviceState& d, uint8_t status, const std::string& why) noexcept;
  /// The node arbiter: `d` withheld (true) or given back (false). False when `d` is not in the
  /// state asked to leave (a quarantined device stays out).
  bool set_withheld(DeviceState& d, bool withheld) noexcept;
  /// A task no device in scheduling can run: kept (true) when `withheld_could(d)` says some
  /// withheld device could, until one is given back; false when none could (it fails). `count`:
  /// the devices; `state(d)`: device d.
  bool park(TaskNode* t, uint32_t count, const std::function<DeviceState&(uint32_t)>& state,
            const std::function<bool(uint32_t)>& could_run) noexcept;

  /// Devices taken out of scheduling so far (placement compares it around a policy's push).
  uint32_t retired() const noexcept { return retired_.load(std::memory_order_seq_cst); }
  /// Devices withheld now.
  uint32_t withheld() const noexcept { return withheld_.load(std::memory_order_seq_cst); }
  /// Devices in scheduling as bits (word w: devices 64w to 64w+63).
  uint64_t usable_bits(uint32_t w) const noexcept {
    return usable_bits_[w].load(std::memory_order_acquire);
  }

 private:
  void leave_bits(uint32_t id) noexcept;
  void place_parked() noexcept;

  HealthListener& listener_;
  DataManager& data_;
  const int quarantine_failures_;
  const double quarantine_window_;
  std::atomic<uint64_t> usable_bits_[2] = {0, 0};
  std::atomic<uint32_t> retired_{0};
  std::atomic<uint32_t> withheld_{0};
  std::mutex parked_mutex_;
  std::vector<TaskNode*> parked_;
};

}  // namespace hcr::detail
