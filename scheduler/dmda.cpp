// dmda: the earliest finish over every device, with copies from host memory queued on each
// device's inbound link (dmda.hpp); registered as "dmda".
#include "dmda.hpp"

#include <hcr/log.hpp>

#include <array>
#include <cmath>
#include <utility>

namespace hcr::sched {

void Dmda::attach(Context& ctx) {
  if (!objective_.by_time())
    log::write(LogLevel::warn, "scheduler.objective: " + std::string(name()) +
                                   " minimises time only (the energy objectives are peft's)");
  EarliestFinish::attach(ctx);
  link_free_at_ = std::make_unique<std::atomic<double>[]>(node_capacity_);
}

// The device where `t` is predicted to finish first: max(ready, inputs arrive) + execution.
// Devices with no prediction are left out; none predicted at all gives kAnyDevice.
Choice Dmda::choose(TaskRef t, const KernelPairs& pairs, double now, bool estimates,
                    const std::bitset<kMaxDevices>* capable) {
  const uint64_t fp = t.footprint();
  const double size = t.size();
  const int prio = wait_priority(t);
  Choice best;
  double best_finish = INFINITY;
  const DeviceId n = ctx_->device_count();
  std::bitset<kMaxDevices> asked;
  if (capable == nullptr) {
    ctx_->capable(t, n, asked);
    capable = &asked;
  }
  // What each device would have to fetch, in one pass over the task's inputs.
  std::array<uint64_t, kMaxDevices> fetch;
  ctx_->bytes_to_fetch(t, n, fetch.data());
  // Predictions are per architecture: devices of one kind share them.
  std::array<std::pair<const CostModel::Pair*, double>, 8> seen{};
  size_t n_seen = 0;
  for (DeviceId d = 0; d < n; ++d) {
    if (!(*capable)[d]) continue;
    const DeviceLoad& dev = loads_[d];
    const CostModel::Pair* p = pairs[d];
    double exec = -1;
    bool cached = false;
    for (size_t i = 0; i < n_seen && !cached; ++i)
      if (seen[i].first == p) {
        exec = seen[i].second;
        cached = true;
      }
    if (!cached) {
      Prediction pr = model_.predict(*pairs[d], fp, size);
      exec = pr.known() ? pr.seconds : estimates ? ctx_->plugin_estimate(t, d) : -1;
      if (n_seen < seen.size()) seen[n_seen++] = {p, exec};
    }
    if (exec < 0) continue;
    // Inputs arrive after the copies already queued on the device's link, then this one's.
    double xfer = fetch[d] ? links_.predict(0, dev.node, fetch[d]) : 0;
    double arrival = xfer > 0 ? link_free(dev.node, prio, now) + xfer : now;
    double ready = now + static_cast<double>(ahead_ns(d, prio)) * 1e-9 / dev.slots;
    double finish = std::max(ready, arrival) + exec;
    if (finish < best_finish) {
      best_finish = finish;
      best = {d, exec, xfer};
    }
  }
  return best;
}

void Dmda::book_copies(TaskRef t, DeviceId d) {
  const uint32_t node = loads_[d].node;
  if (node == 0 || node >= node_capacity_) return;
  const double now = ctx_->now();
  book_inbound(node, t.priority(), now, static_cast<double>(xfer_ns(t.policy_data())) * 1e-9);
}

double Dmda::link_free(uint32_t node, int /*prio*/, double now) const {
  if (node >= node_capacity_) return now;
  return std::max(now, link_free_at_[node].load(std::memory_order_relaxed));
}

void Dmda::book_inbound(uint32_t node, int /*prio*/, double now, double seconds) {
  std::atomic<double>& free_at = link_free_at_[node];
  free_at.store(std::max(now, free_at.load(std::memory_order_relaxed)) + seconds,
                std::memory_order_relaxed);
}

namespace {
const bool registered = [] {
  register_policy("dmda", [](const Config& c) { return std::make_unique<Dmda>(c); });
  return true;
}();
}  // namespace

}  // namespace hcr::sched
