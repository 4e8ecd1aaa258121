// Placement (placement.hpp): ready tasks to the policy and on to the devices.
#include "placement.hpp"

#include "commute_locks.hpp"
#include "device_health.hpp"
#include "task_graph.hpp"
#include "../buffer_state.hpp"
#include "../contexts/context_state.hpp"
#include "../data/data_manager.hpp"
#include "../kernel_state.hpp"
#include "../trace_recorder.hpp"

#include <hcr/error.hpp>

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <deque>
#include <string>
#include <utility>

namespace hcr::detail {

namespace {

// Tasks that became ready while this thread is already dispatching wait here, so chains of
// tasks that finish at once (joins, plugins completing inline) never recurse deeply.
struct ReadyList {
  bool active = false;
  std::deque<std::pair<Placement*, TaskNode*>> items;
};
thread_local ReadyList tl_ready;

}  // namespace

// Tasks a resume made ready: placed together, highest priority first, while no device takes work
// (their pumps are held, as by a pumper that has not finished yet), so each device then starts
// the most urgent of what it was given.
void Placement::place_together(std::vector<TaskNode*> now) noexcept {
  {
    std::vector<sched::TaskRef> refs(now.begin(), now.end());
    policy()->ready_together(refs);  // (priorities it gives count below)
  }
  // Highest priority first (submission order among equals): a policy with one queue for all
  // devices hands them out in this order.
  std::stable_sort(now.begin(), now.end(),
                   [](const TaskNode* a, const TaskNode* b) { return a->priority > b->priority; });
  // Every device's pump is ours until all of them are placed: a device finishing a task meanwhile
  // leaves its request to us, as to any pumper still at work.
  const size_t n = devices_.count();
  std::vector<char> ours(n, 0);
  for (size_t d = 0; d < n; ++d)
    ours[d] = !devices_[d].pumping.exchange(true, std::memory_order_seq_cst);
  for (TaskNode* t : now) place(t);
  for (size_t d = 0; d < n; ++d) {
    if (!ours[d]) continue;
    devices_[d].pumping.store(false, std::memory_order_seq_cst);
    if (usable(d)) stages_.pump(devices_[d]);
  }
}

void Placement::place_batch(std::span<TaskNode* const> tasks) noexcept {
  ReadyList& rl = tl_ready;
  if (rl.active) {  // this thread is placing already: after what it has
    for (TaskNode* t : tasks) rl.items.emplace_back(this, t);
    return;
  }
  rl.active = true;
  // As place_together: every device's pump is ours until all of them are placed; a device whose
  // pump another thread holds is asked to look again below (that pumper sees the request).
  const size_t n = devices_.count();
  boost::container::small_vector<char, 8> ours(n, 0);
  for (size_t d = 0; d < n; ++d)
    ours[d] = !devices_[d].pumping.exchange(true, std::memory_order_seq_cst);
  for (TaskNode* t : tasks) dispatch(t, true);
  for (size_t d = 0; d < n; ++d) {
    if (ours[d]) devices_[d].pumping.store(false, std::memory_order_seq_cst);
    if (usable(d)) stages_.pump(devices_[d]);
  }
  // Tasks made ready meanwhile (joins that finished, commute buffers handed on, launches that
  // completed inline): as place() does.
  while (!rl.items.empty()) {
    auto [placement, next] = rl.items.front();
    rl.items.pop_front();
    placement->dispatch(next);
  }
  rl.active = false;
}

void Placement::place(TaskNode* t) noexcept {
  ReadyList& rl = tl_ready;
  if (rl.active) {
    rl.items.emplace_back(this, t);
    return;
  }
  rl.active = true;
  dispatch(t);
  while (!rl.items.empty()) {
    auto [placement, next] = rl.items.front();
    rl.items.pop_front();
    placement->dispatch(next);
  }
  rl.active = false;
}

void Placement::dispatch(TaskNode* t, bool batch) noexcept {
  if (t->dep_error) {  // set by predecessors before they released us: visible here
    end_.finish(t, dependency_error(t->dep_error));
    return;
  }
  if (t->kind != TaskKind::kernel) {  // joins and host access run where the host memory is
    if (data_.active()) {
      switch (data_.acquire(t, 0)) {
        case DataManager::Status::pending: return;  // data_ready() continues
        case DataManager::Status::failed: end_.finish(t, t->transfer_error); return;
        default: break;
      }
    }
    stages_.host_task_ready(t);
    return;
  }
  KernelState& k = *t->kernel;
  bool runnable = k.any_capable.load(std::memory_order_relaxed);
  const uint32_t retired = health_.retired();
  // The cheap answer holds unless something narrows the devices: a pin, a context, memory limits,
  // devices that failed this task, devices out of scheduling.
  if (runnable && (t->pinned >= 0 || t->context != nullptr || data_.active() ||
                   !t->excluded.empty() || retired != 0)) {
    runnable = false;
    for (size_t d = 0, n = devices_.count(); d < n && !runnable; ++d)
      runnable = sched::TaskRef(t).can_run(static_cast<sched::DeviceId>(d));
  }
  if (!runnable) {
    if (t->pin_is_hint) {  // a replay's hint: the device it ran on last cannot take it now
      t->pinned = -1;
      t->pin_is_hint = false;
      dispatch(t, batch);
      return;
    }
    if (health_.withheld() != 0) {
      release_commute(t);  // parked, it holds no commute buffer: it takes them again once placed
      if (park(t)) return;
    }
    end_.finish(t, no_device_error(*t));
    return;
  }
  // Its commute buffers, all or none, before it goes to a device; placed again, it keeps them.
  if (t->commutes && !t->commute_held) {
    CommuteResumed resumed;
    const bool holds = commute_take(t, resumed);
    for (TaskNode* r : resumed) place(r);  // (after this one: the thread's ready list)
    if (!holds) return;  // it waits, holding nothing: placed when handed the buffer
  }
  // Once pushed, the task is another thread's to take, run, finish and free at any moment, while
  // the offers below still read it: a reference of ours keeps it until we are done (its node could
  // otherwise be reused for a new task under us), unless place_batch's caller keeps it. Finishing
  // gives the task's buffers up, so the inputs to prefetch are taken, with references, before the
  // push.
  const Ref<TaskNode> keep = batch ? Ref<TaskNode>() : Ref<TaskNode>::share(t);
  boost::container::small_vector<Ref<BufferState>, 3> inputs;
  if (data_.active() && prefetch_)
    for (const ArgRec& a : t->uargs)
      if (reads(a.access)) inputs.push_back(Ref<BufferState>::share(a.buffer));
  sched::DeviceId d;
  if (measure_.load(std::memory_order_relaxed)) {  // counters on: the decision's cost
    const int64_t t0 = TraceRecorder::now_ns();
    d = policy()->push(sched::TaskRef(t));
    decision_ns_.fetch_add(TraceRecorder::now_ns() - t0, std::memory_order_relaxed);
    decisions_.fetch_add(1, std::memory_order_relaxed);
  } else {
    d = policy()->push(sched::TaskRef(t));
  }
  // A device left scheduling meanwhile: retire() counts before it drains, so either its drain saw
  // this task, or this sees the count and drains again (the task may sit on that device or in a
  // shared queue no device can take it from).
  if (health_.retired() != retired) {
    for (size_t x = 0, n = devices_.count(); x < n; ++x)
      if (!usable(x)) take_back(static_cast<uint32_t>(x));
    if (d != sched::kAnyDevice) {
      if (usable(d)) stages_.pump(devices_[d]);
      return;
    }
  } else if (d != sched::kAnyDevice) {
    // Into the device's memory, or home for a device working in host memory (a slot of it would
    // otherwise wait for the copies out of another device's memory).
    if (!inputs.empty())
      data_.prefetch({inputs.data(), inputs.size()}, t->priority, devices_[d].info.memory_node,
                     t->context);
    if (!batch) stages_.pump(devices_[d]);
    return;
  }
  if (batch) return;  // place_batch feeds every device once it has placed them all
  // The task waits in a shared queue: offer it to idle devices until one takes work. Starting
  // from a rotating device spreads the offers; stopping at the first taker keeps this O(1) for
  // many devices (a device finishing a task pumps itself anyway).
  const size_t n = devices_.count();
  const size_t first = next_offer_.fetch_add(1, std::memory_order_relaxed) % n;
  for (size_t i = 0; i < n; ++i) {
    DeviceState& ds = devices_[(first + i) % n];
    if (ds.in_flight.load(std::memory_order_relaxed) < ds.window &&
        sched::TaskRef(t).can_run(ds.info.id) && stages_.pump(ds) > 0)
      return;
  }
}

void Placement::release_commute(TaskNode* t) noexcept {
  if (!t->commutes) return;
  CommuteResumed resumed;
  commute_release(t, resumed);
  for (TaskNode* r : resumed) place(r);
}

void Placement::take_back(uint32_t d) noexcept {
  for (sched::TaskRef q : policy()->drain(d)) place(q.node());
}

void Placement::move_ahead(TaskNode* t, std::span<const Ref<BufferState>> inputs) noexcept {
  if (const int64_t node = expected_node(t); node >= 0)
    data_.prefetch(inputs, t->priority, static_cast<uint32_t>(node), t->context);
}

// A successor that still waits for other tasks runs where its pin, or the policy's plan, says: what
// `t` wrote for it starts moving there now, while the others finish, rather than once the last of
// them is done (the copies overlap their computation). Before the successors' counts drop: until
// then each waits for `t`, so it is alive.
void Placement::move_ahead_for(TaskNode* t, std::span<const Edge> successors) noexcept {
  if (!data_.active() || !prefetch_) return;
  const int32_t ran = t->device.load(std::memory_order_relaxed);
  const uint32_t from = ran >= 0 ? devices_[static_cast<size_t>(ran)].info.memory_node : 0;
  for (const Edge& e : successors) {
    TaskNode* s = e.task;
    if (!e.data || s->kind != TaskKind::kernel || s->pending.load(std::memory_order_relaxed) <= 1)
      continue;  // (ready once `t` is done: placing it prefetches)
    const int64_t node = expected_node(s);
    if (node < 0 || static_cast<uint32_t>(node) == from) continue;
    // Not a buffer of a commute run, whose other tasks may be writing it meanwhile: `t`'s run,
    // or the successor's (it moves once placed, holding the buffer). (The successor's `args`, not
    // its `uargs`: its submit may still be filling those.)
    boost::container::small_vector<Ref<BufferState>, 3> inputs;
    for (const ArgRec& w : t->uargs) {
      if (!writes(w.access) || commutes(w.access)) continue;
      bool wanted = false;
      for (const ArgRec& r : s->args) {
        if (r.buffer != w.buffer) continue;
        if (commutes(r.access)) {
          wanted = false;
          break;
        }
        wanted = wanted || reads(r.access);
      }
      if (wanted) inputs.push_back(Ref<BufferState>::share(w.buffer));
    }
    if (!inputs.empty())
      data_.prefetch({inputs.data(), inputs.size()}, s->priority, node, s->context);
  }
}

int64_t Placement::expected_node(TaskNode* t) noexcept {
  const int64_t d = t->pinned >= 0 ? t->pinned : policy()->expected_device(sched::TaskRef(t));
  if (d < 0 || d >= static_cast<int64_t>(devices_.count()) || !usable(static_cast<size_t>(d)))
    return -1;  // (a plan may still name a device withheld or quarantined since)
  return devices_[static_cast<size_t>(d)].info.memory_node;
}

std::exception_ptr Placement::no_device_error(const TaskNode& t) const {
  const KernelState& k = *t.kernel;
  auto reason = [&](size_t d) -> std::string {
    for (uint32_t x : t.excluded)
      if (x == d) {  // it failed there: say what the device said
        std::string name = devices_[d].info.name + ": ";
        size_t at = t.device_errors.find(name);
        if (at == std::string::npos) return "failed";
        size_t end = t.device_errors.find("; ", at);
        return "failed: " + t.device_errors.substr(at + name.size(), end == std::string::npos
                                                                         ? std::string::npos
                                                                         : end - at - name.size());
      }
    auto last = [&] {
      std::lock_guard<SpinLock> g(devices_[d].fault_lock);
      return devices_[d].last_fault;
    };
    switch (devices_[d].status.load(std::memory_order_relaxed)) {
      case DeviceState::kQuarantined:
        return "quarantined after repeated failures (the last: " + last() + ")";
      case DeviceState::kLost: return "lost (" + last() + ")";
      case DeviceState::kRemoved: return "removed";
      case DeviceState::kWithheld: return "withheld (the node arbiter gave it to another process)";
      default: break;
    }
    if (!k.can_run(d))
      return k.devices[d].why_not.empty() ? "no implementation" : k.devices[d].why_not;
    if (!stages_.fits(&t, d)) {
      const uint64_t limit = data_.limit(devices_[d].info.memory_node);
      const std::string scratch =
          t.scratch_bytes != 0 ? " (" + std::to_string(t.scratch_bytes) + " bytes of scratch)"
                               : std::string();
      if (t.bytes <= limit && t.context != nullptr)
        return "the context's memory_quota of " + std::to_string(t.context->memory_quota) +
               " bytes cannot hold the task's " + std::to_string(t.bytes) + scratch;
      return "its memory limit of " + std::to_string(limit) + " bytes cannot hold the task's " +
             std::to_string(t.bytes) + scratch;
    }
    return "no reason known";
  };
  std::string msg = "no device can run kernel '" + k.name + "'";
  if (t.context != nullptr) {
    // Its context's devices are the only ones it may use: name the context and say why each
    // of them refuses (a context may hold none that runs the kernel).
    msg = "no device of context '" + t.context->name + "' can run kernel '" + k.name + "'";
    bool any = false;
    for (size_t d = 0, n = devices_.count(); d < n; ++d)
      if (t.context->has(static_cast<uint32_t>(d))) {
        msg += (any ? "; " : ": ") + devices_[d].info.name + ": " +
               (t.pinned >= 0 && static_cast<size_t>(t.pinned) != d ? "not the device the task "
                                                                      "is pinned to (Task::on)"
                                                                    : reason(d));
        any = true;
      }
    if (t.pinned >= 0 && !t.context->has(static_cast<uint32_t>(t.pinned)))
      msg += std::string(any ? "; " : ": ") + "the task is pinned (Task::on) to device " +
             std::to_string(t.pinned) + " ('" + devices_[t.pinned].info.name +
             "'), which is not in the context";
  } else if (t.pinned >= 0) {
    msg = "kernel '" + k.name + "' cannot run on device " + std::to_string(t.pinned) + " ('" +
          devices_[t.pinned].info.name +
          "'), the only one the task allows (Task::on): " + reason(static_cast<size_t>(t.pinned));
  } else if (devices_.count() == 0) {
    msg += ": no devices (no plugin loaded any; run `hcr devices` to see why)";
  } else {
    for (size_t d = 0, n = devices_.count(); d < n; ++d)
      msg += (d == 0 ? ": " : "; ") + devices_[d].info.name + ": " + reason(d);
  }
  return std::make_exception_ptr(Error(ErrorCode::no_device, msg));
}

bool Placement::park(TaskNode* t) noexcept {
  const KernelState& k = *t->kernel;
  return health_.park(
      t, devices_.count(), [&](uint32_t d) -> DeviceState& { return devices_[d]; },
      [&](uint32_t d) {
        return k.can_run(d) && stages_.fits(t, d) &&
               (t->pinned < 0 || static_cast<uint32_t>(t->pinned) == d) &&
               (t->context == nullptr || t->context->has(d)) &&
               std::find(t->excluded.begin(), t->excluded.end(), d) == t->excluded.end();
      });
}

}  // namespace hcr::detail
