// Owns each memory node's memory: its limit, allocations, quotas per context, and eviction.
//
// Eviction is least-recently-used when a task needs room: invalid and clean replicas first, the
// only valid copy written home before it goes. Scratch blocks (Task::scratch) a task has given
// back wait in the node's pool for a task asking for the same size; they count as used, and are
// the first memory freed for real when room is needed.
#pragma once

#include "coherence.hpp"

#include <hcr/plugin.h>

#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace hcr::detail {

struct BufferState;
struct PluginInstance;
struct TaskNode;

/// One memory node: host memory (node 0) or a device's own.
struct NodeState {
  PluginInstance* plugin = nullptr;  // device nodes: the device's plugin instance
  size_t index = 0;                  // the plugin's device index
  uint32_t device = 0;               // Device::id
  std::string name;                  // the device's ("host" for node 0)
  uint64_t limit = 0, used = 0;
  // Its plugin was left running at shutdown (a launch that never came back): nothing is asked
  // of it any more (no copy, no free, no synchronize) and its data counts as lost.
  bool abandoned = false;
  std::unordered_set<BufferState*> resident;  // buffers with an allocation here
  std::vector<uint64_t> owned;  // bytes allocated here per owning context (Replica::owner)
  std::deque<TaskNode*> waiting_for_memory;
  // Scratch: free blocks kept for reuse by size (device nodes: hcr_memory_t*; node 0: host
  // memory), their bytes, and the bytes of all scratch blocks here (held or free). On device nodes
  // all of it is counted in `used`.
  std::multimap<uint64_t, void*> scratch_free;
  uint64_t scratch_pooled = 0, scratch_bytes = 0;
  // node_lost: its memory is gone; scratch given back is freed, not kept.
  bool lost = false;
};

/// The memory nodes. Everything but limit() runs under the data manager's lock.
/// Scratch blocks a hung launch may still use (NodeMemory::hold_task_scratch).
struct HeldScratch {
  uint32_t node = 0;
  uint32_t owner = 0;                              // the context they are counted to
  std::vector<std::pair<uint64_t, void*>> blocks;  // bytes, block
};

class NodeMemory {
 public:
  static constexpr uint32_t kMaxNodes = 128;  // the host and DeviceBudget::kOwnMemory devices

  explicit NodeMemory(Coherence& coherence);
  NodeMemory(const NodeMemory&) = delete;
  NodeMemory& operator=(const NodeMemory&) = delete;

  /// Appends a device's node (Error(config) past kMaxNodes); returns its number.
  uint32_t add(NodeState node);
  uint32_t count() const noexcept { return static_cast<uint32_t>(nodes_.size()); }
  NodeState& node(uint32_t n) noexcept { return nodes_[n]; }
  const NodeState& node(uint32_t n) const noexcept { return nodes_[n]; }
  /// Lock-free: nodes_ never reallocates (reserved for kMaxNodes).
  uint64_t limit(uint32_t n) const noexcept { return nodes_[n].limit; }

  /// Asks node `n`'s plugin for `bytes`; the plugin's error, or null with `mem` set.
  hcr_error_t* allocate(uint32_t n, uint64_t bytes, hcr_memory_t*& mem);
  /// `b`'s replica `r` on node `n` takes the allocation `mem`, counted to context `owner`.
  void keep(BufferState& b, Replica& r, uint32_t n, hcr_memory_t* mem, uint32_t owner);
  /// Frees `b`'s allocation on `n` (if any); the replica is invalid after.
  void free_replica(BufferState& b, uint32_t n) noexcept;
  /// Bytes context `context` holds on node `n`, made on first use.
  uint64_t& owned(uint32_t n, uint32_t context);
  uint64_t context_bytes(uint32_t n, uint32_t context) const;

  // Frees unpinned replicas on `n` until `need` more bytes fit; starts write-backs of only
  // copies when that is what it takes. True when the room is there now.
  bool make_room(uint32_t n, uint64_t need, const TaskNode* t, std::vector<Copy>& copies);
  // The same within a context's memory quota: only that context's replicas are evicted.
  bool make_room_in_quota(uint32_t n, uint64_t need, const TaskNode* t, std::vector<Copy>& copies);
  enum class Room {
    made,    // it fits now
    queued,  // `t` waits in the node's waiting_for_memory until others release theirs
    never,   // it can never fit: t->transfer_error says why
  };
  // Room on device node `n` for what `t` lacks there (its buffers without an allocation, the
  // scratch the pool cannot supply), within its context's memory_quota; evictions into `copies`.
  Room make_room_for(TaskNode* t, uint32_t n, std::vector<Copy>& copies);
  // Allocates each of `t`'s buffers lacking one on device node `n`, then takes `t`'s scratch
  // blocks (on any node): all before anything is pinned, so a failure leaves nothing pinned and
  // no copy waiting for `t`. The error (allocations made stay, counted), or null.
  std::exception_ptr take_task_memory(TaskNode* t, uint32_t n);
  // Whatever released pins or freed memory may unblock a task waiting on any node.
  void take_memory_waiters(std::vector<TaskNode*>& out);

  /// At most this many free scratch blocks wait in a node's pool; on node 0 (host memory, which
  /// has no limit) at most kHostScratchPoolBytes of them.
  static constexpr size_t kScratchPoolBlocks = 64;
  static constexpr uint64_t kHostScratchPoolBytes = uint64_t{256} << 20;
  /// Bytes of `t`'s scratch on node `n` that its pool cannot supply (what must be allocated).
  uint64_t scratch_short(uint32_t n, const TaskNode* t) const;
  /// A block of `bytes` for scratch on `n`, counted to context `owner`: from the pool if it has
  /// one that size, else allocated (host memory, 64-byte aligned, on node 0). Null on success.
  /// Room on device nodes is the caller's (make_room).
  std::exception_ptr take_scratch(uint32_t n, uint64_t bytes, uint32_t owner, void*& block);
  /// A scratch block comes back: into the pool, or freed if the pool is full or the node lost.
  void give_back_scratch(uint32_t n, uint64_t bytes, uint32_t owner, void* block) noexcept;
  /// Each of `t`'s scratch blocks on `n`, all or none (taken last, after its buffers' room).
  std::exception_ptr take_task_scratch(TaskNode* t, uint32_t n);
  /// `t`'s blocks go back; memory waiters may go on (into `retry`).
  void give_back_task_scratch(TaskNode* t, std::vector<TaskNode*>& retry) noexcept;
  /// `t`'s blocks leave it, still counted, for a launch given up on (null when it holds none).
  HeldScratch* hold_task_scratch(TaskNode* t) noexcept;
  /// The held blocks go back (the record stays the caller's to delete).
  void give_back_held(const HeldScratch* h, std::vector<TaskNode*>& retry) noexcept;
  /// Frees pooled scratch blocks on `n` (but none of a size `t` asks for) until `need` bytes are
  /// freed or none is left; returns the bytes freed. need = UINT64_MAX: all of them.
  uint64_t free_pooled_scratch(uint32_t n, uint64_t need, const TaskNode* t) noexcept;
  uint64_t scratch_allocations() const noexcept { return scratch_allocations_; }
  uint64_t scratch_reuses() const noexcept { return scratch_reuses_; }

  /// A replica was freed to make room (or is dead weight): counted in DataCounters::evictions.
  void count_eviction() noexcept { ++evictions_; }
  uint64_t evictions() const noexcept { return evictions_; }

 private:
  // Evicts unpinned replicas on `n` not used by `t` (of context `owner` only, unless it is
  // negative) until `short_by` bytes are freed or on their way home. True when freed now.
  bool evict(uint32_t n, uint64_t short_by, const TaskNode* t, int64_t owner,
             std::vector<Copy>& copies);

  Coherence& coherence_;
  std::vector<NodeState> nodes_;
  uint64_t evictions_ = 0;
  uint64_t scratch_allocations_ = 0, scratch_reuses_ = 0;
};

}  // namespace hcr::detail
