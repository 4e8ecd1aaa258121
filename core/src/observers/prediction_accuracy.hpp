// How far the policy's predictions were from what attempts took, per (kernel, device)
// (RuntimeStats::accuracy): attached to Completion's observers while the policy learns times.
#pragma once

#include "../engine/attempt_observers.hpp"

#include <hcr/detail/spin_lock.hpp>
#include <hcr/runtime.hpp>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hcr::detail {

class PredictionAccuracy final : public AttemptObserver {
 public:
  /// `kernel_name`: a kernel's name by its id (read when the figures are).
  explicit PredictionAccuracy(std::function<std::string(uint32_t)> kernel_name)
      : kernel_name_(std::move(kernel_name)) {}
  void attempt_ended(const AttemptRecord& r) noexcept override;
  /// The median prediction error per (kernel, device), appended to `out`.
  void report(std::vector<ModelAccuracy>& out) const;

 private:
  std::function<std::string(uint32_t)> kernel_name_;
  // Prediction errors per (kernel id, device): a ring of the latest.
  struct Errors {
    std::vector<float> errors;
    size_t next = 0;
  };
  mutable SpinLock lock_;
  std::map<std::pair<uint32_t, uint32_t>, Errors> errors_;
};

}  // namespace hcr::detail
