// Calibration of the earliest-finish policies: which explorations are under way. An exploration
// sends a task to a device on purpose, to measure a (kernel, architecture) pair; it holds the
// pair's slot and, where the policy's rule asks, its kernel's or its architecture's.
#pragma once

#include "kernel_pairs.hpp"
#include "placement.hpp"

#include <hcr/config.hpp>
#include <hcr/sched.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace hcr::sched {

/// The slots of explorations in flight, and the [scheduler] calibrate settings. Thread safety:
/// every member may be called concurrently.
class Calibration {
 public:
  enum Mode : uint8_t { kAuto, kForce, kOff };  // [scheduler] calibrate, parsed once
  Calibration(const Config& c, const KernelTable& kernels)
      : mode_(c.calibrate == "off"     ? kOff
              : c.calibrate == "force" ? kForce
                                       : kAuto),
        min_samples_(static_cast<uint32_t>(std::max(1, c.calibrate_samples))),
        kernels_(kernels) {}

  Mode mode() const noexcept { return mode_; }
  /// Samples a pair needs before it is no longer explored ([scheduler] calibrate_samples).
  uint32_t min_samples() const noexcept { return min_samples_; }

  /// Takes the slots of an exploration of device d that `what` needs: the policy word's
  /// exploration bits, 0 when another thread took one first (or `what` is none).
  uint64_t take(const KernelPairs& kp, DeviceId d, Probe what) {
    if (what == Probe::none) return 0;
    uint32_t expected = 0;
    if (!kp[d]->exploring.compare_exchange_strong(expected, 1)) return 0;
    std::atomic<uint32_t>* slot = what == Probe::kernel ? &kp.probing
                                  : what == Probe::arch ? &arch_probing_[kernels_.arch_index(d)]
                                                        : nullptr;
    if (slot != nullptr && !slot->compare_exchange_strong(expected = 0, 1)) {
      kp[d]->exploring.fetch_sub(1, std::memory_order_relaxed);
      return 0;
    }
    return kExploreBit | (what == Probe::kernel ? kKernelProbeBit : 0) |
           (what == Probe::arch ? kArchProbeBit : 0);
  }
  /// An exploration of d ended (its task completed, or left d's queue): its slots are free.
  /// `word`: the task's policy word (nothing to do without kExploreBit).
  void end(const KernelPairs& kp, DeviceId d, uint64_t word) {
    kp[d]->exploring.fetch_sub(1, std::memory_order_relaxed);
    if (word & kKernelProbeBit) kp.probing.store(0, std::memory_order_relaxed);
    if (const uint8_t arch = kernels_.arch_index(d); (word & kArchProbeBit) && arch < kArchs)
      arch_probing_[arch].store(0, std::memory_order_relaxed);
  }

  /// Whether an exploration of the kernel is under way on any device.
  static bool exploring(const KernelPairs& kp) {
    if (kp.probing.load(std::memory_order_relaxed) != 0) return true;
    for (uint32_t s = 0, n = kp.count.load(std::memory_order_acquire); s < n; ++s)
      if (kp.archs[s].pair->exploring.load(std::memory_order_relaxed) != 0) return true;
    return false;
  }
  /// Whether an exploration of architecture `arch` (for its speed ratio) is under way.
  bool arch_probing(uint8_t arch) const {
    return arch < kArchs && arch_probing_[arch].load(std::memory_order_relaxed) != 0;
  }

 private:
  const Mode mode_;
  const uint32_t min_samples_;
  const KernelTable& kernels_;
  std::atomic<uint32_t> arch_probing_[kArchs] = {};
};

}  // namespace hcr::sched
