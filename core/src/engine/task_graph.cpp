// The task graph (task_graph.hpp): dependency frontiers, edges, counts and the end of a task. On
// the per-task hot path: no global lock, no allocation beyond the task's own small vectors.
#include "task_graph.hpp"

#include "halo_reads.hpp"

#include "../buffer_state.hpp"
#include "../kernel_state.hpp"

#include <hcr/error.hpp>

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <string>
#include <utility>

namespace hcr::detail {

namespace {

void note_dependency_failure(TaskNode* s, const std::exception_ptr& cause) noexcept {
  s->lock.lock();
  if (!s->dep_error) s->dep_error = cause;
  s->lock.unlock();
}

// pred -> succ. `data`: succ reads what pred wrote, so pred's failure becomes succ's. Returns
// whether succ now waits for pred (false: pred had finished).
bool add_edge(TaskNode* pred, TaskNode* succ, bool data) {
  if (pred == succ) return false;
  pred->lock.lock();
  if (!pred->finished) {
    pred->successors.push_back({succ, data});
    succ->pending.fetch_add(1, std::memory_order_relaxed);
    succ->waited = true;  // (the submitting thread's, read once the task is ready)
    pred->lock.unlock();
    return true;
  }
  bool failed = pred->failed;
  std::exception_ptr cause = failed ? pred->error : nullptr;
  pred->lock.unlock();
  if (data && failed) note_dependency_failure(succ, cause);
  return false;
}

}  // namespace

std::string what(const std::exception_ptr& e) {
  if (!e) return {};
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

std::exception_ptr dependency_error(const std::exception_ptr& cause) {
  try {
    std::rethrow_exception(cause);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::dependency) return cause;  // keep the root cause's message
  } catch (...) {
  }
  std::string text = "unknown exception";
  try {
    std::rethrow_exception(cause);
  } catch (const std::exception& x) {
    text = x.what();
  } catch (...) {
  }
  return std::make_exception_ptr(
      Error(ErrorCode::dependency, "a task this one depends on failed: " + text));
}

void TaskGraph::submit(TaskNode* t) {
  t->submitted = true;
  // Back-pressure: tickets in submission order; the task holding ticket `seq` enters once fewer
  // than max_in_flight_ of the tasks before it are unfinished. completed_ shares its line with
  // open_, which this submit writes below anyway.
  const uint64_t seq = submitted_.fetch_add(1, std::memory_order_relaxed);
  if (max_in_flight_ != 0 &&
      static_cast<int64_t>(seq - completed_.load(std::memory_order_relaxed)) >=
          static_cast<int64_t>(max_in_flight_)) {
    try {
      wait_for_room(seq);
    } catch (...) {  // room can never come (tasks held by a pause fill the window)
      retire_ticket();
      t->submitted = false;
      release(t);
      throw;
    }
  }
  // wait_all's epochs: counted in the current epoch's parity. An epoch that moved on between the
  // load and the count may have been looked at without this task: it then counts in the new one
  // instead, so that a wait_all beginning after this submit returns always waits for it. A task
  // submitted by a running kernel counts with that kernel's task instead, whose count stays open
  // until it finishes: a wait_all that waits for a task waits for what it submits (fork-join).
  if (const TaskNode* parent = running_cpu_task(); parent != nullptr && parent->rt == owner_) {
    t->epoch = parent->epoch;
    open_[t->epoch].fetch_add(1, std::memory_order_seq_cst);
  } else {
    uint64_t e = epoch_.load(std::memory_order_seq_cst);
    for (;;) {
      open_[e & 1].fetch_add(1, std::memory_order_seq_cst);
      const uint64_t now = epoch_.load(std::memory_order_seq_cst);
      if (now == e) break;
      if (open_[e & 1].fetch_sub(1, std::memory_order_acq_rel) == 1) open_[e & 1].notify_all();
      e = now;
    }
    t->epoch = static_cast<uint8_t>(e & 1);
  }

  // One registration per distinct buffer, with the union of its access modes. Inputs no unfinished
  // task still writes are noted: should the task wait for others, they can move now.
  boost::container::small_vector<Ref<BufferState>, 3> available;
  const bool move_early = stages_.moves_inputs_early(*t);
  const size_t n = t->args.size();
  bool halo = false;
  for (size_t i = 0; i < n; ++i) {
    BufferState* b = t->args[i].buffer;
    halo |= b->halo != 0;
    int mode = static_cast<int>(t->args[i].access);
    bool first = true;
    for (size_t j = 0; j < n; ++j) {
      if (t->args[j].buffer != b) continue;
      if (j < i) {
        first = false;
        break;
      }
      mode |= static_cast<int>(t->args[j].access);
    }
    if (first) {
      const Access a = static_cast<Access>(mode);
      t->uargs.push_back({b, a});
      t->bytes += b->bytes();
      t->commutes |= commutes(a);
      // (Another task of its commute run may be writing it meanwhile: it moves once placed.)
      if (!register_access(*b, t, a) && move_early && reads(a) && !commutes(a))
        available.push_back(Ref<BufferState>::share(b));
    }
  }
  // A halo tile read reads its neighbours' edges too (halo_reads.hpp).
  if (halo) [[unlikely]]
    for (const Ref<BufferState>& g : ghost_sources(*t)) register_access(*g, t, Access::read);
  for (TaskNode* before : t->after) {
    add_edge(before, t, true);
    release(before);
  }
  t->after.clear();
  // Still waiting (beyond the submission's own count, so `t` stays ours): what it reads and is
  // ready may start moving to where it will run (a producer that finished before this submit
  // leaves it no one to do so).
  if (!available.empty() && t->pending.load(std::memory_order_relaxed) > 1)
    stages_.waiting_with_inputs(t, {available.data(), available.size()});
  if (gate_ != nullptr && gate_->closed() && gate_->hold(t, seq)) return;
  if (t->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) stages_.ready(t);
}

void TaskGraph::submit_prepared(std::span<TaskNode* const> tasks, void (*link)(void*) noexcept,
                                void* user) {
  const size_t n = tasks.size();
  if (n == 0) return;
  const uint64_t seq = submitted_.fetch_add(n, std::memory_order_relaxed);
  if (max_in_flight_ != 0 &&
      static_cast<int64_t>(seq - completed_.load(std::memory_order_relaxed)) >=
          static_cast<int64_t>(max_in_flight_)) {
    try {
      wait_for_room(seq);
    } catch (...) {
      for (size_t i = 0; i < n; ++i) retire_ticket();
      for (TaskNode* t : tasks) release(t);
      throw;
    }
  }
  // wait_all's epochs, as submit() counts one task, for all of them at once.
  uint8_t epoch;
  if (const TaskNode* parent = running_cpu_task(); parent != nullptr && parent->rt == owner_) {
    epoch = parent->epoch;
    open_[epoch].fetch_add(static_cast<int64_t>(n), std::memory_order_seq_cst);
  } else {
    uint64_t e = epoch_.load(std::memory_order_seq_cst);
    for (;;) {
      open_[e & 1].fetch_add(static_cast<int64_t>(n), std::memory_order_seq_cst);
      const uint64_t now = epoch_.load(std::memory_order_seq_cst);
      if (now == e) break;
      if (open_[e & 1].fetch_sub(static_cast<int64_t>(n), std::memory_order_acq_rel) ==
          static_cast<int64_t>(n))
        open_[e & 1].notify_all();
      e = now;
    }
    epoch = static_cast<uint8_t>(e & 1);
  }
  link(user);
  // The ready ones go on in runs: placed as a batch, they cost placement less than one by one,
  // and the devices start on the first run while the rest are counted down.
  constexpr size_t kRun = 256;
  TaskNode* run[kRun];
  size_t ready = 0;
  const bool gated = gate_ != nullptr && gate_->closed();
  for (size_t i = 0; i < n; ++i) {
    // (Set here, in the one pass over the tasks: none is handed on before its own count drops
    // below, so none is seen by another thread before.)
    TaskNode* t = tasks[i];
    t->submitted = true;
    t->epoch = epoch;
    if (gated && gate_->hold(t, seq + i)) continue;
    if (t->pending.fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
    run[ready++] = t;
    if (ready == kRun) {
      stages_.ready_batch({run, ready});
      ready = 0;
    }
  }
  if (ready == 1) stages_.ready(run[0]);
  else if (ready != 0) stages_.ready_batch({run, ready});
}

namespace {

// Drops the tasks of `list` that finished well (a reference each): waiting for them is moot, and
// a long run of commute tasks or readers would otherwise cost each newcomer a sweep of them all.
template <class List, class TaskOf>
void prune_succeeded(List& list, TaskOf task_of) noexcept {
  size_t keep = 0;
  for (auto& x : list) {
    if (task_of(x)->state.load(std::memory_order_acquire) == kSucceeded) release(task_of(x));
    else list[keep++] = x;
  }
  list.resize(keep);
}

}  // namespace

// Commute runs: consecutive commute accesses wait for what came before the run (its last writer
// and the readers since, or the tasks of an earlier run), never for each other; the first access
// of another mode closes the run and waits for all of its tasks, which then stand for the last
// writer until a write replaces them. That they do not run at once is the commute locks' part
// (engine/commute_locks.hpp), taken when each is placed.
bool TaskGraph::register_commute(BufferState& b, TaskNode* t) {
  if (!b.run_open) {  // a new run: the frontier so far is what its tasks wait for
    for (TaskNode* c : b.commuters) b.before_run.push_back({c, true});
    b.commuters.clear();
    b.prune_commuters_at = 16;
    if (b.last_writer) b.before_run.push_back({std::exchange(b.last_writer, nullptr), true});
    for (TaskNode* r : b.readers) b.before_run.push_back({r, false});
    b.readers.clear();
    b.prune_readers_at = 16;
    b.run_open = true;
  }
  // Those that finished well are dropped: the run may be long and what came before it wide.
  prune_succeeded(b.before_run, [](const BufferState::Before& x) { return x.task; });
  bool waits = false;
  for (const BufferState::Before& x : b.before_run)
    if (add_edge(x.task, t, x.data) && x.data) waits = true;
  if (b.commuters.size() >= b.prune_commuters_at) {
    prune_succeeded(b.commuters, [](TaskNode* c) { return c; });
    b.prune_commuters_at = std::max<size_t>(16, 2 * b.commuters.size());
  }
  retain(t);
  b.commuters.push_back(t);
  return waits;
}

bool TaskGraph::register_access(BufferState& b, TaskNode* t, Access mode) {
  b.lock.lock();
  if (commutes(mode)) {
    const bool waits = register_commute(b, t);
    b.lock.unlock();
    return waits;
  }
  if (b.run_open) {  // this access closes the run: its tasks are now the last writers
    for (const BufferState::Before& x : b.before_run) release(x.task);
    b.before_run.clear();
    b.run_open = false;
  }
  bool waits = reads(mode) && b.last_writer && add_edge(b.last_writer, t, true);
  for (TaskNode* c : b.commuters)
    if (add_edge(c, t, reads(mode)) && reads(mode)) waits = true;
  if (writes(mode)) {
    if (b.last_writer && !reads(mode)) add_edge(b.last_writer, t, false);
    for (TaskNode* c : b.commuters) release(c);
    b.commuters.clear();
    b.prune_commuters_at = 16;
    for (TaskNode* r : b.readers) {
      add_edge(r, t, false);
      release(r);
    }
    b.readers.clear();
    b.prune_readers_at = 16;
    retain(t);
    if (b.last_writer) release(b.last_writer);
    b.last_writer = t;
  } else {
    // Forget finished readers so the list stays short; the next sweep waits until the list has
    // doubled, so many readers still running (submitted faster than they run) cost O(1) each
    // rather than a sweep of all of them per new reader.
    if (b.readers.size() >= b.prune_readers_at) {
      size_t keep = 0;
      for (TaskNode* r : b.readers) {
        if (r->state.load(std::memory_order_acquire) == kPending) b.readers[keep++] = r;
        else release(r);
      }
      b.readers.resize(keep);
      b.prune_readers_at = std::max<size_t>(16, 2 * keep);
    }
    retain(t);
    b.readers.push_back(t);
  }
  b.lock.unlock();
  return waits;
}

void TaskGraph::count_finished() noexcept {
  // A submitter blocked for room is woken once the count it waits for is reached (seq_cst against
  // its publishing room_at_, then reading completed_).
  const uint64_t done = completed_.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (done >= room_at_.load(std::memory_order_seq_cst)) {
    { std::lock_guard<std::mutex> g(room_mutex_); }
    room_cv_.notify_all();
  }
}

void TaskGraph::settle(TaskNode* t, const std::exception_ptr& e) noexcept {
  if (e) {
    t->error = e;
    failed_.fetch_add(1, std::memory_order_relaxed);
  }
  // Counted before any successor can run, so stats() read after waiting for a later task (which
  // waited for this one) include it.
  count_finished();
  boost::container::small_vector<Edge, 2> successors;
  t->lock.lock();
  t->finished = true;
  t->failed = static_cast<bool>(e);
  successors.swap(t->successors);
  t->lock.unlock();
  if (!e && !successors.empty()) stages_.finished_before(t, {successors.data(), successors.size()});
  // Successors this completion makes ready reach placement highest priority first (among tasks
  // ready at once, the application's priority decides who is placed first).
  boost::container::small_vector<TaskNode*, 4> now_ready;
  for (const Edge& s : successors) {
    if (e && s.data) note_dependency_failure(s.task, e);
    if (s.task->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) now_ready.push_back(s.task);
  }
  if (now_ready.size() > 1)
    std::stable_sort(now_ready.begin(), now_ready.end(), [](const TaskNode* a, const TaskNode* b) {
      return a->priority > b->priority;
    });
  for (TaskNode* r : now_ready) stages_.ready(r);
  settle_state(t, e ? kFailed : kSucceeded);
}

void TaskGraph::close(TaskNode* t) noexcept {
  // Done with its buffers: their references go now, not with the node. A buffer's dependency
  // frontier (last_writer, readers) keeps the node while the buffer lives, so references held
  // until then made a cycle that leaked every buffer a task had used, and the runtime with them
  // (LeakSanitizer). Before the count below, so that wait_all() covers what freeing them does.
  for (const ArgRec& a : t->args) release(a.buffer);
  t->args.clear();
  t->uargs.clear();
  std::atomic<int64_t>& open = open_[t->epoch];
  if (open.fetch_sub(1, std::memory_order_acq_rel) == 1) open.notify_all();
  release(t);  // the reference held while the task ran
}

// Why this waits for exactly the tasks submitted before it began: a task T whose submit returned
// counted itself in the parity of epoch E and then saw the epoch still at E. The first wait_all to
// move the epoch past E (under epoch_mutex_, after T's check in the single order of seq_cst
// operations) reads T's count, so it waits for T. Either that is this call, or an earlier one that
// finished before this one could take the mutex.
void TaskGraph::wait_all() noexcept {
  std::lock_guard<std::mutex> g(epoch_mutex_);
  std::atomic<int64_t>& open = open_[epoch_.fetch_add(1, std::memory_order_seq_cst) & 1];
  for (int64_t v; (v = open.load(std::memory_order_acquire)) != 0;)
    open.wait(v, std::memory_order_acquire);
}

void TaskGraph::wait_idle() noexcept {
  while (open_[0].load(std::memory_order_acquire) != 0 ||
         open_[1].load(std::memory_order_acquire) != 0)
    wait_all();
}

void TaskGraph::wait_for_room(uint64_t seq) {
  // Threads that must not wait go over the bound: a kernel (the tasks in flight may need its
  // worker, or be its own successors), a thread holding a host view (they may wait for its
  // release).
  if (!stages_.may_wait_for_room()) return;
  // Wait for room for a batch (a sixteenth of the bound), not for one task: a submitter kept at
  // the bound would otherwise be woken once per completion.
  const uint64_t target = seq + 1 - max_in_flight_ + max_in_flight_ / 16;
  std::unique_lock<std::mutex> lock(room_mutex_);
  if (completed_.load(std::memory_order_seq_cst) >= target) return;
  throttled_.fetch_add(1, std::memory_order_relaxed);
  throttled_now_.fetch_add(1, std::memory_order_relaxed);
  auto it = room_targets_.insert(target);
  room_at_.store(*room_targets_.begin(), std::memory_order_seq_cst);
  auto leave = [&] {
    room_targets_.erase(it);
    room_at_.store(room_targets_.empty() ? UINT64_MAX : *room_targets_.begin(),
                   std::memory_order_seq_cst);
    throttled_now_.fetch_sub(1, std::memory_order_relaxed);
  };
  // The gate wakes us when it keeps another task: room may have become impossible.
  while (completed_.load(std::memory_order_seq_cst) < target) {
    if (const size_t held = gate_ != nullptr ? gate_->held_before(seq) : 0; held > seq - target) {
      leave();
      throw Error(ErrorCode::invalid_argument,
                  "Runtime::submit would wait forever: " + std::to_string(held) +
                      " task(s) submitted since Runtime::pause() wait for Runtime::resume() "
                      "and fill the window of [runtime] max_tasks_in_flight = " +
                      std::to_string(max_in_flight_) +
                      " unfinished tasks; resume() first, or raise max_tasks_in_flight");
    }
    room_cv_.wait(lock);
  }
  leave();
}

void TaskGraph::gate_changed() noexcept {
  if (throttled_now_.load(std::memory_order_seq_cst) != 0) {
    { std::lock_guard<std::mutex> g(room_mutex_); }
    room_cv_.notify_all();
  }
}

void TaskGraph::retire_ticket() noexcept {
  abandoned_.fetch_add(1, std::memory_order_relaxed);
  count_finished();
}

TaskGraph::Counts TaskGraph::counts() const noexcept {
  // A submitter waiting for room holds a ticket its task has not used yet; a submit refused while
  // it waited for room (retire_ticket) counts in neither.
  const uint64_t abandoned = abandoned_.load(std::memory_order_relaxed);
  Counts c;
  c.submitted = submitted_.load(std::memory_order_relaxed) -
                throttled_now_.load(std::memory_order_relaxed) - abandoned;
  c.completed = completed_.load(std::memory_order_relaxed) - abandoned;
  c.failed = failed_.load(std::memory_order_relaxed);
  c.throttled = throttled_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace hcr::detail
