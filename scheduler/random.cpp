// random: each ready task goes to a device drawn uniformly among those that can run it (seeded by
// [scheduler] seed). A baseline for the benchmarks, not a policy anyone should run.
#include "device_queue.hpp"

#include <memory>
#include <mutex>
#include <random>
#include <vector>

namespace hcr::sched {
namespace {

class Random final : public Policy {
 public:
  explicit Random(const Config& c) : gen_(c.seed) {}
  std::string_view name() const noexcept override { return "random"; }
  void attach(Context& ctx) override {
    ctx_ = &ctx;
    queues_.clear();
    queues_.reserve(kMaxDevices);  // indexed without a lock while devices join: never moves
    for (size_t i = 0; i < ctx.devices().size(); ++i)
      queues_.push_back(std::make_unique<DeviceQueue>());
  }
  void device_added(DeviceId /*d*/) override { queues_.push_back(std::make_unique<DeviceQueue>()); }
  DeviceId push(TaskRef t) override {
    DeviceId picked = kAnyDevice;
    uint32_t seen = 0;
    std::lock_guard<std::mutex> lock(mutex_);
    // Reservoir sampling: one pass, uniform
    for (DeviceId d = 0, n = ctx_->device_count(); d < n; ++d)
      if (t.can_run(d) && std::uniform_int_distribution<uint32_t>(0, seen++)(gen_) == 0) picked = d;
    if (picked != kAnyDevice) queues_[picked]->push(t);
    return picked;
  }
  TaskRef pop(DeviceId d) override { return queues_[d]->pop_front(d); }
  std::vector<TaskRef> drain(DeviceId d) override { return queues_[d]->take_all(); }

 private:
  Context* ctx_ = nullptr;
  std::mutex mutex_;
  std::mt19937_64 gen_;
  std::vector<std::unique_ptr<DeviceQueue>> queues_;
};

const bool registered = [] {
  register_policy("random", [](const Config& c) { return std::make_unique<Random>(c); });
  return true;
}();

}  // namespace
}  // namespace hcr::sched
