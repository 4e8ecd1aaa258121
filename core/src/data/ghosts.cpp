// Owns the ghost edges of halo tiles on memory nodes (ghosts.hpp): planning their refresh when a
// task reads a tile, the copies of edges, and their end. Runs under the data manager's lock.
#include "ghosts.hpp"

#include "node_memory.hpp"

#include <hcr/error.hpp>

#include <algorithm>

namespace hcr::detail {

namespace {

bool names(const TaskNode& t, const BufferState* b) {
  for (const ArgRec& a : t.uargs)
    if (a.buffer == b) return true;
  return false;
}

bool overlap(const ElementRect& x, const ElementRect& y) noexcept {
  return x.rows != 0 && x.cols != 0 && y.rows != 0 && y.cols != 0 && x.row0 < y.row0 + y.rows &&
         y.row0 < x.row0 + x.rows && x.col0 < y.col0 + y.cols && y.col0 < x.col0 + x.cols;
}

}  // namespace

Ghosts::Step Ghosts::plan(TaskNode* t, uint32_t n, GhostPlan& plan, std::vector<Copy>& copies) {
  struct Around {
    BufferState* tile;
    BufferState* nb;  // null: gone (one whose count reached 0 is being destroyed; its data is
                      // home, Coherence::update_hold having kept it alive while it was away)
    uint8_t slot;
  };
  std::vector<Around> around;
  for (const ArgRec& a : t->uargs) {
    BufferState& tile = *a.buffer;
    if (tile.halo == 0 || !reads(a.access)) continue;
    for_each_halo_neighbour(tile, [&](BufferState* nb, int di, int dj) {
      if (nb != nullptr) plan.refs.push_back(nb);
      around.push_back({&tile, nb, ghost_slot(di, dj)});
    });
  }
  // A neighbour whose data was lost with a device: the ghosts cannot be filled (checked before
  // anything is planned).
  for (const Around& x : around) {
    if (x.nb == nullptr) continue;
    BufferData& nd = coherence_.data(*x.nb);
    if (nd.lost_with.empty()) continue;
    bool any = false;
    for (const Replica& r : nd.replicas) any = any || r.valid || r.fetching;
    if (any) continue;
    t->data_lost = true;
    t->transfer_error = std::make_exception_ptr(Error(
        ErrorCode::device_lost,
        "the only valid copy of the " + describe(*x.nb) + " whose edge is a ghost of the " +
            describe(*x.tile) + " this task reads was lost with device '" + nd.lost_with + "'"));
    return Step::failed;
  }
  for (const Around& x : around) {
    BufferState* nb = x.nb;
    if (n == 0) {  // the ghosts are the neighbour's own memory (one gone is home)
      if (nb != nullptr && !names(*t, nb)) plan_home(*x.tile, *nb, x.slot, plan);
      continue;
    }
    const Replica& r = coherence_.data(*x.tile).replicas[n];
    const uint64_t version = nb != nullptr ? coherence_.data(*nb).version : kGone;
    if (!r.ghost_seen.empty() && r.ghost_seen[x.slot] == version) continue;  // current
    // An older edge may still be landing in these ghosts (its reader was placed elsewhere): two
    // copies into the same place, in flight at once, could land in either order.
    if (r.ghost_fetches != 0) return Step::retry;
    uint32_t src = 0;
    if (nb != nullptr) {
      BufferData& nd = coherence_.data(*nb);
      int found = edge_source(*nb, n);
      if (found < 0) {
        bool elsewhere = false;  // on another plugin's device: through host memory
        for (const Replica& m : nd.replicas) elsewhere = elsewhere || m.valid;
        if (elsewhere || nd.replicas[0].fetching) {
          // (Pieces of it landing home for a host reader's ghosts: the whole copy after them.)
          if (!nd.replicas[0].fetching && nd.replicas[0].edges_landing == 0)
            coherence_.plan_fetch(*nb, 0, copies, t->priority);
          return Step::retry;
        }
        // Valid nowhere, never written: host memory is as good as any (plan_fetch says so).
        coherence_.plan_fetch(*nb, 0, copies, t->priority);
        found = 0;
      }
      src = static_cast<uint32_t>(found);
    }
    plan.edges.push_back({x.tile, nb, src, x.slot, version});
  }
  return Step::go;
}

void Ghosts::plan_home(BufferState& tile, BufferState& nb, uint8_t slot, GhostPlan& plan) {
  BufferData& nd = coherence_.data(nb);
  const Replica& h = nd.replicas[0];
  if (h.valid) return;
  // A copy of its whole interior on its way home (a reader's, a write-back) may be stale, a newer
  // version committed since, and land over pieces copied beside it: the task waits for that copy,
  // as any reader. Valid on no device (never written, or lost: acquire said so), the fetch home
  // makes host memory valid as it is.
  int src = -1;
  if (!h.fetching && !h.evicting)
    for (uint32_t m = 1; m < nd.replicas.size() && src < 0; ++m)
      if (nd.replicas[m].valid) src = static_cast<int>(m);
  if (src < 0) {
    plan.homes.push_back(&nb);
    return;
  }
  const ElementRect ghost = ghost_edge(tile, slot / 3 - 1, slot % 3 - 1);
  bool reads = false;
  for (uint8_t p = 0; p < 9; ++p) {
    if (!overlap(border_piece(nb, p), ghost)) continue;
    reads = true;
    if (!h.edges_home.empty() && h.edges_home[p] == nd.version) continue;  // home or on its way
    bool planned = false;  // (for another tile of this task)
    for (const GhostPlan::Piece& q : plan.pieces)
      planned = planned || (q.nb == &nb && q.piece == p);
    if (!planned) plan.pieces.push_back({&nb, static_cast<uint32_t>(src), p, nd.version});
  }
  if (reads && std::find(plan.landing.begin(), plan.landing.end(), &nb) == plan.landing.end())
    plan.landing.push_back(&nb);
}

int Ghosts::edge_source(BufferState& nb, uint32_t n) {
  const BufferData& nd = coherence_.data(nb);
  if (nd.replicas[n].valid) return static_cast<int>(n);
  if (nd.replicas[0].valid) return 0;
  for (uint32_t m = 1; m < nd.replicas.size(); ++m)
    if (nd.replicas[m].valid && memory_.node(m).plugin == memory_.node(n).plugin)
      return static_cast<int>(m);
  return -1;
}

void Ghosts::prefetch(BufferState& tile, uint32_t n, int priority, GhostPlan& plan,
                      std::vector<Copy>& copies) {
  const Replica& r = coherence_.data(tile).replicas[n];
  // Edges still landing there: the reader's acquire sorts out which are current.
  if (r.mem == nullptr || r.evicting || r.ghost_fetches != 0) return;
  const size_t first = plan.edges.size();
  for_each_halo_neighbour(tile, [&](BufferState* nb, int di, int dj) {
    if (nb != nullptr) plan.refs.push_back(nb);
    const uint8_t slot = ghost_slot(di, dj);
    const uint64_t version = nb != nullptr ? coherence_.data(*nb).version : kGone;
    if (!r.ghost_seen.empty() && r.ghost_seen[slot] == version) return;  // current
    int src = 0;                                                         // a neighbour gone is home
    if (nb != nullptr && (src = edge_source(*nb, n)) < 0) return;
    plan.edges.push_back({&tile, nb, static_cast<uint32_t>(src), slot, version});
  });
  GhostPlan mine;  // (this tile's edges alone; the references stay with `plan`)
  mine.edges.assign(plan.edges.begin() + static_cast<ptrdiff_t>(first), plan.edges.end());
  start_edges(mine, n, priority, copies);
}

void Ghosts::start(TaskNode* t, uint32_t n, const GhostPlan& plan, std::vector<Copy>& copies) {
  start_edges(plan, n, t->priority, copies);
  for (BufferState* nb : plan.homes) {
    Replica& h = coherence_.data(*nb).replicas[0];
    if (h.fetching) coherence_.urge(*nb, 0, t->priority);
    else if (!h.valid) coherence_.plan_fetch(*nb, 0, copies, t->priority);
    if (h.fetching || h.evicting) {
      h.waiters.push_back({t, true, false});
      t->transfers_pending.fetch_add(1, std::memory_order_relaxed);
    }
  }
  for (const GhostPlan::Piece& p : plan.pieces) {
    BufferData& nd = coherence_.data(*p.nb);
    Replica& h = nd.replicas[0];
    if (h.edges_home.empty()) h.edges_home.assign(9, 0);
    h.edges_home[p.piece] = p.version;  // (a second reader finds it on its way and waits for it)
    ++h.edges_landing;
    Replica& s = nd.replicas[p.src];
    ++s.pins;
    ++s.copies_out;  // a writer of the neighbour there waits for it
    retain(p.nb);
    Copy c{p.nb, p.src, 0, false, t->priority};
    c.piece = p.piece;
    copies.push_back(c);
  }
  // It reads pieces home or on their way (its own, another reader's): it waits for them all,
  // released by the last to land (neither reading nor writing the replica, which stays invalid).
  for (BufferState* nb : plan.landing) {
    Replica& h = coherence_.data(*nb).replicas[0];
    if (h.edges_landing == 0) continue;
    h.waiters.push_back({t, false, false});
    t->transfers_pending.fetch_add(1, std::memory_order_relaxed);
  }
}

void Ghosts::start_edges(const GhostPlan& plan, uint32_t n, int priority,
                         std::vector<Copy>& copies) {
  for (const GhostPlan::Edge& e : plan.edges) {
    Replica& r = coherence_.data(*e.tile).replicas[n];
    if (r.ghost_seen.empty()) r.ghost_seen.assign(9, 0);
    r.ghost_seen[e.slot] = e.version;  // (a second reader finds it current and waits for it)
    ++r.ghost_fetches;
    ++r.pins;  // the copy writes it: not evicted under it
    if (e.from != nullptr) {
      Replica& s = coherence_.data(*e.from).replicas[e.src];
      ++s.pins;
      ++s.copies_out;  // a writer of the neighbour there waits for it
      retain(e.from);
    }
    retain(e.tile);
    Copy c{e.tile, e.src, n, false, priority};
    c.slot = e.slot;
    c.from = e.from;
    copies.push_back(c);
  }
}

void Ghosts::landed(const Copy& c, const std::exception_ptr& failure, CopyLanding::After& after) {
  Replica& dst = coherence_.data(*c.b).replicas[c.dst];
  --dst.ghost_fetches;
  --dst.pins;
  if (c.from != nullptr) {
    Replica& src = coherence_.data(*c.from).replicas[c.src];
    --src.pins;
    --src.copies_out;
    coherence_.wake(*c.from, c.src, nullptr, after.ready, after.more);
  }
  if (failure) {
    // The ghosts hold no known version now; the readers waiting for them fail with the copy.
    if (!dst.ghost_seen.empty()) dst.ghost_seen[c.slot] = 0;
    for (const Replica::Waiter& w : dst.waiters)
      if (w.reads && !w.task->transfer_error) w.task->transfer_error = failure;
  }
  coherence_.wake(*c.b, c.dst, nullptr, after.ready, after.more);
}

void Ghosts::landed_home(const Copy& c, const std::exception_ptr& failure,
                         CopyLanding::After& after) {
  BufferData& d = coherence_.data(*c.b);
  Replica& home = d.replicas[0];
  Replica& src = d.replicas[c.src];
  --home.edges_landing;
  --src.pins;
  --src.copies_out;
  coherence_.wake(*c.b, c.src, nullptr, after.ready, after.more);
  if (failure) {
    // The piece holds no known version now; the readers of ghosts waiting for it fail with it.
    home.edges_home[c.piece] = 0;
    for (const Replica::Waiter& w : home.waiters)
      if (!w.reads && !w.writes && !w.task->transfer_error) w.task->transfer_error = failure;
  }
  coherence_.wake(*c.b, 0, nullptr, after.ready, after.more);
}

}  // namespace hcr::detail
