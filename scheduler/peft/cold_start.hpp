// peft's cold start: an unmeasured (kernel, architecture) is predicted from another architecture's
// measurement times the speed ratio learned between the two (on any kernel), else from the
// plugins' peak speeds, so that a new kernel need not be explored on every architecture.
#pragma once

#include "../cost_model.hpp"
#include "../kernel_pairs.hpp"

#include <hcr/detail/spin_lock.hpp>
#include <hcr/sched.hpp>

#include <array>
#include <atomic>
#include <cstdint>

namespace hcr::sched {

/// The speed ratios between architectures, and the predicted execution of a task on each
/// architecture of its kernel's pairs. Thread safety: every member may be called concurrently
/// after attach().
class ColdStart {
 public:
  ColdStart(const CostModel& model, const KernelTable& kernels)
      : model_(model), kernels_(kernels) {}
  void attach(const Context& ctx) { ctx_ = &ctx; }

  /// The predicted execution of one (kernel, architecture) pair for a task: measured (history or
  /// the fit over sizes); else derived from another architecture's measurement through the speed
  /// ratio learned between the two; else the plugin's estimate (`estimates`); else unknown (< 0).
  struct ArchCost {
    double exec = -1;
    bool measured = false;
  };
  /// One entry per slot of the kernel's pairs; slots with no device in `devices` are unknown.
  using ArchCosts = std::array<ArchCost, KernelPairs::kSlots>;
  void costs(TaskRef t, const KernelPairs& kp, const uint64_t devices[2], bool estimates,
             ArchCosts& out) const;
  /// The entry of device d (unknown for a device whose architecture is not listed).
  static double exec_on(const KernelPairs& kp, const ArchCosts& costs, DeviceId d) {
    const uint8_t s = kp.slot[d];
    return s < KernelPairs::kSlots ? costs[s].exec : -1;
  }

  /// Whether architecture `a` has a ratio to another learned.
  bool ratio_learned(uint8_t a) const;
  /// `t` took `seconds` on d: a sample of the ratio of d's architecture to each other that has a
  /// history for the task's cell.
  void learn(TaskRef t, const KernelPairs& pairs, DeviceId d, double seconds);

 private:
  // The speed ratio between two architectures, as the decayed mean of log(time on a / time on b)
  // over the (kernel, footprint) cells measured on both.
  struct Ratio {
    std::atomic<double> log{0};
    std::atomic<uint32_t> n{0};
  };
  const Ratio& ratio(uint8_t a, uint8_t b) const {
    static const Ratio none;
    return a < kArchs && b < kArchs && a != b ? ratios_[a][b] : none;
  }

  const CostModel& model_;
  const KernelTable& kernels_;
  const Context* ctx_ = nullptr;
  Ratio ratios_[kArchs][kArchs];
  std::atomic<uint32_t> ratio_samples_[kArchs] = {};  // completions seen per architecture
  detail::SpinLock ratios_lock_;
};

}  // namespace hcr::sched
