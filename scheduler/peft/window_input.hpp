// The window a plan covers, gathered from the runtime's tasks into window_plan.hpp's plain data:
// the tasks waiting (queued, parked, or not ready yet), those after them, their buffers, where
// each buffer is, and what the tasks running now will write.
#pragma once

#include "window_plan.hpp"

#include <hcr/sched.hpp>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

namespace hcr::sched {

/// Tasks join in the order found, once each, up to a bound; then close() adds what comes after
/// them, and fill() writes the plan's tasks and buffers. Not thread-safe (one plan at a time);
/// the tasks must stay valid from add to fill.
class WindowInput {
 public:
  explicit WindowInput(size_t max_tasks) : max_tasks_(max_tasks) {}

  /// Adds `x`, queued on device `device` already (-1: not placed): its index in the window, or
  /// -1 when the window is full.
  int64_t add(TaskRef x, int32_t device);
  /// Adds the tasks submitted so far that wait for `t`.
  void add_successors(TaskRef t);
  /// A task running now on memory node `node`, done in `ready` seconds: what it writes will be
  /// there; the tasks that wait for it join the window.
  void add_running(TaskRef t, uint32_t node, double ready);
  /// Adds the tasks waiting for those of the window, and for those, ... (within the bound), and
  /// notes each task's successors in the window.
  void close();
  /// The window's tasks and buffers into `in` (tasks in the order found), once closed;
  /// `exec(task, out)` sets `out` to its execution per device (< 0: cannot run there).
  void fill(PlanInput& in, const Context& ctx,
            const std::function<void(TaskRef, std::vector<double>&)>& exec);

  const std::vector<TaskRef>& tasks() const { return window_; }
  /// Per task: the device it is queued on, or -1.
  const std::vector<int32_t>& fixed() const { return fixed_; }

 private:
  // The tasks waiting for `t` (submitted so far), up to how many there are.
  std::vector<TaskRef>& successors_of(TaskRef t);

  struct Result {
    uint32_t node;
    double ready;
  };
  size_t max_tasks_;
  std::vector<TaskRef> window_;
  std::vector<int32_t> fixed_;
  std::unordered_map<const void*, uint32_t> index_;
  std::vector<std::vector<uint32_t>> succ_;
  std::unordered_map<const void*, Result> results_;  // by buffer
  std::vector<TaskRef> found_;
};

}  // namespace hcr::sched
