// What a scheduling policy sees of the engine (sched::Context): the devices and how busy each
// is, which of them can run a task, where its data is and what would have to move, a plugin's own
// estimate, the clock. Read-only apart from wake(), which a policy calls to have a device fed.
#pragma once

#include "device_table.hpp"

#include <hcr/sched.hpp>

#include <bitset>
#include <cstdint>

namespace hcr::detail {

class DataManager;
class EnergyAccount;
class HealthKeeper;
class TaskGraph;

class SchedulingView final : public sched::Context {
 public:
  SchedulingView(const DeviceTable& devices, DeviceTable& wakes, const DataManager& data,
                 const HealthKeeper& health, const TaskGraph& graph, const EnergyAccount& energy)
      : devices_(devices),
        wakes_(wakes),
        data_(data),
        health_(health),
        graph_(graph),
        energy_(energy) {}

  const std::vector<Device>& devices() const noexcept override { return devices_.infos(); }
  uint32_t device_count() const noexcept override { return devices_.count(); }
  const Device& device(sched::DeviceId d) const noexcept override { return devices_.infos()[d]; }
  uint32_t in_flight(sched::DeviceId d) const noexcept override {
    return devices_[d].in_flight.load(std::memory_order_relaxed);
  }
  double now() const noexcept override;
  uint64_t bytes_to_fetch(sched::TaskRef t, sched::DeviceId d) const noexcept override;
  void bytes_to_fetch(sched::TaskRef t, sched::DeviceId count,
                      uint64_t* bytes) const noexcept override;
  double plugin_estimate(sched::TaskRef t, sched::DeviceId d) const noexcept override;
  void wake(sched::DeviceId d) noexcept override { wakes_.request_wake(d); }
  void capable(sched::TaskRef t, sched::DeviceId count,
               std::bitset<kMaxDevices>& out) const noexcept override;
  void locate(const void* buffer, uint64_t valid[2], uint64_t arriving[2]) const noexcept override;
  bool direct_copy(uint32_t from, uint32_t to) const noexcept override {
    return devices_.same_instance(from, to);
  }
  uint64_t submitted() const noexcept override;
  double idle_watts(sched::DeviceId d) const noexcept override;

 private:
  const DeviceTable& devices_;
  DeviceTable& wakes_;  // the same table: the one thing a policy may ask of it
  const DataManager& data_;
  const HealthKeeper& health_;
  const TaskGraph& graph_;
  const EnergyAccount& energy_;
};

}  // namespace hcr::detail
