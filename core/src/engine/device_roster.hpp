// The device set: the plugin instances loaded, the devices they brought, and hot-plug (a plugin
// loaded while the runtime runs, a device taken out). One change of the set at a time.
#pragma once

#include "device_state.hpp"
#include "device_table.hpp"
#include "../plugins/plugin_loader.hpp"

#include <hcr/config.hpp>
#include <hcr/device.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace hcr::detail {

class DataManager;
class HealthKeeper;
class KernelRegistry;

class DeviceRoster {
 public:
  struct Parts {
    const Config& config;  // the plugins to load, the lookahead behind each slot
    DeviceTable& devices;
    DataManager& data;        // a memory node for each device with memory of its own
    AttemptEnd& attempts;     // where the devices' launches end
    HealthKeeper& health;     // a device joins active; remove_device retires it
    KernelRegistry& kernels;  // the kernels known learn whether a new device runs them
    std::function<void(std::string_view)> check_alive;  // throws Error(shutdown) naming the call
    // A device joins: what must know of it before it is appended (energy accounting).
    std::function<void(DeviceState&, const PluginInstance&)> joining;
    // Appended, not yet published: the policy learns of it before anyone hands it work.
    std::function<void(uint32_t)> appended;
    std::function<void(DeviceState&)> feed;  // a new device takes the work waiting for it
  };
  explicit DeviceRoster(Parts parts) : p_(std::move(parts)) {}
  DeviceRoster(const DeviceRoster&) = delete;
  DeviceRoster& operator=(const DeviceRoster&) = delete;

  /// Construction: the configured plugins, each failure skipped with a diagnostic; their devices.
  void load_configured();
  /// Hot-plug: loads one plugin library with `backend`'s options; its devices join scheduling.
  /// Throws Error naming the file and the reason when it cannot be used.
  PluginRecord load_plugin(const std::string& path, const BackendConfig& backend);
  /// Takes device d out of scheduling for good: its queued work goes elsewhere, running tasks
  /// finish, data only it holds is written home and its memory freed.
  void remove_device(uint32_t d);
  /// A snapshot of the devices (they may join while the caller looks).
  std::vector<Device> snapshot() const;
  LoadReport report() const;

  /// Held while the device set changes (contexts add devices under it too).
  std::mutex& mutex() noexcept { return mutex_; }
  /// Shutdown: the instances, destroyed by the engine in its order.
  std::vector<std::unique_ptr<PluginInstance>>& plugins() noexcept { return plugins_; }

 private:
  // Appends p's devices, publishing each in turn.
  void add_devices(PluginInstance& p);
  // A warning when the CPU devices' slots outnumber the cores of the affinity mask.
  void warn_if_oversubscribed();

  Parts p_;
  mutable std::mutex mutex_;
  LoadReport report_;
  std::vector<std::unique_ptr<PluginInstance>> plugins_;
  uint32_t oversubscribed_warned_ = 0;  // slots last warned of (under mutex_ after start)
};

}  // namespace hcr::detail
