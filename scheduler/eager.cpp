// eager: one shared FIFO of ready tasks; a device with a free slot takes the oldest task it can
// run. No model, no placement decision at push time — StarPU's `eager`, the baseline policy.
#include <hcr/detail/spin_lock.hpp>
#include <hcr/sched.hpp>

#include <deque>
#include <mutex>

namespace hcr::sched {
namespace {

class Eager final : public Policy {
 public:
  std::string_view name() const noexcept override { return "eager"; }
  void attach(Context& /*ctx*/) override {}

  DeviceId push(TaskRef task) override {
    std::lock_guard<detail::SpinLock> lock(lock_);
    queue_.push_back(task);
    return kAnyDevice;
  }

  TaskRef pop(DeviceId d) override {
    std::lock_guard<detail::SpinLock> lock(lock_);
    if (!queue_.empty() && queue_.front().can_run(d)) {  // the common case
      TaskRef t = queue_.front();
      queue_.pop_front();
      return t;
    }
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if (it->can_run(d)) {
        TaskRef t = *it;
        queue_.erase(it);
        return t;
      }
    return {};
  }

  std::vector<TaskRef> drain(DeviceId /*d*/) override {
    std::lock_guard<detail::SpinLock> lock(lock_);
    std::vector<TaskRef> out;
    std::erase_if(queue_, [&](TaskRef t) {
      if (t.can_run_anywhere()) return false;
      out.push_back(t);
      return true;
    });
    return out;
  }

 private:
  detail::SpinLock lock_;
  std::deque<TaskRef> queue_;
};

const bool registered = [] {
  register_policy("eager", [](const Config&) { return std::make_unique<Eager>(); });
  return true;
}();

}  // namespace
}  // namespace hcr::sched
