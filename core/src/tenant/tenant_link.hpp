// The runtime's side of the node arbiter (arbiter/, `hcr serve`): a TenantHost over RuntimeCore,
// and the client that applies grants through RuntimeCore::set_withheld. Exists only when
// [arbiter] socket (or HCR_ARBITER_SOCKET) is set.
#pragma once

#include <hcr/arbiter/client.hpp>
#include <hcr/runtime.hpp>

#include <memory>

namespace hcr::detail {

class RuntimeCore;

class TenantLink final : public arbiter::TenantHost {
 public:
  /// Joins the arbiter of core's config with core's devices (at the start, before any task).
  /// Never throws for an arbiter that is not there: the link then does nothing.
  static std::unique_ptr<TenantLink> join(RuntimeCore& core);
  ~TenantLink() override;
  /// Leaves the arbiter: the own share stays usable (every device when it is empty).
  void leave() noexcept;
  void stats(ArbiterStats& out) const;

  std::vector<arbiter::DeviceReport> devices() override;
  uint64_t unfinished() override;
  void allow(uint32_t local, bool yes) override;
  uint32_t running(uint32_t local) override;
  void log(bool warn, const std::string& text) override;

 private:
  explicit TenantLink(RuntimeCore& core);
  RuntimeCore& core_;
  uint32_t count_ = 0;  // the devices at the start: the ones the arbiter knows
  std::unique_ptr<arbiter::Client> client_;
};

}  // namespace hcr::detail
