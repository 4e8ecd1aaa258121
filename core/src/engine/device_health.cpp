// Device health (device_health.hpp): faults, quarantine, retirement, and devices the node arbiter
// withholds for a while.
#include "device_health.hpp"

#include "device_state.hpp"
#include "../data/data_manager.hpp"
#include "../log_internal.hpp"
#include "../units.hpp"

namespace hcr::detail {

void HealthKeeper::joined(uint32_t id) noexcept {
  usable_bits_[id / 64].fetch_or(uint64_t{1} << (id % 64), std::memory_order_release);
}

void HealthKeeper::leave_bits(uint32_t id) noexcept {
  // Out of the bits, then the count that placement re-checks around a push, then the drain.
  usable_bits_[id / 64].fetch_and(~(uint64_t{1} << (id % 64)), std::memory_order_seq_cst);
  retired_.fetch_add(1, std::memory_order_seq_cst);
}

void HealthKeeper::place_parked() noexcept {
  std::vector<TaskNode*> again;
  {
    std::lock_guard<std::mutex> g(parked_mutex_);
    again.swap(parked_);
  }
  for (TaskNode* t : again) listener_.place_again(t);
}

void HealthKeeper::note_fault(DeviceState& d, ErrorCode code, const std::string& why) noexcept {
  if (code == ErrorCode::device_lost) {
    retire(d, DeviceState::kLost, why);
    return;
  }
  bool quarantine = false;
  {
    std::lock_guard<SpinLock> g(d.fault_lock);
    const double t = listener_.now();
    d.fault_times.push_back(t);
    while (!d.fault_times.empty() && d.fault_times.front() < t - quarantine_window_)
      d.fault_times.pop_front();
    d.last_fault = why;
    quarantine = d.fault_times.size() >= static_cast<size_t>(quarantine_failures_);
  }
  if (quarantine)
    retire(d, DeviceState::kQuarantined,
           std::to_string(quarantine_failures_) + " failures within " +
               detail::format_seconds(quarantine_window_) + ", the last: " + why);
}

void HealthKeeper::retire(DeviceState& d, uint8_t status, const std::string& why) noexcept {
  uint8_t was = DeviceState::kActive;
  bool out = d.status.compare_exchange_strong(was, status, std::memory_order_seq_cst);
  // A withheld device (the node arbiter's) leaves for good too: the tasks parked for it look
  // again (below), and fail if no other device will take them.
  const bool was_withheld =
      !out && was == DeviceState::kWithheld &&
      d.status.compare_exchange_strong(was, status, std::memory_order_seq_cst);
  if (was_withheld) {
    out = true;
    withheld_.fetch_sub(1, std::memory_order_seq_cst);
  }
  if (!out) {
    // Already out. A quarantined device, or one being removed, that is then lost is lost: the
    // data only it held is gone, and its readers (and remove_device's write-backs) must hear so
    // rather than wait for copies from it.
    if (status == DeviceState::kLost &&
        (was == DeviceState::kQuarantined || was == DeviceState::kRemoved) &&
        d.status.compare_exchange_strong(was, status, std::memory_order_seq_cst)) {
      {
        std::lock_guard<SpinLock> g(d.fault_lock);
        d.last_fault = why;
      }
      HCR_LOG(warn, "device '" << d.info.name << "' ("
                               << (was == DeviceState::kRemoved ? "being removed" : "quarantined")
                               << ") lost: " << why);
      if (d.info.memory_node != 0) data_.node_lost(d.info.memory_node, d.info.name);
    }
    return;
  }
  leave_bits(d.info.id);
  {
    std::lock_guard<SpinLock> g(d.fault_lock);
    if (d.status.load(std::memory_order_seq_cst) == status) d.last_fault = why;  // else lost since
  }
  if (status == DeviceState::kRemoved)  // asked for: not a fault
    HCR_LOG(info, "device '" << d.info.name << "' removed; its work goes elsewhere");
  else
    HCR_LOG(warn, "device '" << d.info.name << "' "
                             << (status == DeviceState::kLost ? "lost" : "quarantined") << ": "
                             << why << "; its work goes elsewhere");
  if (status == DeviceState::kLost && d.info.memory_node != 0)
    data_.node_lost(d.info.memory_node, d.info.name);
  listener_.left_scheduling(d);
  if (was_withheld) place_parked();
}

bool HealthKeeper::set_withheld(DeviceState& d, bool withheld) noexcept {
  if (withheld) {
    uint8_t was = DeviceState::kActive;
    // Counted before the state changes: a placement that finds no device sees it and parks.
    withheld_.fetch_add(1, std::memory_order_seq_cst);
    if (!d.status.compare_exchange_strong(was, DeviceState::kWithheld, std::memory_order_seq_cst)) {
      withheld_.fetch_sub(1, std::memory_order_seq_cst);
      return false;
    }
    leave_bits(d.info.id);  // as retire()
    HCR_LOG(debug, "device '" << d.info.name << "' withheld (node arbiter)");
    listener_.left_scheduling(d);
    return true;
  }
  uint8_t was = DeviceState::kWithheld;
  if (!d.status.compare_exchange_strong(was, DeviceState::kActive, std::memory_order_seq_cst))
    return false;
  usable_bits_[d.info.id / 64].fetch_or(uint64_t{1} << (d.info.id % 64), std::memory_order_seq_cst);
  std::vector<TaskNode*> again;
  {
    std::lock_guard<std::mutex> g(parked_mutex_);
    withheld_.fetch_sub(1, std::memory_order_seq_cst);
    again.swap(parked_);
  }
  HCR_LOG(debug, "device '" << d.info.name << "' given back (node arbiter)");
  for (TaskNode* t : again) listener_.place_again(t);
  if (d.status.load(std::memory_order_relaxed) == DeviceState::kActive)
    listener_.back_in_scheduling(d);
  return true;
}

bool HealthKeeper::park(TaskNode* t, uint32_t count,
                        const std::function<DeviceState&(uint32_t)>& state,
                        const std::function<bool(uint32_t)>& could_run) noexcept {
  {
    std::lock_guard<std::mutex> g(parked_mutex_);
    bool withheld_could = false, active_can = false;
    for (uint32_t d = 0; d < count; ++d) {
      if (!could_run(d)) continue;
      const uint8_t s = state(d).status.load(std::memory_order_seq_cst);
      withheld_could = withheld_could || s == DeviceState::kWithheld;
      active_can = active_can || s == DeviceState::kActive;
    }
    if (!active_can) {
      if (withheld_could) parked_.push_back(t);
      return withheld_could;
    }
  }
  listener_.place_again(t);  // a device came back meanwhile
  return true;
}

}  // namespace hcr::detail
