// A ready queue for one device, shared by the policies that place tasks on devices at push time.
#pragma once

#include <hcr/detail/spin_lock.hpp>
#include <hcr/sched.hpp>

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <vector>

namespace hcr::sched {

class DeviceQueue {
 public:
  enum class Order {
    fifo,      ///< first in, first out
    priority,  ///< higher priority first, first in first out among equals
    positive,  ///< StarPU's FIFO: a task of priority > 0 goes ahead of those of lower priority,
               ///< any other at the back (the tasks of priority > 0 stay sorted at the front)
  };
  explicit DeviceQueue(Order order = Order::fifo) : order_(order) {}

  void push(TaskRef t) {
    std::lock_guard<detail::SpinLock> lock(lock_);
    const bool sorted =
        order_ == Order::priority || (order_ == Order::positive && t.priority() > 0);
    // Either the queue is sorted, or it holds a sorted run of tasks of priority > 0 followed by
    // tasks of priority <= 0 < t's: in both, the tasks t goes behind form a prefix.
    if (sorted && !q_.empty() && q_.back().priority() < t.priority()) {
      auto at = std::upper_bound(q_.begin(), q_.end(), t,
                                 [](TaskRef a, TaskRef b) { return a.priority() > b.priority(); });
      q_.insert(at, t);
    } else {
      q_.push_back(t);
    }
    size_.store(q_.size(), std::memory_order_relaxed);
  }
  /// The first task device d can run.
  TaskRef pop_front(DeviceId d) { return take(d, false); }
  /// The last task device d can run (owners of a work-stealing deque).
  TaskRef pop_back(DeviceId d) { return take(d, true); }
  size_t size() const noexcept { return size_.load(std::memory_order_relaxed); }
  /// Empties the queue, returning what it held in order (Policy::drain).
  std::vector<TaskRef> take_all() {
    std::lock_guard<detail::SpinLock> lock(lock_);
    std::vector<TaskRef> all(q_.begin(), q_.end());
    q_.clear();
    size_.store(0, std::memory_order_relaxed);
    return all;
  }
  /// Removes and returns the tasks no device can run any more (Policy::drain, shared queues).
  std::vector<TaskRef> take_stranded() {
    std::lock_guard<detail::SpinLock> lock(lock_);
    std::vector<TaskRef> out;
    auto keep = std::remove_if(q_.begin(), q_.end(), [&](TaskRef t) {
      if (t.can_run_anywhere()) return false;
      out.push_back(t);
      return true;
    });
    q_.erase(keep, q_.end());
    size_.store(q_.size(), std::memory_order_relaxed);
    return out;
  }
  /// Calls `f(task)` for each queued task, in order, under the queue's lock (f must not call
  /// back into the queue).
  template <class F>
  void for_each(F&& f) const {
    std::lock_guard<detail::SpinLock> lock(lock_);
    for (TaskRef t : q_) f(t);
  }
  /// The first of the `window` tasks at the front (the oldest, or the most urgent where the
  /// queue orders by priority) that `take` accepts (called under the queue's lock).
  template <class F>
  TaskRef pop_first(size_t window, F&& take) {
    std::lock_guard<detail::SpinLock> lock(lock_);
    size_t seen = 0;
    for (auto it = q_.begin(); it != q_.end() && seen < window; ++it, ++seen)
      if (take(*it)) {
        TaskRef t = *it;
        q_.erase(it);
        size_.store(q_.size(), std::memory_order_relaxed);
        return t;
      }
    return {};
  }

 private:
  TaskRef take(DeviceId d, bool back) {
    std::lock_guard<detail::SpinLock> lock(lock_);
    TaskRef found;
    if (back) {
      for (auto it = q_.rbegin(); it != q_.rend(); ++it)
        if (it->can_run(d)) {
          found = *it;
          q_.erase(std::next(it).base());
          break;
        }
    } else {
      for (auto it = q_.begin(); it != q_.end(); ++it)
        if (it->can_run(d)) {
          found = *it;
          q_.erase(it);
          break;
        }
    }
    size_.store(q_.size(), std::memory_order_relaxed);
    return found;
  }

  Order order_;
  mutable detail::SpinLock lock_;
  std::deque<TaskRef> q_;
  std::atomic<size_t> size_{0};
};

}  // namespace hcr::sched
