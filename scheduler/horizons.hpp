// What the earliest-finish policies (earliest_finish.hpp) predict a task waits behind, per
// priority: the queued work of a device, and the copies booked on a link. Few distinct priorities
// are queued at once in practice (an application's handful, or the policy's rank levels): short
// sorted lists.
#pragma once

#include <hcr/detail/spin_lock.hpp>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace hcr::sched {

/// Predicted work of the tasks waiting in a priority-ordered queue, per priority.
class WorkByPriority {
 public:
  /// `lowest`: where the lowest queued priority is published (read without the lock).
  explicit WorkByPriority(std::atomic<int>& lowest) : lowest_(lowest) {}
  void add(int prio, int64_t ns) {
    std::lock_guard<detail::SpinLock> lock(lock_);
    auto it = std::lower_bound(w_.begin(), w_.end(), prio,
                               [](const std::pair<int, int64_t>& e, int p) { return e.first < p; });
    if (it == w_.end() || it->first != prio) it = w_.insert(it, {prio, 0});
    it->second += ns;
    if (it->second == 0) w_.erase(it);
    lowest_.store(w_.empty() ? INT_MAX : w_.front().first, std::memory_order_release);
  }
  /// Work queued with a priority below `prio` (what a task of `prio` overtakes). Without a lock
  /// in the common case: nothing queued below it.
  int64_t below(int prio) const {
    if (prio <= lowest_.load(std::memory_order_acquire)) return 0;
    std::lock_guard<detail::SpinLock> lock(lock_);
    int64_t sum = 0;
    for (auto& [p, ns] : w_) {
      if (p >= prio) break;
      sum += ns;
    }
    return sum;
  }

 private:
  mutable detail::SpinLock lock_;
  std::vector<std::pair<int, int64_t>> w_;  // by ascending priority
  std::atomic<int>& lowest_;                // w_'s lowest priority
};

/// One direction of a link's time horizons per priority: until when the copies of tasks of
/// priority p or higher keep it busy, for the priorities copies were booked with. The data
/// manager hands each copy engine the most urgent task's copy first, so a copy waits only behind
/// those of its priority or higher.
class LinkHorizon {
 public:
  /// Books `seconds` of copying for a task of priority `prio` that cannot start before
  /// `earliest` (>= now: a copy staged through host memory starts when its first hop ends).
  void book(int prio, double now, double earliest, double seconds) {
    std::lock_guard<detail::SpinLock> lock(lock_);
    // Horizons already in the past hold nothing back: forget them.
    std::erase_if(h_, [&](const std::pair<int, double>& e) { return e.second <= now; });
    auto it = std::lower_bound(h_.begin(), h_.end(), prio,
                               [](const std::pair<int, double>& e, int p) { return e.first < p; });
    if (it == h_.end() || it->first != prio)  // starts as what copies above it left
      it = h_.insert(it, {prio, it == h_.end() ? now : std::max(now, it->second)});
    // The copy itself ends at max(earliest, its own horizon) + seconds; lower priorities wait
    // behind it as well.
    const double end = std::max(earliest, it->second) + seconds;
    for (auto i = h_.begin(); i < it; ++i) i->second = std::max(now, i->second) + seconds;
    it->second = end;
    for (auto i = h_.begin(); i < it; ++i) i->second = std::max(i->second, end);
    lowest_horizon_.store(h_.front().second, std::memory_order_relaxed);
    lowest_.store(h_.front().first, std::memory_order_release);
  }
  /// When the link is free for a copy of priority `prio`. Lock-free for a task at or below every
  /// booked priority (the common case: one priority).
  double free_at(int prio, double now) const {
    if (prio <= lowest_.load(std::memory_order_acquire))
      return std::max(now, lowest_horizon_.load(std::memory_order_relaxed));
    std::lock_guard<detail::SpinLock> lock(lock_);
    auto it = std::lower_bound(h_.begin(), h_.end(), prio,
                               [](const std::pair<int, double>& e, int p) { return e.first < p; });
    return it == h_.end() ? now : std::max(now, it->second);
  }

 private:
  mutable detail::SpinLock lock_;
  std::vector<std::pair<int, double>> h_;  // by ascending priority; non-increasing horizons
  std::atomic<int> lowest_{INT_MAX};       // h_'s lowest priority (none booked: any task)
  std::atomic<double> lowest_horizon_{0};  // and its horizon, the latest of all
};

}  // namespace hcr::sched
