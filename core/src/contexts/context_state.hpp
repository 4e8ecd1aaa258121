// The record of one scheduling context (hcr::Context): its devices as bits that TaskRef::can_run
// and RuntimeCore::capable read lock-free, its sharing parameters and its counters.
#pragma once

#include <hcr/context.hpp>
#include <hcr/device.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace hcr::detail {

class Contexts;
class RuntimeCore;

struct ContextState {
  std::weak_ptr<RuntimeCore> owner;  // for handles that outlive their runtime
  RuntimeCore* rt = nullptr;         // identity: tasks of another runtime are refused
  Contexts* home = nullptr;          // the runtime's contexts (Context::set_devices)
  uint32_t index = 0;                // its slot in ContextPolicy (0: the default context)
  std::string name;
  double weight = 1;
  int priority = 0;
  uint64_t memory_quota = 0;  // bytes per device node; 0: none (DataManager enforces it)
  uint32_t reserve = 0;       // devices held back for it while active (ContextPolicy::pop)
  std::atomic<int64_t> active_until_ns{0};  // reserve: a task of it was pushed 50 ms before
  bool all_devices = false;                 // spec.devices was empty: devices that join are its too

  // Its devices. Written under the runtime's device-set lock; read anywhere, relaxed: a reader that
  // sees a device a moment late places one task by the old set, which set_devices' drain fixes.
  std::atomic<uint64_t> bits[2] = {0, 0};
  bool has(uint32_t d) const noexcept {
    return (bits[d / 64].load(std::memory_order_relaxed) >> (d % 64)) & 1u;
  }

  // Counters (ContextStats).
  std::atomic<uint64_t> tasks{0}, failed{0};
  std::atomic<int64_t> wait_ns{0};
  std::atomic<uint64_t> busy_ns[kMaxDevices] = {};
};

}  // namespace hcr::detail
