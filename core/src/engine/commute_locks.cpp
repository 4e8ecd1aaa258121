// Commute locks (commute_locks.hpp): all-or-none holding of a task's commute buffers, and the
// lists of tasks waiting for one.
#include "commute_locks.hpp"

#include "../buffer_state.hpp"

#include <algorithm>
#include <functional>

namespace hcr::detail {

namespace {

// The buffers `t` commutes on, in one order for every task (by address), so two tasks after the
// same buffers try them alike.
using Buffers = boost::container::small_vector<BufferState*, 3>;
Buffers commute_buffers(const TaskNode* t) {
  Buffers bs;
  for (const ArgRec& a : t->uargs)
    if (commutes(a.access)) bs.push_back(a.buffer);
  std::sort(bs.begin(), bs.end(), std::less<>());
  return bs;
}

// Under b's lock, its holder letting go: the first task waiting for it holds it now (returned),
// or nobody does. A buffer is never free while tasks wait for it.
TaskNode* hand_on(BufferState& b) noexcept {
  TaskNode* next = b.commute_first;
  if (next != nullptr) {
    b.commute_first = next->commute_next;
    if (b.commute_first == nullptr) b.commute_last = nullptr;
    next->commute_next = nullptr;
    next->commute_waiting = nullptr;
  }
  b.commute_holder = next;
  return next;
}

// Under b's lock: `t` waits for b, last on its list.
void wait_for(BufferState& b, TaskNode* t) noexcept {
  t->commute_next = nullptr;
  t->commute_waiting = &b;
  if (b.commute_last != nullptr) b.commute_last->commute_next = t;
  else b.commute_first = t;
  b.commute_last = t;
}

// Under b's lock: `t` leaves b's list (it ends while waiting).
void leave(BufferState& b, TaskNode* t) noexcept {
  TaskNode* prev = nullptr;
  for (TaskNode* x = b.commute_first; x != nullptr; prev = x, x = x->commute_next) {
    if (x != t) continue;
    (prev != nullptr ? prev->commute_next : b.commute_first) = t->commute_next;
    if (b.commute_last == t) b.commute_last = prev;
    break;
  }
  t->commute_next = nullptr;
  t->commute_waiting = nullptr;
}

void let_go(TaskNode* t, const Buffers& bs, CommuteResumed& resumed) noexcept {
  for (BufferState* b : bs) {
    b->lock.lock();
    TaskNode* next = nullptr;
    if (b->commute_holder == t) next = hand_on(*b);
    else if (t->commute_waiting == b) leave(*b, t);
    b->lock.unlock();
    if (next != nullptr) resumed.push_back(next);
  }
}

}  // namespace

bool commute_take(TaskNode* t, CommuteResumed& resumed) noexcept {
  const Buffers bs = commute_buffers(t);
  // Holding nothing here (or only what was handed to it while it waited): whatever it takes it
  // lets go of again before waiting, so it never waits holding a buffer.
  BufferState* first = nullptr;  // busy at the last try: tried first this time
  for (;;) {
    if (first != nullptr) {
      first->lock.lock();
      if (first->commute_holder != nullptr && first->commute_holder != t) {
        wait_for(*first, t);  // (holding nothing: its holder hands it on when done)
        first->lock.unlock();
        return false;
      }
      first->commute_holder = t;
      first->lock.unlock();
    }
    BufferState* busy = nullptr;
    for (BufferState* b : bs) {
      if (b == first) continue;
      b->lock.lock();
      if (b->commute_holder == nullptr || b->commute_holder == t) b->commute_holder = t;
      else busy = b;
      b->lock.unlock();
      if (busy != nullptr) break;
    }
    if (busy == nullptr) {
      t->commute_held = true;
      return true;
    }
    let_go(t, bs, resumed);
    first = busy;
  }
}

void commute_release(TaskNode* t, CommuteResumed& resumed) noexcept {
  let_go(t, commute_buffers(t), resumed);
  t->commute_held = false;
}

}  // namespace hcr::detail
