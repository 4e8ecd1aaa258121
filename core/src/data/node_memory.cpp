// Owns allocation through each node's plugin, context quotas, and least-recently-used eviction.
// Runs under the data manager's lock; mem_alloc and mem_free are called with it held, being
// short and synchronous.
#include "node_memory.hpp"

#include "../buffer_state.hpp"
#include "../contexts/context_state.hpp"
#include "../kernel_state.hpp"
#include "../plugins/plugin_loader.hpp"
#include "../task_node.hpp"

#include <hcr/error.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

namespace hcr::detail {

namespace {
bool uses(const TaskNode* t, const BufferState* b) {
  if (t == nullptr) return false;
  for (const ArgRec& a : t->uargs)
    if (a.buffer == b) return true;
  return false;
}
}  // namespace

NodeMemory::NodeMemory(Coherence& coherence) : coherence_(coherence) {
  nodes_.reserve(kMaxNodes);  // limit() reads nodes_ without the lock while nodes join
  nodes_.emplace_back().name = "host";
}

uint32_t NodeMemory::add(NodeState node) {
  if (nodes_.size() >= kMaxNodes)
    throw Error(ErrorCode::config,
                "more than " + std::to_string(kMaxNodes - 1) + " devices with their own memory");
  nodes_.push_back(std::move(node));
  return static_cast<uint32_t>(nodes_.size() - 1);
}

NodeMemory::Room NodeMemory::make_room_for(TaskNode* t, uint32_t n, std::vector<Copy>& copies) {
  NodeState& node = nodes_[n];
  uint64_t need = 0;
  for (const ArgRec& a : t->uargs)
    if (coherence_.data(*a.buffer).replicas[n].mem == nullptr) need += a.buffer->bytes();
  // Scratch the pool has in the sizes asked needs no room; all of it counts to the context.
  const uint64_t quota_need = need + t->scratch_bytes;
  need += t->scratch.empty() ? 0 : scratch_short(n, t);
  auto takes = [&] {  // (built only on failure: this is every task's path)
    return t->scratch_bytes == 0
               ? "the task's buffers take " + std::to_string(t->bytes) + " bytes"
               : "task of kernel '" + t->kernel->name + "' takes " + std::to_string(t->bytes) +
                     " bytes (" + std::to_string(t->scratch_bytes) + " of them scratch)";
  };
  if (t->bytes > node.limit) {
    t->transfer_error = std::make_exception_ptr(
        Error(ErrorCode::out_of_memory,
              takes() + "; '" + node.name + "' may hold " + std::to_string(node.limit)));
    return Room::never;
  }
  const ContextState* ctx = t->context;
  if (ctx != nullptr && ctx->memory_quota != 0 && t->bytes > ctx->memory_quota) {
    t->transfer_error = std::make_exception_ptr(
        Error(ErrorCode::out_of_memory, takes() + "; context '" + ctx->name + "' may hold " +
                                            std::to_string(ctx->memory_quota) + " on '" +
                                            node.name + "' (its memory_quota)"));
    return Room::never;
  }
  if ((quota_need > 0 && ctx != nullptr && ctx->memory_quota != 0 &&
       !make_room_in_quota(n, quota_need, t, copies)) ||
      (need > 0 && !make_room(n, need, t, copies))) {
    node.waiting_for_memory.push_back(t);
    return Room::queued;
  }
  return Room::made;
}

std::exception_ptr NodeMemory::take_task_memory(TaskNode* t, uint32_t n) {
  for (size_t i = 0; n != 0 && i < t->uargs.size(); ++i) {  // (host memory: each buffer's own)
    BufferState& b = *t->uargs[i].buffer;
    Replica& r = coherence_.data(b).replicas[n];
    if (r.mem != nullptr) continue;
    hcr_memory_t* mem = nullptr;
    if (hcr_error_t* err = allocate(n, b.bytes(), mem); err != nullptr || mem == nullptr) {
      // A device that is gone says so here too: it must be retired as lost (its data reported
      // lost), not counted a memory fault toward quarantine.
      const hcr_plugin_api_t* api = nodes_[n].plugin->api;
      const ErrorCode code = err != nullptr && api->error_code(err) == HCR_ERROR_DEVICE_LOST
                                 ? ErrorCode::device_lost
                                 : ErrorCode::out_of_memory;
      std::string msg = err ? take_error(api, err) : "no allocation returned";
      return std::make_exception_ptr(Error(code, "allocating " + std::to_string(b.bytes()) +
                                                     " bytes on '" + nodes_[n].name + "': " + msg));
    }
    keep(b, r, n, mem, t->context != nullptr ? t->context->index : 0);
  }
  return t->scratch.empty() ? nullptr : take_task_scratch(t, n);
}

hcr_error_t* NodeMemory::allocate(uint32_t n, uint64_t bytes, hcr_memory_t*& mem) {
  const NodeState& node = nodes_[n];
  hcr_mem_alloc_args_t ma{};
  ma.struct_size = HCR_MEM_ALLOC_ARGS_STRUCT_SIZE;
  ma.device = node.index;
  ma.bytes = bytes;
  hcr_error_t* err = node.plugin->api->mem_alloc(node.plugin->handle, &ma);
  mem = ma.memory;
  return err;
}

void NodeMemory::keep(BufferState& b, Replica& r, uint32_t n, hcr_memory_t* mem, uint32_t owner) {
  NodeState& node = nodes_[n];
  r.mem = mem;
  node.used += b.bytes();
  r.owner = owner;
  owned(n, r.owner) += b.bytes();
  node.resident.insert(&b);
}

void NodeMemory::free_replica(BufferState& b, uint32_t n) noexcept {
  Replica& r = coherence_.data(b).replicas[n];
  if (r.mem != nullptr) {
    NodeState& node = nodes_[n];
    if (!node.abandoned) node.plugin->api->mem_free(node.plugin->handle, node.index, r.mem);
    r.mem = nullptr;
    r.ghost_seen.clear();  // the ghosts went with the memory
    node.used -= b.bytes();
    owned(n, r.owner) -= b.bytes();
    node.resident.erase(&b);
  }
  coherence_.set_valid(b, n, false);
}

uint64_t& NodeMemory::owned(uint32_t n, uint32_t context) {
  NodeState& node = nodes_[n];
  if (node.owned.size() <= context) node.owned.resize(context + 1, 0);
  return node.owned[context];
}

uint64_t NodeMemory::context_bytes(uint32_t n, uint32_t context) const {
  if (n == 0 || n >= nodes_.size()) return 0;
  const NodeState& node = nodes_[n];
  return context < node.owned.size() ? node.owned[context] : 0;
}

// Free scratch blocks go first: nobody holds them, and a pool is only worth keeping while memory is
// not short.
bool NodeMemory::make_room(uint32_t n, uint64_t need, const TaskNode* t,
                           std::vector<Copy>& copies) {
  NodeState& node = nodes_[n];
  if (node.used + need <= node.limit) return true;
  free_pooled_scratch(n, node.used + need - node.limit, t);
  if (node.used + need <= node.limit) return true;
  return evict(n, node.used + need - node.limit, t, -1, copies);
}

namespace {
bool asks_for(const TaskNode* t, uint64_t bytes) {
  if (t == nullptr) return false;
  for (const ScratchRec& s : t->scratch)
    if (s.bytes == bytes) return true;
  return false;
}
}  // namespace

uint64_t NodeMemory::scratch_short(uint32_t n, const TaskNode* t) const {
  const NodeState& node = nodes_[n];
  uint64_t short_by = 0;
  for (size_t i = 0; i < t->scratch.size(); ++i) {
    const uint64_t bytes = t->scratch[i].bytes;
    size_t wanted = 1;  // this one and the earlier ones of its size
    for (size_t j = 0; j < i; ++j) wanted += t->scratch[j].bytes == bytes;
    if (node.scratch_free.count(bytes) < wanted) short_by += bytes;
  }
  return short_by;
}

std::exception_ptr NodeMemory::take_scratch(uint32_t n, uint64_t bytes, uint32_t owner,
                                            void*& block) {
  NodeState& node = nodes_[n];
  block = nullptr;
  if (auto it = node.scratch_free.find(bytes); it != node.scratch_free.end()) {
    block = it->second;
    node.scratch_free.erase(it);
    node.scratch_pooled -= bytes;
    ++scratch_reuses_;
  } else if (n == 0) {
    block = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (block == nullptr)
      return std::make_exception_ptr(
          Error(ErrorCode::out_of_memory, "allocating " + std::to_string(bytes) +
                                              " bytes of scratch in host memory: out of memory"));
    node.scratch_bytes += bytes;
    ++scratch_allocations_;
  } else {
    hcr_memory_t* mem = nullptr;
    hcr_error_t* err = allocate(n, bytes, mem);
    if (err != nullptr || mem == nullptr) {
      const hcr_plugin_api_t* api = node.plugin->api;
      // A device that is gone says so here too: it is retired as lost, not counted a memory fault.
      const ErrorCode code = err != nullptr && api->error_code(err) == HCR_ERROR_DEVICE_LOST
                                 ? ErrorCode::device_lost
                                 : ErrorCode::out_of_memory;
      std::string msg = err ? take_error(api, err) : "no allocation returned";
      return std::make_exception_ptr(Error(code, "allocating " + std::to_string(bytes) +
                                                     " bytes of scratch on '" + node.name +
                                                     "': " + msg));
    }
    block = mem;
    node.used += bytes;
    node.scratch_bytes += bytes;
    ++scratch_allocations_;
  }
  if (n != 0) owned(n, owner) += bytes;
  return nullptr;
}

void NodeMemory::give_back_scratch(uint32_t n, uint64_t bytes, uint32_t owner,
                                   void* block) noexcept {
  NodeState& node = nodes_[n];
  if (n != 0) owned(n, owner) -= bytes;
  const bool room = node.scratch_free.size() < kScratchPoolBlocks &&
                    (n != 0 || node.scratch_pooled + bytes <= kHostScratchPoolBytes);
  if (room && !node.lost && !node.abandoned) {
    try {
      node.scratch_free.emplace(bytes, block);
      node.scratch_pooled += bytes;
      return;
    } catch (...) {  // no memory for the pool's entry: the block is freed instead
    }
  }
  node.scratch_bytes -= bytes;
  if (n == 0) {
    std::free(block);
    return;
  }
  node.used -= bytes;
  if (!node.abandoned)
    node.plugin->api->mem_free(node.plugin->handle, node.index, static_cast<hcr_memory_t*>(block));
}

uint64_t NodeMemory::free_pooled_scratch(uint32_t n, uint64_t need, const TaskNode* t) noexcept {
  NodeState& node = nodes_[n];
  uint64_t freed = 0;
  // Largest first: fewest blocks freed for the room asked.
  for (auto it = node.scratch_free.end(); freed < need && it != node.scratch_free.begin();) {
    --it;
    if (asks_for(t, it->first)) continue;
    const uint64_t bytes = it->first;
    void* block = it->second;
    it = node.scratch_free.erase(it);
    node.scratch_pooled -= bytes;
    node.scratch_bytes -= bytes;
    freed += bytes;
    if (n == 0) {
      std::free(block);
    } else {
      node.used -= bytes;
      if (!node.abandoned)
        node.plugin->api->mem_free(node.plugin->handle, node.index,
                                   static_cast<hcr_memory_t*>(block));
    }
  }
  return freed;
}

// A context over its quota evicts its own data only: the other contexts' (and the default
// context's) replicas stay, whatever their age.
bool NodeMemory::make_room_in_quota(uint32_t n, uint64_t need, const TaskNode* t,
                                    std::vector<Copy>& copies) {
  const ContextState& c = *t->context;
  const uint64_t used = owned(n, c.index);
  if (used + need <= c.memory_quota) return true;
  return evict(n, used + need - c.memory_quota, t, c.index, copies);
}

bool NodeMemory::evict(uint32_t n, uint64_t short_by, const TaskNode* t, int64_t owner,
                       std::vector<Copy>& copies) {
  NodeState& node = nodes_[n];

  struct Candidate {
    BufferState* b;
    int cls;  // 0 invalid, 1 valid elsewhere too, 2 the only valid copy
    uint64_t last_use;
  };
  std::vector<Candidate> candidates;
  uint64_t coming_home = 0;  // only copies already on their way home, to be freed
  for (BufferState* b : node.resident) {
    Replica& r = coherence_.data(*b).replicas[n];
    if (owner >= 0 && r.owner != owner) continue;
    if (r.evicting) coming_home += b->bytes();
    if (r.pins != 0 || r.fetching || r.evicting || uses(t, b)) continue;
    int cls = !r.valid ? 0 : coherence_.has_other_valid(*b, n) ? 1 : 2;
    candidates.push_back({b, cls, r.last_use});
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& x, const Candidate& y) {
    return x.cls != y.cls ? x.cls < y.cls : x.last_use < y.last_use;
  });
  uint64_t freed = 0;
  for (const Candidate& c : candidates) {
    if (freed >= short_by || c.cls == 2) break;
    freed += c.b->bytes();
    free_replica(*c.b, n);
    ++evictions_;
  }
  if (freed >= short_by) return true;
  for (const Candidate& c : candidates) {
    if (freed + coming_home >= short_by) break;
    if (c.cls != 2) continue;
    // Host memory a task holds (a writer about to replace the data) must not be written under it.
    BufferData& d = coherence_.data(*c.b);
    const Replica& home = d.replicas[0];
    if (home.pins != 0 || home.fetching) continue;
    Replica& r = d.replicas[n];
    r.evicting = true;                       // (the write-back pins it: it reads it)
    coherence_.set_fetching(*c.b, 0, true);  // host memory is being written: host users wait
    coherence_.copy_home(*c.b, n, true, Copy::kUrgent, copies);
    coming_home += c.b->bytes();
  }
  return false;
}

// Whatever released pins or freed memory may unblock a task waiting on any node: a write-back
// skipped because a host writer held the data, a copy that pinned a replica elsewhere. Waiting
// tasks are few, and a retry that still finds no room just waits again.
void NodeMemory::take_memory_waiters(std::vector<TaskNode*>& out) {
  for (NodeState& node : nodes_) {
    auto& q = node.waiting_for_memory;
    while (!q.empty()) {
      out.push_back(q.front());
      q.pop_front();
    }
  }
}

// Scratch is taken last, after the buffers' allocations: a failure gives back what it took, so an
// attempt holds all its blocks or none.
std::exception_ptr NodeMemory::take_task_scratch(TaskNode* t, uint32_t n) {
  const uint32_t owner = t->context != nullptr ? t->context->index : 0;
  for (ScratchRec& s : t->scratch) {
    if (std::exception_ptr e = take_scratch(n, s.bytes, owner, s.block)) {
      for (ScratchRec& x : t->scratch)
        if (x.block != nullptr)
          give_back_scratch(n, x.bytes, owner, std::exchange(x.block, nullptr));
      return e;
    }
  }
  t->scratch_node = static_cast<int32_t>(n);
  return nullptr;
}

void NodeMemory::give_back_task_scratch(TaskNode* t, std::vector<TaskNode*>& retry) noexcept {
  if (t->scratch_node < 0) return;
  const auto n = static_cast<uint32_t>(t->scratch_node);
  const uint32_t owner = t->context != nullptr ? t->context->index : 0;
  for (ScratchRec& s : t->scratch)
    if (s.block != nullptr) give_back_scratch(n, s.bytes, owner, std::exchange(s.block, nullptr));
  t->scratch_node = -1;
  if (n != 0) take_memory_waiters(retry);  // a pooled block may be freed for them now
}

HeldScratch* NodeMemory::hold_task_scratch(TaskNode* t) noexcept {
  if (t->scratch_node < 0) return nullptr;
  auto* h = new (std::nothrow) HeldScratch;
  if (h == nullptr) return nullptr;  // no memory for the record: they go back with the attempt
  try {
    h->blocks.reserve(t->scratch.size());
  } catch (...) {
    delete h;
    return nullptr;
  }
  h->node = static_cast<uint32_t>(t->scratch_node);
  h->owner = t->context != nullptr ? t->context->index : 0;
  for (ScratchRec& s : t->scratch)
    if (s.block != nullptr) h->blocks.emplace_back(s.bytes, std::exchange(s.block, nullptr));
  t->scratch_node = -1;
  return h;
}

void NodeMemory::give_back_held(const HeldScratch* h, std::vector<TaskNode*>& retry) noexcept {
  for (auto [bytes, block] : h->blocks) give_back_scratch(h->node, bytes, h->owner, block);
  if (h->node != 0) take_memory_waiters(retry);
}

}  // namespace hcr::detail
