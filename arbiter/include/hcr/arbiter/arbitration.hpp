/// \file arbitration.hpp
/// The node arbiter's state machine: which tenant (a runtime of some process) may use which of
/// the node's devices. No sockets here (server.hpp feeds it), so it is tested on its own.
///
/// \code
/// hcr::arbiter::Arbitration a;
/// auto t1 = a.join(1, devices), t2 = a.join(1, devices);   // the same keys: the same devices
/// a.demand(t1, true);                                      // t2 idle: its devices are lent to t1
/// for (const auto& g : a.take_changes()) send(g);          // grants to tell the tenants
/// a.demand(t2, true);                                      // t1 is asked to give them back
/// a.released(t1, 2, seq);                                  // ... and only then t2 gets them
/// \endcode
///
/// Every device is held by at most one tenant at a time: a device taken from a tenant is first
/// revoked (its grant no longer lists it) and goes to its next holder only once that tenant says
/// it has stopped using it (released). Thread safety: none (the server calls it from one thread).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hcr::arbiter {

/// The kinds a tenant reports (the values of hcr::DeviceKind's names).
enum class Kind : uint8_t { cpu, gpu, accelerator, sim };
const char* kind_name(Kind k) noexcept;
std::optional<Kind> parse_kind(std::string_view s) noexcept;

/// One device as a tenant reports it. Two tenants reporting the same key report the same node
/// device (the same sim devices from the same TOML give the same keys in both processes).
struct DeviceReport {
  std::string key;  ///< node-level identity: backend/index/name/architecture
  Kind kind = Kind::cpu;
  uint64_t memory = 0;  ///< bytes of its own memory (0: works in host memory)
  uint32_t cores = 1;   ///< compute units (a cpu device: its cores)
};

using TenantId = uint64_t;

/// What a tenant is told: the devices it may use now and its own share (the devices it keeps
/// when every tenant is busy, and falls back to when the arbiter goes away), as its local device
/// indices (the order of its reports), ascending. `seq` grows with every grant to that tenant.
struct Grant {
  TenantId tenant = 0;
  uint64_t seq = 0;
  std::vector<uint32_t> held;
  std::vector<uint32_t> own;
};

struct ArbitrationCounters {
  uint64_t grants = 0;    ///< a device handed to a tenant
  uint64_t lends = 0;     ///< ... that was not of its own share
  uint64_t revokes = 0;   ///< a tenant asked to stop using a device
  uint64_t releases = 0;  ///< a tenant said it stopped using one
  uint64_t returned = 0;  ///< devices freed by a tenant that left
};

class Arbitration {
 public:
  /// A new tenant with `weight` (> 0) and its devices (at most 128; keys unique among them).
  TenantId join(double weight, std::vector<DeviceReport> devices);
  /// The tenant is gone (left, died, was dropped): its devices are free at once.
  void leave(TenantId t);
  /// Whether the tenant has work (busy) or not (idle: its own share may be lent).
  void demand(TenantId t, bool busy);
  /// The tenant stopped using its device `local` after the grant `seq` took it away. False (and
  /// nothing changes) when that device is not being taken from it, or `seq` predates the revoke.
  bool released(TenantId t, uint32_t local, uint64_t seq);
  /// The grants that changed since the last call (one per tenant whose grant changed).
  std::vector<Grant> take_changes();
  /// The time now, in seconds of the caller's clock (revokes are stamped with it).
  void tick(double now) noexcept { now_ = now; }
  /// Tenants holding a device revoked more than `seconds` ago and not released.
  std::vector<TenantId> overdue(double seconds) const;

  // Views (tests, the server's log).
  std::vector<uint32_t> held(TenantId t) const;       ///< devices it may use now
  std::vector<uint32_t> own(TenantId t) const;        ///< its own share
  std::vector<uint32_t> releasing(TenantId t) const;  ///< revoked, not yet released
  bool busy(TenantId t) const;
  size_t tenants() const noexcept { return tenants_.size(); }
  size_t devices() const noexcept { return slots_.size(); }
  const ArbitrationCounters& counters() const noexcept { return counters_; }

 private:
  struct NodeDevice {
    DeviceReport info;
    std::vector<std::pair<TenantId, uint32_t>> local;  // tenants that have it, its index in each
    TenantId holder = 0;                               // 0: free
    bool releasing = false;                            // revoked from holder, not yet released
    uint64_t revoke_seq = 0;                           // the holder's grant that revoked it
    double revoked_at = 0;                             // tick() time of the revoke
    TenantId owner = 0;   // own share: whose it is when everyone is busy
    TenantId target = 0;  // who should hold it, as the last pass chose
  };
  struct Tenant {
    double weight = 1;
    bool busy = false;
    std::vector<uint32_t> slots;  // its devices' places in pool_, by local index
    uint64_t seq = 0;
    bool changed = true;
    std::vector<uint32_t> sent_held, sent_own;
  };
  // Recomputes own shares and targets, and moves devices towards them.
  void rebalance();
  // A free device to its target.
  void grant(NodeDevice& n);
  template <class Pick>
  std::vector<uint32_t> list(TenantId t, Pick pick) const;

  // Devices by key (the map gives the deterministic order every pass walks them in) and their
  // state by place: a pass works on places and vectors, never on keys.
  std::map<std::string, uint32_t> slots_;
  std::vector<NodeDevice> pool_;  // by place; a place whose device went is reused
  std::vector<uint32_t> free_;    // places to reuse
  std::map<TenantId, Tenant> tenants_;
  TenantId next_ = 1;
  double now_ = 0;
  ArbitrationCounters counters_;
};

}  // namespace hcr::arbiter
