// The arbiter's state machine: weighted dominant-resource fairness over whole devices (own
// shares), lending an idle tenant's devices to busy ones, and revoke -> release -> grant.
#include <hcr/arbiter/arbitration.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <queue>
#include <stdexcept>

namespace hcr::arbiter {

const char* kind_name(Kind k) noexcept {
  switch (k) {
    case Kind::cpu: return "cpu";
    case Kind::gpu: return "gpu";
    case Kind::accelerator: return "accelerator";
    case Kind::sim: return "sim";
  }
  return "?";
}

std::optional<Kind> parse_kind(std::string_view s) noexcept {
  if (s == "cpu") return Kind::cpu;
  if (s == "gpu") return Kind::gpu;
  if (s == "accelerator") return Kind::accelerator;
  if (s == "sim") return Kind::sim;
  return std::nullopt;
}

namespace {

// The three resources of dominant-resource fairness: CPU cores, accelerator devices (their
// time: a device is granted whole), and device memory.
using Use = std::array<double, 3>;

Use use_of(const DeviceReport& d) {
  if (d.kind == Kind::cpu) return {static_cast<double>(d.cores), 0, 0};
  return {0, 1, static_cast<double>(d.memory)};
}

double dominant(const Use& u, const Use& total) {
  double s = 0;
  for (size_t r = 0; r < u.size(); ++r)
    if (total[r] > 0) s = std::max(s, u[r] / total[r]);
  return s;
}

}  // namespace

TenantId Arbitration::join(double weight, std::vector<DeviceReport> devices) {
  if (!(weight > 0)) throw std::invalid_argument("a tenant's weight must be positive");
  if (devices.size() > 128) throw std::invalid_argument("a tenant reports at most 128 devices");
  {
    std::vector<std::string_view> keys;
    for (const DeviceReport& d : devices) keys.push_back(d.key);
    std::sort(keys.begin(), keys.end());
    const auto twice = std::adjacent_find(keys.begin(), keys.end());
    if (twice != keys.end())
      throw std::invalid_argument("device key '" + std::string(*twice) + "' reported twice");
  }
  const TenantId id = next_++;
  Tenant& t = tenants_[id];
  t.weight = weight;
  for (uint32_t i = 0; i < devices.size(); ++i) {
    auto [it, fresh] = slots_.try_emplace(devices[i].key, 0);
    if (fresh) {  // the first report describes it
      if (free_.empty()) {
        it->second = static_cast<uint32_t>(pool_.size());
        pool_.emplace_back();
      } else {
        it->second = free_.back();
        free_.pop_back();
      }
      pool_[it->second].info = std::move(devices[i]);
    }
    pool_[it->second].local.emplace_back(id, i);
    t.slots.push_back(it->second);
  }
  rebalance();
  return id;
}

void Arbitration::leave(TenantId id) {
  auto it = tenants_.find(id);
  if (it == tenants_.end()) return;
  for (const uint32_t slot : it->second.slots) {
    NodeDevice& n = pool_[slot];
    n.local.erase(
        std::find_if(n.local.begin(), n.local.end(), [&](const auto& l) { return l.first == id; }));
    if (n.holder == id) {
      n.holder = 0;
      n.releasing = false;
      ++counters_.returned;
    }
    if (n.owner == id) n.owner = 0;
    if (n.local.empty()) {
      slots_.erase(n.info.key);
      n = NodeDevice{};
      free_.push_back(slot);
    }
  }
  tenants_.erase(it);
  rebalance();
}

void Arbitration::demand(TenantId id, bool busy) {
  auto it = tenants_.find(id);
  if (it == tenants_.end() || it->second.busy == busy) return;
  it->second.busy = busy;
  rebalance();
}

bool Arbitration::released(TenantId id, uint32_t local, uint64_t seq) {
  auto it = tenants_.find(id);
  if (it == tenants_.end() || local >= it->second.slots.size()) return false;
  NodeDevice& n = pool_[it->second.slots[local]];
  if (n.holder != id || !n.releasing || seq < n.revoke_seq) return false;
  n.holder = 0;
  n.releasing = false;
  ++counters_.releases;
  // To the holder the last pass chose (a release changes nobody's demand, so the pass would
  // choose the same): one device granted, not a pass over every tenant and device. A storm of
  // releases (a busy tenant borrowing the devices of 63 idle ones) stays cheap.
  grant(n);
  return true;
}

void Arbitration::grant(NodeDevice& n) {
  if (n.target == 0) return;
  n.holder = n.target;
  tenants_.at(n.target).changed = true;
  ++counters_.grants;
  if (n.target != n.owner) ++counters_.lends;
}

// One pass costs O(P log T) for P (tenant, device) pairs and T tenants: at 64 tenants of 128
// devices each, a few hundred microseconds where a search of every tenant against every free
// device at each step took seconds.
void Arbitration::rebalance() {
  // Dense views of this pass: tenants by position (ascending id), devices in key order.
  std::vector<TenantId> ids;
  std::vector<Tenant*> ts;
  for (auto& [id, t] : tenants_) {
    ids.push_back(id);
    ts.push_back(&t);
  }
  const auto pos = [&](TenantId id) {
    return static_cast<size_t>(std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
  };
  std::vector<uint32_t> order;
  order.reserve(slots_.size());
  Use total{0, 0, 0};
  for (auto& [key, slot] : slots_) {
    order.push_back(slot);
    const Use u = use_of(pool_[slot].info);
    for (size_t r = 0; r < u.size(); ++r) total[r] += u[r];
  }
  // Each tenant's devices, in key order.
  std::vector<std::vector<uint32_t>> mine(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) mine[i].reserve(ts[i]->slots.size());
  for (uint32_t s : order)
    for (const auto& [id, local] : pool_[s].local) mine[pos(id)].push_back(s);

  // Progressive filling (weighted DRF over indivisible devices): the tenant with the least
  // dominant share per weight (the lowest id on a tie) that can still take a device takes one; a
  // tenant keeps a device it holds or owns already where it has the choice, so shares do not
  // churn, and otherwise takes the first in key order. `open` marks the devices still to hand
  // out; `to` receives whom each goes to.
  auto fill = [&](const std::vector<size_t>& who, std::vector<char>& open, std::vector<Use>& use,
                  std::vector<TenantId>& to) {
    struct Choices {
      std::array<std::vector<uint32_t>, 3> by_rank;  // 2: it holds it, 1: it owns it, 0: other
      std::array<size_t, 3> next{0, 0, 0};
    };
    std::vector<Choices> choices(who.size());
    using Entry = std::pair<double, size_t>;  // (share per weight, index into who)
    auto later = [&](const Entry& a, const Entry& b) {
      return a.first != b.first ? a.first > b.first : ids[who[a.second]] > ids[who[b.second]];
    };
    std::priority_queue<Entry, std::vector<Entry>, decltype(later)> queue(later);
    for (size_t k = 0; k < who.size(); ++k) {
      const size_t i = who[k];
      for (uint32_t s : mine[i])
        if (open[s])
          choices[k]
              .by_rank[pool_[s].holder == ids[i]  ? 2
                       : pool_[s].owner == ids[i] ? 1
                                                  : 0]
              .push_back(s);
      queue.push({dominant(use[i], total) / ts[i]->weight, k});
    }
    while (!queue.empty()) {
      const size_t k = queue.top().second;
      queue.pop();
      Choices& c = choices[k];
      uint32_t pick = UINT32_MAX;
      for (int r = 2; r >= 0 && pick == UINT32_MAX; --r) {
        const std::vector<uint32_t>& v = c.by_rank[static_cast<size_t>(r)];
        size_t& at = c.next[static_cast<size_t>(r)];
        while (at < v.size() && !open[v[at]]) ++at;
        if (at < v.size()) pick = v[at++];
      }
      if (pick == UINT32_MAX) continue;  // nothing left it can use: out of the filling
      const size_t i = who[k];
      open[pick] = 0;
      to[pick] = ids[i];
      const Use u = use_of(pool_[pick].info);
      for (size_t r = 0; r < u.size(); ++r) use[i][r] += u[r];
      queue.push({dominant(use[i], total) / ts[i]->weight, k});
    }
  };

  std::vector<size_t> all, busy;
  std::vector<char> is_busy(ids.size(), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    all.push_back(i);
    if (ts[i]->busy) {
      busy.push_back(i);
      is_busy[i] = 1;
    }
  }

  // Own shares: every tenant busy.
  std::vector<Use> use(ids.size(), Use{0, 0, 0});
  std::vector<TenantId> target(pool_.size(), 0);
  std::vector<char> open(pool_.size(), 0);
  for (uint32_t s : order) open[s] = 1;
  fill(all, open, use, target);
  for (uint32_t s : order) pool_[s].owner = target[s];

  // Targets: a busy owner keeps its own share; an idle owner's devices go to the busy tenants
  // (the filling goes on from their own shares); with nobody busy, everything stays home.
  if (!busy.empty()) {
    for (uint32_t s : order) {
      const TenantId o = pool_[s].owner;
      open[s] = o == 0 || !is_busy[pos(o)];
    }
    fill(busy, open, use, target);
  }

  // Move towards the targets: a free device is granted at once; a held one is revoked first.
  for (uint32_t s : order) {
    NodeDevice& n = pool_[s];
    const TenantId want = target[s];
    n.target = want;
    if (n.holder == want) {
      if (n.releasing) {  // wanted back before it was released: the revoke is called off
        n.releasing = false;
        ts[pos(n.holder)]->changed = true;
      }
      continue;
    }
    if (n.holder == 0) {
      grant(n);
    } else if (!n.releasing) {
      n.releasing = true;
      Tenant& h = *ts[pos(n.holder)];
      h.changed = true;
      n.revoke_seq = h.seq + 1;  // the grant about to be sent
      n.revoked_at = now_;
      ++counters_.revokes;
    }
  }
  // Own shares that moved are news too (the tenant's fallback).
  for (size_t i = 0; i < ids.size(); ++i)
    if (!ts[i]->changed && own(ids[i]) != ts[i]->sent_own) ts[i]->changed = true;
}

template <class Pick>
std::vector<uint32_t> Arbitration::list(TenantId id, Pick pick) const {
  std::vector<uint32_t> out;
  auto it = tenants_.find(id);
  if (it == tenants_.end()) return out;
  const std::vector<uint32_t>& slots = it->second.slots;
  for (uint32_t i = 0; i < slots.size(); ++i)
    if (pick(pool_[slots[i]], id)) out.push_back(i);
  return out;
}

std::vector<uint32_t> Arbitration::held(TenantId id) const {
  return list(id, [](const NodeDevice& n, TenantId t) { return n.holder == t && !n.releasing; });
}
std::vector<uint32_t> Arbitration::own(TenantId id) const {
  return list(id, [](const NodeDevice& n, TenantId t) { return n.owner == t; });
}
std::vector<uint32_t> Arbitration::releasing(TenantId id) const {
  return list(id, [](const NodeDevice& n, TenantId t) { return n.holder == t && n.releasing; });
}
bool Arbitration::busy(TenantId id) const {
  auto it = tenants_.find(id);
  return it != tenants_.end() && it->second.busy;
}

std::vector<TenantId> Arbitration::overdue(double seconds) const {
  std::vector<TenantId> out;
  for (auto& [key, slot] : slots_)
    if (const NodeDevice& n = pool_[slot]; n.releasing && now_ - n.revoked_at > seconds &&
                                           std::find(out.begin(), out.end(), n.holder) == out.end())
      out.push_back(n.holder);
  return out;
}

std::vector<Grant> Arbitration::take_changes() {
  std::vector<Grant> out;
  for (auto& [id, t] : tenants_) {
    if (!t.changed) continue;
    t.changed = false;
    Grant g{id, 0, held(id), own(id)};
    if (g.held == t.sent_held && g.own == t.sent_own && t.seq != 0) continue;
    g.seq = ++t.seq;
    t.sent_held = g.held;
    t.sent_own = g.own;
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace hcr::arbiter
