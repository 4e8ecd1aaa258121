// peft's automatic priorities: the application's priority first, then the task's upward rank
// (upward_rank.hpp) from the learned costs, so that queues and copies follow HEFT's order.
#pragma once

#include "cold_start.hpp"
#include "upward_rank.hpp"
#include "../cost_model.hpp"
#include "../kernel_pairs.hpp"

#include <hcr/sched.hpp>

#include <atomic>
#include <cstdint>

namespace hcr::sched {

/// Thread safety: every member may be called concurrently after attach().
class RankPriorities {
 public:
  RankPriorities(KernelTable& kernels, const ColdStart& cold, const LinkModel& links);
  void attach(const Context& ctx) { ctx_ = &ctx; }

  /// Sets `t`'s priority: user priority u ranks as u * kLevels + the level of its upward rank,
  /// so that any priority the application gives wins over every rank.
  void assign(TaskRef t);
  /// The mean copy between memories from the links of memory nodes 1 .. nodes-1 (a device joined,
  /// or copies were measured).
  void refresh_mean_copy(uint32_t nodes);

  static constexpr int kLevels = 4096;

 private:
  // A task's mean predicted execution over the architectures of the devices.
  double mean_cost(TaskRef t);
  // The mean cost of a copy between two memories (HEFT's average communication cost): over the
  // links of the device memories, into and out of host memory, kept up to date as copies are
  // measured.
  double mean_copy(uint64_t bytes) const;

  KernelTable& kernels_;
  const ColdStart& cold_;
  const LinkModel& links_;
  const Context* ctx_ = nullptr;
  UpwardRank ranks_;
  std::atomic<double> mean_latency_{0}, mean_seconds_per_byte_{0};
};

}  // namespace hcr::sched
