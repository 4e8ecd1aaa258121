// The tasks a device took whose copies have landed, waiting for room in its window (FIFO): they
// are handed to the plugin first when room comes (DeviceDriver::pump), or given back when the
// device leaves scheduling (DeviceDriver::give_back_landed).
#pragma once

#include <hcr/detail/spin_lock.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>

namespace hcr::detail {

struct TaskNode;

class LandedTasks {
 public:
  /// Adds `t` unless `left()` says the device left scheduling. Asked under the lock: a take_all()
  /// made after the device's state changed sees every task added before. False: not added.
  template <class Left>
  bool add(TaskNode* t, Left left) {
    std::lock_guard<SpinLock> g(lock_);
    if (left()) return false;
    tasks_.push_back(t);
    count_.fetch_add(1, std::memory_order_acq_rel);
    return true;
  }
  /// The first one, or null.
  TaskNode* take() {
    std::lock_guard<SpinLock> g(lock_);
    if (tasks_.empty()) return nullptr;
    TaskNode* t = tasks_.front();
    tasks_.pop_front();
    count_.fetch_sub(1, std::memory_order_acq_rel);
    return t;
  }
  std::deque<TaskNode*> take_all() {
    std::deque<TaskNode*> out;
    std::lock_guard<SpinLock> g(lock_);
    out.swap(tasks_);
    count_.store(0, std::memory_order_release);
    return out;
  }
  /// Without the lock (may be momentarily stale).
  uint32_t size() const noexcept { return count_.load(std::memory_order_acquire); }

 private:
  SpinLock lock_;
  std::deque<TaskNode*> tasks_;
  std::atomic<uint32_t> count_{0};
};

}  // namespace hcr::detail
