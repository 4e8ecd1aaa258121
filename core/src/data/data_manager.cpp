// The data manager: replica validity, asynchronous copies through the plugins, memory limits and
// eviction (see data_manager.hpp). Plugin calls that complete asynchronously are never made with
// the lock held; mem_alloc and mem_free are, being short and synchronous.
#include "data_manager.hpp"

#include "../buffer_state.hpp"
#include "../contexts/context_state.hpp"
#include "../log_internal.hpp"
#include "../plugin_loader.hpp"

#include <hcr/error.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace hcr::detail {

// A copy handed to a plugin. Its done_user_data is a token: the Transfer's address with a 16-bit
// generation in the top bits (x86-64 and AArch64 user addresses fit in 48). Transfers are pooled,
// never freed while the DataManager lives, so that a plugin answering a copy twice (or returning an
// error after its done) finds a Transfer that is no longer armed for that generation: the extra
// answer is reported, not a second completion of the copy, nor the completion of a newer one.
struct DataManager::Transfer {
  DataManager* dm;
  Copy copy;
  hcr_memory_t* src_mem;
  hcr_memory_t* dst_mem;
  uint64_t bytes;
  std::chrono::steady_clock::time_point start;
  std::atomic<uint32_t> state{0};  // generation << 1 | armed
  Transfer* next_free = nullptr;

  static constexpr unsigned kGenerationShift = 48;
  void* token() const noexcept {
    const uint64_t gen = state.load(std::memory_order_relaxed) >> 1 & 0xFFFF;
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(this) |
                                   static_cast<uintptr_t>(gen) << kGenerationShift);
  }
  static Transfer* of(void* token) noexcept {
    return reinterpret_cast<Transfer*>(reinterpret_cast<uintptr_t>(token) &
                                       ((uintptr_t{1} << kGenerationShift) - 1));
  }
  // The first answer for the generation the token names takes the copy; any later one gets false.
  static bool claim(Transfer* tr, void* token) noexcept {
    const auto gen =
        static_cast<uint32_t>(reinterpret_cast<uintptr_t>(token) >> kGenerationShift & 0xFFFF);
    uint32_t armed = gen << 1 | 1u;
    return tr->state.compare_exchange_strong(armed, gen << 1, std::memory_order_acq_rel);
  }
};

namespace {
std::string shape(const BufferState& b) {
  return std::to_string(b.rows) + "x" + std::to_string(b.cols);
}
// What a failed copy says of its device: gone (the plugin's HCR_ERROR_DEVICE_LOST: the runtime
// retires it and reports the data only it held as lost), or a fault to count toward quarantine.
ErrorCode copy_error_code(const hcr_plugin_api_t* api, hcr_error_t* error) noexcept {
  return api->error_code(error) == HCR_ERROR_DEVICE_LOST ? ErrorCode::device_lost
                                                         : ErrorCode::backend;
}
bool uses(const TaskNode* t, const BufferState* b) {
  if (t == nullptr) return false;
  for (const ArgRec& a : t->uargs)
    if (a.buffer == b) return true;
  return false;
}
}  // namespace

// The Transfers go with the DataManager: by then no plugin may answer a copy (a runtime whose
// plugin was left running at shutdown is never destroyed).
DataManager::~DataManager() {
  for (Transfer* tr : transfers_) delete tr;
}

DataManager::DataManager(DataEvents& events, const DeviceStatusView& devices)
    : events_(events), devices_(devices) {
  nodes_.reserve(kMaxNodes);  // limit() reads nodes_ without the lock while nodes join
  nodes_.emplace_back().name = "host";
}

uint32_t DataManager::add_node(NodeInit n) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (nodes_.size() >= kMaxNodes)
    throw Error(ErrorCode::config, "more than " + std::to_string(kMaxNodes - 1) +
                                       " devices with their own memory");
  NodeState& s = nodes_.emplace_back();
  s.plugin = n.plugin;
  s.index = n.index;
  s.device = n.device;
  s.name = std::move(n.name);
  s.limit = n.limit;
  active_.store(true, std::memory_order_release);
  return static_cast<uint32_t>(nodes_.size() - 1);
}

BufferData& DataManager::data(BufferState& b) {
  BufferData* d = b.data.load(std::memory_order_acquire);
  if (d == nullptr) {
    d = new BufferData();
    d->replicas.resize(nodes_.size());
    d->replicas[0].valid = true;  // a buffer starts with its host memory
    d->valid_bits[0].store(1, std::memory_order_relaxed);
    b.data.store(d, std::memory_order_release);
  } else if (d->replicas.size() < nodes_.size()) {
    d->replicas.resize(nodes_.size());
  }
  return *d;
}

hcr_memory_t* DataManager::memory(BufferState& b, uint32_t node) {
  std::lock_guard<std::mutex> lock(mutex_);
  return data(b).replicas[node].mem;
}

bool DataManager::valid_on(const BufferState& b, uint32_t node) const noexcept {
  const BufferData* d = b.data.load(std::memory_order_acquire);
  if (d == nullptr) return node == 0;
  return (d->valid_bits[node / 64].load(std::memory_order_relaxed) >> (node % 64)) & 1u;
}

void DataManager::set_valid(BufferState& b, uint32_t node, bool valid) {
  BufferData& d = data(b);
  d.replicas[node].valid = valid;
  const uint64_t bit = uint64_t{1} << (node % 64);
  if (valid) d.valid_bits[node / 64].fetch_or(bit, std::memory_order_relaxed);
  else d.valid_bits[node / 64].fetch_and(~bit, std::memory_order_relaxed);
}

void DataManager::set_fetching(BufferState& b, uint32_t node, bool fetching) {
  BufferData& d = data(b);
  d.replicas[node].fetching = fetching;
  const uint64_t bit = uint64_t{1} << (node % 64);
  if (fetching) d.arriving_bits[node / 64].fetch_or(bit, std::memory_order_relaxed);
  else d.arriving_bits[node / 64].fetch_and(~bit, std::memory_order_relaxed);
}

bool DataManager::valid_or_arriving(const BufferState& b, uint32_t node) const noexcept {
  const BufferData* d = b.data.load(std::memory_order_acquire);
  if (d == nullptr) return node == 0;
  const uint64_t bits = d->valid_bits[node / 64].load(std::memory_order_relaxed) |
                        d->arriving_bits[node / 64].load(std::memory_order_relaxed);
  return (bits >> (node % 64)) & 1u;
}

void DataManager::presence(const BufferState& b, uint64_t bits[2]) const noexcept {
  const BufferData* d = b.data.load(std::memory_order_acquire);
  if (d == nullptr) {  // never met a device with its own memory: only the host has it
    bits[0] = 1;
    bits[1] = 0;
    return;
  }
  for (int i = 0; i < 2; ++i)
    bits[i] = d->valid_bits[i].load(std::memory_order_relaxed) |
              d->arriving_bits[i].load(std::memory_order_relaxed);
}

void DataManager::locate(const BufferState& b, uint64_t valid[2],
                         uint64_t arriving[2]) const noexcept {
  const BufferData* d = b.data.load(std::memory_order_acquire);
  if (d == nullptr) {
    valid[0] = 1, valid[1] = 0, arriving[0] = arriving[1] = 0;
    return;
  }
  for (int i = 0; i < 2; ++i) {
    valid[i] = d->valid_bits[i].load(std::memory_order_relaxed);
    arriving[i] = d->arriving_bits[i].load(std::memory_order_relaxed);
  }
}

bool DataManager::has_other_valid(BufferState& b, uint32_t node) {
  BufferData& d = data(b);
  for (uint32_t m = 0; m < d.replicas.size(); ++m)
    if (m != node && d.replicas[m].valid) return true;
  return false;
}

void DataManager::update_hold(BufferState& b, std::vector<BufferState*>& drop) {
  if (b.owned != nullptr) return;  // its own memory: nobody reads it once the buffer is gone
  BufferData& d = data(b);
  const bool away = !d.replicas[0].valid && has_other_valid(b, 0);
  if (away && !d.held) {
    retain(&b);
    d.held = true;
  } else if (!away && d.held) {
    d.held = false;
    drop.push_back(&b);
  }
}

void DataManager::count_link(uint32_t from, uint32_t to, uint64_t bytes) {
  auto& [total, copies] = links_[{from, to}];
  total += bytes;
  copies += 1;
}

void DataManager::free_replica(BufferState& b, uint32_t node) noexcept {
  Replica& r = data(b).replicas[node];
  if (r.mem != nullptr) {
    const NodeState& ns = nodes_[node];
    if (!ns.abandoned) ns.plugin->api->mem_free(ns.plugin->handle, ns.index, r.mem);
    r.mem = nullptr;
    nodes_[node].used -= b.bytes();
    owned(nodes_[node], r.owner) -= b.bytes();
    nodes_[node].resident.erase(&b);
  }
  set_valid(b, node, false);
}

uint64_t& DataManager::owned(NodeState& node, uint32_t context) {
  if (node.owned.size() <= context) node.owned.resize(context + 1, 0);
  return node.owned[context];
}

uint64_t DataManager::context_bytes(uint32_t n, uint32_t context) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (n == 0 || n >= nodes_.size()) return 0;
  const NodeState& node = nodes_[n];
  return context < node.owned.size() ? node.owned[context] : 0;
}

bool DataManager::make_room(uint32_t n, uint64_t need, const TaskNode* t,
                            std::vector<Copy>& copies) {
  NodeState& node = nodes_[n];
  if (node.used + need <= node.limit) return true;
  return evict(n, node.used + need - node.limit, t, -1, copies);
}

// A context over its quota evicts its own data only: the other contexts' (and the default
// context's) replicas stay, whatever their age.
bool DataManager::make_room_in_quota(uint32_t n, uint64_t need, const TaskNode* t,
                                     std::vector<Copy>& copies) {
  NodeState& node = nodes_[n];
  const ContextState& c = *t->context;
  const uint64_t used = owned(node, c.index);
  if (used + need <= c.memory_quota) return true;
  return evict(n, used + need - c.memory_quota, t, c.index, copies);
}

bool DataManager::evict(uint32_t n, uint64_t short_by, const TaskNode* t, int64_t owner,
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
    Replica& r = data(*b).replicas[n];
    if (owner >= 0 && r.owner != owner) continue;
    if (r.evicting) coming_home += b->bytes();
    if (r.pins != 0 || r.fetching || r.evicting || uses(t, b)) continue;
    int cls = !r.valid ? 0 : has_other_valid(*b, n) ? 1 : 2;
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
    const Replica& home = data(*c.b).replicas[0];
    if (home.pins != 0 || home.fetching) continue;
    BufferData& d = data(*c.b);
    Replica& r = d.replicas[n];
    r.evicting = true;
    ++r.pins;  // the write-back reads it
    ++r.copies_out;
    set_fetching(*c.b, 0, true);  // host memory is being written: host users wait
    retain(c.b);
    copies.push_back({c.b, n, 0, true});
    coming_home += c.b->bytes();
  }
  return false;
}

void DataManager::plan_fetch(BufferState& b, uint32_t n, std::vector<Copy>& copies,
                             int priority) {
  BufferData& d = data(b);
  set_fetching(b, n, true);
  auto device_source = [&](bool same_plugin_only) -> int {
    for (uint32_t s = 1; s < d.replicas.size(); ++s) {
      if (s == n || !d.replicas[s].valid) continue;
      if (same_plugin_only && n != 0 && nodes_[s].plugin != nodes_[n].plugin)
        continue;
      return static_cast<int>(s);
    }
    return -1;
  };
  d.replicas[n].fetch_priority = priority;
  auto plan = [&](uint32_t src, uint32_t to) {
    d.replicas[to].fetch_src = src;
    ++d.replicas[src].pins;
    ++d.replicas[src].copies_out;
    retain(&b);
    copies.push_back({&b, src, to, false, priority});
  };
  if (n == 0) {
    int s = device_source(false);
    if (s < 0) {  // nothing valid anywhere (never written): the host memory is as good as any
      set_fetching(b, 0, false);
      // ... unless it was written and lost with a device: its readers fail saying so (acquire),
      // never read what host memory holds as if it were the data.
      if (d.lost_with.empty()) set_valid(b, 0, true);
      return;
    }
    plan(static_cast<uint32_t>(s), 0);
  } else if (d.replicas[0].valid) {
    plan(0, n);
  } else if (int s = device_source(true); s >= 0) {
    plan(static_cast<uint32_t>(s), n);  // device to device within one plugin
  } else {
    // Another plugin's memory holds it: through the host.
    Replica& host = d.replicas[0];
    host.forward.push_back(n);
    if (!host.fetching) plan_fetch(b, 0, copies, priority);
  }
}

void DataManager::urge(BufferState& b, uint32_t n, int priority) {
  BufferData& d = data(b);
  Replica& r = d.replicas[n];
  if (!r.fetching || r.evicting || priority <= r.fetch_priority) return;
  r.fetch_priority = priority;
  if (r.ticket != 0) {  // still waiting in its lane: again, higher up
    Lane& l = n != 0 ? nodes_[n].in : nodes_[r.fetch_src].out;
    r.ticket = ++l.seq;
    l.waiting.push({priority, r.ticket, {&b, r.fetch_src, n, false, priority}});
  }
  if (n != 0 && !d.replicas[0].valid) {
    const std::vector<uint32_t>& f = d.replicas[0].forward;
    if (std::find(f.begin(), f.end(), n) != f.end()) urge(b, 0, priority);  // through host memory
  }
}

DataManager::Status DataManager::acquire(TaskNode* t, uint32_t n) {
  std::vector<Copy> copies;
  Status status = Status::pending;
  t->transfers_pending.store(1, std::memory_order_relaxed);  // held while we start copies
  {
    std::lock_guard<std::mutex> lock(mutex_);
    NodeState& node = nodes_[n];
    for (const ArgRec& a : t->uargs) {
      BufferData& d = data(*a.buffer);
      if (reads(a.access) && !d.lost_with.empty()) {
        bool any = false;
        for (auto& r : d.replicas) any = any || r.valid || r.fetching;
        if (!any) {
          t->data_lost = true;
          t->transfer_error = std::make_exception_ptr(
              Error(ErrorCode::device_lost, "the only valid copy of a " + shape(*a.buffer) +
                                                " buffer this task reads was lost with device '" +
                                                d.lost_with + "'"));
          return Status::failed;
        }
      }
    }
    if (n != 0) {
      uint64_t need = 0;
      for (const ArgRec& a : t->uargs)
        if (data(*a.buffer).replicas[n].mem == nullptr) need += a.buffer->bytes();
      if (t->bytes > node.limit) {
        t->transfer_error = std::make_exception_ptr(
            Error(ErrorCode::out_of_memory,
                  "the task's buffers take " + std::to_string(t->bytes) + " bytes; '" + node.name +
                      "' may hold " + std::to_string(node.limit)));
        return Status::failed;
      }
      const ContextState* ctx = t->context;
      if (ctx != nullptr && ctx->memory_quota != 0 && t->bytes > ctx->memory_quota) {
        t->transfer_error = std::make_exception_ptr(Error(
            ErrorCode::out_of_memory,
            "the task's buffers take " + std::to_string(t->bytes) + " bytes; context '" +
                ctx->name + "' may hold " + std::to_string(ctx->memory_quota) + " on '" +
                node.name + "' (its memory_quota)"));
        return Status::failed;
      }
      if (need > 0 && ((ctx != nullptr && ctx->memory_quota != 0 &&
                        !make_room_in_quota(n, need, t, copies)) ||
                       !make_room(n, need, t, copies))) {
        node.waiting_for_memory.push_back(t);
        status = Status::blocked;
      }
    }
    if (status != Status::blocked && n != 0) {
      // Allocate first, pin after: a failure leaves nothing pinned and no copy waiting for us.
      for (const ArgRec& a : t->uargs) {
        BufferState& b = *a.buffer;
        Replica& r = data(b).replicas[n];
        if (r.mem != nullptr) continue;
        const hcr_plugin_api_t* api = node.plugin->api;
        hcr_mem_alloc_args_t ma{};
        ma.struct_size = HCR_MEM_ALLOC_ARGS_STRUCT_SIZE;
        ma.device = node.index;
        ma.bytes = b.bytes();
        hcr_error_t* err = api->mem_alloc(node.plugin->handle, &ma);
        if (err != nullptr || ma.memory == nullptr) {
          // A device that is gone says so here too: it must be retired as lost (its data
          // reported lost), not counted a memory fault toward quarantine.
          const ErrorCode code =
              err != nullptr && api->error_code(err) == HCR_ERROR_DEVICE_LOST
                  ? ErrorCode::device_lost
                  : ErrorCode::out_of_memory;
          std::string msg = err ? take_error(api, err) : "no allocation returned";
          t->transfer_error = std::make_exception_ptr(
              Error(code, "allocating " + std::to_string(b.bytes()) + " bytes on '" + node.name +
                              "': " + msg));
          status = Status::failed;
          break;
        }
        r.mem = ma.memory;
        node.used += b.bytes();
        r.owner = t->context != nullptr ? t->context->index : 0;
        owned(node, r.owner) += b.bytes();
        node.resident.insert(&b);
      }
    }
    if (status == Status::pending) {
      t->data_node = static_cast<int32_t>(n);
      for (const ArgRec& a : t->uargs) {
        BufferState& b = *a.buffer;
        Replica& r = data(b).replicas[n];
        ++r.pins;
        r.last_use = ++clock_;
        // A copy landing here, or a write-back leaving, must finish first; and before a write,
        // any copy still reading this replica.
        bool busy = r.fetching || r.evicting || (writes(a.access) && r.copies_out != 0);
        if (reads(a.access) && r.fetching) urge(b, n, t->priority);
        if (!busy && reads(a.access) && !r.valid) {
          plan_fetch(b, n, copies, t->priority);
          busy = r.fetching;
        }
        if (reads(a.access)) ++(busy ? misses_ : hits_);
        if (busy) {
          r.waiters.push_back({t, reads(a.access), writes(a.access)});
          t->transfers_pending.fetch_add(1, std::memory_order_relaxed);
        }
      }
    }
  }
  for (const Copy& c : copies) issue(c);
  if (status == Status::blocked || status == Status::failed) return status;
  if (t->transfers_pending.fetch_sub(1, std::memory_order_acq_rel) == 1) return Status::ready;
  return Status::pending;
}

void DataManager::prefetch(std::span<const Ref<BufferState>> inputs, int priority, uint32_t n,
                           const ContextState* owner) {
  std::vector<Copy> copies;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    NodeState& node = nodes_[n];
    // A device out of scheduling (withheld by the node arbiter, quarantined, removed) gets no
    // copy and no allocation ahead of a task: on a GPU another process holds, that memory is
    // theirs.
    if (n != 0 && (node.abandoned || !devices_.in_scheduling(node.device)))
      return;
    for (const Ref<BufferState>& in : inputs) {
      BufferState& b = *in;
      Replica& r = data(b).replicas[n];
      if (r.fetching) urge(b, n, priority);
      if (r.valid || r.fetching || r.evicting) continue;
      if (n != 0 && r.mem == nullptr) {  // (host memory: the buffer's own)
        if (node.used + b.bytes() > node.limit) continue;  // only free room: evict nothing
        if (owner != nullptr && owner->memory_quota != 0 &&
            owned(node, owner->index) + b.bytes() > owner->memory_quota)
          continue;  // nor beyond its context's quota
        hcr_mem_alloc_args_t ma{};
        ma.struct_size = HCR_MEM_ALLOC_ARGS_STRUCT_SIZE;
        ma.device = node.index;
        ma.bytes = b.bytes();
        if (hcr_error_t* err = node.plugin->api->mem_alloc(node.plugin->handle, &ma)) {
          node.plugin->api->error_destroy(err);
          continue;
        }
        r.mem = ma.memory;
        node.used += b.bytes();
        r.owner = owner != nullptr ? owner->index : 0;
        owned(node, r.owner) += b.bytes();
        node.resident.insert(&b);
      }
      r.last_use = ++clock_;
      plan_fetch(b, n, copies, priority);
    }
  }
  for (const Copy& c : copies) issue(c);
}

DataManager::Lane& DataManager::lane(const Copy& c) noexcept {
  return c.dst != 0 ? nodes_[c.dst].in : nodes_[c.src].out;
}

void DataManager::issue(const Copy& c) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Lane& l = lane(c);
    Replica* r = c.evict ? nullptr : &data(*c.b).replicas[c.dst];
    if (l.in_flight >= Lane::kDepth) {
      // At the priority its most urgent reader asked for since it was planned.
      const int priority = r != nullptr ? std::max(c.priority, r->fetch_priority) : c.priority;
      const uint64_t ticket = ++l.seq;
      if (r != nullptr) r->ticket = ticket;
      l.waiting.push({priority, ticket, c});
      return;
    }
    if (r != nullptr) r->ticket = 0;
    ++l.in_flight;
  }
  start(c);
}

void DataManager::start(const Copy& c) noexcept {
  BufferState& b = *c.b;
  Transfer* tr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_transfers_ != nullptr) {
      tr = free_transfers_;
      free_transfers_ = tr->next_free;
    } else {
      transfers_.reserve(transfers_.size() + 1);
      tr = new Transfer{};
      tr->dm = this;
      transfers_.push_back(tr);
    }
    tr->copy = c;
    tr->bytes = b.bytes();
    tr->start = std::chrono::steady_clock::now();
    const uint32_t gen = ((tr->state.load(std::memory_order_relaxed) >> 1) + 1) & 0xFFFF;
    tr->state.store(gen << 1 | 1u, std::memory_order_release);
    BufferData& d = data(b);
    tr->src_mem = d.replicas[c.src].mem;
    tr->dst_mem = d.replicas[c.dst].mem;
  }
  const NodeState& dev = nodes_[c.dst != 0 ? c.dst : c.src];  // the device that copies
  const uint64_t row = b.cols * b.elem;
  hcr_copy_args_t a{};
  a.struct_size = HCR_COPY_ARGS_STRUCT_SIZE;
  a.device = dev.index;
  if (c.src == 0) {
    a.src_host = b.host;
    a.src_pitch = b.ld * b.elem;
  } else {
    a.src_memory = tr->src_mem;
    a.src_pitch = row;
  }
  if (c.dst == 0) {
    a.dst_host = b.host;
    a.dst_pitch = b.ld * b.elem;
  } else {
    a.dst_memory = tr->dst_mem;
    a.dst_pitch = row;
  }
  a.width = row;
  a.rows = b.rows;
  a.done = &DataManager::on_copy_done;
  void* token = tr->token();
  a.done_user_data = token;
  if (hcr_error_t* err = dev.plugin->api->copy(dev.plugin->handle, &a)) {
    if (Transfer::claim(tr, token)) copy_done(tr, err);
    else copy_answered_twice(tr, err, /*returned=*/true);
  }
}

void DataManager::copy_answered_twice(Transfer* tr, hcr_error_t* error, bool returned) noexcept {
  // tr may carry a newer copy by now (read under the lock that start() writes it under): the
  // device named is then the one most likely at fault.
  Copy c{};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    c = tr->copy;
  }
  const NodeState& dev = nodes_[c.dst != 0 ? c.dst : c.src];
  if (error != nullptr) dev.plugin->api->error_destroy(error);
  const uint64_t n = events_.protocol_error(dev.device);
  std::ostringstream msg;
  msg << "plugin '" << dev.plugin->name << "' "
      << (returned ? "returned an error from copy after calling done for it"
                   : "called done for a copy that had been answered already")
      << " (device '" << dev.name << "'): ignored";
  if (n == 1) {
    msg << "; further ones are counted in stats().devices[" << dev.device << "].protocol_errors";
    log::write(LogLevel::error, msg.str());
  } else if (log::enabled(LogLevel::debug)) {
    log::write(LogLevel::debug, msg.str());
  }
}

void DataManager::on_copy_done(void* user, hcr_error_t* error, const hcr_completion_info_t* info) {
  Transfer* tr = Transfer::of(user);
  if (!Transfer::claim(tr, user)) {
    tr->dm->copy_answered_twice(tr, error, /*returned=*/false);
    return;
  }
  if (error == nullptr) {
    double seconds = info != nullptr && info->struct_size >= HCR_COMPLETION_INFO_STRUCT_SIZE_1_0 &&
                             info->device_seconds >= 0
                         ? info->device_seconds
                         : std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                         tr->start)
                               .count();
    tr->dm->events_.transferred(
        {tr->copy.src, tr->copy.dst, tr->bytes, seconds,
         std::chrono::duration_cast<std::chrono::nanoseconds>(tr->start.time_since_epoch())
             .count()});
  }
  tr->dm->copy_done(tr, error);
}

void DataManager::copy_done(Transfer* tr, hcr_error_t* error) noexcept {
  const Copy c = tr->copy;  // by value: the lane is found after tr is gone
  BufferState& b = *c.b;
  std::exception_ptr failure;
  const NodeState* lost = nullptr;  // the device that did the copy, when it reported itself gone
  std::string failed;  // what the failure says
  if (error != nullptr) {
    const NodeState& dev = nodes_[c.dst != 0 ? c.dst : c.src];
    if (copy_error_code(dev.plugin->api, error) == ErrorCode::device_lost) lost = &dev;
    std::string msg = take_error(dev.plugin->api, error);
    // The tasks waiting on the copy learn which device failed it (the engine charges that
    // device, not theirs); a device that is gone is retired below.
    failed = "copying a " + shape(b) + " buffer from '" + nodes_[c.src].name + "' to '" +
             nodes_[c.dst].name + "' failed: " + msg;
    failure = std::make_exception_ptr(CopyError(failed, dev.device, lost != nullptr));
    HCR_LOG(warn, failed);
  }
  std::vector<TaskNode*> ready, retry;
  std::vector<Copy> more;
  std::vector<BufferState*> drop;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    BufferData& d = data(b);
    Replica& src = d.replicas[c.src];
    Replica& dst = d.replicas[c.dst];
    --src.pins;
    --src.copies_out;
    if (!failure) count_link(c.src, c.dst, tr->bytes);
    // What a copy carried is current only if its source is still valid: a task elsewhere may
    // have committed a newer version while it was in flight (write-backs and prefetches are not
    // ordered by task dependencies).
    const bool current = !failure && src.valid;
    // Nodes of another plugin waiting for the data to reach host memory go on from there; when
    // it did not get there they fail with the copy (or, after a failed write-back, wait for a
    // fetch from the replica that is still valid).
    auto forward = [&](const std::exception_ptr& failed) {
      for (uint32_t f : dst.forward) {
        if (failed) {
          set_fetching(b, f, false);
          wake(b, f, failed, ready, more);
        } else {
          ++dst.pins;
          ++dst.copies_out;
          retain(&b);
          more.push_back({&b, 0, f, false});
        }
      }
      dst.forward.clear();
    };
    if (c.evict) {
      src.evicting = false;
      set_fetching(b, c.dst, false);
      if (!failure) {
        if (current) set_valid(b, 0, true);
        ++writebacks_;
        if (src.pins == 0) {  // nobody took it up meanwhile: free it
          free_replica(b, c.src);
          ++evictions_;
        }
        forward(nullptr);
      } else if (!dst.forward.empty()) {
        plan_fetch(b, 0, more);  // the device's replica is still the valid one
      }
      wake(b, c.dst, nullptr, ready, more);
      take_memory_waiters(retry);
    } else {
      set_fetching(b, c.dst, false);
      if (current) set_valid(b, c.dst, true);  // else stale on arrival: wake() refetches
      wake(b, c.dst, failure, ready, more);
      if (c.dst == 0) forward(failure);
      take_memory_waiters(retry);
    }
    wake(b, c.src, nullptr, ready, more);
    update_hold(b, drop);
  }
  for (BufferState* h : drop) release(h);
  release(&b);  // the copy's reference
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tr->next_free = free_transfers_;
    free_transfers_ = tr;
  }
  bool next = false;
  Copy queued{};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Lane& l = lane(c);
    while (!l.waiting.empty()) {  // the lane's slot passes to its most urgent waiting copy
      const Lane::Waiting w = l.waiting.top();
      l.waiting.pop();
      if (!w.copy.evict) {
        Replica& r = data(*w.copy.b).replicas[w.copy.dst];
        if (r.ticket != w.seq) continue;  // moved up since: its other entry stands
        r.ticket = 0;
      }
      queued = w.copy;
      next = true;
      break;
    }
    if (!next) --l.in_flight;
  }
  if (next) start(queued);
  // Retired before its waiting tasks are placed again, so that none goes back to it.
  if (lost != nullptr) events_.device_lost(lost->device, failed);
  for (const Copy& m : more) issue(m);
  for (TaskNode* t : ready) events_.data_ready(t);
  for (TaskNode* t : retry) events_.retry_acquire(t);
}

void DataManager::wake(BufferState& b, uint32_t node, const std::exception_ptr& failure,
                       std::vector<TaskNode*>& ready, std::vector<Copy>& more) {
  Replica& r = data(b).replicas[node];
  if (r.fetching || r.evicting) return;
  size_t keep = 0;
  bool refetch = false;
  for (const Replica::Waiter& w : r.waiters) {
    if (!failure && ((w.writes && r.copies_out != 0) || (w.reads && !r.valid))) {
      refetch = refetch || (w.reads && !r.valid);
      r.waiters[keep++] = w;
      continue;
    }
    if (failure && !w.task->transfer_error) w.task->transfer_error = failure;
    if (w.task->transfers_pending.fetch_sub(1, std::memory_order_acq_rel) == 1)
      ready.push_back(w.task);
  }
  r.waiters.resize(keep);
  if (refetch) plan_fetch(b, node, more);
}

void DataManager::commit(TaskNode* t, bool success) {
  if (t->data_node < 0) return;
  const auto n = static_cast<uint32_t>(t->data_node);
  std::vector<TaskNode*> retry;
  std::vector<BufferState*> drop;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const ArgRec& a : t->uargs) {
      BufferState& b = *a.buffer;
      BufferData& d = data(b);
      Replica& r = d.replicas[n];
      --r.pins;
      if (writes(a.access)) {
        if (success) {
          for (uint32_t m = 0; m < d.replicas.size(); ++m)
            if (m != n && d.replicas[m].valid) set_valid(b, m, false);
          set_valid(b, n, true);
          d.lost_with.clear();  // written anew
          if (t->written_through && n != 0) set_valid(b, 0, true);  // home already, too
        } else if (has_other_valid(b, n)) {
          set_valid(b, n, false);  // keep the inputs' valid copies for a retry elsewhere
        }
      }
      // The unpartition join brought a dead tile home: its device copies are dead weight. (Tasks
      // submitted before the unpartition still use them until then.)
      if (n == 0 && t->kind == TaskKind::join && b.detached.load(std::memory_order_acquire) &&
          r.valid)
        for (uint32_t m = 1; m < d.replicas.size(); ++m)
          if (d.replicas[m].pins == 0 && !d.replicas[m].fetching) free_replica(b, m);
      update_hold(b, drop);
    }
    take_memory_waiters(retry);
  }
  for (BufferState* h : drop) release(h);
  t->data_node = -1;
  for (TaskNode* w : retry) events_.retry_acquire(w);
}

struct DataManager::WriteThrough {
  struct Stage {
    WriteThrough* wt;
    BufferState* b;
    void* staging;
    std::chrono::steady_clock::time_point start;
  };
  DataManager* dm;
  TaskNode* t;
  uint32_t node;
  std::atomic<int> left{1};  // copies + 1 held while starting them
  std::mutex mutex;
  std::exception_ptr error;
  std::vector<Stage> stages;
};

bool DataManager::write_through(TaskNode* t) {
  if (!eager_writeback_ || t->data_node <= 0) return false;
  const auto n = static_cast<uint32_t>(t->data_node);
  auto* wt = new WriteThrough{this, t, n, {}, {}, {}, {}};
  for (const ArgRec& a : t->uargs)
    if (writes(a.access)) wt->stages.push_back({wt, a.buffer, nullptr, {}});
  if (wt->stages.empty()) {
    delete wt;
    return false;
  }
  wt->left.store(static_cast<int>(wt->stages.size()) + 1, std::memory_order_relaxed);
  const NodeState& dev = nodes_[n];
  for (auto& st : wt->stages) {
    BufferState& b = *st.b;
    const uint64_t row = b.cols * b.elem;
    st.staging = std::aligned_alloc(64, (b.bytes() + 63) / 64 * 64);
    hcr_copy_args_t c{};
    c.struct_size = HCR_COPY_ARGS_STRUCT_SIZE;
    c.device = dev.index;
    c.src_memory = memory(b, n);  // pinned by the task until it commits
    c.src_pitch = row;
    c.dst_host = st.staging;
    c.dst_pitch = row;
    c.width = row;
    c.rows = b.rows;
    c.done = &DataManager::on_stage_done;
    c.done_user_data = &st;
    st.start = std::chrono::steady_clock::now();
    hcr_error_t* err = st.staging ? dev.plugin->api->copy(dev.plugin->handle, &c)
                                  : nullptr;
    if (st.staging == nullptr || err != nullptr) {
      const ErrorCode code = err ? copy_error_code(dev.plugin->api, err) : ErrorCode::out_of_memory;
      const std::string msg =
          err ? take_error(dev.plugin->api, err) : std::string("no host memory to stage");
      std::lock_guard<std::mutex> g(wt->mutex);
      if (!wt->error)
        wt->error = std::make_exception_ptr(Error(
            code, "writing a " + shape(b) + " buffer home from '" + nodes_[n].name +
                      "' failed: " + msg));
      if (wt->left.fetch_sub(1, std::memory_order_acq_rel) == 1) finish_write_through(wt);
    }
  }
  if (wt->left.fetch_sub(1, std::memory_order_acq_rel) == 1) finish_write_through(wt);
  return true;
}

void DataManager::on_stage_done(void* user, hcr_error_t* error, const hcr_completion_info_t* info) {
  auto* st = static_cast<WriteThrough::Stage*>(user);
  WriteThrough* wt = st->wt;
  DataManager& dm = *wt->dm;
  const NodeState& dev = dm.nodes_[wt->node];
  if (error != nullptr) {
    const ErrorCode code = copy_error_code(dev.plugin->api, error);
    std::string msg = take_error(dev.plugin->api, error);
    std::lock_guard<std::mutex> g(wt->mutex);
    if (!wt->error)
      wt->error = std::make_exception_ptr(
          Error(code, "writing a " + shape(*st->b) + " buffer home from '" +
                          dm.nodes_[wt->node].name + "' failed: " + msg));
  } else {
    double seconds = info != nullptr && info->struct_size >= HCR_COMPLETION_INFO_STRUCT_SIZE_1_0 &&
                             info->device_seconds >= 0
                         ? info->device_seconds
                         : std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                         st->start)
                               .count();
    // (The trace shows it as long as it took, however long ago it was handed over.)
    dm.events_.transferred(
        {wt->node, 0, st->b->bytes(), seconds, std::numeric_limits<int64_t>::min()});
    std::lock_guard<std::mutex> lock(dm.mutex_);
    dm.count_link(wt->node, 0, st->b->bytes());
  }
  if (wt->left.fetch_sub(1, std::memory_order_acq_rel) == 1) dm.finish_write_through(wt);
}

void DataManager::finish_write_through(WriteThrough* wt) noexcept {
  if (!wt->error) {
    // Every copy arrived: now, and only now, the host memory takes the new version. Nobody else
    // touches these buffers until the task finishes.
    for (auto& st : wt->stages) {
      BufferState& b = *st.b;
      const uint64_t row = b.cols * b.elem;
      for (size_t r = 0; r < b.rows; ++r)
        std::memcpy(b.host + r * b.ld * b.elem, static_cast<std::byte*>(st.staging) + r * row, row);
    }
    wt->t->written_through = true;
  }
  for (auto& st : wt->stages) std::free(st.staging);
  TaskNode* t = wt->t;
  std::exception_ptr error = wt->error;
  delete wt;
  events_.written_through(t, error);
}

bool DataManager::evacuate(uint32_t n, double timeout_s) noexcept {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  for (;;) {
    std::vector<Copy> copies;
    size_t left = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (n == 0 || n >= nodes_.size()) return true;
      NodeState& node = nodes_[n];
      std::vector<BufferState*> resident(node.resident.begin(), node.resident.end());
      for (BufferState* b : resident) {
        BufferData& d = data(*b);
        Replica& r = d.replicas[n];
        // Busy replicas (a copy into or out of it, a write-back on its way) are looked at again
        // once that is done: the device runs nothing, so they only get fewer.
        if (r.pins != 0 || r.fetching || r.evicting || r.copies_out != 0) continue;
        if (!r.valid || has_other_valid(*b, n)) {
          free_replica(*b, n);
          ++evictions_;
          continue;
        }
        const Replica& home = d.replicas[0];
        if (home.pins != 0 || home.fetching) continue;  // a host task holds it: next round
        r.evicting = true;  // the write-back frees it when it lands (copy_done)
        ++r.pins;
        ++r.copies_out;
        set_fetching(*b, 0, true);
        retain(b);
        copies.push_back({b, n, 0, true});
      }
      left = node.resident.size();
      if (left == 0) {
        node.limit = 0;  // nothing is placed here again (the device is out of scheduling)
        return true;
      }
    }
    for (const Copy& c : copies) issue(c);
    if (std::chrono::steady_clock::now() > deadline) {
      HCR_LOG(error, "memory of '" << nodes_[n].name << "': " << left
                                   << " buffer(s) still resident after " << timeout_s << " s");
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void DataManager::node_lost(uint32_t n, const std::string& device) noexcept {
  std::vector<BufferState*> drop;
  std::unique_lock<std::mutex> lock(mutex_);
  if (n >= nodes_.size()) return;
  std::vector<BufferState*> resident(nodes_[n].resident.begin(), nodes_[n].resident.end());
  for (BufferState* b : resident) {
    BufferData& d = data(*b);
    Replica& r = d.replicas[n];
    if (r.valid && !has_other_valid(*b, n)) {
      d.lost_with = device;
      HCR_LOG(error, "the only valid copy of a " << shape(*b) << " buffer was lost with device '"
                                                 << device << "'");
    }
    set_valid(*b, n, false);
    if (r.pins == 0 && !r.fetching && r.copies_out == 0) free_replica(*b, n);
    update_hold(*b, drop);  // nothing left to wait for if that was the only copy
  }
  lock.unlock();
  for (BufferState* h : drop) release(h);
}

void DataManager::abandon_node(uint32_t n, const std::string& device) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (n == 0 || n >= nodes_.size()) return;
    nodes_[n].abandoned = true;
  }
  node_lost(n, device);
}

// Whatever released pins or freed memory may unblock a task waiting on any node: a write-back
// skipped because a host writer held the data, a copy that pinned a replica elsewhere. Waiting
// tasks are few, and a retry that still finds no room just waits again.
void DataManager::take_memory_waiters(std::vector<TaskNode*>& out) {
  for (NodeState& node : nodes_) {
    auto& q = node.waiting_for_memory;
    while (!q.empty()) {
      out.push_back(q.front());
      q.pop_front();
    }
  }
}

void DataManager::forget(BufferState& b) noexcept {
  if (b.data.load(std::memory_order_acquire) == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  BufferData& d = data(b);
  for (uint32_t n = 1; n < d.replicas.size() && n < nodes_.size(); ++n)
    if (d.replicas[n].mem != nullptr) free_replica(b, n);
}

void DataManager::drain_lanes() noexcept {
  // A lane starts its next copy from the completion of the one before, so one synchronize may
  // return while the lane still holds copies: until every lane is empty and idle.
  for (;;) {
    for (uint32_t n = 1; n < nodes_.size(); ++n) {
      if (nodes_[n].abandoned) continue;  // set before shutdown began: read without the lock
      const NodeState& dev = nodes_[n];
      if (hcr_error_t* e = dev.plugin->api->synchronize(dev.plugin->handle, dev.index))
        HCR_LOG(warn, "synchronize '" << dev.name << "': " << take_error(dev.plugin->api, e));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    bool idle = true;
    for (uint32_t n = 1; n < nodes_.size() && idle; ++n) {
      const NodeState& node = nodes_[n];
      idle = node.abandoned || (node.in.in_flight == 0 && node.out.in_flight == 0 &&
                                node.in.waiting.empty() && node.out.waiting.empty());
    }
    if (idle) return;
  }
}

void DataManager::shutdown() noexcept {
  if (!active()) return;
  drain_lanes();  // prefetches and write-backs still on their way
  std::vector<BufferState*> resident, kept;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (uint32_t n = 1; n < nodes_.size(); ++n)
      for (BufferState* b : nodes_[n].resident) resident.push_back(b);
    std::sort(resident.begin(), resident.end());
    resident.erase(std::unique(resident.begin(), resident.end()), resident.end());
    // A held buffer's hold may go as soon as its copy home lands: ours keeps it to the end.
    for (BufferState* b : resident)
      if (data(*b).held) {
        retain(b);
        kept.push_back(b);
      }
  }
  // Bring home every buffer whose host copy is stale, then free everything. A copy that failed
  // is tried again, from wherever the data is valid, a few rounds (as a host task's would be).
  constexpr int kRetries = 8;
  for (int round = 0; round <= kRetries; ++round) {
    bool any = false;
    for (BufferState* b : resident) {
      std::vector<Copy> copies;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!data(*b).replicas[0].valid && !data(*b).replicas[0].fetching)
          plan_fetch(*b, 0, copies);
      }
      any = any || !copies.empty();
      for (const Copy& c : copies) issue(c);
    }
    drain_lanes();
    if (!any) break;
  }
  std::vector<BufferState*> drop;
  std::unique_lock<std::mutex> lock(mutex_);
  for (BufferState* b : resident) {
    if (!data(*b).replicas[0].valid)
      HCR_LOG(error, "a " << shape(*b) << " buffer could not be copied home at shutdown");
    for (uint32_t n = 1; n < nodes_.size(); ++n) free_replica(*b, n);
    set_valid(*b, 0, true);
    update_hold(*b, drop);
  }
  active_.store(false, std::memory_order_relaxed);
  lock.unlock();
  for (BufferState* h : drop) release(h);
  for (BufferState* b : kept) release(b);
}

DataCounters DataManager::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  DataCounters c;
  for (uint32_t n = 0; n < nodes_.size(); ++n)
    c.nodes.push_back({n, nodes_[n].name, n == 0 ? 0 : nodes_[n].limit, nodes_[n].used});
  for (const auto& [link, counts] : links_)
    c.links.push_back({link.first, link.second, counts.first, counts.second});
  c.hits = hits_;
  c.misses = misses_;
  c.evictions = evictions_;
  c.writebacks = writebacks_;
  return c;
}

}  // namespace hcr::detail
