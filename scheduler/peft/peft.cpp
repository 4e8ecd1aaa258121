// peft on the earliest-finish base: its choice with copies and look ahead, its exploration, the
// window plan it follows, and upward ranks as priorities; registered as "peft".
#include "peft.hpp"

#include "window_input.hpp"
#include "window_plan.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>

namespace hcr::sched {

namespace {

// Tasks a window plan covers at most.
constexpr size_t kWindowTasks = 2048;
// How much sooner a plan that spreads the window must be predicted to finish than the best single
// device before it is followed. A spread plan runs later than predicted (copies and orders it does
// not model), so a smaller predicted gain is no gain (how the figure was chosen: bench/README.md,
// dag_bench).
constexpr double kSpreadGain = 0.05;
// A device the window plan chose is taken unless the best finishes sooner by more than this
// fraction of the time from now to the chosen device's finish.
constexpr double kPlanSlack = 0.25;
// Queued tasks a device looks at for one whose inputs are there already.
constexpr size_t kReadyWindow = 4;

}  // namespace

Peft::Peft(const Config& c) : EarliestFinish(c, DeviceQueue::Order::priority) {}

void Peft::attach(Context& ctx) {
  EarliestFinish::attach(ctx);
  cold_.attach(ctx);
  lookahead_.attach(ctx, node_capacity_);
  priorities_.attach(ctx);
  copies_.resize(node_capacity_);
  refresh_mean_copy();
}

void Peft::device_added(DeviceId id) {
  EarliestFinish::device_added(id);
  refresh_mean_copy();
}

// No task leaves a queue while the window is planned (a plan takes microseconds, and only when
// the graph has grown); a task that does is running until completed() (the plan starts from what
// runs, too).
TaskRef Peft::pop(DeviceId d) {
  std::shared_lock<std::shared_mutex> gate(gate_);
  TaskRef t = take(d);
  if (t) {
    std::lock_guard<std::mutex> lock(running_mutex_);
    running_.push_back({t, d});
  }
  return t;
}

// Of the first tasks in the queue (the most urgent), the first whose inputs are all in d's memory
// already, so that a slot does not wait for copies while a task behind could run (StarPU's dmdar).
TaskRef Peft::take_first(DeviceId d) {
  return queue(d).pop_first(
      kReadyWindow, [&](TaskRef u) { return u.can_run(d) && inputs_on(*ctx_, u, loads_[d].node); });
}

void Peft::completed(TaskRef t, DeviceId d, double seconds) {
  {
    std::lock_guard<std::mutex> lock(running_mutex_);
    auto it = std::find_if(running_.begin(), running_.end(),
                           [&](const Running& r) { return r.task == t; });
    if (it != running_.end()) {
      *it = running_.back();
      running_.pop_back();
    }
  }
  record_completion(t, d, seconds);
  // The tasks this one makes ready are placed one by one right after: a plan made now sees them
  // all (one made when the first is placed would not see its siblings).
  if (!verdict_fresh() && t.successors(nullptr, nullptr, 0) > 0) plan(t, /*completing=*/true);
  maybe_save();
}

void Peft::measured(TaskRef t, DeviceId d, double seconds, bool first) {
  if (seconds > 0) cold_.learn(t, kernels_.of(t), d, seconds);
  // A (kernel, architecture) measured for the first time: the plan rested on less.
  if (first) model_epoch_.fetch_add(1, std::memory_order_relaxed);
}

void Peft::transferred(uint32_t from, uint32_t to, uint64_t bytes, double seconds) {
  EarliestFinish::transferred(from, to, bytes, seconds);
  if ((transfers_.fetch_add(1, std::memory_order_relaxed) & 31) == 0) refresh_mean_copy();
}

// For its first sample only: a kernel measured nowhere is explored on one device at a time (the
// kernel's slot); a kernel measured elsewhere, only while d's architecture has no speed ratio to
// another learned (then an unmeasured pair is predicted from it), one task at a time per
// architecture. A cold start so explores about one task per kernel and one per architecture, not
// one per (kernel, architecture). Calibration forced: every pair, as dmda.
Probe Peft::probe(const KernelPairs& kp, DeviceId d, uint32_t samples) const {
  if (calibration_.mode() == Calibration::kForce) return EarliestFinish::probe(kp, d, samples);
  if (samples != 0) return Probe::none;
  const uint8_t arch = kernels_.arch_index(d);
  bool elsewhere = false;
  for (uint32_t s = 0, n = kp.count.load(std::memory_order_acquire); s < n && !elsewhere; ++s)
    elsewhere = kp.archs[s].pair != kp[d] && model_.samples(*kp.archs[s].pair) > 0;
  if (!elsewhere)
    return kp.probing.load(std::memory_order_relaxed) == 0 ? Probe::kernel : Probe::none;
  if (arch >= kArchs || cold_.ratio_learned(arch) || calibration_.arch_probing(arch))
    return Probe::none;
  // Where this device and a measured one declare peak speeds, their ratio predicts it until a
  // ratio is learned (ColdStart::costs): no task need be sent to find out.
  if (ctx_->device(d).peak_gflops > 0)
    for (uint32_t s = 0, n = kp.count.load(std::memory_order_acquire); s < n; ++s)
      if (model_.samples(*kp.archs[s].pair) > 0 && ctx_->device(kp.archs[s].device).peak_gflops > 0)
        return Probe::none;
  return Probe::arch;
}

// ---- the choice -----------------------------------------------------------------------------

Choice Peft::choose_preferring(TaskRef t, const KernelPairs& pairs, double now, bool estimates,
                               const std::bitset<kMaxDevices>* capable, DeviceId prefer) {
  // A task that neither waited for others nor is waited on (yet) is predicted behind all the
  // work queued on a device, not only the work it outranks: independent tasks outranking each
  // other by cost alone would each see the devices emptier than they will be, and a burst of them
  // sends misfits there (sched_bench's affinity bag: 1.46x HEFT, 0.94x under dmda's FIFO view).
  const int prio = !t.waited() && t.successors(nullptr, nullptr, 0) == 0 ? INT_MIN : t.priority();
  const DeviceId count = ctx_->device_count();
  std::bitset<kMaxDevices> asked;
  if (capable == nullptr) {
    ctx_->capable(t, count, asked);
    capable = &asked;
  }
  uint64_t can[2];
  words_of(*capable, can);
  ColdStart::ArchCosts costs;
  cold_.costs(t, pairs, can, estimates, costs);
  InputSite ins[CopyPlanner::kInputs];
  uint64_t extra = 0;
  const size_t n_in = read_inputs(*ctx_, t, ins, extra);
  Lookahead ahead;
  lookahead_.fill(t, ahead);

  Choice best, preferred;
  double best_score = INFINITY, preferred_score = INFINITY;
  // The energy objectives weigh each device's finish against the task's predicted joules.
  std::array<EnergyObjective::Option, kMaxDevices> options;
  size_t n_options = 0;
  const bool by_time = objective_.by_time();
  for (DeviceId d = 0; d < count; ++d) {
    if (!(*capable)[d]) continue;
    const double exec = ColdStart::exec_on(pairs, costs, d);
    if (exec < 0) continue;
    const DeviceLoad& dev = loads_[d];
    const double ready = now + static_cast<double>(ahead_ns(d, prio)) * 1e-9 / dev.slots;
    // Copies only delay: a device that cannot win without them is not asked for them.
    if (by_time && d != prefer && ready + exec + ahead.cost(dev.node) >= best_score) continue;
    const double in = arrival(t, d, ins, n_in, extra, now, /*book=*/false);
    const double finish = std::max(ready, in) + exec;
    const double score = finish + ahead.cost(dev.node);
    if (!by_time) options[n_options++] = {d, finish, score, exec, in - now};
    if (d == prefer) {
      preferred_score = score;
      preferred = {d, exec, in - now};
    }
    if (score < best_score) {
      best_score = score;
      best = {d, exec, in - now};
    }
  }
  if (preferred.device != kAnyDevice &&
      best_score >= preferred_score - kPlanSlack * (preferred_score - now)) {
    return preferred;
  }
  if (by_time || best.device == kAnyDevice) return best;
  return objective_.choose(t, pairs, now, best_score, {options.data(), n_options}, best);
}

// While the plan keeps the graph on one device, another device steals nothing from it: each task
// it took would send its results back over the links the plan chose to spare.
bool Peft::may_steal(DeviceId d) const {
  const uint64_t verdict = verdict_.load(std::memory_order_acquire);
  return !(verdict_fresh(verdict) && (verdict & 0xffff) != 0 &&
           static_cast<DeviceId>((verdict & 0xffff) - 1) != d);
}

// What each side leaves the task's readers: its results copied to where they run.
void Peft::weigh_steal(TaskRef t, DeviceId d, DeviceId v, double& finish_here,
                       double& finish_there) {
  Lookahead ahead;
  lookahead_.fill(t, ahead);
  finish_here += ahead.cost(loads_[d].node);
  finish_there += ahead.cost(loads_[v].node);
}

// ---- the window plan ------------------------------------------------------------------------

// While the plan keeps every task on one device, that is where a task not ready yet will run:
// the core copies its inputs there as its predecessors finish. (Spreading, where a task runs is
// decided when it is ready: copies made ahead on an older plan's word cost more than they save.)
DeviceId Peft::expected_device(TaskRef /*t*/) const noexcept {
  const uint64_t verdict = verdict_.load(std::memory_order_acquire);
  if (!verdict_fresh(verdict) || (verdict & 0xffff) == 0) return kAnyDevice;
  return static_cast<DeviceId>((verdict & 0xffff) - 1);
}

// (The plan minimises time: the energy objectives decide task by task.)
Choice Peft::planned(TaskRef t, const KernelPairs& pairs, double now,
                     const std::bitset<kMaxDevices>& capable) {
  return objective_.by_time() ? follow_plan(t, pairs, now, capable) : Choice{};
}

// The plan's verdict for `t`: the one device every task goes to while spreading is predicted not
// to pay, or none (spread: each task where it finishes first). Planned again when `t` waits for
// tasks after it and the graph has grown by a quarter since the last plan (or never was).
Choice Peft::follow_plan(TaskRef t, const KernelPairs& pairs, double now,
                         const std::bitset<kMaxDevices>& capable) {
  if (!verdict_fresh() && t.successors(nullptr, nullptr, 0) > 0) plan(t);
  const uint64_t verdict = verdict_.load(std::memory_order_acquire);
  if (!verdict_fresh(verdict)) return {};
  const int d = static_cast<int>(verdict & 0xffff) - 1;  // -1: spread
  if (d < 0) {
    // Spreading: the device the plan gave this task, unless placing it by its own finish now
    // does clearly better (the plan's predictions have drifted from what happened).
    DeviceId p = kAnyDevice;
    {
      std::lock_guard<std::mutex> lock(planned_mutex_);
      if (auto it = planned_.find(t.node()); it != planned_.end()) {
        p = it->second;
        planned_.erase(it);
      }
    }
    if (p == kAnyDevice || p >= ctx_->device_count() || !capable[p]) return {};
    return choose_preferring(t, pairs, now, /*estimates=*/true, &capable, p);
  }
  if (static_cast<DeviceId>(d) >= ctx_->device_count() || !capable[d]) return {};
  uint64_t can[2];
  words_of(capable, can);
  ColdStart::ArchCosts costs;
  cold_.costs(t, pairs, can, /*estimates=*/true, costs);
  const double exec = ColdStart::exec_on(pairs, costs, static_cast<DeviceId>(d));
  if (exec < 0) return {};
  return {static_cast<DeviceId>(d), exec,
          arrival(t, static_cast<DeviceId>(d), now, /*book=*/false) - now};
}

// Whether the plan's verdict is current: made, and the graph has grown by less than a quarter of
// its window since.
bool Peft::verdict_fresh(uint64_t v) const {
  const uint32_t submitted = static_cast<uint32_t>(ctx_->submitted());
  return v != 0 && submitted - static_cast<uint32_t>(v >> 32) <= 8 + ((v >> 16) & 0xffff) / 4 &&
         plan_epoch_.load(std::memory_order_relaxed) ==
             model_epoch_.load(std::memory_order_relaxed);
}

// Plans the window: every task queued (on a device, or parked), the roots, and the tasks after
// them, at most kWindowTasks, against the work the devices run now and the links' booked copies.
// Devices take no task meanwhile (pop waits at the gate), so no task of the window starts and the
// walk reads only tasks that wait. One thread plans at a time; another finds the plan busy and
// decides alone. False when no plan was made. `roots`: tasks being placed (part of the window),
// or, `completing`, tasks completing (their successors are).
bool Peft::plan(std::span<const TaskRef> roots, bool completing) {
  std::unique_lock<std::shared_mutex> gate(gate_, std::try_to_lock);
  if (!gate.owns_lock()) return false;
  const double now = ctx_->now();
  const DeviceId count = ctx_->device_count();
  WindowInput window(kWindowTasks);
  for (TaskRef t : roots) {
    if (completing) window.add_successors(t);  // they are alive: they wait for it
    else window.add(t, -1);
  }
  for (DeviceId d = 0; d < count; ++d) queue(d).for_each([&](TaskRef q) { window.add(q, d); });
  unknown_.for_each([&](TaskRef q) { window.add(q, -1); });
  // What runs now: its results will be where it runs, its successors are in the window. A
  // running task stays alive while the lock is held (completed() takes it first).
  std::unique_lock<std::mutex> running(running_mutex_);
  for (const Running& r : running_) {
    const double ready = static_cast<double>(exec_ns(r.task.policy_data())) * 1e-9 / 2;
    window.add_running(r.task, loads_[r.device].node, ready);
  }
  window.close();
  PlanInput in;
  in.links = &links_;
  in.direct = [this](uint32_t a, uint32_t b) { return ctx_->direct_copy(a, b); };
  in.devices.resize(count);
  for (DeviceId d = 0; d < count; ++d) {  // the work started there (queued work is planned)
    const DeviceLoad& h = loads_[d];
    const int64_t started = ahead_ns(d, INT_MAX);
    in.devices[d] = {h.node, h.slots,
                     static_cast<double>(std::max<int64_t>(0, started)) * 1e-9 / h.slots};
  }
  const uint32_t nodes = copies_.nodes();
  in.link_in.resize(nodes);
  in.link_out.resize(nodes);
  for (uint32_t n = 0; n < nodes; ++n) {
    in.link_in[n] = copies_.inbound(n)->free_at(INT_MIN, now) - now;
    in.link_out[n] = copies_.outbound(n)->free_at(INT_MIN, now) - now;
  }
  window.fill(in, *ctx_, [&](TaskRef w, std::vector<double>& exec) {
    std::bitset<kMaxDevices> can;
    ctx_->capable(w, count, can);
    uint64_t can_words[2];
    words_of(can, can_words);
    const KernelPairs& pairs = kernels_.of(w);
    ColdStart::ArchCosts costs;
    cold_.costs(w, pairs, can_words, /*estimates=*/false, costs);
    exec.resize(count);
    for (DeviceId d = 0; d < count; ++d)
      exec[d] = can[d] ? ColdStart::exec_on(pairs, costs, d) : -1;
  });
  running.unlock();
  plan_epoch_.store(model_epoch_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  const Plan best = best_plan(in, kSpreadGain);
  const uint64_t single = best.rule == Plan::Rule::single ? best.single + 1 : 0;
  const std::vector<TaskRef>& tasks = window.tasks();
  {
    std::lock_guard<std::mutex> lock(planned_mutex_);
    planned_.clear();
    if (single == 0)
      for (size_t i = 0; i < tasks.size(); ++i)
        if (window.fixed()[i] < 0 && best.device[i] >= 0)
          planned_[tasks[i].node()] = static_cast<DeviceId>(best.device[i]);
  }
  const uint64_t made = static_cast<uint32_t>(ctx_->submitted());
  verdict_.store((made << 32) | (std::min<uint64_t>(tasks.size(), 0xffff) << 16) | single,
                 std::memory_order_release);
  return true;
}

// Ready together (Runtime::resume): ranked first, so that the core pushes them highest first,
// and planned as one window, so that the first of them placed is not placed on a plan of its own
// descendants alone.
void Peft::ready_together(std::span<const TaskRef> tasks) {
  for (TaskRef t : tasks) priorities_.assign(t);
  if (objective_.by_time()) plan(tasks, /*completing=*/false);
}

namespace {
const bool registered = [] {
  register_policy("peft", [](const Config& c) { return std::make_unique<Peft>(c); });
  return true;
}();
}  // namespace

}  // namespace hcr::sched
