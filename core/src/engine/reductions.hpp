// Reductions (Access::reduce, StarPU's STARPU_REDUX): owns each buffer's declared reduction, the
// private copies its reduce accesses accumulate into, and the combine tasks that fold them into the
// buffer before its next access of another mode.
//
// A reduce access is turned into an ordinary one when the task is built (task_add_reduce): the task
// gets a fresh private copy of the buffer's shape and type, holding the identity, as a read_write
// argument in the buffer's place. Nothing else in the engine sees Access::reduce: the copies are
// buffers like any other (the data manager moves them, a new one waits for nothing), and the
// combines are kernel tasks like any other (placed by the policy, learnt by its cost model, shown
// in the trace). One copy per task, not per device: two tasks of one device never share a copy, so
// no lock is needed however many slots the device runs, and a copy needs no device chosen in
// advance. Its memory comes from the runtime's buffer pool; a scalar or a bin vector is cheap.
//
// Thread safety: all calls may be made from any thread. The combines of one buffer are submitted
// by whichever thread accesses it next; accesses from several threads at once are ordered as they
// register, as for any buffer.
#pragma once

#include "../buffer_state.hpp"
#include "../kernel_state.hpp"
#include "../task_node.hpp"

#include <hcr/detail/handles.hpp>
#include <hcr/types.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

namespace hcr::detail {

/// The copies one built-in combine task folds: its destination and up to 15 sources.
inline constexpr size_t kBuiltinArity = 16;

/// What Reductions asks of the engine: kernels by name and a way in for the tasks it makes.
class ReductionStages {
 public:
  virtual Ref<KernelState> kernel(std::string_view name) = 0;
  virtual void resolve(KernelState& k) = 0;
  /// Submits an identity or combine task it made; while a recording is open, the recording keeps
  /// it as it keeps Runtime::submit's tasks (a replay makes fresh copies and runs them again).
  virtual void submit_made(TaskNode* t) = 0;

 protected:
  ~ReductionStages() = default;
};

/// One buffer's reduction (BufferState::reduction).
struct ReductionState {
  std::mutex mutex;  // guards everything below but `pending`
  // The user's identity kernel; null for a built-in, whose copies are filled on the host with
  // `identity` (one element) when they are made.
  Ref<KernelState> identity_kernel;
  Ref<KernelState> combine;
  std::array<std::byte, 8> identity{};
  bool zero_identity = true;
  size_t arity = 2;  // the copies one combine task folds (destination and sources)
  std::vector<Ref<BufferState>> copies;  // contributions not yet combined, in submission order
  std::atomic<bool> pending{false};      // copies is not empty (read without the lock)
  bool listed = false;                   // in Reductions::listed_ (under Reductions' mutex)
};

class Reductions {
 public:
  explicit Reductions(ReductionStages& stages) : stages_(stages) {}
  Reductions(const Reductions&) = delete;
  Reductions& operator=(const Reductions&) = delete;

  /// Buffer::set_reduction: a built-in, or the user's identity and combine kernels.
  void declare(BufferState& b, Reduction op);
  void declare(BufferState& b, KernelState* identity, KernelState* combine);

  /// Runtime::submit of a task with reduce accesses (t.reduces), before the task itself: checks
  /// them, submits the identity tasks of user reductions, and adds its copies to their buffers'
  /// contributions.
  void join(TaskNode& t);
  /// Adds `copy` to `target`'s contributions, combined at its next access of another mode or at
  /// wait_all (join's bookkeeping; a replay of recorded reduce tasks calls it for its copies).
  void contribute(BufferState& target, Ref<BufferState> copy);
  /// Before an access of another mode to `b`: submits the combine tasks of its contributions, if
  /// it has any (a tree of combines of up to `arity` copies each, the last level into `b`).
  void combine(BufferState& b);
  /// Combines every buffer's contributions (Runtime::wait_all, the runtime's end).
  void combine_all();

 private:
  ReductionState& state_of(BufferState& b);
  void submit_combine(KernelState* k, BufferState* into, std::span<BufferState* const> from);

  ReductionStages& stages_;
  std::mutex mutex_;
  std::vector<Ref<BufferState>> listed_;  // buffers that had contributions since combine_all
};

/// task_add_arg of an Access::reduce argument: the task gets a private copy of `b` holding the
/// identity, as read_write, in its place. Throws Error(invalid_argument), naming the argument,
/// when `b` declares no reduction.
void task_add_reduce(TaskNode* t, BufferState* b);

void combine_contributions(BufferState& b);
/// Before an access of another mode to `b`: the combine of its contributions, when it has any (a
/// predictable branch for a buffer without a reduction).
inline void combine_reductions(BufferState& b) {
  if (ReductionState* s = b.reduction.load(std::memory_order_acquire);
      s != nullptr && s->pending.load(std::memory_order_acquire))
    combine_contributions(b);
}

}  // namespace hcr::detail
