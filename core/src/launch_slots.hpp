// Launch tokens. A launch's done_user_data is not a pointer to its task but a token: the number of
// a slot in a process-wide table and the slot's generation. The first completion of a launch (the
// plugin's done, an error returned from launch, or the watchdog giving up on it) claims the slot by
// moving it out of `armed` for that generation; any later one finds the slot free, or armed for a
// later generation, and is reported instead of finishing a task twice, or finishing another task
// that has since taken the freed node. The table is never freed, so even a late call finds a slot
// to check against: the slots of a device are handed back for reuse only once its plugin is gone
// (no call can come any more), and never when the plugin was left running a launch at shutdown.
#pragma once

#include <boost/container/small_vector.hpp>

#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

namespace hcr::detail {

struct BufferState;
struct DeviceState;
struct HeldScratch;
struct TaskNode;
class DataManager;

/// A launch the watchdog gave up on (task_timeout): references to what the plugin may still use,
/// held until its done finally arrives. The task went elsewhere (or failed) meanwhile.
struct HungLaunch {
  TaskNode* task;  // a reference: its arguments (abi_args, params) and its kernel
  boost::container::small_vector<BufferState*, 3> buffers;  // references: their memory
  // The task's scratch blocks, out of the pool until the plugin answers (none: null).
  HeldScratch* scratch = nullptr;
  DataManager* data = nullptr;  // where they go back
};

struct alignas(64) LaunchSlot {
  enum Status : uint64_t {
    kFree = 0,      // no launch (its generation is the last one's)
    kArmed = 1,     // a launch of `task` is on its way to the plugin or in it
    kGivingUp = 2,  // the watchdog is taking the launch over (a moment)
    kGivenUp = 3,   // the watchdog ended the attempt; `hung` waits for the plugin's done
  };
  static constexpr unsigned kStatusBits = 2;
  static constexpr uint64_t kGenerationMask = (uint64_t{1} << 44) - 1;  // what a token carries

  std::atomic<uint64_t> state{0};  // generation << kStatusBits | Status
  std::atomic<TaskNode*> task{nullptr};
  std::atomic<const char*> kernel{nullptr};  // the task's kernel name, for diagnostics
  // When the watchdog gives up (steady clock, ns); max until the launch reaches the plugin.
  std::atomic<int64_t> deadline_ns{std::numeric_limits<int64_t>::max()};
  std::atomic<HungLaunch*> hung{nullptr};     // kGivenUp: what the plugin's done releases
  std::atomic<DeviceState*> device{nullptr};  // the owner, while a device holds the chunk

  static uint64_t generation(uint64_t state) noexcept { return state >> kStatusBits; }
  static Status status(uint64_t state) noexcept {
    return static_cast<Status>(state & ((uint64_t{1} << kStatusBits) - 1));
  }
  static uint64_t make(uint64_t generation, Status s) noexcept {
    return generation << kStatusBits | s;
  }
};

/// The process-wide table of launch slots, in chunks that devices take and give back.
class LaunchTable {
 public:
  static constexpr unsigned kIndexBits = 20;  // slots: about a million at once
  static constexpr uint32_t kChunk = 64;      // slots per chunk
  static constexpr uint32_t kMaxChunks = (uint32_t{1} << kIndexBits) / kChunk;
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

  static void* token(uint32_t index, uint64_t generation) noexcept {
    return reinterpret_cast<void*>(
        static_cast<uintptr_t>((generation & LaunchSlot::kGenerationMask) << kIndexBits | index));
  }
  static uint32_t index_of(const void* token) noexcept {
    return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(token) &
                                 ((uintptr_t{1} << kIndexBits) - 1));
  }
  static uint64_t generation_of(const void* token) noexcept {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(token) >> kIndexBits);
  }
  /// The slot a token names, or null for a number never handed out (a corrupt token).
  static LaunchSlot* slot(uint32_t index) noexcept {
    if (index >= kMaxChunks * kChunk) return nullptr;
    LaunchSlot* c = table().chunks[index / kChunk].load(std::memory_order_acquire);
    return c != nullptr ? c + index % kChunk : nullptr;
  }
  /// A chunk for `owner` (its slots free, their generations continuing); kNone when the table is
  /// full.
  static uint32_t take_chunk(DeviceState* owner) {
    Table& t = table();
    std::lock_guard<std::mutex> g(t.mutex);
    uint32_t c;
    if (!t.free.empty()) {
      c = t.free.back();
      t.free.pop_back();
    } else if (t.used < kMaxChunks) {
      c = t.used++;
      t.chunks[c].store(new LaunchSlot[kChunk], std::memory_order_release);
    } else {
      return kNone;
    }
    LaunchSlot* s = t.chunks[c].load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < kChunk; ++i) s[i].device.store(owner, std::memory_order_relaxed);
    return c;
  }
  /// Gives a chunk back: its plugin can no longer call (it was destroyed).
  static void give_back(uint32_t c) {
    Table& t = table();
    LaunchSlot* s = t.chunks[c].load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < kChunk; ++i) s[i].device.store(nullptr, std::memory_order_relaxed);
    std::lock_guard<std::mutex> g(t.mutex);
    t.free.push_back(c);
  }

 private:
  struct Table {
    std::atomic<LaunchSlot*> chunks[kMaxChunks] = {};
    std::mutex mutex;
    uint32_t used = 0;
    std::vector<uint32_t> free;
  };
  // Never destroyed: late calls (a plugin left running at shutdown) may come at any time.
  static Table& table() {
    static Table* t = new Table();
    return *t;
  }
};

}  // namespace hcr::detail
