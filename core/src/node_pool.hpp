// A pool for fixed-size runtime nodes (tasks, buffers). Nodes are made on the submitting thread and
// freed on a worker, so malloc pays for cross-thread frees with its arena lock; here each thread
// keeps a small cache and hands surplus blocks to a shared list in batches. The shared list keeps a
// bounded reserve (kKeepBatches): a burst of a million tasks gives its nodes back to the system
// once they are freed, rather than holding them for the life of the process.
#pragma once

#include <hcr/detail/spin_lock.hpp>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hcr::detail {

/// Bytes the pools gave back to malloc since memory was last returned to the system.
inline std::atomic<size_t> g_pool_released{0};

/// Returns the pages malloc holds free to the system, once the pools have given back a lot
/// (a burst of tasks has drained): glibc keeps a heap's freed pages below its top otherwise, and
/// the process stays at its peak. Called where the runtime becomes quiet (wait_all).
inline void return_freed_memory() noexcept {
  constexpr size_t kAfter = size_t{32} << 20;
  size_t released = g_pool_released.load(std::memory_order_relaxed);
  if (released < kAfter ||
      !g_pool_released.compare_exchange_strong(released, 0, std::memory_order_relaxed))
    return;
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

template <size_t Size, size_t Align>
class NodePool {
 public:
  static void* allocate() {
    Cache& c = cache();
    if (c.head == nullptr) c.refill();
    if (c.head == nullptr) return ::operator new(Size, std::align_val_t(Align));
    Block* b = c.head;
    c.head = b->next;
    --c.count;
    return b;
  }

  static void deallocate(void* p) noexcept {
    Cache& c = cache();
    auto* b = static_cast<Block*>(p);
    b->next = c.head;
    c.head = b;
    if (++c.count >= 2 * kBatch) c.spill();
  }

 private:
  struct Block {
    Block* next;
  };
  static constexpr size_t kBatch = 128;
  static constexpr size_t kKeepBatches = 32;  // what a steady stream of tasks reuses

  // Batches of kBatch blocks chained through `next`. Never destroyed: blocks may be freed by
  // threads that outlive static destruction.
  struct Shared {
    SpinLock lock;
    std::vector<Block*> batches;
  };
  static Shared& shared() {
    static Shared* s = new Shared();
    return *s;
  }

  struct Cache {
    Block* head = nullptr;
    size_t count = 0;
    void refill() {
      Shared& s = shared();
      std::lock_guard<SpinLock> g(s.lock);
      if (s.batches.empty()) return;
      head = s.batches.back();
      s.batches.pop_back();
      count = kBatch;
    }
    void spill() noexcept {
      Block* batch = head;
      Block* last = head;
      for (size_t i = 1; i < kBatch; ++i) last = last->next;
      head = last->next;
      last->next = nullptr;
      count -= kBatch;
      Shared& s = shared();
      {
        std::lock_guard<SpinLock> g(s.lock);
        if (s.batches.size() < kKeepBatches) {
          try {
            s.batches.push_back(batch);
            return;
          } catch (...) {  // cannot record the batch: give it back to the system
          }
        }
      }
      while (batch) {  // the reserve is full: back to the system
        Block* n = batch->next;
        ::operator delete(batch, std::align_val_t(Align));
        batch = n;
      }
      g_pool_released.fetch_add(kBatch * Size, std::memory_order_relaxed);
    }
    ~Cache() {
      g_pool_released.fetch_add(count * Size, std::memory_order_relaxed);
      while (head) {
        Block* n = head->next;
        ::operator delete(head, std::align_val_t(Align));
        head = n;
      }
    }
  };
  static Cache& cache() {
    thread_local Cache c;
    return c;
  }
};

}  // namespace hcr::detail
