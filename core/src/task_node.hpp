// The runtime's record of one task: arguments, dependency edges, state, result.
#pragma once

#include <hcr/detail/spin_lock.hpp>

#include <hcr/plugin.h>
#include <hcr/types.hpp>

#include <boost/container/small_vector.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <vector>

namespace hcr::detail {

struct BufferState;
struct ContextState;
struct DeviceGraph;
struct KernelState;
struct TaskNode;
class RuntimeCore;

enum class TaskKind : uint8_t {
  kernel,       // runs a kernel on a device
  join,         // runs nowhere: finishes as soon as its dependencies have (partition, barriers)
  host_access,  // the host holds a buffer (Buffer::acquire, acquire_async) until release
};

struct ArgRec {
  BufferState* buffer;  // `args` hold a reference each; `uargs` borrow those
  Access access;
};

// A workspace (Task::scratch): memory for one attempt of the task alone, never copied, on the node
// of the device that runs it (data/node_memory.hpp keeps the free blocks). `position` is its place
// among the arguments the kernel sees; `block` what the attempt holds (host memory on node 0, else
// the plugin's hcr_memory_t*), null between attempts.
struct ScratchRec {
  uint32_t position;
  DType dtype;
  uint64_t rows, cols;
  uint64_t bytes;
  void* block = nullptr;
};

// A reduce access (engine/reductions.hpp): the buffer reduced into (a reference held) and the
// private copy the task has as its argument in its place (borrowed from `args`).
struct ReduceRec {
  BufferState* target;
  BufferState* copy;
};
struct Edge {
  TaskNode* task;
  bool data;  // the successor reads what this task wrote: a failure propagates along it
};

enum TaskState : uint32_t { kPending = 0, kSucceeded = 1, kFailed = 2 };

struct TaskNode {
  std::atomic<uint32_t> refs{1};
  std::atomic<int32_t> pending{1};  // unresolved dependencies + 1 held while submitting
  std::atomic<uint32_t> state{kPending};
  // Threads in wait_settled(): settling wakes waiters only while there are some. A wake costs a
  // system call, and std::atomic's wait shares a table of 16 slots among all addresses: a
  // wait_all() waiting on its count sits in the slot of every node's `state` at times.
  mutable std::atomic<uint32_t> state_waiters{0};
  std::atomic<uint32_t> granted{0};  // host_access: 1 the host may touch the data, 2 released
  TaskKind kind = TaskKind::kernel;
  bool submitted = false;
  bool waited = false;  // it was submitted behind an unfinished task it depends on (add_edge)
  uint8_t epoch = 0;  // the parity of the wait_all epoch it was submitted in (RuntimeCore::submit)
  int32_t priority = 0;       // what queues and copies order by (a policy may derive it)
  int32_t user_priority = 0;  // what the application gave (Task::priority)
  int32_t pinned = -1;        // Task::on(): the only device allowed
  // `pinned` is a replayed graph's hint (engine/recorded_graph.hpp), not Task::on(): lifted when
  // that device cannot take the task.
  bool pin_is_hint = false;
  // Task::in(): its context (owned by the runtime, which outlives the task); null: the default.
  ContextState* context = nullptr;
  // ContextPolicy: when it was placed (ns, steady clock); 0 while no context policy counts it.
  int64_t ctx_ready_ns = 0;
  std::atomic<int32_t> device{-1};
  RuntimeCore* rt = nullptr;
  KernelState* kernel = nullptr;  // holds a reference (kernel tasks)

  boost::container::small_vector<ArgRec, 3> args;   // references, given up when the task finishes
  boost::container::small_vector<ArgRec, 3> uargs;  // one per distinct buffer, modes combined
  // host_access granted: the buffer, a reference the view holds until Buffer's HostView releases
  // it (its memory, and the runtime, outlive the task: the runtime's end may finish it first).
  BufferState* view = nullptr;
  // Buffer::acquire_async (host_access): called once, when granted or when failed before that.
  void (*grant_fn)(void* user, void* data, TaskNode* token, std::exception_ptr error) = nullptr;
  void* grant_user = nullptr;
  uint64_t bytes = 0;          // what it needs where it runs: its distinct buffers and its scratch
  uint64_t scratch_bytes = 0;  // of those, its scratch
  std::vector<ScratchRec> scratch;  // in the order Task::scratch added them
  int32_t scratch_node = -1;        // the node its scratch blocks are held on, while held
  boost::container::small_vector<hcr_arg_t, 3> abi_args;  // filled at launch, alive until done
  boost::container::small_vector<std::byte, 32> params;
  boost::container::small_vector<uint32_t, 4> param_offsets;
  uint64_t global_size[3] = {0, 0, 0};                 // Task::grid()
  uint32_t local_size[3] = {0, 0, 0};                  // Task::block()
  boost::container::small_vector<TaskNode*, 1> after;  // explicit dependencies (references)
  // Commute accesses (engine/commute_locks.hpp): it has some; it holds all their buffers (from
  // placement to its end); the buffer whose waiting list it is on, and its next there (both
  // under that buffer's lock).
  bool commutes = false;
  // Its reduce accesses, in argument order (empty for nearly every task).
  std::vector<ReduceRec> reduces;
  bool commute_held = false;
  BufferState* commute_waiting = nullptr;
  TaskNode* commute_next = nullptr;

  // Successors, guarded by `lock`; `finished` and `failed` flip under it exactly once.
  SpinLock lock;
  bool finished = false;
  bool failed = false;
  boost::container::small_vector<Edge, 2> successors;
  std::exception_ptr dep_error;  // first failed data predecessor (under lock)

  std::exception_ptr error;  // written before `state` is published

  // Devices that failed this task (it is retried elsewhere) and what each said.
  boost::container::small_vector<uint32_t, 2> excluded;
  std::string device_errors;
  bool data_lost = false;        // an input died with a device: no retry can help
  bool written_through = false;  // eager write-back put its results home before it committed
  // Placed again after another device's copy failed for it; for tasks that run nowhere, fetched
  // again after a copy home failed.
  uint8_t foreign_faults = 0;

  // Data (data_manager.cpp): the node whose replicas this task holds pinned, copies it waits for.
  int32_t data_node = -1;
  std::atomic<int32_t> transfers_pending{0};
  std::exception_ptr transfer_error;
  bool kernel_threw = false;  // `error` came from the kernel itself (CPU implementation)

  uint64_t policy_data = 0;             // sched::TaskRef::policy_data()
  std::atomic<uint64_t> policy_aux{0};  // sched::TaskRef::policy_aux(): any thread, any time
  uint64_t footprint = 0;               // computed lazily for the scheduler
  double size = 0;
  bool footprint_valid = false;
  std::chrono::steady_clock::time_point start;  // handed to the plugin (timing or tracing)
  void* launch_token = nullptr;  // its current launch's done_user_data (launch_slots.hpp)
  // A replay run as one device graph (engine/device_graphs.hpp): this task launches it instead of
  // a kernel (a reference, given up with the task).
  DeviceGraph* device_graph = nullptr;

  ~TaskNode();

  // Tasks come from a per-thread pool (node_pool.hpp).
  static void* operator new(size_t size);
  static void operator delete(void* p) noexcept;
};

/// Blocks until `t` has settled (`state` no longer kPending).
inline void wait_settled(const TaskNode* t) noexcept {
  if (t->state.load(std::memory_order_acquire) != kPending) return;
  // Counted, then `state` read again: against settle_state's store, then its read of the count
  // (seq_cst both sides), one of the two sees the other.
  t->state_waiters.fetch_add(1, std::memory_order_seq_cst);
  for (uint32_t s; (s = t->state.load(std::memory_order_seq_cst)) == kPending;)
    t->state.wait(s, std::memory_order_acquire);
  t->state_waiters.fetch_sub(1, std::memory_order_release);
}

/// Publishes `t`'s final state and wakes the threads in wait_settled, if any.
inline void settle_state(TaskNode* t, TaskState s) noexcept {
  t->state.store(s, std::memory_order_seq_cst);
  if (t->state_waiters.load(std::memory_order_seq_cst) != 0) t->state.notify_all();
}

/// Fills t->footprint and t->size from its kernel and arguments' shapes.
void compute_footprint(TaskNode* t) noexcept;

}  // namespace hcr::detail
