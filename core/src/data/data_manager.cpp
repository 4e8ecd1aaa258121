// Owns the data manager's facade: acquire, prefetch, commit and a copy's end, over the parts.
// Plugin calls that complete asynchronously are never made with the lock held; mem_alloc and
// mem_free are, being short and synchronous.
#include "data_manager.hpp"

#include "../buffer_state.hpp"
#include "../contexts/context_state.hpp"
#include "../kernel_state.hpp"
#include "../log_internal.hpp"
#include "../plugins/plugin_loader.hpp"

#include <hcr/error.hpp>

#include <utility>

namespace hcr::detail {

DataManager::DataManager(DataEvents& events, const DeviceStatusView& devices)
    : events_(events),
      devices_(devices),
      transfers_(mutex_, coherence_, memory_, *this, events),
      write_back_(mutex_, coherence_, memory_, transfers_, events) {}

uint32_t DataManager::add_node(NodeInit n) {
  std::lock_guard<std::mutex> lock(mutex_);
  NodeState node;
  node.plugin = n.plugin;
  node.index = n.index;
  node.device = n.device;
  node.name = std::move(n.name);
  node.limit = n.limit;
  const uint32_t id = memory_.add(std::move(node));
  transfers_.add_node();
  active_.store(true, std::memory_order_release);
  return id;
}

hcr_memory_t* DataManager::memory(BufferState& b, uint32_t node) {
  std::lock_guard<std::mutex> lock(mutex_);
  return coherence_.data(b).replicas[node].mem;
}

uint64_t DataManager::context_bytes(uint32_t n, uint32_t context) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return memory_.context_bytes(n, context);
}

DataManager::Status DataManager::acquire(TaskNode* t, uint32_t n) {
  std::vector<Copy> copies;
  GhostPlan ghost_plan;  // (its references go after the lock)
  bool halo = false;
  Status status = Status::pending;
  t->transfers_pending.store(1, std::memory_order_relaxed);  // held while we start copies
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const ArgRec& a : t->uargs) halo |= a.buffer->halo != 0;
    if (std::exception_ptr e = coherence_.lost_input(*t)) {
      t->data_lost = true;
      t->transfer_error = std::move(e);
      return Status::failed;
    }
    using Room = NodeMemory::Room;
    const Room room = n != 0 ? memory_.make_room_for(t, n, copies) : Room::made;
    if (room == Room::never) return Status::failed;  // (before any copy was planned)
    if (room == Room::queued) status = Status::blocked;
    // Halo tiles read: which ghost edges to refresh, and from where (ghosts.hpp). After making
    // room: the plan reads only replicas still there (make_room may have freed a neighbour's).
    if (halo && status != Status::blocked) [[unlikely]]
      switch (ghosts_.plan(t, n, ghost_plan, copies)) {
        case Ghosts::Step::go: break;
        case Ghosts::Step::retry:
          memory_.node(n).waiting_for_memory.push_back(t);  // acquired again when a copy lands
          status = Status::blocked;
          break;
        case Ghosts::Step::failed: status = Status::failed; break;  // (copies planned still go)
      }
    if (status == Status::pending) {
      if (std::exception_ptr e = memory_.take_task_memory(t, n)) {
        t->transfer_error = std::move(e);
        status = Status::failed;
      }
    }
    if (status == Status::pending) {
      t->data_node = static_cast<int32_t>(n);
      if (halo) [[unlikely]]
        ghosts_.start(t, n, ghost_plan, copies);
      coherence_.pin(t, n, copies);
    }
  }
  for (const Copy& c : copies) transfers_.issue(c);
  if (status == Status::blocked || status == Status::failed) return status;
  if (t->transfers_pending.fetch_sub(1, std::memory_order_acq_rel) == 1) return Status::ready;
  return Status::pending;
}

void DataManager::prefetch(std::span<const Ref<BufferState>> inputs, int priority, uint32_t n,
                           const ContextState* owner) {
  std::vector<Copy> copies;
  GhostPlan ghost_plan;  // (its references go after the lock)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    NodeState& node = memory_.node(n);
    // A device out of scheduling (withheld by the node arbiter, quarantined, removed) gets no
    // copy and no allocation ahead of a task: on a GPU another process holds, that memory is
    // theirs.
    if (n != 0 && (node.abandoned || !devices_.in_scheduling(node.device))) return;
    for (const Ref<BufferState>& in : inputs) {
      BufferState& b = *in;
      Replica& r = coherence_.data(b).replicas[n];
      if (r.fetching) coherence_.urge(b, n, priority);
      // A halo tile's stale ghost edges come with it: its reader waits for none (ghosts.hpp).
      auto ghosts = [&] {
        if (b.halo != 0 && n != 0) [[unlikely]]
          ghosts_.prefetch(b, n, priority, ghost_plan, copies);
      };
      // (Pieces of a halo tile landing in host memory: its whole interior goes after them.)
      if (r.valid || r.fetching || r.evicting || r.edges_landing != 0) {
        ghosts();
        continue;
      }
      if (n != 0 && r.mem == nullptr) {                    // (host memory: the buffer's own)
        if (node.used + b.bytes() > node.limit) continue;  // only free room: evict nothing
        if (owner != nullptr && owner->memory_quota != 0 &&
            memory_.owned(n, owner->index) + b.bytes() > owner->memory_quota)
          continue;  // nor beyond its context's quota
        hcr_memory_t* mem = nullptr;
        if (hcr_error_t* err = memory_.allocate(n, b.bytes(), mem)) {
          node.plugin->api->error_destroy(err);
          continue;
        }
        memory_.keep(b, r, n, mem, owner != nullptr ? owner->index : 0);
      }
      coherence_.touch(r);
      coherence_.plan_fetch(b, n, copies, priority);
      ghosts();
    }
  }
  for (const Copy& c : copies) transfers_.issue(c);
}

// A copy ended: what it carried becomes valid where it landed (if still current), the tasks
// waiting on either end go, and a write-back frees the replica it emptied.
void DataManager::landed(const Copy& c, const std::exception_ptr& failure, After& after) noexcept {
  if (c.ghost() || c.edge_home()) {
    if (c.ghost()) ghosts_.landed(c, failure, after);
    else ghosts_.landed_home(c, failure, after);
    memory_.take_memory_waiters(after.retry);
    return;
  }
  BufferState& b = *c.b;
  BufferData& d = coherence_.data(b);
  Replica& src = d.replicas[c.src];
  Replica& dst = d.replicas[c.dst];
  --src.pins;
  --src.copies_out;
  // A part of a copy home (Coherence::copy_home): the copy ends with its last part.
  std::exception_ptr failed = failure;
  if (c.part) {
    if (failure && !dst.parts_failure) dst.parts_failure = failure;
    if (--dst.parts_landing != 0) {
      coherence_.wake(b, c.src, nullptr, after.ready, after.more);
      return;
    }
    failed = std::exchange(dst.parts_failure, nullptr);
  }
  // What a copy carried is current only if its source is still valid: a task elsewhere may
  // have committed a newer version while it was in flight (write-backs and prefetches are not
  // ordered by task dependencies).
  const bool current = !failed && src.valid;
  // Nodes of another plugin waiting for the data to reach host memory go on from there; when
  // it did not get there they fail with the copy (or, after a failed write-back, wait for a
  // fetch from the replica that is still valid).
  auto forward = [&](const std::exception_ptr& lost) {
    for (uint32_t f : dst.forward) {
      if (lost) {
        coherence_.set_fetching(b, f, false);
        coherence_.wake(b, f, lost, after.ready, after.more);
      } else {
        ++dst.pins;
        ++dst.copies_out;
        retain(&b);
        after.more.push_back({&b, 0, f, false});
      }
    }
    dst.forward.clear();
  };
  if (c.evict) {
    src.evicting = false;
    coherence_.set_fetching(b, c.dst, false);
    if (!failed) {
      if (current) coherence_.set_valid(b, 0, true);
      ++writebacks_;
      if (src.pins == 0) {  // nobody took it up meanwhile: free it
        memory_.free_replica(b, c.src);
        memory_.count_eviction();
      }
      forward(nullptr);
    } else if (!dst.forward.empty()) {
      coherence_.plan_fetch(b, 0, after.more);  // the device's replica is still the valid one
    }
    coherence_.wake(b, c.dst, nullptr, after.ready, after.more);
    memory_.take_memory_waiters(after.retry);
  } else {
    coherence_.set_fetching(b, c.dst, false);
    if (current) coherence_.set_valid(b, c.dst, true);  // else stale: wake() fetches again
    coherence_.wake(b, c.dst, failed, after.ready, after.more);
    if (c.dst == 0) forward(failed);
    memory_.take_memory_waiters(after.retry);
  }
  coherence_.wake(b, c.src, nullptr, after.ready, after.more);
  coherence_.update_hold(b, after.drop);
}

bool DataManager::take_host_scratch(TaskNode* t) {
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    e = memory_.take_task_scratch(t, 0);
  }
  if (!e) return true;
  t->transfer_error = std::move(e);
  return false;
}

void DataManager::release_scratch(TaskNode* t) {
  if (t->scratch_node < 0) return;
  std::vector<TaskNode*> retry;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_.give_back_task_scratch(t, retry);
  }
  for (TaskNode* w : retry) events_.retry_acquire(w);
}

HeldScratch* DataManager::hold_scratch(TaskNode* t) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return memory_.hold_task_scratch(t);
}

void DataManager::give_back_held(HeldScratch* h) noexcept {
  std::vector<TaskNode*> retry;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_.give_back_held(h, retry);
  }
  delete h;
  for (TaskNode* w : retry) events_.retry_acquire(w);
}

void DataManager::forget_held(HeldScratch* h) noexcept { delete h; }

bool DataManager::evacuate(uint32_t n, double timeout_s) noexcept {
  const bool done = write_back_.evacuate(n, timeout_s);
  std::lock_guard<std::mutex> lock(mutex_);
  if (n < memory_.count()) {
    memory_.node(n).lost = true;  // (nothing runs there any more: scratch given back is freed)
    free_scratch_pool(n);
  }
  return done;
}

void DataManager::commit(TaskNode* t, bool success) {
  if (t->data_node < 0) {
    release_scratch(t);
    return;
  }
  const auto n = static_cast<uint32_t>(t->data_node);
  std::vector<TaskNode*> retry;
  std::vector<BufferState*> drop;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_.give_back_task_scratch(t, retry);
    for (const ArgRec& a : t->uargs) {
      BufferState& b = *a.buffer;
      BufferData& d = coherence_.data(b);
      Replica& r = d.replicas[n];
      --r.pins;
      if (writes(a.access)) {
        ++d.version;  // neighbours' ghosts holding the last one are stale (failed: garbage maybe)
        if (success) {
          for (uint32_t m = 0; m < d.replicas.size(); ++m)
            if (m != n && d.replicas[m].valid) coherence_.set_valid(b, m, false);
          coherence_.set_valid(b, n, true);
          d.lost_with.clear();                                                 // written anew
          if (t->written_through && n != 0) coherence_.set_valid(b, 0, true);  // home already, too
        } else if (coherence_.has_other_valid(b, n)) {
          coherence_.set_valid(b, n, false);  // keep the inputs' valid copies for a retry elsewhere
        }
      }
      // The unpartition join brought a dead tile home: its device copies are dead weight. (Tasks
      // submitted before the unpartition still use them until then.)
      if (n == 0 && t->kind == TaskKind::join && b.detached.load(std::memory_order_acquire) &&
          r.valid)
        for (uint32_t m = 1; m < d.replicas.size(); ++m)
          if (d.replicas[m].pins == 0 && !d.replicas[m].fetching) memory_.free_replica(b, m);
      coherence_.update_hold(b, drop);
    }
    memory_.take_memory_waiters(retry);
  }
  for (BufferState* h : drop) release(h);
  t->data_node = -1;
  for (TaskNode* w : retry) events_.retry_acquire(w);
}

void DataManager::node_lost(uint32_t n, const std::string& device) noexcept {
  std::vector<BufferState*> drop;
  std::unique_lock<std::mutex> lock(mutex_);
  if (n >= memory_.count()) return;
  NodeState& node = memory_.node(n);
  node.lost = true;
  free_scratch_pool(n);  // (abandoned: forgotten, not freed)
  std::vector<BufferState*> resident(node.resident.begin(), node.resident.end());
  for (BufferState* b : resident) {
    BufferData& d = coherence_.data(*b);
    Replica& r = d.replicas[n];
    if (r.valid && !coherence_.has_other_valid(*b, n)) {
      d.lost_with = device;
      HCR_LOG(error, "the only valid copy of a " << shape_of(*b) << " buffer was lost with device '"
                                                 << device << "'");
    }
    coherence_.set_valid(*b, n, false);
    if (r.pins == 0 && !r.fetching && r.copies_out == 0) memory_.free_replica(*b, n);
    coherence_.update_hold(*b, drop);  // nothing left to wait for if that was the only copy
  }
  lock.unlock();
  for (BufferState* h : drop) release(h);
}

void DataManager::abandon_node(uint32_t n, const std::string& device) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (n == 0 || n >= memory_.count()) return;
    memory_.node(n).abandoned = true;
  }
  node_lost(n, device);
}

void DataManager::forget(BufferState& b) noexcept {
  if (b.data.load(std::memory_order_acquire) == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  BufferData& d = coherence_.data(b);
  for (uint32_t n = 1; n < d.replicas.size() && n < memory_.count(); ++n)
    if (d.replicas[n].mem != nullptr) memory_.free_replica(b, n);
}

void DataManager::shutdown() noexcept {
  if (active()) write_back_.shutdown(active_);
  std::lock_guard<std::mutex> lock(mutex_);
  for (uint32_t n = 0; n < memory_.count(); ++n) free_scratch_pool(n);
}

DataCounters DataManager::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  DataCounters c;
  for (uint32_t n = 0; n < memory_.count(); ++n) {
    const NodeState& node = memory_.node(n);
    c.nodes.push_back({n, node.name, n == 0 ? 0 : node.limit, node.used, node.scratch_bytes,
                       node.scratch_pooled});
  }
  c.scratch_allocations = memory_.scratch_allocations();
  c.scratch_reuses = memory_.scratch_reuses();
  transfers_.links(c);
  c.hits = coherence_.hits();
  c.misses = coherence_.misses();
  c.evictions = memory_.evictions();
  c.writebacks = writebacks_;
  return c;
}

}  // namespace hcr::detail
