// dmdas: dmda with each device's queue sorted by priority, a task predicted to wait behind the
// queued work and the booked copies of its priority or higher only; registered as "dmdas".
#include "dmda.hpp"
#include "horizons.hpp"

#include <memory>

namespace hcr::sched {
namespace {

// The data manager hands each copy engine the most urgent copy first, so a copy waits only behind
// those of its priority or higher: one horizon per priority on each inbound link.
class Dmdas final : public Dmda {
 public:
  explicit Dmdas(const Config& c) : Dmda(c, DeviceQueue::Order::priority) {}
  std::string_view name() const noexcept override { return "dmdas"; }
  void attach(Context& ctx) override {
    Dmda::attach(ctx);
    inbound_ = std::make_unique<LinkHorizon[]>(node_capacity_);
  }

 private:
  int wait_priority(TaskRef t) const override { return t.priority(); }
  double link_free(uint32_t node, int prio, double now) const override {
    if (node >= node_capacity_) return now;
    return inbound_[node].free_at(prio, now);
  }
  void book_inbound(uint32_t node, int prio, double now, double seconds) override {
    inbound_[node].book(prio, now, now, seconds);
  }

  std::unique_ptr<LinkHorizon[]> inbound_;  // per memory node
};

const bool registered = [] {
  register_policy("dmdas", [](const Config& c) { return std::make_unique<Dmdas>(c); });
  return true;
}();

}  // namespace
}  // namespace hcr::sched
