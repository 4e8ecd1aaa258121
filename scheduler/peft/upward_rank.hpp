// Upward ranks over the submitted task graph (HEFT's priority): a task's rank is its own mean
// predicted execution plus, over the tasks waiting for it, the largest (mean copy of what it
// passes on + that task's rank) — the length of the critical path from it to the end of what has
// been submitted so far.
//
// The graph grows while tasks run, so ranks are computed when a task becomes ready, by a walk over
// its descendants that keeps each rank it computes in the task (TaskRef::policy_aux) stamped with
// the submission count: a rank whose stamp is current is reused, so a graph submitted before it
// runs is walked once in all. Each walk visits at most a budget of tasks; beyond it a stale rank,
// or the task's own cost alone, stands in (a lower bound), so a streaming submission costs
// bounded time per decision.
#pragma once

#include <hcr/sched.hpp>

#include <cstdint>
#include <functional>

namespace hcr::sched {

class UpwardRank {
 public:
  /// Seconds: a task's mean predicted execution over the devices that can run it (0: unknown).
  using MeanCost = std::function<double(TaskRef)>;
  /// Seconds: the mean cost of moving `bytes` between two memories (0: all work in one memory).
  using MeanCopy = std::function<double(uint64_t bytes)>;

  UpwardRank(MeanCost cost, MeanCopy copy, size_t budget = 256)
      : cost_(std::move(cost)), copy_(std::move(copy)), budget_(budget) {}

  /// The rank of `t` in seconds, with `submitted` the Context's submission count now.
  double rank(TaskRef t, uint64_t submitted) const;

  /// A priority level for a rank: 32 levels per doubling of the rank (in microseconds), from 0
  /// (a rank 2.2% longer is a level higher: ties among the tasks ready at once are rare).
  /// Under 1200 levels for ranks below a day: queues and link horizons keep one entry per level
  /// in use.
  static int level(double seconds);

 private:
  MeanCost cost_;
  MeanCopy copy_;
  size_t budget_;
};

}  // namespace hcr::sched
