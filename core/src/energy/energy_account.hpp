// What each device uses, in joules, and what each task cost of it: the engine's energy room.
//
// A device's figures come from its plugin's meter (ABI 1.1 device_energy: measured by the hardware
// — NVML, RAPL — or modelled by a simulated device), else from the power its [[backend]] table
// declares (idle_watts, busy_watts: modelled from the device's busy time), else there are none.
// Every figure says which.
//
// A task's share (what a policy learns energy costs from): a plugin that knows it for the task
// alone reports it with the task's completion; a declared power gives it exactly (the busy draw
// above idle, per slot, for the task's duration); a measured meter updates every few milliseconds
// (RAPL) to hundreds (NVML), so its readings are attributed over the tasks of each interval at
// least that long, by their busy time, after taking off the idle draw.
//
// Thread safety: every member may be called concurrently; a device's state has its own lock.
#pragma once

#include <hcr/detail/spin_lock.hpp>
#include <hcr/device.hpp>
#include <hcr/plugin.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hcr::detail {

class EnergyAccount {
 public:
  enum Source : uint8_t { kNone = 0, kMeasured = 1, kModelled = 2, kDeclared = 3 };
  static const char* source_name(uint8_t source) noexcept;

  /// What a device joining brings: its plugin's table and handle (for the meter), and the
  /// power its [[backend]] table declares (< 0: none).
  struct DeviceInit {
    const hcr_plugin_api_t* api = nullptr;
    hcr_plugin_t* plugin = nullptr;
    size_t index = 0;
    uint32_t slots = 1;
    double idle_watts = -1, busy_watts = -1;
    std::string name;
  };
  /// One task's share, for the policy's model of energy costs.
  struct Sample {
    uint32_t kernel = 0;
    uint64_t footprint = 0;
    double size = 0;
    uint32_t device = 0;
    double joules = 0;
  };
  struct Reading {
    uint8_t source = kNone;
    double joules = 0;       ///< since the runtime started
    double watts = -1;       ///< the draw now (< 0: unknown)
    double idle_watts = -1;  ///< (< 0: unknown)
  };

  EnergyAccount();
  ~EnergyAccount();
  /// Device `id` joined (ids in order, one at a time); `now`: seconds on the steady clock.
  void add_device(uint32_t id, const DeviceInit& init, double now);
  /// Whether any device has figures (none: the engine calls nothing here per task).
  bool active() const noexcept { return active_.load(std::memory_order_acquire); }
  /// A task of (kernel, footprint, size) ran `seconds` on device `d`; `joules`: what its plugin
  /// reported for it alone (< 0: nothing). Appends to `out` the samples this completes.
  void task_done(uint32_t d, uint32_t kernel, uint64_t footprint, double size, double seconds,
                 double joules, double now, std::vector<Sample>& out);
  /// The device's figures now (reads its meter).
  Reading read(uint32_t d, double now);
  /// What a policy may assume of a device's draw: its idle watts (< 0: unknown).
  double idle_watts(uint32_t d) const noexcept;
  /// Power samples for the trace (device, seconds on the steady clock, watts), taken at each
  /// meter reading while recording (record_power(true) starts afresh).
  void record_power(bool on);
  struct PowerPoint {
    uint32_t device;
    double time, watts;
  };
  std::vector<PowerPoint> power() const;

 private:
  struct State;
  // Reads d's meter (lock held): total joules since its start; updates watts.
  double meter(State& s, double now);
  std::unique_ptr<State[]> states_;
  std::atomic<bool> active_{false};
  std::atomic<bool> record_{false};
  mutable SpinLock power_lock_;
  std::vector<PowerPoint> power_;
};

}  // namespace hcr::detail
