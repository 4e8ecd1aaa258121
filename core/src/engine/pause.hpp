// Runtime::pause and resume as a gate in front of the task graph's exit: tasks submitted while
// paused are kept, and the last resume lets them go at once, placed together.
//
// Submitted one task at a time, a graph starts while it is still being submitted: the first tasks
// submitted take the idle devices whatever their priority, and a planning policy (peft) plans
// around the little it has seen. A kernel task submitted while paused keeps its submission's own
// pending count — one more predecessor, the pause — here. The last resume takes that count back
// from every kept task; those it makes ready go to placement together (PlaceTogether).
//
// Thread safety: every member may be called from any thread.
#pragma once

#include "task_graph.hpp"

#include <hcr/types.hpp>

#include <atomic>
#include <mutex>
#include <string_view>
#include <vector>

namespace hcr::detail {

struct BufferState;

/// Placement of several ready tasks at once, the most urgent first, before a device takes any.
class PlaceTogether {
 public:
  virtual void place_together(std::vector<TaskNode*> ready) noexcept = 0;

 protected:
  ~PlaceTogether() = default;
};

class Pause final : public SubmitGate {
 public:
  Pause(TaskGraph& graph, PlaceTogether& placement) : graph_(graph), placement_(placement) {
    graph_.set_gate(this);
  }
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;

  /// Pauses nest: the last resume() lets go.
  void pause() noexcept;
  /// False when not paused.
  bool resume() noexcept;
  /// Throws Error(invalid_argument) naming `what` when it would wait forever for a kept task:
  /// `target` kept, or a join or host access that depends on one (null: any).
  void check_not_held(std::string_view what, const TaskNode* target) const;
  /// The same for an acquire of `b` for `mode`: a kept task writing `b` (read), or using it
  /// (write).
  void check_not_held(const BufferState& b, Access mode) const;

  // SubmitGate
  bool hold(TaskNode* t, uint64_t seq) noexcept override;
  size_t held_before(uint64_t seq) const override;
  bool closed() const noexcept override { return paused_.load(std::memory_order_relaxed) != 0; }

 private:
  void let_go(std::vector<TaskNode*> held) noexcept;
  // Under mutex_: the kept task `target` waits for, if any (itself, if it is kept).
  const TaskNode* kept_before(const TaskNode* target) const;
  TaskGraph& graph_;
  PlaceTogether& placement_;
  std::atomic<uint32_t> paused_{0};  // pauses not resumed yet (written under mutex_)
  mutable std::mutex mutex_;
  std::vector<TaskNode*> held_;
  std::vector<uint64_t> tickets_;  // held_[i]'s back-pressure ticket
};

}  // namespace hcr::detail
