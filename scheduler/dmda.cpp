// The earliest-finish policies. dmda ("deque model data aware", as StarPU calls it): each ready
// task goes to the device where it is predicted to finish first — the device's predicted ready
// time, or the arrival of the task's inputs there if later (copies start at once: the runtime
// prefetches), plus the learned execution time. The online form of HEFT. dmdas keeps each device's
// queue sorted by priority.
//
// peft (the default on machines of several architectures) predicts what dmda gets wrong where data
// movement matters: each copy from where a valid replica is, over every link it crosses (device ->
// host, host -> device, through host memory between devices of different plugins), each link
// direction busy until the copies booked on it are through; a look ahead at the consumers already
// submitted (PEFT's optimistic cost table, one level deep: what reading this task's outputs costs
// them if it runs here); upward ranks as priorities where the application gives none (HEFT's
// order); and a cold start that predicts an unmeasured (kernel, architecture) from the speed ratio
// of the architectures learned on other kernels, exploring only one task per architecture until
// that ratio is known.
//
// Calibration (dmda, dmdas): while a (kernel, architecture) pair has fewer than calibrate_samples
// measurements, one task at a time is sent there on purpose, so that a slow device is measured but
// never fed a share of the work it cannot finish in time.
#include "cost_model.hpp"
#include "device_queue.hpp"
#include "energy_objective.hpp"
#include "horizons.hpp"
#include "kernel_pairs.hpp"
#include "peft/copy_plan.hpp"
#include "peft/upward_rank.hpp"
#include "peft/window_plan.hpp"
#include "placement.hpp"

#include <hcr/log.hpp>

#include <array>
#include <bitset>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace hcr::sched {

namespace {

// How a device's queue runs its tasks. dmdas and peft: by priority. dmda: as StarPU's dmda, first
// in first out except that a task of priority > 0 goes ahead of those of lower priority (an
// application that marks its critical path with positive priorities gets it first under either
// policy); dmda's predictions ignore that order, dmdas's and peft's follow it.
DeviceQueue::Order queue_order(bool by_priority) {
  return by_priority ? DeviceQueue::Order::priority : DeviceQueue::Order::positive;
}

enum class Rule : uint8_t { dmda, dmdas, peft };

// peft: consumers of a task's outputs looked at.
constexpr size_t kConsumers = 8;
// peft: tasks a window plan covers at most.
constexpr size_t kWindowTasks = 2048;
// How much sooner a plan that spreads the window must be predicted to finish than the best single
// device before it is followed. A spread plan runs later than predicted (copies and orders it does
// not model), so a smaller predicted gain is no gain. It was 10% while spread plans ran 10-25% over
// their prediction in dag_bench; since copies waiting in a lane move up for urgent readers, a task
// waiting for copies no longer holds its device, and graphs are submitted whole (Runtime::pause),
// pinned HEFT schedules replay within 0.98-1.19 of offline, and 5% gave dag_bench's warm worst
// over the best single device 1.05 against 1.07-1.08 (median over the reference alike).
constexpr double kSpreadGain = 0.05;
// peft: queued tasks a device looks at for one whose inputs are there already.
constexpr size_t kReadyWindow = 4;
// Automatic priorities: a user priority u ranks as u * kLevels + the rank's level, so that any
// priority the application gives wins over every rank.
constexpr int kLevels = 4096;

class Dmda final : public Policy {
 public:
  Dmda(const Config& c, Rule rule)
      : rule_(rule),
        by_priority_(rule != Rule::dmda),
        peft_(rule == Rule::peft),
        unknown_(queue_order(by_priority_)),
        calibrate_(c.calibrate == "off" ? kOff : c.calibrate == "force" ? kForce : kAuto),
        min_samples_(static_cast<uint32_t>(std::max(1, c.calibrate_samples))),
        dir_(model_directory(c)),
        objective_(c, model_, loads_.get()),
        ranks_([this](TaskRef t) { return mean_cost(t); },
               [this](uint64_t bytes) { return mean_copy(bytes); }) {}

  ~Dmda() override { save(); }

  std::string_view name() const noexcept override {
    return rule_ == Rule::dmda ? "dmda" : rule_ == Rule::dmdas ? "dmdas" : "peft";
  }
  bool wants_timing() const noexcept override { return true; }

  void attach(Context& ctx) override {
    ctx_ = &ctx;
    objective_.attach(ctx);
    if (!peft_ && !objective_.by_time())
      log::write(LogLevel::warn, "scheduler.objective: " + std::string(name()) +
                                     " minimises time only (the energy objectives are peft's)");
    const auto& devices = ctx.devices();
    devs_.clear();
    devs_.reserve(kMaxDevices);  // indexed without a lock while devices join: never moves
    uint32_t nodes = 1;
    for (const Device& d : devices) {
      devs_.push_back(make_dev(d));
      nodes = std::max(nodes, d.memory_node + 1);
    }
    // Room for memory nodes that join later (hot-plug); beyond it copies are predicted at the
    // fallback bandwidth.
    node_capacity_ = nodes + kSpareNodes;
    links_.resize(node_capacity_);
    link_free_at_ = std::make_unique<std::atomic<double>[]>(node_capacity_);
    copies_.resize(node_capacity_);
    node_names_.assign(nodes, "host");
    for (const Device& d : devices) add_node(d);
    load();
    refresh_mean_copy();
  }

  void device_added(DeviceId id) override {
    const Device& d = ctx_->device(id);
    devs_.push_back(make_dev(d));  // (its pairs join every kernel's: KernelTable::add_device)
    {
      std::lock_guard<std::mutex> lock(save_mutex_);
      if (d.memory_node >= node_names_.size()) node_names_.resize(d.memory_node + 1, "host");
      add_node(d);
    }
    refresh_mean_copy();
  }

  DeviceId push(TaskRef t) override {
    if (peft_) assign_priority(t);
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

    if (calibrate_ != kOff) {  // a pair not measured enough, with no calibration task out?
      uint32_t fewest = UINT32_MAX;
      double fastest = -1;  // peft: of those, the device its plugin says is fastest
      for (DeviceId d = 0; d < count; ++d) {
        if (!capable[d]) continue;
        CostModel::Pair& p = *pairs[d];
        uint32_t n = model_.samples(p);
        if (calibrate_ == kForce) {  // every footprint, not just the pair
          Prediction pr = model_.predict(p, fp, size);
          n = pr.source == Prediction::Source::history ? pr.samples : 0;
        }
        if (probe(pairs, d, n) == Probe::none || p.exploring.load(std::memory_order_relaxed) != 0)
          continue;
        const double peak = peft_ ? ctx_->device(d).peak_gflops : 0;
        if (n < fewest || (n == fewest && peak > fastest)) {
          fewest = n;
          fastest = peak;
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
      best_xfer = peft_ ? std::max(0.0, arrival(t, best, now, /*book=*/false) - now)
                        : copy_in(t, best);
    } else {
      // (The plan minimises time: the energy objectives decide task by task.)
      Choice c = peft_ && objective_.by_time() ? follow_plan(t, pairs, now, capable)
                                                        : Choice{};
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

  double predicted(TaskRef t) const noexcept override {
    const uint64_t w = t.policy_data();
    if ((w & kExploreBit) || exec_ns(w) == 0) return -1;  // calibration runs predict nothing
    return static_cast<double>(exec_ns(w)) * 1e-9;
  }

  TaskRef pop(DeviceId d) override {
    if (!peft_) return take(d);
    // peft: no task leaves a queue while the window is planned (a plan takes microseconds, and
    // only when the graph has grown); a task that does is running until completed() (the plan
    // starts from what runs, too).
    std::shared_lock<std::shared_mutex> gate(gate_);
    TaskRef t = take(d);
    if (t) {
      std::lock_guard<std::mutex> lock(running_mutex_);
      running_.push_back({t, d});
    }
    return t;
  }

  TaskRef take(DeviceId d) {
    // peft: of the first tasks in the queue (the most urgent), the first whose inputs are all in
    // d's memory already, so that a slot does not wait for copies while a task behind could run
    // (StarPU's dmdar); else the first.
    if (TaskRef t = peft_ ? devs_[d]->queue.pop_first(kReadyWindow, [&](TaskRef u) {
                              return u.can_run(d) && inputs_here(u, loads_[d].node);
                            })
                          : TaskRef()) {
      dequeued(t, d);
      return t;
    }
    if (TaskRef t = devs_[d]->queue.pop_front(d)) {
      dequeued(t, d);
      return t;
    }
    if (unknown_.size() > 0) {
      // A task parked before its costs were known. d takes it to calibrate itself (one at a
      // time, until it has its samples), or when the model now sends it to d; with calibration
      // off and nothing known anywhere, first come first served.
      const double now = ctx_->now();
      uint64_t explored = 0;
      // Devices the model sends a parked task to that sit idle: nothing else would ask them.
      std::array<DeviceId, 16> idle_choices;
      size_t n_idle = 0;
      TaskRef t = unknown_.pop_first(16, [&](TaskRef u) {
        if (!u.can_run(d)) return false;
        const auto& pairs = kernels_.of(u);
        CostModel::Pair& p = *pairs[d];
        if (calibrate_ != kOff && probe(pairs, d, model_.samples(p)) != Probe::none) {
          explored = try_explore(pairs, d, model_.samples(p));
          return explored != 0;
        }
        Choice c = choose(u, pairs, now, /*estimates=*/false);
        if (c.device != d && c.device != kAnyDevice && n_idle < idle_choices.size() &&
            ctx_->in_flight(c.device) < loads_[c.device].slots)
          idle_choices[n_idle++] = c.device;
        // Nothing predicts it anywhere, no exploration of d is allowed and none of the kernel is
        // under way (peft explores by kernel or architecture, not by pair): run it here rather
        // than wait for a measurement nothing is making.
        return c.device == d ||
               (c.device == kAnyDevice && (calibrate_ == kOff || (peft_ && !exploring(pairs))));
      });
      for (size_t i = 0; i < n_idle; ++i) ctx_->wake(idle_choices[i]);
      if (t) {
        t.set_policy_data(explored);
        account(t, d);
        return t;
      }
    }
    return steal(d);
  }

  // Whether a (kernel, architecture) pair with `samples` measurements on device d is explored on
  // purpose, and which slot the exploration needs besides the pair's own. dmda, dmdas: until it
  // has calibrate_samples. peft, for its first sample only: a kernel measured nowhere is explored
  // on one device at a time (the kernel's slot); a kernel measured elsewhere, only while d's
  // architecture has no speed ratio to another learned (then an unmeasured pair is predicted
  // from it), one task at a time per architecture. A cold start so explores about one task per
  // kernel and one per architecture, not one per (kernel, architecture).
  Probe probe(const KernelPairs& kp, DeviceId d, uint32_t samples) const {
    if (!peft_ || calibrate_ == kForce) return samples < min_samples_ ? Probe::pair : Probe::none;
    if (samples != 0) return Probe::none;
    const uint8_t arch = devs_[d]->arch_index;
    bool elsewhere = false;
    for (uint32_t s = 0, n = kp.count.load(std::memory_order_acquire); s < n && !elsewhere; ++s)
      elsewhere = kp.archs[s].pair != kp[d] && model_.samples(*kp.archs[s].pair) > 0;
    if (!elsewhere)
      return kp.probing.load(std::memory_order_relaxed) == 0 ? Probe::kernel : Probe::none;
    if (arch >= kArchs || ratio_learned(arch) ||
        arch_probing_[arch].load(std::memory_order_relaxed) != 0)
      return Probe::none;
    // Where this device and a measured one declare peak speeds, their ratio predicts it until a
    // ratio is learned (arch_costs): no task need be sent to find out.
    if (ctx_->device(d).peak_gflops > 0)
      for (uint32_t s = 0, n = kp.count.load(std::memory_order_acquire); s < n; ++s)
        if (model_.samples(*kp.archs[s].pair) > 0 && ctx_->device(kp.archs[s].device).peak_gflops > 0)
          return Probe::none;
    return Probe::arch;
  }
  // Takes the slots of an exploration of device d (pair, and kernel or architecture): the policy
  // word's exploration bits, 0 when another thread took one first.
  uint64_t try_explore(const KernelPairs& kp, DeviceId d, uint32_t samples) {
    const Probe what = probe(kp, d, samples);
    if (what == Probe::none) return 0;
    uint32_t expected = 0;
    if (!kp[d]->exploring.compare_exchange_strong(expected, 1)) return 0;
    std::atomic<uint32_t>* slot = what == Probe::kernel ? &kp.probing
                                  : what == Probe::arch ? &arch_probing_[devs_[d]->arch_index]
                                                        : nullptr;
    if (slot != nullptr && !slot->compare_exchange_strong(expected = 0, 1)) {
      kp[d]->exploring.fetch_sub(1, std::memory_order_relaxed);
      return 0;
    }
    return kExploreBit | (what == Probe::kernel ? kKernelProbeBit : 0) |
           (what == Probe::arch ? kArchProbeBit : 0);
  }
  // Whether an exploration of the kernel is under way on any device.
  static bool exploring(const KernelPairs& kp) {
    if (kp.probing.load(std::memory_order_relaxed) != 0) return true;
    for (uint32_t s = 0, n = kp.count.load(std::memory_order_acquire); s < n; ++s)
      if (kp.archs[s].pair->exploring.load(std::memory_order_relaxed) != 0) return true;
    return false;
  }
  // An exploration of d ended (its task completed, or left d's queue): its slots are free.
  void end_explore(TaskRef t, DeviceId d, uint64_t word) {
    if (!(word & kExploreBit)) return;
    const KernelPairs& kp = kernels_.of(t);
    kp[d]->exploring.fetch_sub(1, std::memory_order_relaxed);
    if (word & kKernelProbeBit) kp.probing.store(0, std::memory_order_relaxed);
    if ((word & kArchProbeBit) && devs_[d]->arch_index < kArchs)
      arch_probing_[devs_[d]->arch_index].store(0, std::memory_order_relaxed);
  }

  // Predicted seconds to copy `t`'s missing inputs into d's memory (dmda's rule: all from host
  // memory over d's inbound link).
  double copy_in(TaskRef t, DeviceId d) {
    uint64_t bytes = ctx_->bytes_to_fetch(t, d);
    return bytes ? links_.predict(0, loads_[d].node, bytes) : 0;
  }
  // Adds a placed task's predicted work to its device, and its copies to the links: the runtime
  // prefetches at once, so a link is busy from now until they are through (time frees it;
  // nothing needs to be taken back).
  // `queued`: the task waits in d's queue (rather than starting at once), where dmdas orders it.
  void charge(TaskRef t, DeviceId d, bool queued = true) {
    DeviceLoad& dev = loads_[d];
    dev.pending_ns.fetch_add(exec_ns(t.policy_data()), std::memory_order_relaxed);
    if (by_priority_ && queued) devs_[d]->queued.add(t.priority(), exec_ns(t.policy_data()));
    if (peft_) {
      if (xfer_ns(t.policy_data()) > 0) arrival(t, d, ctx_->now(), /*book=*/true);
      return;
    }
    if (dev.node != 0 && xfer_ns(t.policy_data()) > 0 && dev.node < node_capacity_) {
      const double now = ctx_->now();
      const double x = static_cast<double>(xfer_ns(t.policy_data())) * 1e-9;
      if (by_priority_) {
        copies_.inbound(dev.node)->book(t.priority(), now, now, x);
      } else {
        std::atomic<double>& free_at = link_free_at_[dev.node];
        free_at.store(std::max(now, free_at.load(std::memory_order_relaxed)) + x,
                      std::memory_order_relaxed);
      }
    }
  }
  // When the copies queued on a node's inbound link that a task of priority `prio` waits behind
  // are through: all of them (dmda), or those of tasks of at least its priority (dmdas: the data
  // manager hands each engine the most urgent copy first).
  double link_free(uint32_t node, int prio, double now) const {
    if (node >= node_capacity_) return now;
    if (by_priority_) return copies_.inbound(node)->free_at(prio, now);
    return std::max(now, link_free_at_[node].load(std::memory_order_relaxed));
  }
  void discharge(TaskRef t, DeviceId d) {
    loads_[d].pending_ns.fetch_sub(exec_ns(t.policy_data()), std::memory_order_relaxed);
  }
  // A task charged as queued left d's queue (to run, to another device, or back to the core).
  void dequeued(TaskRef t, DeviceId d) {
    if (by_priority_) devs_[d]->queued.add(t.priority(), -exec_ns(t.policy_data()));
  }
  // Predicted work ahead of a task of priority `prio` on d: everything started, and (dmdas, whose
  // queues run by priority) only the queued tasks it would not overtake.
  int64_t ahead_ns(DeviceId d, int prio) const {
    const DeviceLoad& h = loads_[d];
    int64_t pending = h.pending_ns.load(std::memory_order_relaxed);
    if (!by_priority_ || prio <= h.lowest_queued.load(std::memory_order_acquire)) return pending;
    return std::max<int64_t>(0, pending - devs_[d]->queued.below(prio));
  }

  Choice choose(TaskRef t, const KernelPairs& pairs, double now,
                bool estimates, const std::bitset<kMaxDevices>* capable = nullptr) {
    return peft_ ? choose_peft(t, pairs, now, estimates, capable)
                 : choose_dmda(t, pairs, now, estimates, capable);
  }

  // The device where `t` is predicted to finish first: max(ready, inputs arrive) + execution.
  // Devices with no prediction are left out; none predicted at all gives kAnyDevice.
  // `capable`: which devices can run it, when the caller asked already.
  Choice choose_dmda(TaskRef t, const KernelPairs& pairs, double now,
                     bool estimates, const std::bitset<kMaxDevices>* capable) {
    const uint64_t fp = t.footprint();
    const double size = t.size();
    const int prio = by_priority_ ? t.priority() : 0;
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

  // ---- peft ---------------------------------------------------------------------------------

  // Where each input of a task is (Context::locate), read once per decision; inputs beyond
  // CopyPlanner::kInputs add their bytes to `extra`.
  size_t read_inputs(TaskRef t, InputSite* out, uint64_t& extra) const {
    size_t n = 0;
    extra = 0;
    const size_t args = t.arg_count();
    for (size_t i = 0; i < args; ++i) {
      const TaskArg a = t.arg(i);
      if (!reads(a.access)) continue;
      bool again = false;  // a buffer named twice is read once
      for (size_t k = 0; k < i && !again; ++k) again = t.arg(k).buffer == a.buffer;
      if (again) continue;
      if (n == CopyPlanner::kInputs) {
        extra += a.bytes;
        continue;
      }
      InputSite& in = out[n++];
      in.bytes = a.bytes;
      uint64_t arriving[2];
      ctx_->locate(a.buffer, in.valid, arriving);
      in.at[0] = in.valid[0] | arriving[0];
      in.at[1] = in.valid[1] | arriving[1];
    }
    return n;
  }

  // Whether every input of `t` has a valid replica in memory node `node`.
  bool inputs_here(TaskRef t, uint32_t node) const {
    for (size_t i = 0, n = t.arg_count(); i < n; ++i) {
      const TaskArg a = t.arg(i);
      if (!reads(a.access)) continue;
      uint64_t valid[2], arriving[2];
      ctx_->locate(a.buffer, valid, arriving);
      if (!on_node(valid, node)) return false;
    }
    return true;
  }

  // When `t`'s inputs would all be in d's memory (CopyPlanner); `book`: t was placed on d.
  double arrival(TaskRef t, DeviceId d, double now, bool book) {
    InputSite ins[CopyPlanner::kInputs];
    uint64_t extra = 0;
    const size_t n = read_inputs(t, ins, extra);
    return arrival(t, d, ins, n, extra, now, book);
  }
  double arrival(TaskRef t, DeviceId d, const InputSite* ins, size_t n, uint64_t extra,
                 double now, bool book) {
    return copies_.arrival(ins, n, extra, loads_[d].node, t.priority(), now, book,
                           [this](uint32_t a, uint32_t b) { return ctx_->direct_copy(a, b); });
  }

  // The predicted execution of one (kernel, architecture) pair for a task: measured (history or
  // the fit over sizes); else derived from another architecture's measurement through the speed
  // ratio learned between the two; else the plugin's estimate (`estimates`); else unknown (< 0).
  // One entry per slot of the kernel's pairs; slots with no device in `devices` are unknown.
  struct ArchCost {
    double exec = -1;
    bool measured = false;
  };
  using ArchCosts = std::array<ArchCost, KernelPairs::kSlots>;
  void arch_costs(TaskRef t, const KernelPairs& kp, const uint64_t devices[2], bool estimates,
                  ArchCosts& out) {
    const uint64_t fp = t.footprint();
    const double size = t.size();
    const uint32_t n = kp.count.load(std::memory_order_acquire);
    // Every architecture's measurement (a basis for the others'), then the ones asked for.
    uint32_t asked = 0;
    for (uint32_t s = 0; s < n; ++s) {
      const KernelPairs::Arch& a = kp.archs[s];
      Prediction pr = model_.predict(*a.pair, fp, size);
      out[s] = pr.known() ? ArchCost{pr.seconds, true} : ArchCost{};
      if (((a.devices[0].load(std::memory_order_relaxed) & devices[0]) |
           (a.devices[1].load(std::memory_order_relaxed) & devices[1])) != 0)
        asked |= 1u << s;
    }
    for (uint32_t s = 0; s < n; ++s) {
      ArchCost& c = out[s];
      if (c.measured || !(asked & (1u << s))) continue;
      const KernelPairs::Arch& a = kp.archs[s];
      // The measured architecture with the most reliable ratio to this one.
      uint32_t best_n = 0;
      for (uint32_t o = 0; o < n; ++o) {
        if (!out[o].measured) continue;
        const Ratio& r = ratio(a.arch, kp.archs[o].arch);
        const uint32_t rn = r.n.load(std::memory_order_relaxed);
        if (rn > best_n) {
          best_n = rn;
          c.exec = out[o].exec * std::exp(r.log.load(std::memory_order_relaxed));
        }
      }
      if (best_n != 0) continue;
      // No ratio learned yet: the plugins' peak speeds stand for it (where both declare one).
      const double peak = ctx_->device(a.device).peak_gflops;
      for (uint32_t o = 0; o < n && best_n == 0 && peak > 0; ++o) {
        const double other = out[o].measured ? ctx_->device(kp.archs[o].device).peak_gflops : 0;
        if (other > 0) {
          c.exec = out[o].exec * other / peak;
          best_n = 1;
        }
      }
      if (best_n == 0 && estimates) c.exec = ctx_->plugin_estimate(t, a.device);
    }
    for (uint32_t s = 0; s < n; ++s)
      if (!(asked & (1u << s))) out[s] = {};
  }
  // The entry of device d (unknown for a device whose architecture is not listed).
  static double exec_on(const KernelPairs& kp, const ArchCosts& costs, DeviceId d) {
    const uint8_t s = kp.slot[d];
    return s < KernelPairs::kSlots ? costs[s].exec : -1;
  }

  // `prefer`: a device the window plan chose; taken unless the best finishes sooner by more than
  // kPlanSlack of the time from now to the preferred device's finish.
  static constexpr double kPlanSlack = 0.25;
  Choice choose_peft(TaskRef t, const KernelPairs& pairs, double now,
                     bool estimates, const std::bitset<kMaxDevices>* capable,
                     DeviceId prefer = kAnyDevice) {
    // A task that neither waited for others nor is waited on (yet) is predicted behind all the
    // work queued on a device, not only the work it outranks: independent tasks outranking each
    // other by cost alone would each see the devices emptier than they will be, and a burst of them
    // sends misfits there (sched_bench's affinity bag: 1.46x HEFT, 0.94x under dmda's FIFO view).
    const int prio =
        !t.waited() && t.successors(nullptr, nullptr, 0) == 0 ? INT_MIN : t.priority();
    const DeviceId count = ctx_->device_count();
    std::bitset<kMaxDevices> asked;
    if (capable == nullptr) {
      ctx_->capable(t, count, asked);
      capable = &asked;
    }
    uint64_t can[2];
    words_of(*capable, can);
    ArchCosts costs;
    arch_costs(t, pairs, can, estimates, costs);
    InputSite ins[CopyPlanner::kInputs];
    uint64_t extra = 0;
    const size_t n_in = read_inputs(t, ins, extra);
    Lookahead ahead;
    lookahead(t, ahead);

    Choice best, preferred;
    double best_score = INFINITY, preferred_score = INFINITY;
    // The energy objectives weigh each device's finish against the task's predicted joules.
    std::array<EnergyObjective::Option, kMaxDevices> options;
    size_t n_options = 0;
    const bool by_time = objective_.by_time();
    for (DeviceId d = 0; d < count; ++d) {
      if (!(*capable)[d]) continue;
      const double exec = exec_on(pairs, costs, d);
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

  // PEFT's optimistic cost table, one level deep, per memory node: if `t` runs in node n's memory,
  // the least each consumer of its outputs (submitted so far) needs to run after it — its
  // predicted execution on the best device, plus copying what it reads from `t` there when that
  // is another memory — the largest over the consumers. Copies are predicted without queueing
  // (an optimistic table), through host memory between two device memories.
  struct Lookahead {
    bool any = false;
    std::array<float, kNodeSlots> by_node{};
    double cost(uint32_t node) const { return any && node < by_node.size() ? by_node[node] : 0.0; }
  };
  void lookahead(TaskRef t, Lookahead& out) {
    TaskRef succ[kConsumers];
    bool data[kConsumers];
    const size_t n = std::min(t.successors(succ, data, kConsumers), kConsumers);
    if (n == 0) return;
    const DeviceId count = ctx_->device_count();
    const uint32_t nodes = std::min<uint32_t>(node_capacity_, static_cast<uint32_t>(out.by_node.size()));
    for (size_t i = 0; i < n; ++i) {
      if (!data[i]) continue;
      const TaskRef s = succ[i];
      const uint64_t bytes = passed_bytes(t, s);
      std::bitset<kMaxDevices> can;
      ctx_->capable(s, count, can);
      uint64_t can_words[2];
      words_of(can, can_words);
      ArchCosts costs;
      const KernelPairs& pairs = kernels_.of(s);
      arch_costs(s, pairs, can_words, /*estimates=*/false, costs);
      // The consumer's best execution in each memory, then with the copy there from `t`.
      std::array<float, kNodeSlots> here;
      here.fill(INFINITY);
      bool known = false;
      for (DeviceId d = 0; d < count; ++d) {
        if (!can[d]) continue;
        const double exec = exec_on(pairs, costs, d);
        if (exec < 0 || loads_[d].node >= nodes) continue;
        here[loads_[d].node] = std::min(here[loads_[d].node], static_cast<float>(exec));
        known = true;
      }
      if (!known) continue;
      // Copying from memory a to memory b (a != b): out of a (unless host) + into b (unless
      // host). The two cheapest (execution + copy in) over all memories, for "anywhere else".
      double v1 = INFINITY, v2 = INFINITY;
      uint32_t m1 = UINT32_MAX;
      for (uint32_t m = 0; m < nodes; ++m) {
        if (!std::isfinite(here[m])) continue;
        const double v = here[m] + (m == 0 ? 0 : links_.predict(0, m, bytes));
        if (v < v1) {
          v2 = v1;
          v1 = v;
          m1 = m;
        } else if (v < v2) {
          v2 = v;
        }
      }
      for (uint32_t m = 0; m < nodes; ++m) {
        const double away = (m == 0 ? 0 : links_.predict(m, 0, bytes)) + (m1 == m ? v2 : v1);
        const double oct = std::min(static_cast<double>(here[m]), away);
        if (std::isfinite(oct)) out.by_node[m] = std::max(out.by_node[m], static_cast<float>(oct));
      }
      out.any = true;
    }
  }
  // Bytes of what `from` writes that `to` reads.
  static uint64_t passed_bytes(TaskRef from, TaskRef to) {
    uint64_t bytes = 0;
    for (size_t i = 0, nf = from.arg_count(); i < nf; ++i) {
      const TaskArg a = from.arg(i);
      if (!writes(a.access)) continue;
      for (size_t j = 0, nt = to.arg_count(); j < nt; ++j) {
        const TaskArg b = to.arg(j);
        if (b.buffer == a.buffer && reads(b.access)) {
          bytes += a.bytes;
          break;
        }
      }
    }
    return bytes;
  }

  // ---- the window plan (peft) -----------------------------------------------------------------

  // While the plan keeps every task on one device, that is where a task not ready yet will run:
  // the core copies its inputs there as its predecessors finish. (Spreading, where a task runs is
  // decided when it is ready: copies made ahead on an older plan's word cost more than they
  // save.)
  DeviceId expected_device(TaskRef /*t*/) const noexcept override {
    if (!peft_) return kAnyDevice;
    const uint64_t verdict = verdict_.load(std::memory_order_acquire);
    if (!verdict_fresh(verdict) || (verdict & 0xffff) == 0) return kAnyDevice;
    return static_cast<DeviceId>((verdict & 0xffff) - 1);
  }

  // The plan's verdict for `t`: the one device every task goes to while spreading is predicted not
  // to pay, or none (spread: each task where it finishes first). Planned again when `t` waits for
  // tasks after it and the graph has grown by a quarter since the last plan (or never was).
  Choice follow_plan(TaskRef t, const KernelPairs& pairs, double now,
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
      return choose_peft(t, pairs, now, /*estimates=*/true, &capable, p);
    }
    if (static_cast<DeviceId>(d) >= ctx_->device_count() || !capable[d]) return {};
    uint64_t can[2];
    words_of(capable, can);
    ArchCosts costs;
    arch_costs(t, pairs, can, /*estimates=*/true, costs);
    const double exec = exec_on(pairs, costs, static_cast<DeviceId>(d));
    if (exec < 0) return {};
    return {static_cast<DeviceId>(d), exec,
            arrival(t, static_cast<DeviceId>(d), now, /*book=*/false) - now};
  }

  // Whether the plan's verdict is current: made, and the graph has grown by less than a quarter
  // of its window since.
  bool verdict_fresh(uint64_t v) const {
    const uint32_t submitted = static_cast<uint32_t>(ctx_->submitted());
    return v != 0 && submitted - static_cast<uint32_t>(v >> 32) <= 8 + ((v >> 16) & 0xffff) / 4 &&
           plan_epoch_.load(std::memory_order_relaxed) ==
               model_epoch_.load(std::memory_order_relaxed);
  }
  bool verdict_fresh() const { return verdict_fresh(verdict_.load(std::memory_order_acquire)); }

  // Plans the window: every task queued (on a device, or waiting for calibration), `t`, and the
  // tasks after them, at most kWindowTasks, against the work the devices run now and the links'
  // booked copies (PlanInput). Devices take no task meanwhile (pop waits at the gate), so no
  // task of the window starts and the walk reads only tasks that wait. One thread plans at a
  // time; another finds the plan busy and decides alone. False when no plan was made.
  // `t`: a task being placed (part of the window), or one completing (its successors are).
  bool plan(TaskRef t, bool completing = false) { return plan({&t, 1}, completing); }
  // The same from several tasks at once (ready together, or completing).
  bool plan(std::span<const TaskRef> roots, bool completing) {
    std::unique_lock<std::shared_mutex> gate(gate_, std::try_to_lock);
    if (!gate.owns_lock()) return false;
    const double now = ctx_->now();
    const DeviceId count = ctx_->device_count();
    std::vector<TaskRef> window;
    std::vector<int32_t> fixed;
    std::unordered_map<const void*, uint32_t> index;
    auto add = [&](TaskRef x, int32_t device) -> int64_t {
      auto [it, added] = index.emplace(x.node(), static_cast<uint32_t>(window.size()));
      if (!added) return it->second;
      if (window.size() >= kWindowTasks) {
        index.erase(it);
        return -1;
      }
      window.push_back(x);
      fixed.push_back(device);
      return it->second;
    };
    std::vector<TaskRef> found;
    for (TaskRef t : roots) {
      if (completing) {  // its successors are alive: they wait for it
        found.resize(t.successors(nullptr, nullptr, 0));
        std::unique_ptr<bool[]> data(new bool[found.size() + 1]);
        found.resize(std::min(found.size(), t.successors(found.data(), data.get(), found.size())));
        for (TaskRef x : found) add(x, -1);
      } else {
        add(t, -1);
      }
    }
    for (DeviceId d = 0; d < count; ++d) devs_[d]->queue.for_each([&](TaskRef q) { add(q, d); });
    unknown_.for_each([&](TaskRef q) { add(q, -1); });
    // What runs now: its results will be where it runs, its successors are in the window. A
    // running task stays alive while the lock is held (completed() takes it first).
    std::unique_lock<std::mutex> running(running_mutex_);
    struct Result {
      uint32_t node;
      double ready;
    };
    std::unordered_map<const void*, Result> results;
    for (const Running& r : running_) {
      const double ready = static_cast<double>(exec_ns(r.task.policy_data())) * 1e-9 / 2;
      for (size_t a = 0, na = r.task.arg_count(); a < na; ++a)
        if (const TaskArg arg = r.task.arg(a); writes(arg.access))
          results[arg.buffer] = {loads_[r.device].node, ready};
      const size_t n = r.task.successors(nullptr, nullptr, 0);
      found.resize(n);
      std::unique_ptr<bool[]> data(new bool[n + 1]);
      const size_t got = std::min(n, r.task.successors(found.data(), data.get(), n));
      for (size_t k = 0; k < got; ++k) add(found[k], -1);
    }
    std::vector<std::vector<uint32_t>> succ;
    for (size_t i = 0; i < window.size(); ++i) {
      succ.emplace_back();
      const size_t n = window[i].successors(nullptr, nullptr, 0);
      found.resize(n);
      std::unique_ptr<bool[]> data(new bool[n + 1]);
      const size_t got = std::min(n, window[i].successors(found.data(), data.get(), n));
      for (size_t k = 0; k < got; ++k)
        if (const int64_t j = add(found[k], -1); j >= 0) succ[i].push_back(static_cast<uint32_t>(j));
    }
    PlanInput in;
    in.links = &links_;
    in.direct = [this](uint32_t a, uint32_t b) { return ctx_->direct_copy(a, b); };
    in.devices.resize(count);
    for (DeviceId d = 0; d < count; ++d) {  // the work started there (queued work is planned)
      const DeviceLoad& h = loads_[d];
      const int64_t started = ahead_ns(d, INT_MAX);
      in.devices[d] = {h.node, h.slots, static_cast<double>(std::max<int64_t>(0, started)) * 1e-9 / h.slots};
    }
    const uint32_t nodes = copies_.nodes();
    in.link_in.resize(nodes);
    in.link_out.resize(nodes);
    for (uint32_t n = 0; n < nodes; ++n) {
      in.link_in[n] = copies_.inbound(n)->free_at(INT_MIN, now) - now;
      in.link_out[n] = copies_.outbound(n)->free_at(INT_MIN, now) - now;
    }
    std::unordered_map<const void*, uint32_t> buffers;
    in.tasks.resize(window.size());
    for (size_t i = 0; i < window.size(); ++i) {
      const TaskRef w = window[i];
      PlanTask& pt = in.tasks[i];
      pt.successors = std::move(succ[i]);
      pt.fixed = fixed[i];
      std::bitset<kMaxDevices> can;
      ctx_->capable(w, count, can);
      uint64_t can_words[2];
      words_of(can, can_words);
      const KernelPairs& pairs = kernels_.of(w);
      ArchCosts costs;
      arch_costs(w, pairs, can_words, /*estimates=*/false, costs);
      pt.exec.resize(count);
      for (DeviceId d = 0; d < count; ++d) pt.exec[d] = can[d] ? exec_on(pairs, costs, d) : -1;
      for (size_t a = 0, na = w.arg_count(); a < na; ++a) {
        const TaskArg arg = w.arg(a);
        auto [it, added] = buffers.emplace(arg.buffer, static_cast<uint32_t>(in.buffers.size()));
        if (added) {
          PlanBuffer& b = in.buffers.emplace_back();
          b.bytes = arg.bytes;
          uint64_t arriving[2];
          ctx_->locate(arg.buffer, b.valid, arriving);
          b.valid[0] |= arriving[0];
          b.valid[1] |= arriving[1];
          if (auto r = results.find(arg.buffer); r != results.end()) {
            b.written = true;
            b.writer_node = r->second.node;
            b.ready = r->second.ready;  // (halfway through, on average)
          }
        }
        auto use = std::find_if(pt.uses.begin(), pt.uses.end(),
                                [&](const PlanTask::Use& u) { return u.buffer == it->second; });
        if (use == pt.uses.end()) use = pt.uses.insert(pt.uses.end(), {it->second, false, false});
        use->reads |= reads(arg.access);
        use->writes |= writes(arg.access);
      }
    }
    running.unlock();
    plan_epoch_.store(model_epoch_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    const Plan best = best_plan(in, kSpreadGain);
    const uint64_t single = best.rule == Plan::Rule::single ? best.single + 1 : 0;
    {
      std::lock_guard<std::mutex> lock(planned_mutex_);
      planned_.clear();
      if (single == 0)
        for (size_t i = 0; i < window.size(); ++i)
          if (fixed[i] < 0 && best.device[i] >= 0)
            planned_[window[i].node()] = static_cast<DeviceId>(best.device[i]);
    }
    const uint64_t made = static_cast<uint32_t>(ctx_->submitted());
    verdict_.store((made << 32) |
                       (std::min<uint64_t>(window.size(), 0xffff) << 16) | single,
                   std::memory_order_release);
    return true;
  }

  // Ready together (Runtime::resume): ranked first, so that the core pushes them highest first,
  // and planned as one window, so that the first of them placed is not placed on a plan of its
  // own descendants alone.
  void ready_together(std::span<const TaskRef> tasks) override {
    if (!peft_) return;
    for (TaskRef t : tasks) assign_priority(t);
    if (objective_.by_time()) plan(tasks, /*completing=*/false);
  }

  // Automatic priority: the application's, then the task's upward rank.
  void assign_priority(TaskRef t) {
    const int user = std::clamp(t.user_priority(), INT_MIN / kLevels + 1, INT_MAX / kLevels - 1);
    const int level = UpwardRank::level(ranks_.rank(t, ctx_->submitted()));
    t.set_priority(user * kLevels + std::min(level, kLevels - 1));
  }
  // A task's mean predicted execution over the architectures of the devices (for ranks).
  double mean_cost(TaskRef t) {
    const KernelPairs& pairs = kernels_.of(t);
    const uint64_t all[2] = {~uint64_t{0}, ~uint64_t{0}};
    ArchCosts costs;
    arch_costs(t, pairs, all, /*estimates=*/false, costs);
    double sum = 0;
    size_t known = 0;
    for (size_t i = 0, n = pairs.count.load(std::memory_order_acquire); i < n; ++i)
      if (costs[i].exec >= 0) {
        sum += costs[i].exec;
        ++known;
      }
    return known ? sum / static_cast<double>(known) : 0;
  }
  // The mean cost of a copy between two memories (HEFT's average communication cost): over the
  // links of the device memories, into and out of host memory, kept up to date as copies are
  // measured.
  double mean_copy(uint64_t bytes) const {
    if (bytes == 0) return 0;
    return mean_latency_.load(std::memory_order_relaxed) +
           static_cast<double>(bytes) * mean_seconds_per_byte_.load(std::memory_order_relaxed);
  }
  void refresh_mean_copy() {
    double lat = 0, spb = 0;
    size_t n = 0;
    const uint32_t nodes = std::min<uint32_t>(node_capacity_, static_cast<uint32_t>(node_names_.size()));
    for (uint32_t m = 1; m < nodes; ++m) {
      const double big = 1e9;
      const double l = links_.predict(0, m, 1);
      lat += l;
      spb += (links_.predict(0, m, static_cast<uint64_t>(big)) - l) / big;
      ++n;
    }
    // With every device in host memory, copies cost nothing.
    mean_latency_.store(n ? lat / static_cast<double>(n) : 0, std::memory_order_relaxed);
    mean_seconds_per_byte_.store(n ? spb / static_cast<double>(n) : 0, std::memory_order_relaxed);
  }

  // ---- common -------------------------------------------------------------------------------

  // An idle device takes a task queued elsewhere when it is predicted to finish it before the
  // device it waits for would even start it: queues placed on old predictions (a device that
  // slowed down since) drain to where the work now goes faster.
  TaskRef steal(DeviceId d) {
    // peft: while the plan keeps the graph on one device, another device steals nothing from it:
    // each task it took would send its results back over the links the plan chose to spare.
    if (peft_) {
      const uint64_t verdict = verdict_.load(std::memory_order_acquire);
      if (verdict_fresh(verdict) && (verdict & 0xffff) != 0 &&
          static_cast<DeviceId>((verdict & 0xffff) - 1) != d)
        return {};
    }
    std::vector<std::pair<int64_t, DeviceId>> victims;
    for (DeviceId v = 0, n = ctx_->device_count(); v < n; ++v)
      if (v != d && devs_[v]->queue.size() > 0)
        victims.push_back({loads_[v].pending_ns.load(std::memory_order_relaxed) / loads_[v].slots, v});
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
      double copies = peft_ ? arrival(t, d, now, /*book=*/false) - now : copy_in(t, d);
      double finish_here = (here.known() ? here.seconds : INFINITY) + copies;
      if (peft_ && here.known() && finish_here < finish_there) {
        // What each side leaves the task's readers: its results copied to where they run.
        Lookahead ahead;
        lookahead(t, ahead);
        finish_here += ahead.cost(loads_[d].node);
        finish_there += ahead.cost(loads_[v].node);
      }
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

  // Charges a task taken from the shared queue to d.
  void account(TaskRef t, DeviceId d) {
    Prediction pr = model_.predict(*kernels_.of(t)[d], t.footprint(), t.size());
    const double copies = peft_ ? arrival(t, d, ctx_->now(), false) - ctx_->now() : copy_in(t, d);
    t.set_policy_data(placed_word(pr.known() ? pr.seconds : 0, copies, t.policy_data()));
    charge(t, d, /*queued=*/false);
  }

  void completed(TaskRef t, DeviceId d, double seconds) override {
    if (peft_) {
      std::lock_guard<std::mutex> lock(running_mutex_);
      auto it = std::find_if(running_.begin(), running_.end(),
                             [&](const Running& r) { return r.task == t; });
      if (it != running_.end()) {
        *it = running_.back();
        running_.pop_back();
      }
    }
    const uint64_t data = t.policy_data();
    discharge(t, d);
    CostModel::Pair& p = *kernels_.of(t)[d];
    if (seconds >= 0) {
      if (peft_ && seconds > 0) learn_ratios(t, d, seconds);
      const bool first = peft_ && model_.samples(p) == 0;
      model_.record(p, t.footprint(), t.size(), seconds);
      // A (kernel, architecture) measured for the first time: the plan rested on less.
      if (first) model_epoch_.fetch_add(1, std::memory_order_relaxed);
    }
    end_explore(t, d, data);  // after the record: the next decision sees the sample
    // The tasks this one makes ready are placed one by one right after: a plan made now sees them
    // all (one made when the first is placed would not see its siblings).
    if (peft_ && !verdict_fresh() && t.successors(nullptr, nullptr, 0) > 0)
      plan(t, /*completing=*/true);
    maybe_save();
  }

  // d left scheduling: its queue goes back to the core with its predicted work (and any
  // calibration slot a queued task held) taken off d.
  std::vector<TaskRef> drain(DeviceId d) override {
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

  // Energy is learned by every rule (cheap, and only where a device has figures); peft's
  // objectives use it.
  bool wants_energy() const noexcept override { return true; }
  void energy(uint32_t kernel, std::string_view name, uint64_t footprint, double size,
              DeviceId d, double joules) override {
    if (d >= ctx_->device_count() || !(joules >= 0)) return;
    CostModel::Pair& p = *kernels_.of(kernel, name)[d];
    // The device's draw above idle, joules per busy second, for kernels not measured yet there.
    const Prediction time = model_.predict(p, footprint, size);
    if (time.source == Prediction::Source::history && time.seconds > 0)
      objective_.learn_watts(d, joules / time.seconds);
    model_.record_energy(p, footprint, size, joules);
  }

  void transferred(uint32_t from, uint32_t to, uint64_t bytes, double seconds) override {
    links_.record(from, to, bytes, seconds);
    if (peft_ && (transfers_.fetch_add(1, std::memory_order_relaxed) & 31) == 0)
      refresh_mean_copy();
  }

 private:
  struct Dev {
    Dev(bool by_priority, DeviceLoad& load)
        : queue(queue_order(by_priority)), queued(load.lowest_queued) {}
    DeviceQueue queue;
    WorkByPriority queued;  // dmdas only
    uint8_t arch_index = kArchs;  // peft: its architecture's row of speed ratios (kArchs: none)
  };

  // The next device's state (devices join in id order).
  std::unique_ptr<Dev> make_dev(const Device& d) {
    DeviceLoad& h = loads_[devs_.size()];
    h.node = static_cast<uint16_t>(d.memory_node);
    h.slots = static_cast<uint16_t>(std::clamp<uint32_t>(d.concurrency, 1, 65535));
    auto dev = std::make_unique<Dev>(by_priority_, h);
    dev->arch_index = kernels_.add_device(d.arch);
    return dev;
  }
  // A device's memory node: its name (the architecture) for the link file, and the figures its
  // plugin declares until copies are measured.
  void add_node(const Device& d) {
    if (d.memory_node == 0) return;
    node_names_[d.memory_node] = d.arch;
    if (d.link_bandwidth > 0) {
      links_.declare(0, d.memory_node, d.link_latency, d.link_bandwidth);
      links_.declare(d.memory_node, 0, d.link_latency, d.link_bandwidth);
    }
  }

  // peft: the speed ratio between two architectures, as the decayed mean of log(time on a /
  // time on b) over the (kernel, footprint) cells measured on both.
  struct Ratio {
    std::atomic<double> log{0};
    std::atomic<uint32_t> n{0};
  };
  const Ratio& ratio(uint8_t a, uint8_t b) const {
    static const Ratio none;
    return a < kArchs && b < kArchs && a != b ? ratios_[a][b] : none;
  }
  bool ratio_learned(uint8_t a) const {
    if (a >= kArchs) return false;
    for (size_t b = 0; b < kArchs; ++b)
      if (b != a && ratios_[a][b].n.load(std::memory_order_relaxed) > 0) return true;
    return false;
  }
  // A measurement on d of a cell other architectures have a history for: one sample of the ratio.
  void learn_ratios(TaskRef t, DeviceId d, double seconds) {
    const uint8_t a = devs_[d]->arch_index;
    if (a >= kArchs) return;
    // Once a ratio rests on many samples, one completion in 16 keeps it current (each costs a
    // prediction per architecture).
    if (ratio_samples_[a].fetch_add(1, std::memory_order_relaxed) >= 64 &&
        (ratio_samples_[a].load(std::memory_order_relaxed) & 15) != 0)
      return;
    const KernelPairs& pairs = kernels_.of(t);
    std::bitset<kArchs> done;
    done[a] = true;
    for (DeviceId o = 0, count = ctx_->device_count(); o < count; ++o) {
      const uint8_t b = devs_[o]->arch_index;
      if (b >= kArchs || done[b]) continue;
      done[b] = true;
      Prediction there = model_.predict(*pairs[o], t.footprint(), t.size());
      if (there.source != Prediction::Source::history || !(there.seconds > 0)) continue;
      const double x = std::log(seconds / there.seconds);
      std::lock_guard<detail::SpinLock> lock(ratios_lock_);
      for (auto [i, j, v] : {std::tuple{a, b, x}, std::tuple{b, a, -x}}) {
        Ratio& r = ratios_[i][j];
        const uint32_t n = r.n.load(std::memory_order_relaxed);
        const double keep = std::min<double>(n, 15) / (std::min<double>(n, 15) + 1);
        r.log.store(keep * r.log.load(std::memory_order_relaxed) + (1 - keep) * v,
                    std::memory_order_relaxed);
        r.n.store(n + 1, std::memory_order_relaxed);
      }
    }
  }

  void load() {
    if (!dir_.empty()) load_models(dir_, model_, links_, node_names_);
  }

  void maybe_save() {
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

  void save() noexcept {
    if (dir_.empty() || ctx_ == nullptr) return;
    std::lock_guard<std::mutex> lock(save_mutex_);
    save_models(dir_, model_, links_, node_names_);
  }

  const Rule rule_;
  const bool by_priority_;  // dmdas, peft: queues and predictions by priority
  const bool peft_;
  DeviceQueue unknown_;  // tasks no device has a prediction for yet
  enum Calibrate : uint8_t { kAuto, kForce, kOff };  // [scheduler] calibrate, parsed once
  const Calibrate calibrate_;
  const uint32_t min_samples_;
  const std::string dir_;
  Context* ctx_ = nullptr;
  std::vector<std::unique_ptr<Dev>> devs_;
  std::unique_ptr<DeviceLoad[]> loads_{new DeviceLoad[kMaxDevices]};
  CostModel model_;
  LinkModel links_;
  KernelTable kernels_{model_};
  EnergyObjective objective_;  // [scheduler] objective (peft's placements, every rule's steals)
  std::unique_ptr<std::atomic<double>[]> link_free_at_;  // dmda: when each node's inbound copies end
  // dmdas: each node's inbound link per priority; peft: both directions, and the copy planning.
  CopyPlanner copies_{links_};
  std::vector<std::string> node_names_;
  uint32_t node_capacity_ = 0;
  std::atomic<double> last_save_{0};
  std::mutex save_mutex_;
  // peft
  Ratio ratios_[kArchs][kArchs];
  std::atomic<uint32_t> arch_probing_[kArchs] = {};  // an exploration for the ratio is in flight
  std::atomic<uint32_t> ratio_samples_[kArchs] = {};  // completions seen per architecture
  detail::SpinLock ratios_lock_;
  UpwardRank ranks_;
  std::atomic<double> mean_latency_{0}, mean_seconds_per_byte_{0};
  std::atomic<uint32_t> transfers_{0};
  // The window plan's verdict: the submission count when it was made (32 bits), the window's
  // size (16) and the device every task goes to + 1, or 0 to spread (16); 0: none yet.
  std::atomic<uint64_t> verdict_{0};
  // (kernel, architecture) pairs measured for the first time so far, and when the plan was made.
  std::atomic<uint64_t> model_epoch_{0}, plan_epoch_{0};
  // While the plan spreads: the device it gave each task of its window not placed yet, taken by
  // the task's push (a task placed again, or one of an older plan, decides alone).
  std::mutex planned_mutex_;
  std::unordered_map<const void*, DeviceId> planned_;
  std::shared_mutex gate_;  // exclusive: a plan walks the window; shared: a device takes a task
  struct Running {
    TaskRef task;
    DeviceId device;
  };
  std::mutex running_mutex_;
  std::vector<Running> running_;  // popped and not completed yet
};

const bool registered = [] {
  register_policy("dmda", [](const Config& c) { return std::make_unique<Dmda>(c, Rule::dmda); });
  register_policy("dmdas", [](const Config& c) { return std::make_unique<Dmda>(c, Rule::dmdas); });
  register_policy("peft", [](const Config& c) { return std::make_unique<Dmda>(c, Rule::peft); });
  return true;
}();

}  // namespace
}  // namespace hcr::sched
