// Owns replica validity: the copies that make a replica valid, and the tasks they release.
// Runs under the data manager's lock, but for the lock-free queries.
#include "coherence.hpp"

#include "ghosts.hpp"
#include "node_memory.hpp"
#include "transfers.hpp"

#include "../buffer_state.hpp"

#include <hcr/error.hpp>

#include <algorithm>

namespace hcr::detail {

std::string shape_of(const BufferState& b) {
  return std::to_string(b.rows) + "x" + std::to_string(b.cols);
}

BufferData& Coherence::data(BufferState& b) {
  BufferData* d = b.data.load(std::memory_order_acquire);
  if (d == nullptr) {
    d = new BufferData();
    d->replicas.resize(memory_.count());
    d->replicas[0].valid = true;  // a buffer starts with its host memory
    d->valid_bits[0].store(1, std::memory_order_relaxed);
    b.data.store(d, std::memory_order_release);
  } else if (d->replicas.size() < memory_.count()) {
    d->replicas.resize(memory_.count());
  }
  return *d;
}

bool Coherence::valid_on(const BufferState& b, uint32_t node) noexcept {
  const BufferData* d = b.data.load(std::memory_order_acquire);
  if (d == nullptr) return node == 0;
  return (d->valid_bits[node / 64].load(std::memory_order_relaxed) >> (node % 64)) & 1u;
}

void Coherence::set_valid(BufferState& b, uint32_t node, bool valid) {
  BufferData& d = data(b);
  d.replicas[node].valid = valid;
  const uint64_t bit = uint64_t{1} << (node % 64);
  if (valid) d.valid_bits[node / 64].fetch_or(bit, std::memory_order_relaxed);
  else d.valid_bits[node / 64].fetch_and(~bit, std::memory_order_relaxed);
}

void Coherence::set_fetching(BufferState& b, uint32_t node, bool fetching) {
  BufferData& d = data(b);
  d.replicas[node].fetching = fetching;
  const uint64_t bit = uint64_t{1} << (node % 64);
  if (fetching) d.arriving_bits[node / 64].fetch_or(bit, std::memory_order_relaxed);
  else d.arriving_bits[node / 64].fetch_and(~bit, std::memory_order_relaxed);
}

bool Coherence::valid_or_arriving(const BufferState& b, uint32_t node) noexcept {
  const BufferData* d = b.data.load(std::memory_order_acquire);
  if (d == nullptr) return node == 0;
  const uint64_t bits = d->valid_bits[node / 64].load(std::memory_order_relaxed) |
                        d->arriving_bits[node / 64].load(std::memory_order_relaxed);
  return (bits >> (node % 64)) & 1u;
}

void Coherence::presence(const BufferState& b, uint64_t bits[2]) noexcept {
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

void Coherence::locate(const BufferState& b, uint64_t valid[2], uint64_t arriving[2]) noexcept {
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

bool Coherence::has_other_valid(BufferState& b, uint32_t node) {
  BufferData& d = data(b);
  for (uint32_t m = 0; m < d.replicas.size(); ++m)
    if (m != node && d.replicas[m].valid) return true;
  return false;
}

void Coherence::update_hold(BufferState& b, std::vector<BufferState*>& drop) {
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

void Coherence::plan_fetch(BufferState& b, uint32_t n, std::vector<Copy>& copies, int priority) {
  BufferData& d = data(b);
  set_fetching(b, n, true);
  auto device_source = [&](bool same_plugin_only) -> int {
    for (uint32_t s = 1; s < d.replicas.size(); ++s) {
      if (s == n || !d.replicas[s].valid) continue;
      if (same_plugin_only && n != 0 && memory_.node(s).plugin != memory_.node(n).plugin) continue;
      return static_cast<int>(s);
    }
    return -1;
  };
  d.replicas[n].fetch_priority = priority;
  auto plan = [&](uint32_t src, uint32_t to) {
    d.replicas[to].fetch_src = src;
    if (to == 0) {
      copy_home(b, src, false, priority, copies);
      return;
    }
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

void Coherence::copy_home(BufferState& b, uint32_t src, bool evict, int priority,
                          std::vector<Copy>& copies) {
  BufferData& d = data(b);
  Replica& s = d.replicas[src];
  Replica& home = d.replicas[0];
  auto copy = [&](uint8_t piece) {
    ++s.pins;
    ++s.copies_out;
    retain(&b);
    Copy c{&b, src, 0, evict, priority};
    c.piece = piece;
    c.part = piece != Copy::kOwn;
    copies.push_back(c);
    if (c.part) ++home.parts_landing;
  };
  // Pieces of a halo tile home for its neighbours' ghosts (ghosts.hpp), current: tasks reading
  // those ghosts may be running, so no copy writes them again; the rest of the interior comes.
  bool current = false;
  for (uint64_t v : home.edges_home) current = current || v == d.version;
  if (!current) {
    copy(Copy::kOwn);
    return;
  }
  for (uint8_t p = 0; p < 9; ++p) {
    const ElementRect e = border_piece(b, p);
    if (home.edges_home[p] != d.version && e.rows != 0 && e.cols != 0) copy(p);
  }
  // All of it home already (a tile no wider than two ghosts): copied once more, as it stands.
  if (home.parts_landing == 0) copy(Copy::kOwn);
}

void Coherence::urge(BufferState& b, uint32_t n, int priority) {
  BufferData& d = data(b);
  Replica& r = d.replicas[n];
  if (!r.fetching || r.evicting || priority <= r.fetch_priority) return;
  r.fetch_priority = priority;
  if (r.ticket != 0)  // still waiting in its lane: again, higher up
    r.ticket = transfers_.queue_again({&b, r.fetch_src, n, false, priority});
  if (n != 0 && !d.replicas[0].valid) {
    const std::vector<uint32_t>& f = d.replicas[0].forward;
    if (std::find(f.begin(), f.end(), n) != f.end()) urge(b, 0, priority);  // through host memory
  }
}

void Coherence::wake(BufferState& b, uint32_t node, const std::exception_ptr& failure,
                     std::vector<TaskNode*>& ready, std::vector<Copy>& more) {
  Replica& r = data(b).replicas[node];
  if (r.fetching || r.evicting || r.ghost_fetches != 0 || r.edges_landing != 0) return;
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

std::exception_ptr Coherence::lost_input(const TaskNode& t) {
  for (const ArgRec& a : t.uargs) {
    BufferData& d = data(*a.buffer);
    if (!reads(a.access) || d.lost_with.empty()) continue;
    bool any = false;
    for (auto& r : d.replicas) any = any || r.valid || r.fetching;
    if (!any)
      return std::make_exception_ptr(
          Error(ErrorCode::device_lost, "the only valid copy of a " + shape_of(*a.buffer) +
                                            " buffer this task reads was lost with device '" +
                                            d.lost_with + "'"));
  }
  return nullptr;
}

void Coherence::pin(TaskNode* t, uint32_t node, std::vector<Copy>& copies) {
  for (const ArgRec& a : t->uargs) {
    BufferState& b = *a.buffer;
    Replica& r = data(b).replicas[node];
    ++r.pins;
    touch(r);
    // A copy landing here, or a write-back leaving, must finish first; and before a write, any
    // copy still reading this replica. Pieces of a halo tile landing in host memory for its
    // neighbours' ghosts: a copy of its whole interior (a reader's) and a writer go after them.
    bool busy = r.fetching || r.evicting || (reads(a.access) && r.ghost_fetches != 0) ||
                (writes(a.access) && r.copies_out != 0) || r.edges_landing != 0;
    if (reads(a.access) && r.fetching) urge(b, node, t->priority);
    if (!busy && reads(a.access) && !r.valid) {
      plan_fetch(b, node, copies, t->priority);
      busy = r.fetching;
    }
    if (reads(a.access)) ++(busy ? misses_ : hits_);
    if (busy) {
      r.waiters.push_back({t, reads(a.access), writes(a.access)});
      t->transfers_pending.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace hcr::detail
