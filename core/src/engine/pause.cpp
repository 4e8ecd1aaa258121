// Runtime::pause and resume: a task graph submitted whole, then let go at once.
//
// Submitted one task at a time, a graph starts while it is still being submitted: the first tasks
// submitted take the idle devices whatever their priority, and a planning policy (peft) plans
// around the little it has seen. A task submitted while the runtime is paused keeps its
// submission's own pending count — one more predecessor, the pause — in held_. The last resume
// takes that count back from every held task; those it makes ready are placed together, highest
// priority first, while no device takes work (their pumps are held, as by a pumper that has not
// finished yet), so each device then starts the most urgent of what it was given.
#include "../runtime_core.hpp"

#include "../buffer_state.hpp"
#include "../log_internal.hpp"

#include <hcr/error.hpp>

#include <algorithm>

namespace hcr::detail {

void RuntimeCore::pause() noexcept {
  std::lock_guard<std::mutex> g(held_mutex_);
  paused_.store(paused_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

bool RuntimeCore::resume() noexcept {
  std::vector<TaskNode*> held;
  {
    std::lock_guard<std::mutex> g(held_mutex_);
    const uint32_t p = paused_.load(std::memory_order_relaxed);
    if (p == 0) return false;
    paused_.store(p - 1, std::memory_order_relaxed);
    if (p == 1) {
      held.swap(held_);
      held_tickets_.clear();
    }
  }
  if (!held.empty()) let_go(std::move(held));
  return true;
}

bool RuntimeCore::hold(TaskNode* t, uint64_t seq) noexcept {
  if (t->kind != TaskKind::kernel) return false;  // a host view or a join: the caller waits on it
  {
    std::lock_guard<std::mutex> g(held_mutex_);
    if (paused_.load(std::memory_order_relaxed) == 0) return false;  // resumed meanwhile
    held_.push_back(t);
    held_tickets_.push_back(seq);
  }
  // A submitter waiting for room looks again: what it waits for may now never come.
  if (throttled_now_.load(std::memory_order_seq_cst) != 0) {
    { std::lock_guard<std::mutex> g(room_mutex_); }
    room_cv_.notify_all();
  }
  return true;
}

size_t RuntimeCore::held_before(uint64_t seq) const {
  if (paused_.load(std::memory_order_relaxed) == 0) return 0;
  std::lock_guard<std::mutex> g(held_mutex_);
  return static_cast<size_t>(
      std::count_if(held_tickets_.begin(), held_tickets_.end(),
                    [seq](uint64_t ticket) { return ticket < seq; }));
}

void RuntimeCore::let_go(std::vector<TaskNode*> held) noexcept {
  std::vector<TaskNode*> now;
  for (TaskNode* t : held)
    if (t->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) now.push_back(t);
  if (now.empty()) return;
  {
    std::vector<sched::TaskRef> refs(now.begin(), now.end());
    pol()->ready_together(refs);  // (priorities it gives count below)
  }
  // Highest priority first (submission order among equals): a policy with one queue for all
  // devices hands them out in this order.
  std::stable_sort(now.begin(), now.end(),
                   [](const TaskNode* a, const TaskNode* b) { return a->priority > b->priority; });
  // Every device's pump is ours until all of them are placed: a device finishing a task meanwhile
  // leaves its request to us, as to any pumper still at work.
  const size_t n = device_count();
  std::vector<char> ours(n, 0);
  for (size_t d = 0; d < n; ++d)
    ours[d] = !dev_[d]->pumping.exchange(true, std::memory_order_seq_cst);
  for (TaskNode* t : now) ready(t);
  for (size_t d = 0; d < n; ++d) {
    if (!ours[d]) continue;
    dev_[d]->pumping.store(false, std::memory_order_seq_cst);
    if (usable(d)) pump(*dev_[d]);
  }
}

void RuntimeCore::check_not_held(std::string_view what, const TaskNode* target) const {
  if (paused_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> g(held_mutex_);
  if (held_.empty()) return;
  if (target == nullptr)
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + " would wait forever: " + std::to_string(held_.size()) +
                    " task(s) submitted since Runtime::pause() wait for Runtime::resume()");
  if (std::find(held_.begin(), held_.end(), target) != held_.end())
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + " would wait forever: the task of kernel '" +
                    target->kernel->name +
                    "' was submitted since Runtime::pause() and waits for Runtime::resume()");
}

void RuntimeCore::check_not_held(const BufferState& b, Access mode) const {
  if (paused_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> g(held_mutex_);
  if (held_.empty()) return;
  auto is_held = [&](const TaskNode* t) {
    return t != nullptr && std::find(held_.begin(), held_.end(), t) != held_.end();
  };
  auto& buffer = const_cast<BufferState&>(b);  // its frontier, read under its lock
  buffer.lock.lock();
  const TaskNode* blocker = is_held(buffer.last_writer) ? buffer.last_writer : nullptr;
  if (blocker == nullptr && writes(mode))
    for (const TaskNode* r : buffer.readers)
      if (is_held(r)) {
        blocker = r;
        break;
      }
  const std::string kernel = blocker != nullptr ? blocker->kernel->name : std::string();
  buffer.lock.unlock();
  if (blocker != nullptr)
    throw Error(ErrorCode::invalid_argument,
                "acquire(" + std::string(access_name(mode)) + ") of a " + describe(b) +
                    " would wait forever: a task of kernel '" + kernel +
                    "' submitted since Runtime::pause() uses it and waits for Runtime::resume()");
}

}  // namespace hcr::detail
