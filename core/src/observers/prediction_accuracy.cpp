// PredictionAccuracy (prediction_accuracy.hpp).
#include "prediction_accuracy.hpp"

#include "../kernel_state.hpp"

#include <algorithm>
#include <cmath>

namespace hcr::detail {

void PredictionAccuracy::attempt_ended(const AttemptRecord& r) noexcept {
  if (r.predicted <= 0 || r.seconds <= 0 || r.failed) return;
  const float err = static_cast<float>(std::abs(r.predicted - r.seconds) / r.seconds * 100.0);
  try {
    std::lock_guard<SpinLock> g(lock_);
    Errors& e = errors_[{r.task->kernel->id, r.device.info.id}];
    if (e.errors.size() < 1024) {
      e.errors.push_back(err);
    } else {
      e.errors[e.next] = err;
      e.next = (e.next + 1) % e.errors.size();
    }
  } catch (...) {  // out of memory: this sample is not counted
  }
}

void PredictionAccuracy::report(std::vector<ModelAccuracy>& out) const {
  std::lock_guard<SpinLock> g(lock_);
  for (auto& [key, a] : errors_) {
    std::vector<float> e = a.errors;
    std::nth_element(e.begin(), e.begin() + static_cast<long>(e.size() / 2), e.end());
    out.push_back(
        {kernel_name_(key.first), key.second, e[e.size() / 2], static_cast<uint32_t>(e.size())});
  }
}

}  // namespace hcr::detail
