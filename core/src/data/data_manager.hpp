// Owns the data manager's facade: what the engine calls, composed of the parts by role.
//
// The data manager: where each buffer's valid copies are, and moving them. A buffer has a replica
// per memory node (0 = host), each valid or invalid (an MSI-style protocol): a task reading on a
// node gets a valid replica copied in; a task writing makes its node's replica the only valid one
// when it commits. Copies are asynchronous through the plugins. Each device node has a memory
// limit; replicas are evicted least-recently-used, invalid and clean ones first, the only valid
// copy written home first. A task pins all its replicas at once or waits (all or nothing), so a
// working set that fits never thrashes. The parts, by role (as StarPU's datawizard): coherence
// (coherence.hpp), transfers (transfers.hpp), memory (node_memory.hpp), write-back
// (write_back.hpp), halo tiles' ghost edges (ghosts.hpp); it tells the engine what happened
// through data_events.hpp.
#pragma once

#include "coherence.hpp"
#include "data_events.hpp"
#include "ghosts.hpp"
#include "node_memory.hpp"
#include "transfers.hpp"
#include "write_back.hpp"
#include "../task_node.hpp"

#include <hcr/data.hpp>
#include <hcr/detail/handles.hpp>
#include <hcr/plugin.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace hcr::detail {

struct BufferState;
struct ContextState;
struct PluginInstance;

/// The facade the engine calls, composed of the parts by role. One lock guards them all.
class DataManager final : private CopyLanding {
 public:
  static constexpr uint32_t kMaxNodes = NodeMemory::kMaxNodes;

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
  /// A device with its own memory joins (at start or hot-plugged); returns its node. Nodes are
  /// never reused: a removed device's node stays, empty.
  uint32_t add_node(NodeInit node);
  /// False while every device works in host memory: then nothing here is needed.
  bool active() const noexcept { return active_.load(std::memory_order_relaxed); }
  /// Lock-free.
  uint64_t limit(uint32_t node) const noexcept { return memory_.limit(node); }

  enum class Status {
    ready,    // every replica is valid and pinned: run now
    pending,  // copies are in flight; DataEvents::data_ready(t) follows
    blocked,  // not enough memory until other tasks release theirs; retried automatically
    failed,   // cannot ever fit: t->transfer_error says why
  };
  /// Makes every argument of `t` valid (read) or allocated (write) on `node`, and pins them; takes
  /// its scratch blocks there (Task::scratch), room for them made as for its buffers.
  Status acquire(TaskNode* t, uint32_t node);
  /// While no device has its own memory (!active(), so acquire is not called): takes `t`'s
  /// scratch blocks in host memory. False (t->transfer_error says why) when it could not.
  bool take_host_scratch(TaskNode* t);
  /// `t`'s attempt has ended: its scratch blocks go back to their node's pool (commit does this
  /// too). For tasks that acquired nothing else (!active()).
  void release_scratch(TaskNode* t);
  /// A launch of `t` was given up on while its plugin may still use the task's scratch: the
  /// blocks leave the task (its attempt ends without giving them back), still counted on their
  /// node, until give_back_held(). Null when `t` holds none.
  HeldScratch* hold_scratch(TaskNode* t) noexcept;
  /// The plugin answered at last: the held blocks go back to their node's pool.
  void give_back_held(HeldScratch* h) noexcept;
  /// The plugin ended without answering, after shutdown: the record goes, the blocks with the
  /// plugin's memory.
  static void forget_held(HeldScratch* h) noexcept;
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
  void set_eager_writeback(bool on) noexcept { write_back_.set_eager(on); }
  /// Eager write-back of what `t` (its kernel done) wrote on its device: copies each written
  /// buffer into host staging, and only when every copy succeeded into the buffer's host memory,
  /// so a device lost mid-copy leaves the previous version intact for a retry. Then calls
  /// DataEvents::written_through(t, error). False when there is nothing to do.
  bool write_through(TaskNode* t) { return write_back_.write_through(t); }

  /// The allocation holding `b` on device node `node` (pinned by the caller's task).
  hcr_memory_t* memory(BufferState& b, uint32_t node);
  /// Whether `b` has a valid replica on `node` (lock-free, may be momentarily stale).
  bool valid_on(const BufferState& b, uint32_t node) const noexcept {
    return Coherence::valid_on(b, node);
  }
  /// Valid there, or a copy to there is in flight (lock-free, may be momentarily stale).
  bool valid_or_arriving(const BufferState& b, uint32_t node) const noexcept {
    return Coherence::valid_or_arriving(b, node);
  }
  /// The nodes where `b` is valid or arriving, as a bit set over kMaxNodes (lock-free).
  void presence(const BufferState& b, uint64_t bits[2]) const noexcept {
    Coherence::presence(b, bits);
  }
  /// The same, valid and arriving apart.
  void locate(const BufferState& b, uint64_t valid[2], uint64_t arriving[2]) const noexcept {
    Coherence::locate(b, valid, arriving);
  }
  DataCounters counters() const;

 private:
  void landed(const Copy& c, const std::exception_ptr& failure, After& after) noexcept override;
  // Under the lock: frees every pooled scratch block on `n`.
  void free_scratch_pool(uint32_t n) noexcept {
    memory_.free_pooled_scratch(n, UINT64_MAX, nullptr);
  }

  DataEvents& events_;
  const DeviceStatusView& devices_;
  std::atomic<bool> active_{false};
  mutable std::mutex mutex_;  // guards every part
  // The parts (each names the others it uses; none is used while they are made).
  NodeMemory memory_{coherence_};
  Coherence coherence_{memory_, transfers_};
  Ghosts ghosts_{coherence_, memory_};
  Transfers transfers_;
  WriteBack write_back_;
  // Counters (under mutex_); hits and misses are Coherence's, evictions NodeMemory's, links
  // Transfers'.
  uint64_t writebacks_ = 0;
};

}  // namespace hcr::detail
