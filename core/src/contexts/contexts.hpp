// Scheduling contexts (hcr::Context): making them — the first one puts a ContextPolicy in front
// of the runtime's policy, which stays the default context's —, changing their devices, finding
// them by name, their counters. The arbitration itself is context_policy.cpp.
//
// Thread safety: every member may be called from any thread. Contexts are made, and their devices
// changed, under the runtime's device-set lock (Parts::device_set).
#pragma once

#include "context_state.hpp"

#include <hcr/config.hpp>
#include <hcr/context.hpp>
#include <hcr/runtime.hpp>
#include <hcr/sched.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace hcr::detail {

class ContextPolicy;
class DataManager;
class DeviceTable;
class Placement;
class RuntimeCore;
struct TaskNode;

class Contexts {
 public:
  struct Parts {
    DeviceTable& devices;
    Placement& placement;
    const DataManager& data;
    sched::Context& view;  // what each context's policy instance sees
    const Config& config;
    std::mutex& device_set;  // the runtime's: one change of the device set at a time
    // The runtime's policy (a ContextPolicy once a context exists) and the configured name, each
    // context getting an instance of it.
    std::unique_ptr<sched::Policy>& policy_owner;
    const std::string& policy_name;
    const std::weak_ptr<RuntimeCore>& self;             // ContextState::owner
    RuntimeCore* rt;                                    // ContextState::rt
    std::function<void(std::string_view)> check_alive;  // throws Error(shutdown) naming the call
    std::function<void(uint32_t)> feed;                 // feeds device d if it takes work
    std::function<void(TaskNode*)> place_again;
    // Contexts share measured device time: execution is measured from the first one on.
    std::function<void()> measure;
  };
  explicit Contexts(Parts parts) : p_(std::move(parts)) {}
  Contexts(const Contexts&) = delete;
  Contexts& operator=(const Contexts&) = delete;

  /// Runtime::context: a new context with its own instance of the policy. Throws
  /// Error(invalid_argument) naming the value at fault.
  hcr::Context make(const ContextSpec& spec);
  /// A [[context]] table at the start: devices by id or name; Error(config) naming its origin.
  hcr::Context make(const ContextConfig& table);
  /// Runtime::find_context: the context of that name; Error(invalid_argument) naming the known.
  hcr::Context find(std::string_view name) const;
  /// Context::set_devices: the context's devices become `devices` (empty: all); what it queued
  /// for a device it loses is placed again.
  void set_devices(ContextState& c, const std::vector<uint32_t>& devices);
  /// RuntimeStats::contexts: the default context and every other, once one exists.
  void stats(RuntimeStats& s) const;
  /// The contexts' names by index (traces); the default context's is empty.
  std::vector<std::string> names() const;
  /// Shutdown, once every task is done: the composite policy's thread for reserves ends.
  void stop() noexcept;

 private:
  Parts p_;
  ContextPolicy* policy_ = nullptr;  // under device_set: none until the first context
  std::shared_ptr<ContextState> default_;
  // The default one first. Appended under device_set and mutex_; read under either (stats and
  // traces take only the latter: remove_device holds device_set for long).
  std::vector<std::shared_ptr<ContextState>> all_;
  mutable std::mutex mutex_;
};

}  // namespace hcr::detail
