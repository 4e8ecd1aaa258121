// The data manager: where each buffer's valid copies are, and moving them. A buffer has a replica
// per memory node (0 = host), each valid or invalid (an MSI-style protocol): a task reading on a
// node gets a valid replica copied in; a task writing makes its node's replica the only valid one
// when it commits. Copies are asynchronous through the plugins. Each device node has a memory
// limit; replicas are evicted least-recently-used, invalid and clean ones first, the only valid
// copy written home first. A task pins all its replicas at once or waits (all or nothing), so a
// working set that fits never thrashes.
#pragma once

#include "data_events.hpp"
#include "../task_node.hpp"

#include <hcr/error.hpp>
#include <hcr/data.hpp>
#include <hcr/detail/handles.hpp>
#include <hcr/plugin.h>

#include <atomic>
#include <deque>
#include <limits>
#include <queue>
#include <exception>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

namespace hcr::detail {

struct BufferState;
struct ContextState;
struct PluginInstance;

struct Replica {
  hcr_memory_t* mem = nullptr;  // the allocation on a device node (host: the buffer's memory)
  bool valid = false;
  bool fetching = false;        // a copy into this replica is in flight
  bool evicting = false;        // being copied home before it is freed
  uint32_t pins = 0;            // tasks between acquire and commit, copies reading it
  uint32_t copies_out = 0;      // copies reading it now: a writer must wait for them
  uint64_t last_use = 0;        // LRU clock
  uint32_t owner = 0;           // device nodes: the context whose task allocated it (0: default)
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
  std::vector<Waiter> waiters;  // tasks waiting for copies into (or out of) this replica
  std::vector<uint32_t> forward;   // host replica: nodes to copy on to once it arrives
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
  // A reference to the buffer is held (DataManager::update_hold), under the lock.
  bool held = false;
};

/// A copy that failed, with the device whose plugin did it: the fault is that device's, which
/// is not always the device of the task that waited for the copy.
class CopyError : public hcr::Error {
 public:
  CopyError(const std::string& message, uint32_t device, bool lost)
      : hcr::Error(hcr::ErrorCode::backend, message), device(device), lost(lost) {}
  uint32_t device;  ///< Device::id of the device that did the copy
  bool lost;        ///< it reported itself gone (and is retired as lost)
};

class DataManager {
 public:
  static constexpr uint32_t kMaxNodes = 128;  // the host and DeviceBudget::kOwnMemory devices

  /// A device with its own memory: the plugin instance that drives it and its index there.
  struct NodeInit {
    PluginInstance* plugin;
    size_t index;      // the plugin's device index
    uint32_t device;   // Device::id, as DataEvents and DeviceStatusView name it
    std::string name;  // the device's
    uint64_t limit;
  };

  DataManager(const DataManager&) = delete;
  DataManager& operator=(const DataManager&) = delete;

  /// Node 0 is host memory; one node per device with its own memory follows (add_node). What
  /// happens to data is told to `events`; `devices` says which devices take work.
  DataManager(DataEvents& events, const DeviceStatusView& devices);
  ~DataManager();
  /// A device with its own memory joins (at start or hot-plugged); returns its node. Nodes are
  /// never reused: a removed device's node stays, empty.
  uint32_t add_node(NodeInit node);
  /// False while every device works in host memory: then nothing here is needed.
  bool active() const noexcept { return active_.load(std::memory_order_relaxed); }
  /// Lock-free: nodes_ never reallocates (reserved for kMaxNodes).
  uint64_t limit(uint32_t node) const noexcept { return nodes_[node].limit; }

  enum class Status {
    ready,    // every replica is valid and pinned: run now
    pending,  // copies are in flight; DataEvents::data_ready(t) follows
    blocked,  // not enough memory until other tasks release theirs; retried automatically
    failed,   // cannot ever fit: t->transfer_error says why
  };
  /// Makes every argument of `t` valid (read) or allocated (write) on `node`, and pins them.
  Status acquire(TaskNode* t, uint32_t node);
  /// Starts copying a placed task's inputs to `node` if there is free memory (host memory, node 0:
  /// home from the device that holds them); pins nothing. The caller holds the references: by now
  /// the task may have run elsewhere and let its buffers go.
  void prefetch(std::span<const Ref<BufferState>> inputs, int priority, uint32_t node,
                const ContextState* owner = nullptr);
  /// Bytes context `context` (ContextState::index) holds in node `node`'s memory.
  uint64_t context_bytes(uint32_t node, uint32_t context) const;
  /// The task acquired earlier has ended: its writes become the only valid replicas (on success),
  /// and its pins are released.
  void commit(TaskNode* t, bool success);
  /// A buffer is being destroyed: free its allocations.
  void forget(BufferState& b) noexcept;
  /// Copies every buffer whose only valid replica is on a device home, frees all allocations.
  void shutdown() noexcept;
  /// A device was removed (no longer scheduled, nothing running on it): writes home every buffer
  /// whose only valid copy is on `node` and frees the node's allocations. Waits for copies in
  /// flight; false (with the node's leftovers logged) when that took longer than `timeout_s`.
  bool evacuate(uint32_t node, double timeout_s) noexcept;
  /// A device and its memory are gone: its replicas are invalid, and data whose only valid copy
  /// was there is lost (readers fail, saying so).
  void node_lost(uint32_t node, const std::string& device) noexcept;
  /// Shutdown, for a device whose plugin is left running a launch that never came back: as
  /// node_lost, and its plugin is not called for the node again (its allocations are left).
  void abandon_node(uint32_t node, const std::string& device) noexcept;
  /// "eager": a task's writes on a device are copied home before it finishes (Config::writeback).
  void set_eager_writeback(bool on) noexcept { eager_writeback_ = on; }
  /// Eager write-back of what `t` (its kernel done) wrote on its device: copies each written
  /// buffer into host staging, and only when every copy succeeded into the buffer's host memory,
  /// so a device lost mid-copy leaves the previous version intact for a retry. Then calls
  /// DataEvents::written_through(t, error). False when there is nothing to do.
  bool write_through(TaskNode* t);

  /// The allocation holding `b` on device node `node` (pinned by the caller's task).
  hcr_memory_t* memory(BufferState& b, uint32_t node);
  /// Whether `b` has a valid replica on `node` (lock-free, may be momentarily stale).
  bool valid_on(const BufferState& b, uint32_t node) const noexcept;
  /// Valid there, or a copy to there is in flight (lock-free, may be momentarily stale).
  bool valid_or_arriving(const BufferState& b, uint32_t node) const noexcept;
  /// The nodes where `b` is valid or arriving, as a bit set over kMaxNodes (lock-free).
  void presence(const BufferState& b, uint64_t bits[2]) const noexcept;
  /// The same, valid and arriving apart.
  void locate(const BufferState& b, uint64_t valid[2], uint64_t arriving[2]) const noexcept;
  DataCounters counters() const;

 private:
  static constexpr int kUrgent = std::numeric_limits<int>::max();
  struct Copy {
    BufferState* b;  // holds a reference until the copy completes
    uint32_t src, dst;
    bool evict;      // a write-back before freeing the source replica
    int priority = kUrgent;  // of the task that needs it; write-backs and refetches go first
  };
  // The copies of one device's engine in one direction: a few in flight in the plugin (so that
  // it never idles between two), the rest waiting here, the most urgent task's first. Copies
  // handed to a plugin run in the order given; without this a copy for an urgent task would
  // wait behind every prefetch placed before it.
  struct Lane {
    static constexpr uint32_t kDepth = 2;
    uint32_t in_flight = 0;
    uint64_t seq = 0;
    // A copy whose priority rose waits twice: the entry whose seq is no longer its replica's
    // ticket is dropped when it comes up.
    struct Waiting {
      int priority;
      uint64_t seq;
      Copy copy;
      bool operator<(const Waiting& o) const {
        return priority != o.priority ? priority < o.priority : seq > o.seq;
      }
    };
    std::priority_queue<Waiting> waiting;
  };
  struct Transfer;
  struct WriteThrough;
  static void on_stage_done(void* user, hcr_error_t* error, const hcr_completion_info_t* info);
  void finish_write_through(WriteThrough* wt) noexcept;
  struct NodeState {
    PluginInstance* plugin = nullptr;  // device nodes: the device's plugin instance
    size_t index = 0;                  // the plugin's device index
    uint32_t device = 0;               // Device::id
    Lane in, out;  // copies into this node, and out of it to host memory
    std::string name;
    uint64_t limit = 0, used = 0;
    // Its plugin was left running at shutdown (a launch that never came back): nothing is asked
    // of it any more (no copy, no free, no synchronize) and its data counts as lost.
    bool abandoned = false;
    std::unordered_set<BufferState*> resident;  // buffers with an allocation here
    std::vector<uint64_t> owned;  // bytes allocated here per owning context (Replica::owner)
    std::deque<TaskNode*> waiting_for_memory;
  };

  BufferData& data(BufferState& b);  // made on first use; lock held
  void set_valid(BufferState& b, uint32_t node, bool valid);
  void set_fetching(BufferState& b, uint32_t node, bool fetching);
  bool has_other_valid(BufferState& b, uint32_t node);
  // Frees unpinned replicas on `node` until `need` more bytes fit; starts write-backs of only
  // copies when that is what it takes. True when the room is there now.
  bool make_room(uint32_t node, uint64_t need, const TaskNode* t, std::vector<Copy>& copies);
  // The same within a context's memory quota: only that context's replicas are evicted.
  bool make_room_in_quota(uint32_t node, uint64_t need, const TaskNode* t,
                          std::vector<Copy>& copies);
  // Evicts unpinned replicas on `node` not used by `t` (of context `owner` only, unless it is
  // negative) until `short_by` bytes are freed or on their way home. True when freed now.
  bool evict(uint32_t node, uint64_t short_by, const TaskNode* t, int64_t owner,
             std::vector<Copy>& copies);
  uint64_t& owned(NodeState& node, uint32_t context);
  void free_replica(BufferState& b, uint32_t node) noexcept;
  // Plans the copy that makes `node`'s replica valid; the replica is marked fetching.
  void plan_fetch(BufferState& b, uint32_t node, std::vector<Copy>& copies,
                  int priority = kUrgent);
  // A task of `priority` waits for the copy already planned into `node`'s replica: a copy still
  // waiting in its lane (or the copy into host memory it is forwarded from) moves up to it. The
  // first task to ask for a replica is often not its most urgent reader.
  void urge(BufferState& b, uint32_t node, int priority);
  // Hands a copy to its device's lane: started now, or when an earlier one of the lane is done.
  void issue(const Copy& c) noexcept;
  void start(const Copy& c) noexcept;  // hands it to the plugin
  // Until every copy handed to a lane has completed (abandoned nodes' lanes aside).
  void drain_lanes() noexcept;
  Lane& lane(const Copy& c) noexcept;  // lock held
  static void on_copy_done(void* user, hcr_error_t* error, const hcr_completion_info_t* info);
  void copy_done(Transfer* tr, hcr_error_t* error) noexcept;
  // A second answer for a copy (done again, or an error returned after done): counted in the
  // device's protocol_errors and logged, never completing a copy twice.
  void copy_answered_twice(Transfer* tr, hcr_error_t* error, bool returned) noexcept;
  // Every Transfer made, freed with the DataManager only (see Transfer); those not in flight.
  std::vector<Transfer*> transfers_;    // lock held
  Transfer* free_transfers_ = nullptr;  // lock held
  // Releases the tasks waiting on `b`'s replica on `node` that may go now: once nothing is copied
  // into it (writers: nor out of it). A reader finding it invalid then (a newer version was
  // committed elsewhere meanwhile) gets a fresh fetch and waits on. A failed copy fails them.
  void wake(BufferState& b, uint32_t node, const std::exception_ptr& failure,
            std::vector<TaskNode*>& ready, std::vector<Copy>& more);
  void take_memory_waiters(std::vector<TaskNode*>& out);
  // A buffer whose host memory is not its own (the application's, Runtime::wrap; its parent's, a
  // tile) is kept alive while only devices hold its current data, so that dropping its last
  // handle loses nothing its host memory is waiting for: the data comes home when read, evicted,
  // or at the runtime's end. Lock held; a reference to give up goes to `drop`, to be released
  // after the lock (it may be the last one).
  void update_hold(BufferState& b, std::vector<BufferState*>& drop);
  void count_link(uint32_t from, uint32_t to, uint64_t bytes);

  DataEvents& events_;
  const DeviceStatusView& devices_;
  std::atomic<bool> active_{false};
  bool eager_writeback_ = false;
  mutable std::mutex mutex_;
  std::vector<NodeState> nodes_;
  uint64_t clock_ = 0;
  // Counters (under mutex_).
  std::map<std::pair<uint32_t, uint32_t>, std::pair<uint64_t, uint64_t>> links_;  // bytes, copies
  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0, writebacks_ = 0;
};

}  // namespace hcr::detail
