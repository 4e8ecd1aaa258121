// The runtime's record of one kernel: its implementations and, per device, whether and how the
// device runs it.
#pragma once

#include <hcr/kernel.hpp>
#include <hcr/plugin.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hcr::detail {

class RuntimeCore;
struct BuiltinSpec;
struct TaskNode;

/// The task whose C++ CPU implementation runs on this thread, or null: calls from inside a kernel
/// that would wait for the kernel's own task are refused.
const TaskNode* running_cpu_task() noexcept;

struct KernelImpl {
  hcr_impl_kind_t kind = HCR_IMPL_BUILTIN;
  std::string api;
  CpuFunction cpu;  // HOST_FUNCTION implementations written in C++
  hcr_kernel_fn fn = nullptr;
  void* user_data = nullptr;
  std::string source, build_options, binary_path, entry;
};

enum class Capability : uint8_t { unknown = 0, yes = 1, no = 2 };

struct KernelDevice {
  std::atomic<Capability> capability{Capability::unknown};
  hcr_kernel_t* handle = nullptr;  // the plugin's, released at shutdown
  std::string why_not;             // what the plugin said when it could not
};

struct KernelState {
  std::atomic<uint32_t> refs{1};
  std::shared_ptr<RuntimeCore> rt;
  std::string name;
  uint32_t id = 0;
  // The built-in kernel of plugin.h this name is (builtin_check.hpp): its tasks are checked at
  // submit. Null for every other kernel, whose tasks skip the check at the cost of this test.
  const BuiltinSpec* builtin = nullptr;

  std::mutex mutex;                                // guards impls and resolution
  std::vector<std::unique_ptr<KernelImpl>> impls;  // stable addresses: user_data points at them
  // One entry per possible device (kMaxDevices), so devices can join while tasks run.
  std::unique_ptr<KernelDevice[]> devices;
  size_t num_devices = 0;
  std::atomic<bool> resolved{false};     // every device's capability is known
  std::atomic<bool> any_capable{false};  // some device runs it (published by `resolved`)

  // Devices with Capability::yes as bits, for decisions over many devices (capable()).
  std::atomic<uint64_t> yes_bits[2] = {0, 0};

  bool can_run(size_t d) const noexcept {
    return d < num_devices &&
           devices[d].capability.load(std::memory_order_acquire) == Capability::yes;
  }
  /// Sets device d's capability (under `mutex`), keeping yes_bits in step.
  void set_capability(size_t d, Capability c) noexcept {
    devices[d].capability.store(c, std::memory_order_release);
    const uint64_t bit = uint64_t{1} << (d % 64);
    if (c == Capability::yes) yes_bits[d / 64].fetch_or(bit, std::memory_order_release);
    else yes_bits[d / 64].fetch_and(~bit, std::memory_order_release);
  }
};

}  // namespace hcr::detail
