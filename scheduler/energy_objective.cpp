// The energy objectives: which device a task's joules send it to, within the makespan bound or at
// the weight the configuration gives them (see the header).
#include "energy_objective.hpp"

#include <algorithm>
#include <cmath>

namespace hcr::sched {

EnergyObjective::EnergyObjective(const Config& c, const CostModel& model, const DeviceLoad* loads)
    : kind_(c.objective == "energy"     ? Kind::energy
            : c.objective == "weighted" ? Kind::weighted
                                        : Kind::time),
      max_slowdown_(std::max(1.0, c.max_slowdown)),
      gamma_(c.gamma),
      idle_power_(c.idle_power),
      model_(model),
      loads_(loads),
      watts_(new std::atomic<double>[kMaxDevices]) {
  for (size_t d = 0; d < kMaxDevices; ++d) watts_[d].store(0, std::memory_order_relaxed);
}

void EnergyObjective::learn_watts(DeviceId d, double joules_per_second) {
  std::atomic<double>& w = watts_[d];
  const double old = w.load(std::memory_order_relaxed);
  w.store(old > 0 ? 0.9 * old + 0.1 * joules_per_second : joules_per_second,
          std::memory_order_relaxed);
}

Choice EnergyObjective::choose(TaskRef t, const KernelPairs& pairs, double now, double best_score,
                               std::span<const Option> options, Choice fastest) {
  Choice best = fastest;
  double best_value = INFINITY;
  double horizon = now;  // the makespan as predicted so far
  for (DeviceId d = 0, n = ctx_->device_count(); d < n; ++d)
    horizon = std::max(horizon, now + pending_seconds(d));
  double bound = 0, idle = 0;
  if (kind_ == Kind::energy) {
    // The bound holds as an absolute deadline for the work under way: the fluid bound does not
    // move while every device works, and a steal (worth_moving) keeps to it as placement did.
    bound = now + max_slowdown_ * std::max(best_score - now, fluid_makespan(options));
    double was = deadline_.load(std::memory_order_relaxed);
    while (was < bound && !deadline_.compare_exchange_weak(was, bound, std::memory_order_relaxed)) {
    }
    bound = std::max(bound, was);
    for (DeviceId d = 0, n = ctx_->device_count(); d < n; ++d)
      idle += std::max(0.0, ctx_->idle_watts(d));
  }
  for (const Option& o : options) {
    const double joules = task_joules(t, pairs, o.d, o.exec);
    double value;
    if (kind_ == Kind::energy) {
      if (o.score > bound + 1e-12) continue;
      value = joules + idle * std::max(0.0, o.finish - horizon);
    } else {
      value = o.score + gamma_ * joules + idle_power_ * std::max(0.0, o.finish - horizon);
    }
    if (value < best_value) {
      best_value = value;
      best = {o.d, o.exec, o.xfer};
    }
  }
  return best;
}

bool EnergyObjective::worth_moving(TaskRef t, const KernelPairs& pairs, DeviceId d, DeviceId v,
                                   const Prediction& here, const Prediction& there,
                                   double finish_here, double finish_there) {
  if (kind_ == Kind::time) return true;
  const double j_here = task_joules(t, pairs, d, here.seconds);
  const double j_there = task_joules(t, pairs, v, there.known() ? there.seconds : 0);
  if (kind_ == Kind::energy) {
    if (j_here <= j_there) return true;
    // Where it waits it would finish past the deadline the placements kept to (choose).
    return ctx_->now() + finish_there > deadline_.load(std::memory_order_relaxed);
  }
  return finish_here + gamma_ * j_here < finish_there + gamma_ * j_there;
}

double EnergyObjective::pending_seconds(DeviceId d) const noexcept {
  return static_cast<double>(loads_[d].pending_ns.load(std::memory_order_relaxed)) * 1e-9 /
         loads_[d].slots;
}

// Seconds from now the work queued on the capable devices, and one more task, would take spread
// over all of them in proportion to their speeds for this task's kernel.
double EnergyObjective::fluid_makespan(std::span<const Option> options) const noexcept {
  double work = 1, rate = 0;  // in this task's units; tasks per second
  for (const Option& o : options) {
    if (!(o.exec > 0)) return 0;
    work += pending_seconds(o.d) * loads_[o.d].slots / o.exec;
    rate += loads_[o.d].slots / o.exec;
  }
  return rate > 0 ? work / rate : 0;
}

// Joules `t` is predicted to use on d above its idle draw: learned for its cell (or the fit over
// sizes), else its predicted duration at the device's learned watts above idle, else 0.
double EnergyObjective::task_joules(TaskRef t, const KernelPairs& pairs, DeviceId d,
                                    double exec) const {
  const Prediction e = model_.predict_energy(*pairs[d], t.footprint(), t.size());
  if (e.known()) return e.seconds;
  const double watts = watts_[d].load(std::memory_order_relaxed);
  return watts > 0 ? watts * exec : 0;
}

}  // namespace hcr::sched
