// A pool for fixed-size runtime nodes (tasks). Tasks are made on the submitting thread and freed
// on a worker, so malloc pays for cross-thread frees with its arena lock; here each thread keeps a
// small cache and hands surplus blocks to a shared list in batches.
#pragma once

#include <hcr/detail/spin_lock.hpp>

#include <cstddef>
#include <mutex>
#include <new>
#include <vector>

namespace hcr::detail {

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
      std::lock_guard<SpinLock> g(s.lock);
      try {
        s.batches.push_back(batch);
      } catch (...) {  // cannot record the batch: give it back to the system
        while (batch) {
          Block* n = batch->next;
          ::operator delete(batch, std::align_val_t(Align));
          batch = n;
        }
      }
    }
    ~Cache() {
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
