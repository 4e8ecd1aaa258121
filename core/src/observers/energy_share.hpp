// Each finished task's share of its device's energy (EnergyAccount), and, when the policy learns
// energy costs (Policy::wants_energy), the samples that completes: attached to Completion's
// observers once a device has energy figures.
#pragma once

#include "../engine/attempt_observers.hpp"

#include <functional>
#include <string>
#include <utility>

namespace hcr::detail {

class EnergyAccount;
class Placement;

class EnergyShare final : public AttemptObserver {
 public:
  /// `now`: the runtime's clock; `kernel_name`: a kernel's name by its id.
  EnergyShare(EnergyAccount& energy, const Placement& placement, std::function<double()> now,
              std::function<std::string(uint32_t)> kernel_name)
      : energy_(energy),
        placement_(placement),
        now_(std::move(now)),
        kernel_name_(std::move(kernel_name)) {}
  /// The policy learns energy costs (set at the start, before any task runs).
  void set_policy_learns(bool on) noexcept { policy_learns_ = on; }
  void attempt_ended(const AttemptRecord& r) noexcept override;

 private:
  EnergyAccount& energy_;
  const Placement& placement_;
  std::function<double()> now_;
  std::function<std::string(uint32_t)> kernel_name_;
  bool policy_learns_ = false;
};

}  // namespace hcr::detail
