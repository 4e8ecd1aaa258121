// Internal: a tiny test-and-test-and-set lock for critical sections of a few instructions
// (dependency lists, successor lists, policy queues). Yields after a short spin.
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HCR_CPU_RELAX() _mm_pause()
#else
#define HCR_CPU_RELAX() ((void)0)
#endif

namespace hcr::detail {

class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0;; ++spins) {
      if (!flag_.exchange(true, std::memory_order_acquire)) return;
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins > 64) std::this_thread::yield();
        else HCR_CPU_RELAX();
      }
    }
  }
  bool try_lock() noexcept {
    return !flag_.load(std::memory_order_relaxed) &&
           !flag_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace hcr::detail
