// The devices of one runtime: each one's state (DeviceState) and description, appended as they
// join (at the start, or hot-plugged) and published one by one. Readers index it without a lock:
// nothing in it ever moves (room for kMaxDevices is reserved), and a device is read only once its
// publication (count()) says it is there.
#pragma once

#include "device_state.hpp"

#include <hcr/device.hpp>
#include <hcr/sched.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace hcr::detail {

class DeviceTable {
 public:
  static constexpr uint32_t kMaxNodes = 128;  // memory nodes: the host's and one per device

  DeviceTable() {
    states_.reserve(kMaxDevices);
    infos_.reserve(kMaxDevices);
  }
  DeviceTable(const DeviceTable&) = delete;
  DeviceTable& operator=(const DeviceTable&) = delete;

  /// Devices published so far (removed ones stay, out of scheduling).
  uint32_t count() const noexcept { return count_.load(std::memory_order_acquire); }
  DeviceState& operator[](size_t d) const noexcept { return *states_[d]; }
  /// Their descriptions, indexed by Device::id (entries beyond count() may be in the making).
  const std::vector<Device>& infos() const noexcept { return infos_; }

  /// What decisions over many devices read per device, dense.
  struct Hot {
    uint32_t node = 0;   // its memory node
    uint64_t limit = 0;  // that node's memory limit (node 0, host memory: none)
  };
  const Hot& hot(size_t d) const noexcept { return hot_[d]; }

  /// Devices appended so far, published or not (for the thread that appends).
  uint32_t appended() const noexcept { return static_cast<uint32_t>(states_.size()); }
  /// Appends device `d` (its info.id must be appended()); joins are serialised by the caller. It
  /// is published by publish(), once everything that must know of it first does.
  DeviceState& append(std::unique_ptr<DeviceState> d, uint64_t memory_limit) {
    infos_.push_back(d->info);
    hot_[d->info.id] = {d->info.memory_node, d->info.memory_node == 0 ? 0 : memory_limit};
    if (d->info.memory_node != 0) node_plugin_[d->info.memory_node] = d->plugin;
    states_.push_back(std::move(d));
    return *states_.back();
  }
  void publish() noexcept {
    count_.store(static_cast<uint32_t>(states_.size()), std::memory_order_release);
  }

  /// Whether memory nodes `from` and `to` belong to devices of one plugin instance (which copies
  /// between them directly).
  bool same_instance(uint32_t from, uint32_t to) const noexcept {
    return from != 0 && to != 0 && from < kMaxNodes && to < kMaxNodes &&
           node_plugin_[from] != nullptr && node_plugin_[from] == node_plugin_[to];
  }

  /// The policy asked to feed device `d` (Context::wake): noted, for the driver to act on once the
  /// policy's call has returned.
  void request_wake(uint32_t d) noexcept {
    if (d < count() && !(*this)[d].wake_requested.exchange(true, std::memory_order_acq_rel))
      wakes_.fetch_add(1, std::memory_order_release);
  }
  /// Whether some device was asked to wake; take_wake(d) takes device d's request.
  bool wakes_pending() const noexcept { return wakes_.load(std::memory_order_acquire) != 0; }
  bool take_wake(uint32_t d) noexcept {
    if (!(*this)[d].wake_requested.exchange(false, std::memory_order_acq_rel)) return false;
    wakes_.fetch_sub(1, std::memory_order_acq_rel);
    return true;
  }

 private:
  std::vector<std::unique_ptr<DeviceState>> states_;
  std::vector<Device> infos_;
  std::atomic<uint32_t> count_{0};
  std::unique_ptr<Hot[]> hot_{new Hot[kMaxDevices]};
  // The plugin instance whose device owns each memory node (written once when the device joins).
  std::unique_ptr<const PluginInstance* []> node_plugin_ { new const PluginInstance*[kMaxNodes]() };
  std::atomic<uint32_t> wakes_{0};  // devices asked to wake and not fed yet
};

}  // namespace hcr::detail
