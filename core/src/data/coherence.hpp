// Owns each buffer's replicas and their validity (coherence), and the tasks waiting on them.
//
// An MSI-style protocol: it plans the copy that makes a replica valid, moves that copy up for an
// urgent reader, and releases the tasks waiting for it.
#pragma once

#include "../task_node.hpp"

#include <hcr/plugin.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <limits>
#include <string>
#include <vector>

namespace hcr::detail {

struct BufferState;
class NodeMemory;
class Transfers;

struct Replica {
  hcr_memory_t* mem = nullptr;  // the allocation on a device node (host: the buffer's memory)
  bool valid = false;
  bool fetching = false;    // a copy into this replica is in flight
  bool evicting = false;    // being copied home before it is freed
  uint32_t pins = 0;        // tasks between acquire and commit, copies reading it
  uint32_t copies_out = 0;  // copies reading it now: a writer must wait for them
  uint64_t last_use = 0;    // LRU clock
  uint32_t owner = 0;       // device nodes: the context whose task allocated it (0: default)
  // While fetching: the priority of the most urgent task waiting for the copy, its source, and
  // its ticket in the lane while it waits there (0: started, or not a lane's to order).
  int fetch_priority = 0;
  uint32_t fetch_src = 0;
  uint64_t ticket = 0;
  struct Waiter {
    TaskNode* task;
    bool reads;   // needs the replica valid when it goes
    bool writes;  // also waits for copies reading this replica
  };
  std::vector<Waiter> waiters;    // tasks waiting for copies into (or out of) this replica
  std::vector<uint32_t> forward;  // host replica: nodes to copy on to once it arrives
  // A halo tile's replica on a device node (data/ghosts.hpp): ghost edge copies landing in it (its
  // readers wait for them), and per neighbour (ghost_slot) the version of its data the ghosts hold
  // or are receiving, 0 for none; empty until first filled, emptied when the memory is freed.
  uint32_t ghost_fetches = 0;
  std::vector<uint64_t> ghost_seen;
  // A halo tile's host replica while it is invalid: the pieces of its interior copied home for the
  // ghosts of its neighbours read in host memory (border_piece), per piece the version of its data
  // copied there or on its way, 0 for none (empty until first copied); and those copies in flight,
  // which a copy of the whole interior and a host writer wait for (they write the same memory).
  uint32_t edges_landing = 0;
  std::vector<uint64_t> edges_home;
  // A copy of such a tile's whole interior home when some of those pieces are current (tasks may
  // be reading them): the rest comes piece by piece (Coherence::copy_home), and the copy ends
  // when the last lands; the first failure among them is the copy's.
  uint32_t parts_landing = 0;
  std::exception_ptr parts_failure;
};

/// Per-buffer replica table, made when a buffer first meets a device with its own memory.
struct BufferData {
  std::deque<Replica> replicas;  // per node; a deque so references survive growth
  // Which nodes hold a valid replica, or have one on its way, readable without the lock
  // (scheduling predictions).
  std::atomic<uint64_t> valid_bits[2] = {0, 0};
  std::atomic<uint64_t> arriving_bits[2] = {0, 0};
  // The only valid copy died with a device (under the lock): readers fail until a task writes it.
  std::string lost_with;
  // A reference to the buffer is held (Coherence::update_hold), under the lock.
  bool held = false;
  // Counts the tasks that wrote it (under the lock): which version a neighbour's ghosts hold.
  uint64_t version = 1;
};

/// A copy planned from one memory node to another. It holds a reference to its buffer until it
/// completes. It moves `b`'s own data (a halo tile's interior: data/ghosts.hpp), or an edge of a
/// neighbour's into `b`'s ghosts (a reference held to the neighbour too), or one piece of `b`'s
/// interior home for its neighbours' ghosts there.
struct Copy {
  static constexpr int kUrgent = std::numeric_limits<int>::max();
  BufferState* b;
  uint32_t src, dst;
  bool evict;              // a write-back before freeing the source replica
  int priority = kUrgent;  // of the task that needs it; write-backs and refetches go first
  static constexpr uint8_t kOwn = 0xFF;
  // A ghost edge: its ghost_slot around `b` (kOwn: a copy of b's own data), and the neighbour
  // whose replica on `src` is read (null: one gone, its data in host memory).
  uint8_t slot = kOwn;
  BufferState* from = nullptr;
  bool ghost() const noexcept { return slot != kOwn; }
  // A piece of b's interior copied home (border_piece; kOwn: none): for its neighbours' ghosts
  // (Replica::edges_home), or a part of a copy of its whole interior (Replica::parts_landing).
  uint8_t piece = kOwn;
  bool part = false;
  bool edge_home() const noexcept { return piece != kOwn && !part; }
  /// Waits in its lane under its replica's ticket (a fetch that can move up for an urgent reader).
  /// (A piece is not: its copy's several parts would share one ticket.)
  bool ticketed() const noexcept { return !evict && !ghost() && piece == kOwn; }
};

/// "rows x cols", for messages.
std::string shape_of(const BufferState& b);

/// The replica tables. All but the lock-free queries run under the data manager's lock.
class Coherence {
 public:
  Coherence(const NodeMemory& memory, Transfers& transfers)
      : memory_(memory), transfers_(transfers) {}
  Coherence(const Coherence&) = delete;
  Coherence& operator=(const Coherence&) = delete;

  BufferData& data(BufferState& b);  // made on first use
  void set_valid(BufferState& b, uint32_t node, bool valid);
  void set_fetching(BufferState& b, uint32_t node, bool fetching);
  bool has_other_valid(BufferState& b, uint32_t node);
  // A buffer whose host memory is not its own (the application's, Runtime::wrap; its parent's, a
  // tile) is kept alive while only devices hold its current data, so that dropping its last
  // handle loses nothing its host memory is waiting for: the data comes home when read, evicted,
  // or at the runtime's end. A reference to give up goes to `drop`, to be released after the
  // lock (it may be the last one).
  void update_hold(BufferState& b, std::vector<BufferState*>& drop);
  // Plans the copy that makes `node`'s replica valid; the replica is marked fetching.
  void plan_fetch(BufferState& b, uint32_t node, std::vector<Copy>& copies,
                  int priority = Copy::kUrgent);
  // Plans the copy of `b`'s data on device node `src` into host memory (a write-back when `evict`),
  // the host replica marked fetching by the caller: one copy, or the parts not home yet of a halo
  // tile some of whose pieces are (Replica::parts_landing). Pins `src` for each.
  void copy_home(BufferState& b, uint32_t src, bool evict, int priority, std::vector<Copy>& copies);
  // A task of `priority` waits for the copy already planned into `node`'s replica: a copy still
  // waiting in its lane (or the copy into host memory it is forwarded from) moves up to it. The
  // first task to ask for a replica is often not its most urgent reader.
  void urge(BufferState& b, uint32_t node, int priority);
  // Releases the tasks waiting on `b`'s replica on `node` that may go now: once nothing is copied
  // into it (writers: nor out of it). A reader finding it invalid then (a newer version was
  // committed elsewhere meanwhile) gets a fresh fetch and waits on. A failed copy fails them.
  void wake(BufferState& b, uint32_t node, const std::exception_ptr& failure,
            std::vector<TaskNode*>& ready, std::vector<Copy>& more);
  // The error a task reading a buffer whose only valid copy died with a device (lost_with) fails
  // with, until a task writes the buffer again: null when `t` reads none.
  std::exception_ptr lost_input(const TaskNode& t);
  // Pins `t`'s replicas on `node` for its attempt (allocated there already): plans the fetches its
  // reads need, and queues `t` on each replica a copy must first land in, leave, or stop reading,
  // counting those in t->transfers_pending. Each read is counted a hit or a miss.
  void pin(TaskNode* t, uint32_t node, std::vector<Copy>& copies);
  // The replica is used now: the last to be evicted (NodeMemory evicts least-recently-used).
  void touch(Replica& r) noexcept { r.last_use = ++clock_; }
  // Reads that found their replica valid and idle, and those that waited for a copy.
  uint64_t hits() const noexcept { return hits_; }
  uint64_t misses() const noexcept { return misses_; }

  // Lock-free, and possibly momentarily stale (scheduling predictions).
  static bool valid_on(const BufferState& b, uint32_t node) noexcept;
  static bool valid_or_arriving(const BufferState& b, uint32_t node) noexcept;
  static void presence(const BufferState& b, uint64_t bits[2]) noexcept;
  static void locate(const BufferState& b, uint64_t valid[2], uint64_t arriving[2]) noexcept;

 private:
  const NodeMemory& memory_;
  Transfers& transfers_;
  uint64_t clock_ = 0;  // LRU
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace hcr::detail
