// dmda, and dmdas on it: the earliest finish with every input copied from host memory over the
// device's inbound link, queued behind that link's earlier copies.
#pragma once

#include "earliest_finish.hpp"

#include <atomic>
#include <memory>

namespace hcr::sched {

/// dmda ("deque model data aware", as StarPU calls it): each ready task goes to the device where
/// it is predicted to finish first — the device's predicted ready time, or the arrival of the
/// task's inputs there if later (copies start at once: the runtime prefetches), plus the learned
/// execution time. The online form of HEFT. A device's queue is StarPU's: first in first out,
/// except that a task of priority > 0 goes ahead of those of lower priority (an application that
/// marks its critical path with positive priorities gets it first); the predictions ignore that
/// order, counting all the work queued and all the copies booked.
class Dmda : public EarliestFinish {
 public:
  explicit Dmda(const Config& c, DeviceQueue::Order order = DeviceQueue::Order::positive)
      : EarliestFinish(c, order) {}
  std::string_view name() const noexcept override { return "dmda"; }
  void attach(Context& ctx) override;

 protected:
  Choice choose(TaskRef t, const KernelPairs& pairs, double now, bool estimates,
                const std::bitset<kMaxDevices>* capable) override;
  double copy_time(TaskRef t, DeviceId d, double /*now*/) override { return copy_in(t, d); }
  void book_copies(TaskRef t, DeviceId d) override;

  /// The priority `t`'s wait is predicted at: it waits behind the queued work and the booked
  /// copies of this priority or higher. Here all of them.
  virtual int wait_priority(TaskRef /*t*/) const { return 0; }
  /// When the copies booked on memory node `node`'s inbound link that a task of priority `prio`
  /// waits behind are through (node < node_capacity_).
  virtual double link_free(uint32_t node, int prio, double now) const;
  /// Books `seconds` of copying on `node`'s inbound link for a task of priority `prio`.
  virtual void book_inbound(uint32_t node, int prio, double now, double seconds);

 private:
  // Predicted seconds to copy `t`'s missing inputs into d's memory: all from host memory over
  // d's inbound link.
  double copy_in(TaskRef t, DeviceId d) {
    uint64_t bytes = ctx_->bytes_to_fetch(t, d);
    return bytes ? links_.predict(0, loads_[d].node, bytes) : 0;
  }

  std::unique_ptr<std::atomic<double>[]> link_free_at_;  // when each node's inbound copies end
};

}  // namespace hcr::sched
