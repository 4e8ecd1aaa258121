// The task graph: each buffer's dependency frontier, the edges between tasks, the count of the
// unfinished ones (wait_all's epochs, back-pressure's tickets) and the end of a task, which
// releases its successors. It knows nothing of devices or data: a task whose last predecessor
// finishes goes on to the stages after it through GraphStages.
//
// Thread safety: submit, finish and the waits may be called from any thread at once; dependency
// tracking takes only the locks of the buffers and tasks involved.
#pragma once

#include "../task_node.hpp"

#include <hcr/detail/handles.hpp>
#include <hcr/types.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <set>
#include <span>

namespace hcr::detail {

struct BufferState;

/// What the task graph hands on, and the little it asks of the stages after it.
class GraphStages {
 public:
  /// `t` waits for nothing any more: to placement.
  virtual void ready(TaskNode* t) noexcept = 0;
  /// As ready() for each of `tasks`, in order, which the caller keeps alive (a reference of its
  /// own) until this returns: placed as a batch (Placement::place_batch).
  virtual void ready_batch(std::span<TaskNode* const> tasks) noexcept = 0;
  /// `t`, just submitted, still waits for other tasks and reads `inputs`, which no unfinished
  /// task writes: they may move towards where it will run meanwhile.
  virtual void waiting_with_inputs(TaskNode* t,
                                   std::span<const Ref<BufferState>> inputs) noexcept = 0;
  /// `t` finished well; `successors` still wait for it (so they are alive), some for more.
  virtual void finished_before(TaskNode* t, std::span<const Edge> successors) noexcept = 0;
  /// Whether inputs of `t` that are ready at its submit are worth reporting (waiting_with_inputs).
  virtual bool moves_inputs_early(const TaskNode& t) const noexcept = 0;
  /// False on a thread that must not wait for room (back-pressure): a kernel of this runtime, or
  /// a thread holding a host view the tasks in flight may wait for.
  virtual bool may_wait_for_room() const noexcept = 0;

 protected:
  ~GraphStages() = default;
};

/// A gate in front of the graph's exit: a pause keeps tasks (engine/pause.hpp).
class SubmitGate {
 public:
  /// True when it keeps `t` (ticket `seq`), whose submission's own pending count then stands for
  /// the gate; the gate lets it go later by dropping that count.
  virtual bool hold(TaskNode* t, uint64_t seq) noexcept = 0;
  /// How many kept tasks took their ticket before `seq`: a submitter waiting for room behind
  /// them waits for ever.
  virtual size_t held_before(uint64_t seq) const = 0;
  /// Whether anything is being kept now (cheap: read on every submit).
  virtual bool closed() const noexcept = 0;

 protected:
  ~SubmitGate() = default;
};

class TaskGraph {
 public:
  /// `owner`: the engine whose kernels' submits count with their own task (fork-join).
  /// `max_in_flight`: back-pressure's bound (0: none).
  TaskGraph(const void* owner, GraphStages& stages, uint64_t max_in_flight)
      : owner_(owner), stages_(stages), max_in_flight_(max_in_flight) {}
  TaskGraph(const TaskGraph&) = delete;
  TaskGraph& operator=(const TaskGraph&) = delete;

  void set_gate(SubmitGate* gate) noexcept { gate_ = gate; }

  /// Takes ownership of the caller's reference to `t`: counts it, registers its accesses and
  /// edges, and hands it on once it waits for nothing. Blocks while max_in_flight tasks are
  /// unfinished, except where GraphStages::may_wait_for_room says not to; throws
  /// Error(invalid_argument) (and takes nothing) when that room can only come after a resume.
  void submit(TaskNode* t);
  /// Registers `t`'s access to `b` in the buffer's dependency frontier. Returns whether `t` now
  /// waits for a task that wrote `b` (false also for an access that does not read).
  bool register_access(BufferState& b, TaskNode* t, Access mode);
  /// Takes ownership of the caller's reference to each of `tasks`, prepared outside dependency
  /// analysis (a replayed graph, engine/recorded_graph.hpp): their edges, `uargs` and `bytes` set,
  /// each `pending` its predecessors + 1. Counted as submit() counts them (tickets, wait_all's
  /// epoch, the gate) and handed on, in order, as each waits for nothing: those that wait for
  /// nothing at once go to GraphStages::ready_batch in runs, so the caller must hold a reference
  /// of its own to each until this returns. Back-pressure is checked once, for the first (the
  /// batch may exceed the bound by its size). `link(user)` runs once they are counted, before
  /// any is handed on: what it registers (register_access) is registered only for a batch that
  /// enters (a refused one throws before it, taking the tasks).
  void submit_prepared(std::span<TaskNode* const> tasks, void (*link)(void* user) noexcept,
                       void* user);
  /// The first half of a task's end: counts it, releases its successors (those it was the last
  /// predecessor of go to GraphStages::ready, most urgent first) and publishes its state.
  void settle(TaskNode* t, const std::exception_ptr& e) noexcept;
  /// The second half: its buffers and its node go, and wait_all stops counting it.
  void close(TaskNode* t) noexcept;

  /// Returns once every task whose submit() returned before this call began has finished.
  void wait_all() noexcept;
  /// Until no task is unfinished at all (the runtime's end).
  void wait_idle() noexcept;

  uint64_t submitted() const noexcept { return submitted_.load(std::memory_order_relaxed); }
  /// Tasks submitted and not finished.
  uint64_t unfinished() const noexcept {
    return submitted_.load(std::memory_order_relaxed) - completed_.load(std::memory_order_relaxed);
  }
  struct Counts {
    uint64_t submitted, completed, failed, throttled;
  };
  Counts counts() const noexcept;

 private:
  // Blocks the submitter holding ticket `seq` until it may enter; throws when the room it waits
  // for can only come after a resume().
  void wait_for_room(uint64_t seq);
  // A ticket whose task was refused: counted as finished so that later tickets are not kept
  // waiting for it, and left out of counts().
  void retire_ticket() noexcept;
  void count_finished() noexcept;
  // register_access of a commute access, under b's lock.
  bool register_commute(BufferState& b, TaskNode* t);

  const void* owner_;
  GraphStages& stages_;
  SubmitGate* gate_ = nullptr;

  // wait_all: each task counts in open_[parity of the epoch current when it was submitted]; a
  // wait_all moves the epoch on and waits for the previous one's count to drain, while new tasks
  // count in the other. One wait_all moves the epoch at a time (epoch_mutex_), so the count it
  // waits for receives no new task. Read by every submit, written by wait_all: a line of its own.
  alignas(64) std::atomic<uint64_t> epoch_{0};
  std::mutex epoch_mutex_;
  // Touched by submitting and finishing threads alike.
  alignas(64) std::atomic<int64_t> open_[2] = {0, 0};
  std::atomic<uint64_t> completed_{0};
  // Back-pressure: the smallest completed_ a blocked submitter waits for (max: none waits).
  std::atomic<uint64_t> room_at_{UINT64_MAX};
  alignas(64) std::atomic<uint64_t> submitted_{0};  // tickets, in submission order
  std::atomic<uint64_t> failed_{0};
  const uint64_t max_in_flight_;  // [runtime] max_tasks_in_flight (0: no bound)
  std::mutex room_mutex_;
  std::condition_variable room_cv_;
  std::multiset<uint64_t> room_targets_;    // completed_ counts blocked submitters wait for
  std::atomic<uint64_t> throttled_{0};      // submits that waited for room
  std::atomic<uint32_t> throttled_now_{0};  // submitters waiting for room now
  std::atomic<uint64_t> abandoned_{0};      // tickets retired without a task

 public:
  /// A gate that kept a task wakes submitters waiting for room: what they wait for may now
  /// never come (they look again, and throw).
  void gate_changed() noexcept;
};

/// Error for a task whose data predecessor failed, carrying the original message.
std::exception_ptr dependency_error(const std::exception_ptr& cause);

}  // namespace hcr::detail
