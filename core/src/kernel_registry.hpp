// The runtime's kernels by name, each made on first use with an id, and which devices run each:
// every device is asked once per kernel, and again after a new implementation or a new device.
//
// Thread safety: every member may be called from any thread.
#pragma once

#include "engine/device_table.hpp"
#include "kernel_state.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace hcr::detail {

class RuntimeCore;

class KernelRegistry {
 public:
  explicit KernelRegistry(DeviceTable& devices) : devices_(devices) {}
  KernelRegistry(const KernelRegistry&) = delete;
  KernelRegistry& operator=(const KernelRegistry&) = delete;

  /// The kernel of that name, made on first use (`owner`: its runtime, which it keeps alive).
  /// Throws Error(invalid_argument) for an empty name.
  Ref<KernelState> get(std::string_view name, std::shared_ptr<RuntimeCore> owner);
  /// A kernel's name by its id ("?" when none has it).
  std::string name(uint32_t id) const;
  /// Every kernel's name by id (traces).
  std::map<uint32_t, std::string> names() const;
  std::vector<Ref<KernelState>> all() const;
  /// Asks every device whether it runs `k` (once per device, again after a new implementation).
  void resolve(KernelState& k);
  /// Shutdown: each kernel's handle on the devices not `stuck` (by device) goes back to their
  /// plugins; none of them runs it any more.
  void release_handles(const std::vector<bool>& stuck) noexcept;
  void clear() noexcept;

 private:
  DeviceTable& devices_;
  mutable std::mutex mutex_;
  std::map<std::string, Ref<KernelState>, std::less<>> kernels_;
};

}  // namespace hcr::detail
