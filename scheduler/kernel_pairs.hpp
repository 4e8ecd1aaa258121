// The cost model's (kernel, architecture) pairs as the earliest-finish policies look them up: per
// kernel, the pair of each device and the distinct architectures among them; and the index each
// device architecture has in the policies' tables (speed ratios, exploration slots).
#pragma once

#include "cost_model.hpp"

#include <hcr/sched.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bitset>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace hcr::sched {

// Architectures with an index: peft's rows of speed ratios (devices of further architectures have
// none, kArchs, and are predicted from their own measurements only).
constexpr size_t kArchs = 16;
// Kernel ids with a lock-free lookup.
constexpr size_t kFastKernels = 4096;

// The cost model's pairs of one kernel: per device, and the distinct ones (a device architecture
// each) with the devices they cover. Devices are added under the table's lock while decisions
// read without it: the vector is reserved, the distinct list published by its count.
struct KernelPairs {
  static constexpr size_t kSlots = 16;  // distinct architectures listed (further ones: none)
  struct Arch {
    CostModel::Pair* pair = nullptr;
    uint8_t arch = kArchs;  // the architecture's index (kArchs: none)
    uint32_t device = 0;    // the first device of the architecture
    std::atomic<uint64_t> devices[2] = {0, 0};
  };

  KernelPairs() { by_device.reserve(kMaxDevices); }
  CostModel::Pair* operator[](size_t d) const { return by_device[d]; }
  void add(size_t device, CostModel::Pair* p, uint8_t arch) {
    by_device.push_back(p);
    const uint32_t n = count.load(std::memory_order_relaxed);
    uint32_t s = 0;
    while (s < n && archs[s].pair != p) ++s;
    if (s == n && n < kSlots) {
      archs[s].pair = p;
      archs[s].arch = arch;
      archs[s].device = static_cast<uint32_t>(device);
      count.store(n + 1, std::memory_order_release);
    }
    slot[device] = static_cast<uint8_t>(s);  // kSlots and above: not listed
    if (s < kSlots) archs[s].devices[device / 64].fetch_or(uint64_t{1} << (device % 64));
  }

  std::vector<CostModel::Pair*> by_device;
  std::array<Arch, kSlots> archs;
  std::atomic<uint32_t> count{0};
  std::array<uint8_t, kMaxDevices> slot{};
  // peft: an exploration of the kernel, measured nowhere yet, is in flight.
  mutable std::atomic<uint32_t> probing{0};
};

// A device bit set as two words.
inline void words_of(const std::bitset<kMaxDevices>& b, uint64_t w[2]) {
  static const std::bitset<kMaxDevices> low(~uint64_t{0});
  w[0] = (b & low).to_ullong();
  w[1] = (b >> 64).to_ullong();
}

/// Every kernel's pairs, made when the kernel is first seen, and the devices' architectures.
/// Thread safety: every member may be called concurrently; add_device one device at a time.
class KernelTable {
 public:
  explicit KernelTable(CostModel& model) : model_(model), by_kernel_(kFastKernels) {
    devices_.reserve(kMaxDevices);  // indexed without a lock while devices join: never moves
  }
  ~KernelTable() {
    for (auto& slot : by_kernel_) delete slot.load(std::memory_order_relaxed);
    for (auto& [id, v] : slow_kernels_) delete v;
  }
  KernelTable(const KernelTable&) = delete;
  KernelTable& operator=(const KernelTable&) = delete;

  /// The next device (devices join in id order) is of architecture `arch`: it takes the
  /// architecture's index (a new one while fewer than kArchs are indexed), which is returned, and
  /// its pair joins every kernel's list.
  uint8_t add_device(const std::string& arch) {
    std::lock_guard<std::mutex> lock(mutex_);
    uint8_t index = kArchs;
    auto known = std::find(arch_names_.begin(), arch_names_.end(), arch);
    if (known != arch_names_.end()) {
      index = static_cast<uint8_t>(known - arch_names_.begin());
    } else if (arch_names_.size() < kArchs) {
      index = static_cast<uint8_t>(arch_names_.size());
      arch_names_.push_back(arch);
    }
    const size_t d = devices_.size();
    devices_.push_back({arch, index});
    for (auto& [id, name] : kernel_names_) {
      KernelPairs* v =
          id < kFastKernels ? by_kernel_[id].load(std::memory_order_relaxed) : slow_kernels_[id];
      if (v != nullptr) v->add(d, model_.pair(name, arch), index);
    }
    return index;
  }
  /// Device d's architecture index (kArchs: none).
  uint8_t arch_index(DeviceId d) const { return devices_[d].index; }

  /// The pairs of the task's kernel, made at its first sight.
  const KernelPairs& of(TaskRef t) { return of(t.kernel_id(), t.kernel_name()); }
  const KernelPairs& of(uint32_t id, std::string_view name) {
    if (id < kFastKernels)
      if (auto* v = by_kernel_[id].load(std::memory_order_acquire)) return *v;
    std::lock_guard<std::mutex> lock(mutex_);
    if (id < kFastKernels) {
      if (auto* v = by_kernel_[id].load(std::memory_order_relaxed)) return *v;
    } else if (auto it = slow_kernels_.find(id); it != slow_kernels_.end()) {
      return *it->second;  // (made once: others may hold references to it)
    }
    auto* v = new KernelPairs();
    std::string kernel(name);
    for (size_t d = 0; d < devices_.size(); ++d)
      v->add(d, model_.pair(kernel, devices_[d].arch), devices_[d].index);
    kernel_names_[id] = kernel;
    if (id < kFastKernels) by_kernel_[id].store(v, std::memory_order_release);
    else slow_kernels_[id] = v;
    return *v;
  }

 private:
  struct DeviceArch {
    std::string arch;
    uint8_t index = kArchs;
  };
  CostModel& model_;
  std::vector<DeviceArch> devices_;
  std::vector<std::string> arch_names_;           // by index (under mutex_)
  std::map<uint32_t, std::string> kernel_names_;  // kernels with a pairs vector (under mutex_)
  std::vector<std::atomic<KernelPairs*>> by_kernel_;
  std::map<uint32_t, KernelPairs*> slow_kernels_;  // (under mutex_)
  std::mutex mutex_;
};

}  // namespace hcr::sched
