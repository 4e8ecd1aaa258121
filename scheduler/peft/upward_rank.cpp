// Upward ranks: an iterative depth-first walk over successors, memoised in the tasks.
#include "upward_rank.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

namespace hcr::sched {

namespace {

// A task's policy_aux: the rank (a float's bits) and the submission count it was computed at, +1
// so that a task never ranked (aux 0) has no stamp.
uint64_t pack(double seconds, uint32_t stamp) {
  return (static_cast<uint64_t>(stamp) << 32) |
         std::bit_cast<uint32_t>(static_cast<float>(seconds));
}
double rank_of(uint64_t aux) { return std::bit_cast<float>(static_cast<uint32_t>(aux)); }
uint32_t stamp_of(uint64_t aux) { return static_cast<uint32_t>(aux >> 32); }

// Bytes of what `from` writes that `to` reads.
uint64_t passed(TaskRef from, TaskRef to) {
  uint64_t bytes = 0;
  const size_t nf = from.arg_count(), nt = to.arg_count();
  for (size_t i = 0; i < nf; ++i) {
    const TaskArg a = from.arg(i);
    if (!writes(a.access)) continue;
    bool counted = false;  // a buffer named twice by `from` counts once
    for (size_t k = 0; k < i && !counted; ++k) counted = from.arg(k).buffer == a.buffer;
    if (counted) continue;
    for (size_t j = 0; j < nt; ++j) {
      const TaskArg b = to.arg(j);
      if (b.buffer == a.buffer && reads(b.access)) {
        bytes += a.bytes;
        break;
      }
    }
  }
  return bytes;
}

constexpr size_t kMaxSuccessors = 32;  // a task's first successors stand for all of them

struct Frame {
  TaskRef task;
  size_t n = 0, next = 0;
  double longest = 0;  // the largest (copy + rank) over the successors done so far
  TaskRef succ[kMaxSuccessors];
  bool data[kMaxSuccessors];
};

}  // namespace

double UpwardRank::rank(TaskRef t, uint64_t submitted) const {
  const uint32_t stamp = static_cast<uint32_t>(submitted) + 1;
  if (stamp == 0) return rank(t, submitted + 1);  // (2^32 - 1 submissions: skip the no-stamp 0)
  const uint64_t own = t.policy_aux();
  if (stamp_of(own) == stamp) return rank_of(own);

  // Reused across calls on this thread: a decision allocates nothing once it has walked once.
  thread_local std::vector<Frame> stack;
  stack.clear();
  size_t visits = 0;
  auto open = [&](TaskRef x) {
    Frame& f = stack.emplace_back();
    f.task = x;
    f.n = std::min(x.successors(f.succ, f.data, kMaxSuccessors), kMaxSuccessors);
    ++visits;
  };
  auto edge = [&](const Frame& f, size_t i, double child_rank) {
    const double copy = f.data[i] ? copy_(passed(f.task, f.succ[i])) : 0;
    return copy + child_rank;
  };
  open(t);
  double result = 0;
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next < f.n) {
      const TaskRef s = f.succ[f.next];
      const uint64_t aux = s.policy_aux();
      if (stamp_of(aux) == stamp || visits >= budget_) {
        // Current, or past the budget: what is known of it (a stale rank, or its own cost)
        // stands in, a lower bound of its rank.
        const double r = stamp_of(aux) != 0 ? rank_of(aux) : cost_(s);
        f.longest = std::max(f.longest, edge(f, f.next, r));
        ++f.next;
        continue;
      }
      open(s);  // may move `f`: the loop takes the back again
      continue;
    }
    const double r = cost_(f.task) + f.longest;
    f.task.set_policy_aux(pack(r, stamp));
    stack.pop_back();
    if (stack.empty()) {
      result = r;
      break;
    }
    Frame& parent = stack.back();
    parent.longest = std::max(parent.longest, edge(parent, parent.next, r));
    ++parent.next;
  }
  return result;
}

int UpwardRank::level(double seconds) {
  const double us = seconds * 1e6;
  if (!(us > 0)) return 0;
  return static_cast<int>(std::min(4095.0, std::round(32 * std::log2(1 + us))));
}

}  // namespace hcr::sched
