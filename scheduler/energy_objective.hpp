// The scheduling objective ([scheduler] objective): time, or one of the energy objectives that
// weigh where a task finishes against the joules it is predicted to use there (peft's placements;
// every earliest-finish policy's steals).
#pragma once

#include "cost_model.hpp"
#include "kernel_pairs.hpp"
#include "placement.hpp"

#include <hcr/config.hpp>
#include <hcr/sched.hpp>

#include <atomic>
#include <memory>
#include <span>

namespace hcr::sched {

/// "time": the earliest finish alone. "energy": the device predicted to use the least energy for
/// the task — its own joules plus every device's idle draw over any time it adds to the predicted
/// makespan — among those that keep the makespan of the work placed so far within max_slowdown of
/// its time-optimal bound (the queued work spread over every device at its speed for this kernel,
/// a fluid bound below any real schedule). "weighted" (StarPU's): the least finish + gamma x
/// joules, plus idle_power watts for each second past the latest device horizon.
///
/// Thread safety: every member may be called concurrently after attach().
class EnergyObjective {
 public:
  /// `model` and `loads` (one per device) are the policy's, read by its decisions.
  EnergyObjective(const Config& c, const CostModel& model, const DeviceLoad* loads);
  void attach(const Context& ctx) { ctx_ = &ctx; }

  bool by_time() const noexcept { return kind_ == Kind::time; }

  /// A task used `joules_per_second` above idle for each second of its predicted duration on d:
  /// the device's learned draw, for the kernels with no energy measured there.
  void learn_watts(DeviceId d, double joules_per_second);

  /// One device's figures for a task: its predicted finish, its score (the finish plus what the
  /// policy adds to it), execution and copies.
  struct Option {
    DeviceId d;
    double finish, score, exec, xfer;
  };
  /// Under an energy objective, the device of `options` it chooses for `t` (`fastest`, the best
  /// by time with `best_score`, when none qualifies).
  Choice choose(TaskRef t, const KernelPairs& pairs, double now, double best_score,
                std::span<const Option> options, Choice fastest);

  /// Whether an idle device d should take `t` from v's queue, where it finishes sooner
  /// (`finish_here` < `finish_there`): under the energy objectives a task placed on an efficient
  /// device stays there unless moving it to the (faster, hungrier) device is what the objective
  /// would choose too.
  bool worth_moving(TaskRef t, const KernelPairs& pairs, DeviceId d, DeviceId v,
                    const Prediction& here, const Prediction& there, double finish_here,
                    double finish_there);

 private:
  enum class Kind : uint8_t { time, energy, weighted };
  double pending_seconds(DeviceId d) const noexcept;
  double fluid_makespan(std::span<const Option> options) const noexcept;
  double task_joules(TaskRef t, const KernelPairs& pairs, DeviceId d, double exec) const;

  const Kind kind_;
  const double max_slowdown_, gamma_, idle_power_;
  const CostModel& model_;
  const DeviceLoad* loads_;
  const Context* ctx_ = nullptr;
  std::atomic<double> deadline_{0};  // "energy": the makespan bound of the work under way
  // Joules per busy second above idle, learned per device (0: none).
  std::unique_ptr<std::atomic<double>[]> watts_;
};

}  // namespace hcr::sched
