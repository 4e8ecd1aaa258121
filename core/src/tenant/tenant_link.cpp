// The runtime as a tenant of the node arbiter: its devices reported as node-level keys, its
// demand, and grants applied by withholding devices (the retired-device path: no new branch in
// the engine's loops, the same mask test).
#include "tenant_link.hpp"

#include <hcr/arbiter/protocol.hpp>
#include "../log_internal.hpp"
#include "../runtime_core.hpp"

#include <algorithm>
#include <mutex>

namespace hcr::detail {

TenantLink::TenantLink(RuntimeCore& core) : core_(core) {}

TenantLink::~TenantLink() { leave(); }

std::unique_ptr<TenantLink> TenantLink::join(RuntimeCore& core) {
  std::unique_ptr<TenantLink> link(new TenantLink(core));
  link->count_ = core.device_count();
  arbiter::ClientOptions o;
  o.socket = core.config().arbiter_socket;
  o.weight = core.config().arbiter_weight;
  link->client_ = std::make_unique<arbiter::Client>(*link, o);
  if (link->client_->start())
    HCR_LOG(info, "joined the node arbiter '" << o.socket << "' as tenant "
                                              << link->client_->stats().tenant);
  return link;
}

void TenantLink::leave() noexcept {
  if (client_) client_->stop();
}

std::vector<arbiter::DeviceReport> TenantLink::devices() {
  std::vector<arbiter::DeviceReport> out;
  for (uint32_t d = 0; d < count_; ++d) {
    const Device& x = core_.device(d);
    arbiter::DeviceReport r;
    // The same device seen from two processes: the same plugin, its index there, name, arch.
    r.key = arbiter::wire_key(x.backend + "/" + std::to_string(d) + "/" + x.name + "/" + x.arch);
    switch (x.kind) {
      case DeviceKind::cpu: r.kind = arbiter::Kind::cpu; break;
      case DeviceKind::gpu: r.kind = arbiter::Kind::gpu; break;
      case DeviceKind::accelerator: r.kind = arbiter::Kind::accelerator; break;
      case DeviceKind::sim: r.kind = arbiter::Kind::sim; break;
    }
    r.memory = x.memory_node == 0 ? 0 : x.memory_bytes;
    r.cores = std::max<uint32_t>(1, x.compute_units);
    out.push_back(std::move(r));
  }
  return out;
}

uint64_t TenantLink::unfinished() { return core_.unfinished(); }

void TenantLink::allow(uint32_t local, bool yes) { core_.set_withheld(local, !yes); }

uint32_t TenantLink::running(uint32_t local) { return core_.occupied(local); }

void TenantLink::log(bool warn, const std::string& text) {
  if (warn) HCR_LOG(warn, text);
  else HCR_LOG(info, text);
}

void TenantLink::stats(ArbiterStats& out) const {
  const arbiter::ClientStats s = client_->stats();
  out.joined = s.joined;
  out.connected = s.connected;
  out.tenant = s.tenant;
  out.grants = s.grants;
  out.gained = s.gained;
  out.revoked = s.revoked;
  out.released = s.released;
  out.held = s.held;
  out.own = s.own;
  out.borrowed = s.borrowed;
  out.max_release_seconds = s.max_release_seconds;
}

void RuntimeCore::tenant_stats(RuntimeStats& s) const {
  if (tenant_) tenant_->stats(s.arbiter);
}

// ---- the node arbiter: devices withheld and given back ----------------------------------------

bool RuntimeCore::set_withheld(uint32_t id, bool withheld) noexcept {
  return id < device_count() && health_.set_withheld(devices_[id], withheld);
}

}  // namespace hcr::detail
