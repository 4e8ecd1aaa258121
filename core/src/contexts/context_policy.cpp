// Scheduling contexts' composite policy: per-context policy instances behind one Policy, and the
// arbitration between contexts sharing a device. Only in the path once a context exists.
#include "context_policy.hpp"

#include "../task_node.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <climits>
#include <cmath>
#include <limits>
#include <utility>

namespace hcr::detail {

ContextPolicy::ContextPolicy(std::unique_ptr<sched::Policy> default_policy,
                             ContextState& default_context, sched::Context& core)
    : core_(core), energy_(default_policy->wants_energy()) {
  slots_[0] = std::make_unique<Slot>();
  slots_[0]->ctx = &default_context;
  slots_[0]->policy = std::move(default_policy);
  count_.store(1, std::memory_order_release);
}

void ContextPolicy::add(ContextState& c, std::unique_ptr<sched::Policy> policy) {
  const uint32_t i = count_.load(std::memory_order_relaxed);
  auto s = std::make_unique<Slot>();
  s->ctx = &c;
  s->policy = std::move(policy);
  {
    // A new context starts level with the busy ones: it is owed nothing for the time before it.
    std::lock_guard<SpinLock> g(lock_);
    double least = std::numeric_limits<double>::infinity();
    for (uint32_t k = 0; k < i; ++k)
      if (slots_[k]->pending > 0) least = std::min(least, slots_[k]->vtime);
    s->vtime = std::isfinite(least) ? std::max(least, floor_) : floor_;
  }
  slots_[i] = std::move(s);
  count_.store(i + 1, std::memory_order_release);  // readers index slots below it
  if (c.reserve > 0) {
    reserving_.store(true, std::memory_order_release);
    std::lock_guard<std::mutex> g(timer_mutex_);
    if (!timer_.joinable() && !timer_stop_ && pump_) timer_ = std::thread([this] { lapse_loop(); });
  }
}

void ContextPolicy::stop() noexcept {
  {
    std::lock_guard<std::mutex> g(timer_mutex_);
    timer_stop_ = true;
  }
  timer_cv_.notify_all();
  if (timer_.joinable()) timer_.join();
}

void ContextPolicy::lapse_loop() {
  std::unique_lock<std::mutex> lock(timer_mutex_);
  while (!timer_stop_) {
    const int64_t now = now_ns();
    int64_t next = now + 10'000'000;  // (a missed notification costs at most this)
    for (uint32_t w = 0; w < 2; ++w)
      for (uint64_t bits = held_[w].load(std::memory_order_acquire); bits != 0; bits &= bits - 1) {
        const auto d = static_cast<sched::DeviceId>(w * 64 + std::countr_zero(bits));
        bool still = false;
        for (uint32_t k = 0, n = count_.load(std::memory_order_acquire); k < n; ++k)
          if (reserved_for(*slots_[k]->ctx, d, now)) {
            still = true;
            next = std::min(next, slots_[k]->ctx->active_until_ns.load(std::memory_order_relaxed));
          }
        if (still) continue;
        held_[w].fetch_and(~(uint64_t{1} << (d % 64)), std::memory_order_acq_rel);
        lock.unlock();
        pump_(d);  // the lower classes' work it held back
        lock.lock();
      }
    timer_cv_.wait_for(lock, std::chrono::nanoseconds(std::max<int64_t>(next - now, 100'000)));
  }
}

// A context with a reserve counts as active this long after its last task was placed: longer
// than the gaps of a latency stream, short enough that the lower classes soon have every device
// again once it stops.
constexpr int64_t kReserveHoldNs = 50'000'000;

namespace {
// Calls f(d) for each device a context with a reserve holds: the first `reserve` of its devices.
template <class F>
void for_each_held(const ContextState& c, F f) {
  uint32_t seen = 0;
  for (uint32_t w = 0; w < 2 && seen < c.reserve; ++w)
    for (uint64_t bits = c.bits[w].load(std::memory_order_relaxed); bits != 0 && seen < c.reserve;
         bits &= bits - 1, ++seen)
      f(static_cast<sched::DeviceId>(w * 64 + std::countr_zero(bits)));
}
}  // namespace

bool ContextPolicy::reserved_for(const ContextState& c, sched::DeviceId d, int64_t now) noexcept {
  if (c.reserve == 0 || now >= c.active_until_ns.load(std::memory_order_relaxed) || !c.has(d))
    return false;
  bool held = false;
  for_each_held(c, [&](sched::DeviceId x) { held = held || x == d; });
  return held;
}

int64_t ContextPolicy::now_ns() const noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ContextPolicy::Slot& ContextPolicy::slot_of(sched::TaskRef t) const noexcept {
  const ContextState* c = t.node()->context;
  return *slots_[c == nullptr ? 0 : c->index];
}

void ContextPolicy::activate(Slot& s) noexcept {
  std::lock_guard<SpinLock> g(lock_);
  if (s.pending++ > 0) return;
  // Idle until now: no credit banked. It resumes at the least virtual time of the busy ones (or
  // where they last were), so it neither starves them with a burst nor is starved itself.
  double least = std::numeric_limits<double>::infinity();
  for (uint32_t k = 0, n = count_.load(std::memory_order_acquire); k < n; ++k)
    if (slots_[k].get() != &s && slots_[k]->pending > 0) least = std::min(least, slots_[k]->vtime);
  if (std::isfinite(least)) floor_ = std::max(floor_, least);
  s.vtime = std::max(s.vtime, floor_);
}

sched::DeviceId ContextPolicy::push(sched::TaskRef task) {
  Slot& s = slot_of(task);
  // Marked as counted: tasks the default policy held before this policy took over are not.
  task.node()->ctx_ready_ns = now_ns();
  if (s.ctx->reserve > 0)
    s.ctx->active_until_ns.store(task.node()->ctx_ready_ns + kReserveHoldNs,
                                 std::memory_order_relaxed);
  activate(s);
  const sched::DeviceId placed = s.policy->push(task);
  if (s.ctx->reserve > 0 && placed == sched::kAnyDevice) {
    // Its held devices take it (the others leave it to them while they are free): asked now,
    // whichever device the core offers it to first.
    for_each_held(*s.ctx, [&](sched::DeviceId d) {
      if (core_.in_flight(d) == 0) core_.wake(d);
    });
  }
  return placed;
}

sched::TaskRef ContextPolicy::pop(sched::DeviceId d) {
  struct Candidate {
    int priority;
    double vtime;
    uint32_t index;
  };
  Candidate order[kMaxContexts];
  uint32_t n = 0;
  // A device held back for an active context with a reserve serves no lower class meanwhile; and
  // another device leaves that context's tasks to its held device while that one is free (taken
  // here, a task would wait behind the task running here).
  int floor = INT_MIN;
  bool held = false;
  uint64_t skip = 0;  // contexts whose tasks d leaves to their held devices
  if (reserving_.load(std::memory_order_acquire)) {
    const int64_t now = now_ns();
    for (uint32_t k = 0, c = count_.load(std::memory_order_acquire); k < c; ++k) {
      const ContextState& x = *slots_[k]->ctx;
      if (x.reserve == 0 || now >= x.active_until_ns.load(std::memory_order_relaxed)) continue;
      if (reserved_for(x, d, now)) {
        floor = std::max(floor, x.priority);
        continue;
      }
      for_each_held(x, [&](sched::DeviceId h) {
        if (core_.in_flight(h) == 0) skip |= uint64_t{1} << k;
      });
    }
  }
  {
    std::lock_guard<SpinLock> g(lock_);
    for (uint32_t k = 0, c = count_.load(std::memory_order_acquire); k < c; ++k) {
      const Slot& s = *slots_[k];
      // The default context is always asked: its policy may hold tasks from before this policy
      // took over, which no count includes.
      if ((s.pending > 0 || k == 0) && s.ctx->has(d) && ((skip >> k) & 1u) == 0) {
        if (s.ctx->priority >= floor) order[n++] = {s.ctx->priority, s.vtime, k};
        else if (s.pending > 0) held = true;
      }
    }
  }
  if (held) {  // pumped again when the reserve lapses
    const uint64_t bit = uint64_t{1} << (d % 64);
    if ((held_[d / 64].fetch_or(bit, std::memory_order_acq_rel) & bit) == 0) timer_cv_.notify_one();
  }
  // Strict by class; within one, least device time per weight first (ties: the older context).
  std::sort(order, order + n, [](const Candidate& a, const Candidate& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.vtime != b.vtime) return a.vtime < b.vtime;
    return a.index < b.index;
  });
  for (uint32_t i = 0; i < n; ++i) {
    Slot& s = *slots_[order[i].index];
    sched::TaskRef t = s.policy->pop(d);
    if (!t) continue;
    TaskNode* node = t.node();
    if (node->ctx_ready_ns != 0)
      s.ctx->wait_ns.fetch_add(now_ns() - node->ctx_ready_ns, std::memory_order_relaxed);
    return t;
  }
  return {};
}

void ContextPolicy::completed(sched::TaskRef task, sched::DeviceId d, double seconds) {
  Slot& s = slot_of(task);
  s.policy->completed(task, d, seconds);
  TaskNode* node = task.node();
  const bool counted = node->ctx_ready_ns != 0;
  node->ctx_ready_ns = 0;
  if (seconds >= 0) {
    s.ctx->tasks.fetch_add(1, std::memory_order_relaxed);
    s.ctx->busy_ns[d].fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
  } else {
    s.ctx->failed.fetch_add(1, std::memory_order_relaxed);
  }
  std::lock_guard<SpinLock> g(lock_);
  if (seconds > 0) {
    s.vtime += seconds / s.ctx->weight;
    // The floor follows the busy contexts (this one still counted), also one running alone: a
    // context that wakes later starts there, however long it slept.
    double least = std::numeric_limits<double>::infinity();
    for (uint32_t k = 0, n = count_.load(std::memory_order_acquire); k < n; ++k)
      if (slots_[k]->pending > 0) least = std::min(least, slots_[k]->vtime);
    if (std::isfinite(least)) floor_ = std::max(floor_, least);
  }
  if (counted) --s.pending;
}

std::vector<sched::TaskRef> ContextPolicy::drain_context(uint32_t c, sched::DeviceId d) {
  std::vector<sched::TaskRef> out = slots_[c]->policy->drain(d);
  int64_t counted = 0;
  for (sched::TaskRef t : out)
    if (std::exchange(t.node()->ctx_ready_ns, 0) != 0) ++counted;
  std::lock_guard<SpinLock> g(lock_);
  slots_[c]->pending -= counted;
  return out;
}

int64_t ContextPolicy::queued(uint32_t c) const noexcept {
  std::lock_guard<SpinLock> g(lock_);
  return c < count_.load(std::memory_order_acquire) ? std::max<int64_t>(0, slots_[c]->pending) : 0;
}

std::vector<sched::TaskRef> ContextPolicy::drain(sched::DeviceId d) {
  std::vector<sched::TaskRef> out;
  for (uint32_t k = 0, n = count_.load(std::memory_order_acquire); k < n; ++k) {
    std::vector<sched::TaskRef> part = drain_context(k, d);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

void ContextPolicy::device_added(sched::DeviceId d) {
  for (uint32_t k = 0, n = count_.load(std::memory_order_acquire); k < n; ++k) {
    Slot& s = *slots_[k];
    if (s.ctx->all_devices)
      s.ctx->bits[d / 64].fetch_or(uint64_t{1} << (d % 64), std::memory_order_relaxed);
    s.policy->device_added(d);
  }
}

void ContextPolicy::transferred(uint32_t from, uint32_t to, uint64_t bytes, double seconds) {
  for (uint32_t k = 0, n = count_.load(std::memory_order_acquire); k < n; ++k)
    slots_[k]->policy->transferred(from, to, bytes, seconds);
}

void ContextPolicy::energy(uint32_t kernel, std::string_view name, uint64_t footprint, double size,
                           sched::DeviceId d, double joules) {
  // Every context's model learns the device's energy: it is the device's, not the context's.
  for (uint32_t k = 0, n = count_.load(std::memory_order_acquire); k < n; ++k)
    slots_[k]->policy->energy(kernel, name, footprint, size, d, joules);
}

sched::DeviceId ContextPolicy::expected_device(sched::TaskRef task) const noexcept {
  return slot_of(task).policy->expected_device(task);
}

double ContextPolicy::predicted(sched::TaskRef task) const noexcept {
  return slot_of(task).policy->predicted(task);
}

void ContextPolicy::ready_together(std::span<const sched::TaskRef> tasks) {
  // Each context's policy, with its own tasks (in their order).
  std::vector<sched::TaskRef> mine;
  std::vector<const Slot*> done;
  for (const sched::TaskRef& first : tasks) {
    const Slot& s = slot_of(first);
    if (std::find(done.begin(), done.end(), &s) != done.end()) continue;
    done.push_back(&s);
    mine.clear();
    for (const sched::TaskRef& t : tasks)
      if (&slot_of(t) == &s) mine.push_back(t);
    s.policy->ready_together(mine);
  }
}

}  // namespace hcr::detail
