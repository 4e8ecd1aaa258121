// Runtime::pause and resume (pause.hpp): the gate's bookkeeping, and the waits it would make
// endless turned into errors.
#include "pause.hpp"

#include "../buffer_state.hpp"
#include "../kernel_state.hpp"

#include <hcr/error.hpp>

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <string>
#include <unordered_set>

namespace hcr::detail {

void Pause::pause() noexcept {
  std::lock_guard<std::mutex> g(mutex_);
  paused_.store(paused_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

bool Pause::resume() noexcept {
  std::vector<TaskNode*> held;
  {
    std::lock_guard<std::mutex> g(mutex_);
    const uint32_t p = paused_.load(std::memory_order_relaxed);
    if (p == 0) return false;
    paused_.store(p - 1, std::memory_order_relaxed);
    if (p == 1) {
      held.swap(held_);
      tickets_.clear();
    }
  }
  if (!held.empty()) let_go(std::move(held));
  return true;
}

bool Pause::hold(TaskNode* t, uint64_t seq) noexcept {
  if (t->kind != TaskKind::kernel) return false;  // a host view or a join: the caller waits on it
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (paused_.load(std::memory_order_relaxed) == 0) return false;  // resumed meanwhile
    held_.push_back(t);
    tickets_.push_back(seq);
  }
  // A submitter waiting for room looks again: what it waits for may now never come.
  graph_.gate_changed();
  return true;
}

size_t Pause::held_before(uint64_t seq) const {
  if (paused_.load(std::memory_order_relaxed) == 0) return 0;
  std::lock_guard<std::mutex> g(mutex_);
  return static_cast<size_t>(std::count_if(tickets_.begin(), tickets_.end(),
                                           [seq](uint64_t ticket) { return ticket < seq; }));
}

void Pause::let_go(std::vector<TaskNode*> held) noexcept {
  std::vector<TaskNode*> now;
  for (TaskNode* t : held)
    if (t->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) now.push_back(t);
  if (!now.empty()) placement_.place_together(std::move(now));
}

// A kernel task is kept itself; a join (a replay's end, an unpartition) or a host access never is,
// but waits for what it depends on: a kept task it is reached from along successor edges (which
// stay pending, and alive, while kept; a walk too large to finish quickly is given up).
const TaskNode* Pause::kept_before(const TaskNode* target) const {
  if (target->kind == TaskKind::kernel)
    return std::find(held_.begin(), held_.end(), target) != held_.end() ? target : nullptr;
  constexpr size_t kMaxWalk = 100000;
  std::unordered_set<const TaskNode*> seen;
  for (TaskNode* kept : held_) {
    std::vector<TaskNode*> stack{kept};
    while (!stack.empty() && seen.size() < kMaxWalk) {
      TaskNode* n = stack.back();
      stack.pop_back();
      boost::container::small_vector<Edge, 8> next;
      n->lock.lock();
      next.assign(n->successors.begin(), n->successors.end());
      n->lock.unlock();
      for (const Edge& e : next) {
        if (e.task == target) return kept;
        if (seen.insert(e.task).second) stack.push_back(e.task);
      }
    }
  }
  return nullptr;
}

void Pause::check_not_held(std::string_view what, const TaskNode* target) const {
  if (paused_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> g(mutex_);
  if (held_.empty()) return;
  if (target == nullptr)
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + " would wait forever: " + std::to_string(held_.size()) +
                    " task(s) submitted since Runtime::pause() wait for Runtime::resume()");
  const TaskNode* kept = kept_before(target);
  if (kept == nullptr) return;
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) about one long sum.
  std::string msg(what);
  msg += " would wait forever: ";
  if (kept != target)
    msg += target->kind == TaskKind::join ? "the operation (a replay, an unpartition) waits for a "
                                          : "the host access waits for a ";
  else msg += "the ";
  msg += "task of kernel '";
  msg += kept->kernel->name;
  msg += kept != target ? "' that was submitted" : "' was submitted";
  msg += " since Runtime::pause() and waits for Runtime::resume()";
  throw Error(ErrorCode::invalid_argument, msg);
}

void Pause::check_not_held(const BufferState& b, Access mode) const {
  if (paused_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> g(mutex_);
  if (held_.empty()) return;
  auto is_held = [&](const TaskNode* t) {
    return t != nullptr && std::find(held_.begin(), held_.end(), t) != held_.end();
  };
  auto& buffer = const_cast<BufferState&>(b);  // its frontier, read under its lock
  buffer.lock.lock();
  const TaskNode* blocker = is_held(buffer.last_writer) ? buffer.last_writer : nullptr;
  for (const TaskNode* c : buffer.commuters)  // a commute run: every access waits for it all
    if (blocker == nullptr && is_held(c)) blocker = c;
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
