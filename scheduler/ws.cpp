// ws: work stealing. A ready task goes to the deque of the least loaded device that can run it;
// a device takes its newest task (depth first: a chain of dependent tasks stays where its data
// is), and an idle device steals the oldest task it can run from the most loaded other deque.
#include "device_queue.hpp"

#include <memory>
#include <vector>

namespace hcr::sched {
namespace {

class WorkStealing final : public Policy {
 public:
  std::string_view name() const noexcept override { return "ws"; }
  void attach(Context& ctx) override {
    ctx_ = &ctx;
    queues_.clear();
    queues_.reserve(kMaxDevices);  // indexed without a lock while devices join: never moves
    for (size_t i = 0; i < ctx.devices().size(); ++i)
      queues_.push_back(std::make_unique<DeviceQueue>());
  }
  void device_added(DeviceId /*d*/) override { queues_.push_back(std::make_unique<DeviceQueue>()); }
  DeviceId push(TaskRef t) override {
    DeviceId best = kAnyDevice;
    double best_load = 0;
    for (DeviceId d = 0, n = ctx_->device_count(); d < n; ++d) {
      if (!t.can_run(d)) continue;
      double load = static_cast<double>(queues_[d]->size() + ctx_->in_flight(d)) /
                    std::max<uint32_t>(1, ctx_->device(d).concurrency);
      if (best == kAnyDevice || load < best_load) {
        best = d;
        best_load = load;
      }
    }
    if (best == kAnyDevice) return kAnyDevice;
    queues_[best]->push(t);
    return kAnyDevice;  // every idle device may come and steal it
  }
  TaskRef pop(DeviceId d) override {
    if (TaskRef t = queues_[d]->pop_back(d)) return t;
    // Steal from the longest queue first.
    std::vector<std::pair<size_t, DeviceId>> victims;
    for (DeviceId v = 0, n = ctx_->device_count(); v < n; ++v)
      if (v != d && queues_[v]->size() > 0) victims.push_back({queues_[v]->size(), v});
    std::sort(victims.rbegin(), victims.rend());
    for (auto& [size, v] : victims)
      if (TaskRef t = queues_[v]->pop_front(d)) return t;
    return {};
  }
  // Others would steal them anyway; handing them back places them at once.
  std::vector<TaskRef> drain(DeviceId d) override { return queues_[d]->take_all(); }

 private:
  Context* ctx_ = nullptr;
  std::vector<std::unique_ptr<DeviceQueue>> queues_;
};

const bool registered = [] {
  register_policy("ws", [](const Config&) { return std::make_unique<WorkStealing>(); });
  return true;
}();

}  // namespace
}  // namespace hcr::sched
