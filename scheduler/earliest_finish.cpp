// The earliest-finish base: placing, parking, calibrating, stealing and learning, the same loops
// for dmda, dmdas and peft (their differences are the hooks of earliest_finish.hpp).
#include "earliest_finish.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>

namespace hcr::sched {

EarliestFinish::EarliestFinish(const Config& c, DeviceQueue::Order order)
    : calibration_(c, kernels_),
      objective_(c, model_, loads_.get()),
      unknown_(order),
      order_(order),
      dir_(model_directory(c)) {}

EarliestFinish::~EarliestFinish() { save(); }

void EarliestFinish::attach(Context& ctx) {
  ctx_ = &ctx;
  objective_.attach(ctx);
  const auto& devices = ctx.devices();
  devs_.clear();
  devs_.reserve(kMaxDevices);  // indexed without a lock while devices join: never moves
  uint32_t nodes = 1;
  for (const Device& d : devices) {
    devs_.push_back(make_dev(d));
    nodes = std::max(nodes, d.memory_node + 1);
  }
  node_capacity_ = nodes + kSpareNodes;
  links_.resize(node_capacity_);
  node_names_.assign(nodes, "host");
  for (const Device& d : devices) add_node(d);
  load();
}

void EarliestFinish::device_added(DeviceId id) {
  const Device& d = ctx_->device(id);
  devs_.push_back(make_dev(d));
  std::lock_guard<std::mutex> lock(save_mutex_);
  if (d.memory_node >= node_names_.size()) node_names_.resize(d.memory_node + 1, "host");
  add_node(d);
}

// The next device's state (devices join in id order).
std::unique_ptr<EarliestFinish::Dev> EarliestFinish::make_dev(const Device& d) {
  DeviceLoad& h = loads_[devs_.size()];
  h.node = static_cast<uint16_t>(d.memory_node);
  h.slots = static_cast<uint16_t>(std::clamp<uint32_t>(d.concurrency, 1, 65535));
  kernels_.add_device(d.arch);
  return std::make_unique<Dev>(order_, h);
}

// A device's memory node: its name (the architecture) for the link file, and the figures its
// plugin declares until copies are measured.
void EarliestFinish::add_node(const Device& d) {
  if (d.memory_node == 0) return;
  node_names_[d.memory_node] = d.arch;
  if (d.link_bandwidth > 0) {
    links_.declare(0, d.memory_node, d.link_latency, d.link_bandwidth);
    links_.declare(d.memory_node, 0, d.link_latency, d.link_bandwidth);
  }
}

// ---- placing --------------------------------------------------------------------------------

DeviceId EarliestFinish::push(TaskRef t) {
  prepare(t);
  const KernelPairs& pairs = kernels_.of(t);
  const uint64_t fp = t.footprint();
  const double size = t.size();
  const double now = ctx_->now();

  DeviceId best = kAnyDevice;
  double best_exec = 0, best_xfer = 0;
  uint64_t explore = 0;

  // The devices that can run it, asked once per decision (both passes below need them).
  std::bitset<kMaxDevices> capable;
  const DeviceId count = ctx_->device_count();
  ctx_->capable(t, count, capable);

  // A pair not measured enough, with no calibration task out?
  const Calibration::Mode calibrate = calibration_.mode();
  if (calibrate != Calibration::kOff) {
    uint32_t fewest = UINT32_MAX;
    double first_rank = -1;  // of those, the device that goes first (explore_rank)
    for (DeviceId d = 0; d < count; ++d) {
      if (!capable[d]) continue;
      CostModel::Pair& p = *pairs[d];
      uint32_t n = model_.samples(p);
      if (calibrate == Calibration::kForce) {  // every footprint, not just the pair
        Prediction pr = model_.predict(p, fp, size);
        n = pr.source == Prediction::Source::history ? pr.samples : 0;
      }
      if (probe(pairs, d, n) == Probe::none || p.exploring.load(std::memory_order_relaxed) != 0)
        continue;
      const double rank = explore_rank(d);
      if (n < fewest || (n == fewest && rank > first_rank)) {
        fewest = n;
        first_rank = rank;
        best = d;
      }
    }
    if (best != kAnyDevice) {
      explore = try_explore(pairs, best, fewest);
      if (explore == 0) best = kAnyDevice;  // another thread took that calibration slot
    }
  }

  if (explore != 0) {
    Prediction pr = model_.predict(*pairs[best], fp, size);
    best_exec = pr.known() ? pr.seconds : std::max(0.0, ctx_->plugin_estimate(t, best));
    best_xfer = std::max(0.0, copy_time(t, best, now));
  } else {
    Choice c = planned(t, pairs, now, capable);
    if (c.device == kAnyDevice) c = choose(t, pairs, now, /*estimates=*/true, &capable);
    if (c.device == kAnyDevice) {
      // Nothing is known yet (calibration still running): placing now would be a guess. The
      // task waits where a device with a free slot takes it once the model says it should.
      t.set_policy_data(0);
      unknown_.push(t);
      return kAnyDevice;
    }
    best = c.device;
    best_exec = c.exec;
    best_xfer = c.xfer;
  }

  t.set_policy_data(placed_word(best_exec, best_xfer, explore));
  charge(t, best);
  devs_[best]->queue.push(t);
  return best;
}

double EarliestFinish::predicted(TaskRef t) const noexcept {
  const uint64_t w = t.policy_data();
  if ((w & kExploreBit) || exec_ns(w) == 0) return -1;  // calibration runs predict nothing
  return static_cast<double>(exec_ns(w)) * 1e-9;
}

void EarliestFinish::charge(TaskRef t, DeviceId d, bool queued) {
  loads_[d].pending_ns.fetch_add(exec_ns(t.policy_data()), std::memory_order_relaxed);
  if (order_ == DeviceQueue::Order::priority && queued)
    devs_[d]->queued.add(t.priority(), exec_ns(t.policy_data()));
  if (xfer_ns(t.policy_data()) > 0) book_copies(t, d);
}

// ---- taking ---------------------------------------------------------------------------------

TaskRef EarliestFinish::take(DeviceId d) {
  if (TaskRef t = take_first(d)) {
    dequeued(t, d);
    return t;
  }
  if (TaskRef t = devs_[d]->queue.pop_front(d)) {
    dequeued(t, d);
    return t;
  }
  if (unknown_.size() > 0)
    if (TaskRef t = take_parked(d)) return t;
  return steal(d);
}

// A task parked before its costs were known. d takes it to calibrate itself (one at a time,
// until it has its samples), or when the model now sends it to d; with calibration off and
// nothing known anywhere, first come first served.
TaskRef EarliestFinish::take_parked(DeviceId d) {
  const double now = ctx_->now();
  uint64_t explored = 0;
  // Devices the model sends a parked task to that sit idle: nothing else would ask them.
  std::array<DeviceId, 16> idle_choices;
  size_t n_idle = 0;
  TaskRef t = unknown_.pop_first(16, [&](TaskRef u) {
    if (!u.can_run(d)) return false;
    const auto& pairs = kernels_.of(u);
    CostModel::Pair& p = *pairs[d];
    if (calibration_.mode() != Calibration::kOff &&
        probe(pairs, d, model_.samples(p)) != Probe::none) {
      explored = try_explore(pairs, d, model_.samples(p));
      return explored != 0;
    }
    Choice c = choose(u, pairs, now, /*estimates=*/false, nullptr);
    if (c.device != d && c.device != kAnyDevice && n_idle < idle_choices.size() &&
        ctx_->in_flight(c.device) < loads_[c.device].slots)
      idle_choices[n_idle++] = c.device;
    // Nothing predicts it anywhere and no exploration of d is allowed: run it here rather than
    // wait for a measurement nothing is making. That is so too once the pair has its samples but
    // none at this task's size, with no exploration of its kernel in flight: a halo stencil's
    // tiles of other shapes than those measured, pinned to a second device of the same
    // architecture, were parked there for good (two fake CUDA devices under dmda hung).
    return c.device == d ||
           (c.device == kAnyDevice && (calibration_.mode() == Calibration::kOff ||
                                       runs_unpredicted(pairs) || !Calibration::exploring(pairs)));
  });
  for (size_t i = 0; i < n_idle; ++i) ctx_->wake(idle_choices[i]);
  if (t) {
    t.set_policy_data(explored);
    account(t, d);
  }
  return t;
}

void EarliestFinish::account(TaskRef t, DeviceId d) {
  Prediction pr = model_.predict(*kernels_.of(t)[d], t.footprint(), t.size());
  const double copies = copy_time(t, d, ctx_->now());
  t.set_policy_data(placed_word(pr.known() ? pr.seconds : 0, copies, t.policy_data()));
  charge(t, d, /*queued=*/false);
}

// An idle device takes a task queued elsewhere when it is predicted to finish it before the
// device it waits for would even start it: queues placed on old predictions (a device that
// slowed down since) drain to where the work now goes faster.
TaskRef EarliestFinish::steal(DeviceId d) {
  if (!may_steal(d)) return {};
  std::vector<std::pair<int64_t, DeviceId>> victims;
  for (DeviceId v = 0, n = ctx_->device_count(); v < n; ++v)
    if (v != d && devs_[v]->queue.size() > 0)
      victims.push_back(
          {loads_[v].pending_ns.load(std::memory_order_relaxed) / loads_[v].slots, v});
  std::sort(victims.rbegin(), victims.rend());
  for (auto& [pending, v] : victims) {
    TaskRef t = devs_[v]->queue.pop_back(d);
    if (!t) continue;
    // A calibration task was sent there on purpose, to measure v; a task whose placement
    // started copies to v would waste them elsewhere (and move its inputs twice): both stay.
    if ((t.policy_data() & kExploreBit) || xfer_ns(t.policy_data()) > 0) {
      devs_[v]->queue.push(t);
      ctx_->wake(v);  // v may have found its queue empty while t was out of it
      continue;
    }
    const KernelPairs& pairs = kernels_.of(t);
    Prediction here = model_.predict(*pairs[d], t.footprint(), t.size());
    Prediction there = model_.predict(*pairs[v], t.footprint(), t.size());
    double start_there = static_cast<double>(pending) * 1e-9;  // behind everything queued
    double finish_there = start_there + (there.known() ? there.seconds : 0);
    const double now = ctx_->now();
    double copies = copy_time(t, d, now);
    double finish_here = (here.known() ? here.seconds : INFINITY) + copies;
    if (here.known() && finish_here < finish_there) weigh_steal(t, d, v, finish_here, finish_there);
    if (here.known() && finish_here < finish_there &&
        objective_.worth_moving(t, pairs, d, v, here, there, finish_here, finish_there)) {
      dequeued(t, v);
      discharge(t, v);
      t.set_policy_data(placed_word(here.seconds, copies, 0));
      charge(t, d, /*queued=*/false);
      return t;
    }
    devs_[v]->queue.push(t);  // better where it is: put it back
    ctx_->wake(v);            // (v may have found its queue empty meanwhile)
  }
  return {};
}

// ---- learning -------------------------------------------------------------------------------

void EarliestFinish::completed(TaskRef t, DeviceId d, double seconds) {
  record_completion(t, d, seconds);
  maybe_save();
}

void EarliestFinish::record_completion(TaskRef t, DeviceId d, double seconds) {
  const uint64_t data = t.policy_data();
  discharge(t, d);
  CostModel::Pair& p = *kernels_.of(t)[d];
  if (seconds >= 0) {
    const bool first = model_.samples(p) == 0;
    model_.record(p, t.footprint(), t.size(), seconds);
    measured(t, d, seconds, first);
  }
  end_explore(t, d, data);  // after the record: the next decision sees the sample
  // Parked tasks that another device declined while this exploration held the kernel's probe
  // (peft explores a kernel on one device at a time) can be taken now. That device went to sleep,
  // and no other offers it a task only it may run (pinned): wake the others to look again.
  if ((data & kExploreBit) != 0 && unknown_.size() > 0)
    for (DeviceId other = 0, n = ctx_->device_count(); other < n; ++other)
      if (other != d) ctx_->wake(other);
}

// d left scheduling: its queue goes back to the core with its predicted work (and any
// calibration slot a queued task held) taken off d.
std::vector<TaskRef> EarliestFinish::drain(DeviceId d) {
  std::vector<TaskRef> queued = devs_[d]->queue.take_all();
  for (TaskRef t : queued) {
    dequeued(t, d);
    discharge(t, d);
    end_explore(t, d, t.policy_data());
    t.set_policy_data(0);
  }
  for (TaskRef t : unknown_.take_stranded()) queued.push_back(t);  // nowhere left to calibrate
  return queued;
}

void EarliestFinish::energy(uint32_t kernel, std::string_view name, uint64_t footprint, double size,
                            DeviceId d, double joules) {
  if (d >= ctx_->device_count() || !(joules >= 0)) return;
  CostModel::Pair& p = *kernels_.of(kernel, name)[d];
  // The device's draw above idle, joules per busy second, for kernels not measured yet there.
  const Prediction time = model_.predict(p, footprint, size);
  if (time.source == Prediction::Source::history && time.seconds > 0)
    objective_.learn_watts(d, joules / time.seconds);
  model_.record_energy(p, footprint, size, joules);
}

void EarliestFinish::transferred(uint32_t from, uint32_t to, uint64_t bytes, double seconds) {
  links_.record(from, to, bytes, seconds);
}

// ---- persistence ----------------------------------------------------------------------------

void EarliestFinish::load() {
  if (!dir_.empty()) load_models(dir_, model_, links_, node_names_);
}

void EarliestFinish::maybe_save() {
  if (dir_.empty()) return;
  const double now = ctx_->now();
  double last = last_save_.load(std::memory_order_relaxed);
  if (last == 0) {
    last_save_.compare_exchange_strong(last, now);
    return;
  }
  if (now - last < 30 || !last_save_.compare_exchange_strong(last, now)) return;
  save();
}

void EarliestFinish::save() noexcept {
  if (dir_.empty() || ctx_ == nullptr) return;
  std::lock_guard<std::mutex> lock(save_mutex_);
  save_models(dir_, model_, links_, node_names_);
}

}  // namespace hcr::sched
