// PEFT's optimistic cost table, one level deep: per memory node, what running a task there leaves
// the readers of its outputs submitted so far to do after it (their best execution, plus copying
// what they read from it to where that is).
#pragma once

#include "cold_start.hpp"
#include "../cost_model.hpp"
#include "../kernel_pairs.hpp"
#include "../placement.hpp"

#include <hcr/sched.hpp>

#include <array>
#include <cstdint>

namespace hcr::sched {

/// A task's look ahead: by memory node, the least the readers of its outputs need after it.
struct Lookahead {
  bool any = false;
  std::array<float, kNodeSlots> by_node{};
  double cost(uint32_t node) const { return any && node < by_node.size() ? by_node[node] : 0.0; }
};

/// Makes look aheads from the policy's model. Thread safety: fill() may be called concurrently
/// after attach().
class LookaheadTable {
 public:
  /// `loads`: the policy's, one per device (their memory nodes).
  LookaheadTable(KernelTable& kernels, const ColdStart& cold, const LinkModel& links,
                 const DeviceLoad* loads)
      : kernels_(kernels), cold_(cold), links_(links), loads_(loads) {}
  /// `nodes`: memory nodes the policy has room for (Lookahead has kNodeSlots at most).
  void attach(const Context& ctx, uint32_t nodes) {
    ctx_ = &ctx;
    nodes_ = nodes;
  }

  /// If `t` runs in node n's memory, the least each consumer of its outputs (submitted so far)
  /// needs to run after it — its predicted execution on the best device, plus copying what it
  /// reads from `t` there when that is another memory — the largest over the consumers. Copies
  /// are predicted without queueing (an optimistic table), through host memory between two device
  /// memories.
  void fill(TaskRef t, Lookahead& out) const;

 private:
  // Consumers of a task's outputs looked at.
  static constexpr size_t kConsumers = 8;
  // Bytes of what `from` writes that `to` reads.
  static uint64_t passed_bytes(TaskRef from, TaskRef to);

  KernelTable& kernels_;
  const ColdStart& cold_;
  const LinkModel& links_;
  const DeviceLoad* loads_;
  const Context* ctx_ = nullptr;
  uint32_t nodes_ = 0;
};

}  // namespace hcr::sched
