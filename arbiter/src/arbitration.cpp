// The arbiter's state machine: weighted dominant-resource fairness over whole devices (own
// shares), lending an idle tenant's devices to busy ones, and revoke -> release -> grant.
#include <hcr/arbiter/arbitration.hpp>

#include <algorithm>
#include <array>
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
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (devices[i].key == devices[j].key)
        throw std::invalid_argument("device key '" + devices[i].key + "' reported twice");
  const TenantId id = next_++;
  Tenant& t = tenants_[id];
  t.weight = weight;
  for (uint32_t i = 0; i < devices.size(); ++i) {
    t.keys.push_back(devices[i].key);
    NodeDevice& n = pool_[devices[i].key];
    if (n.local.empty()) n.info = devices[i];  // the first report describes it
    n.local[id] = i;
  }
  rebalance();
  return id;
}

void Arbitration::leave(TenantId id) {
  auto it = tenants_.find(id);
  if (it == tenants_.end()) return;
  for (const std::string& key : it->second.keys) {
    NodeDevice& n = pool_[key];
    n.local.erase(id);
    if (n.holder == id) {
      n.holder = 0;
      n.releasing = false;
      ++counters_.returned;
    }
    if (n.owner == id) n.owner = 0;
    if (n.local.empty()) pool_.erase(key);
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
  if (it == tenants_.end() || local >= it->second.keys.size()) return false;
  NodeDevice& n = pool_[it->second.keys[local]];
  if (n.holder != id || !n.releasing || seq < n.revoke_seq) return false;
  n.holder = 0;
  n.releasing = false;
  ++counters_.releases;
  rebalance();
  return true;
}

void Arbitration::rebalance() {
  Use total{0, 0, 0};
  for (auto& [key, n] : pool_) {
    const Use u = use_of(n.info);
    for (size_t r = 0; r < u.size(); ++r) total[r] += u[r];
  }
  // Progressive filling (weighted DRF over indivisible devices): the tenant with the least
  // dominant share per weight that can still take a device takes one; a tenant keeps a device
  // it holds or owns already where it has the choice, so shares do not churn.
  auto fill = [&](const std::vector<TenantId>& who, std::vector<std::string> devs,
                  std::map<TenantId, Use>& use, std::map<std::string, TenantId>& out) {
    while (!devs.empty()) {
      TenantId best = 0;
      double best_share = 0;
      for (TenantId t : who) {
        bool can = false;
        for (const std::string& k : devs)
          if (pool_[k].local.count(t)) {
            can = true;
            break;
          }
        if (!can) continue;
        const double s = dominant(use[t], total) / tenants_[t].weight;
        if (best == 0 || s < best_share) {
          best = t;
          best_share = s;
        }
      }
      if (best == 0) return;
      size_t pick = devs.size();
      int pick_rank = -1;
      for (size_t i = 0; i < devs.size(); ++i) {
        const NodeDevice& n = pool_[devs[i]];
        if (!n.local.count(best)) continue;
        const int rank = n.holder == best ? 2 : n.owner == best ? 1 : 0;
        if (rank > pick_rank) {
          pick = i;
          pick_rank = rank;
        }
      }
      const Use u = use_of(pool_[devs[pick]].info);
      for (size_t r = 0; r < u.size(); ++r) use[best][r] += u[r];
      out[devs[pick]] = best;
      devs.erase(devs.begin() + static_cast<long>(pick));
    }
  };

  std::vector<TenantId> all, busy;
  for (auto& [id, t] : tenants_) {
    all.push_back(id);
    if (t.busy) busy.push_back(id);
  }
  std::vector<std::string> keys;
  for (auto& [key, n] : pool_) keys.push_back(key);

  // Own shares: every tenant busy.
  std::map<TenantId, Use> use;
  std::map<std::string, TenantId> owners;
  fill(all, keys, use, owners);
  for (auto& [key, n] : pool_) n.owner = owners.count(key) ? owners[key] : 0;

  // Targets: a busy owner keeps its own share; an idle owner's devices go to the busy tenants
  // (the filling goes on from their own shares); with nobody busy, everything stays home.
  std::map<std::string, TenantId> target = owners;
  if (!busy.empty()) {
    std::vector<std::string> lendable;
    for (auto& [key, n] : pool_)
      if (n.owner == 0 || !tenants_[n.owner].busy) lendable.push_back(key);
    std::map<TenantId, Use> busy_use;
    for (TenantId t : busy) busy_use[t] = use[t];
    std::map<std::string, TenantId> lent;
    fill(busy, lendable, busy_use, lent);
    for (auto& [key, t] : lent) target[key] = t;
  }

  // Move towards the targets: a free device is granted at once; a held one is revoked first.
  for (auto& [key, n] : pool_) {
    const TenantId want = target.count(key) ? target[key] : 0;
    if (n.holder == want) {
      if (n.releasing) {  // wanted back before it was released: the revoke is called off
        n.releasing = false;
        tenants_[n.holder].changed = true;
      }
      continue;
    }
    if (n.holder == 0) {
      n.holder = want;
      tenants_[want].changed = true;
      ++counters_.grants;
      if (want != n.owner) ++counters_.lends;
    } else if (!n.releasing) {
      n.releasing = true;
      Tenant& h = tenants_[n.holder];
      h.changed = true;
      n.revoke_seq = h.seq + 1;  // the grant about to be sent
      n.revoked_at = now_;
      ++counters_.revokes;
    }
  }
  // Own shares that moved are news too (the tenant's fallback).
  for (auto& [id, t] : tenants_)
    if (own(id) != t.sent_own) t.changed = true;
}

std::vector<uint32_t> Arbitration::list(TenantId id, bool (*pick)(const NodeDevice&, TenantId)) const {
  std::vector<uint32_t> out;
  auto it = tenants_.find(id);
  if (it == tenants_.end()) return out;
  for (uint32_t i = 0; i < it->second.keys.size(); ++i)
    if (pick(pool_.at(it->second.keys[i]), id)) out.push_back(i);
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
  for (auto& [key, n] : pool_)
    if (n.releasing && now_ - n.revoked_at > seconds &&
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
