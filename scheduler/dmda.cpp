// dmda ("deque model data aware", as StarPU calls it): each ready task goes to the device where it
// is predicted to finish first — the device's predicted ready time, or the arrival of the task's
// inputs there if later (copies start at once: the runtime prefetches), plus the learned execution
// time. The online form of HEFT. dmdas keeps each device's queue sorted by priority.
//
// Calibration: while a (kernel, architecture) pair has fewer than calibrate_samples measurements,
// one task at a time is sent there on purpose, so that a slow device is measured but never fed a
// share of the work it cannot finish in time.
#include "cost_model.hpp"
#include "device_queue.hpp"

#include <hcr/log.hpp>

#include <unistd.h>

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
#include <vector>

namespace hcr::sched {

std::string model_directory(const Config& config) {
  std::string dir = config.model_dir;
  if (dir == "off") return {};
  if (dir.empty()) {
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg && xdg[0] == '/')
      dir = std::string(xdg) + "/hcr/models";
    else if (const char* home = std::getenv("HOME"); home && *home)
      dir = std::string(home) + "/.cache/hcr/models";
    else
      return {};
  }
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  return (std::filesystem::path(dir) / host).string();
}

std::vector<ModelRow> read_models(const std::string& dir, std::vector<std::string>& warnings) {
  CostModel model;
  model.load(dir, warnings);
  std::vector<ModelRow> rows;
  for (auto& r : model.rows())
    rows.push_back({r.kernel, r.arch, r.footprint, r.size, r.estimate, r.spread, r.samples,
                    r.fit.valid, r.fit.a, r.fit.b, r.fit.c});
  return rows;
}

namespace {

// What a placed task keeps in its policy word: predicted execution and copy-in time (in
// microseconds, 31 bits each), and whether it is a calibration task.
constexpr uint64_t kExploreBit = uint64_t{1} << 63;
constexpr uint64_t kField = (uint64_t{1} << 31) - 1;
uint64_t pack(double exec, double xfer, bool explore) {
  // Clamped before the conversion: a prediction beyond 2^64 us (a regression far outside the
  // sizes measured, a model file's huge figures) would make it undefined. nan counts as 0.
  auto us = [](double s) {
    return static_cast<uint64_t>(std::min(static_cast<double>(kField), std::max(0.0, s) * 1e6));
  };
  return us(exec) | (us(xfer) << 31) | (explore ? kExploreBit : 0);
}
int64_t exec_ns(uint64_t w) { return static_cast<int64_t>(w & kField) * 1000; }
int64_t xfer_ns(uint64_t w) { return static_cast<int64_t>((w >> 31) & kField) * 1000; }
constexpr size_t kFastKernels = 4096;  // kernel ids with a lock-free lookup

// How a device's queue runs its tasks. dmdas: by priority. dmda: as StarPU's dmda, first in first
// out except that a task of priority > 0 goes ahead of those of lower priority (an application
// that marks its critical path with positive priorities gets it first under either policy);
// dmda's predictions ignore that order, dmdas's follow it.
DeviceQueue::Order queue_order(bool by_priority) {
  return by_priority ? DeviceQueue::Order::priority : DeviceQueue::Order::positive;
}

class Dmda final : public Policy {
 public:
  Dmda(const Config& c, bool by_priority)
      : by_priority_(by_priority),
        unknown_(queue_order(by_priority)),
        calibrate_(c.calibrate == "off" ? kOff : c.calibrate == "force" ? kForce : kAuto),
        min_samples_(static_cast<uint32_t>(std::max(1, c.calibrate_samples))),
        dir_(model_directory(c)),
        by_kernel_(kFastKernels) {}

  ~Dmda() override {
    save();
    for (auto& slot : by_kernel_) delete slot.load(std::memory_order_relaxed);
    for (auto& [id, v] : slow_kernels_) delete v;
  }

  std::string_view name() const noexcept override { return by_priority_ ? "dmdas" : "dmda"; }
  bool wants_timing() const noexcept override { return true; }

  void attach(Context& ctx) override {
    ctx_ = &ctx;
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
    link_by_priority_ = std::make_unique<LinkByPriority[]>(node_capacity_);
    node_names_.assign(nodes, "host");
    for (const Device& d : devices) add_node(d);
    load();
  }

  void device_added(DeviceId id) override {
    const Device& d = ctx_->device(id);
    {
      std::lock_guard<std::mutex> lock(kernels_mutex_);
      devs_.push_back(make_dev(d));
      const std::string arch = d.arch;
      auto extend = [&](std::vector<CostModel::Pair*>* v, const std::string& kernel) {
        v->push_back(model_.pair(kernel, arch));  // reserved: readers never see it move
      };
      for (auto& [id2, name] : kernel_names_) {
        std::vector<CostModel::Pair*>* v =
            id2 < kFastKernels ? by_kernel_[id2].load(std::memory_order_relaxed) : slow_kernels_[id2];
        if (v != nullptr) extend(v, name);
      }
    }
    std::lock_guard<std::mutex> lock(save_mutex_);
    if (d.memory_node >= node_names_.size()) node_names_.resize(d.memory_node + 1, "host");
    add_node(d);
  }

  DeviceId push(TaskRef t) override {
    const std::vector<CostModel::Pair*>& pairs = pairs_for(t);
    const uint64_t fp = t.footprint();
    const double size = t.size();
    const double now = ctx_->now();

    DeviceId best = kAnyDevice;
    double best_exec = 0, best_xfer = 0;
    bool explore = false;

    // The devices that can run it, asked once per decision (both passes below need them).
    std::bitset<kMaxDevices> capable;
    const DeviceId count = ctx_->device_count();
    ctx_->capable(t, count, capable);

    if (calibrate_ != kOff) {  // a pair not measured enough, with no calibration task out?
      uint32_t fewest = min_samples_;
      for (DeviceId d = 0; d < count; ++d) {
        if (!capable[d]) continue;
        CostModel::Pair& p = *pairs[d];
        uint32_t n = model_.samples(p);
        if (calibrate_ == kForce) {  // every footprint, not just the pair
          Prediction pr = model_.predict(p, fp, size);
          n = pr.source == Prediction::Source::history ? pr.samples : 0;
        }
        if (n < fewest && p.exploring.load(std::memory_order_relaxed) == 0) {
          fewest = n;
          best = d;
        }
      }
      if (best != kAnyDevice) {
        CostModel::Pair& p = *pairs[best];
        uint32_t expected = 0;
        explore = p.exploring.compare_exchange_strong(expected, 1);
        if (!explore) best = kAnyDevice;  // another thread took that calibration slot
      }
    }

    if (explore) {
      Prediction pr = model_.predict(*pairs[best], fp, size);
      best_exec = pr.known() ? pr.seconds : std::max(0.0, ctx_->plugin_estimate(t, best));
      best_xfer = copy_in(t, best);
    } else {
      Choice c = choose(t, pairs, now, /*estimates=*/true, &capable);
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

    t.set_policy_data(pack(best_exec, best_xfer, explore));
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
    if (TaskRef t = devs_[d]->queue.pop_front(d)) {
      dequeued(t, d);
      return t;
    }
    if (unknown_.size() > 0) {
      // A task parked before its costs were known. d takes it to calibrate itself (one at a
      // time, until it has its samples), or when the model now sends it to d; with calibration
      // off and nothing known anywhere, first come first served.
      const double now = ctx_->now();
      bool explored = false;
      // Devices the model sends a parked task to that sit idle: nothing else would ask them.
      std::array<DeviceId, 16> idle_choices;
      size_t n_idle = 0;
      TaskRef t = unknown_.pop_first(16, [&](TaskRef u) {
        if (!u.can_run(d)) return false;
        const auto& pairs = pairs_for(u);
        CostModel::Pair& p = *pairs[d];
        if (calibrate_ != kOff && model_.samples(p) < min_samples_) {
          uint32_t expected = 0;
          explored = p.exploring.compare_exchange_strong(expected, 1);
          return explored;
        }
        Choice c = choose(u, pairs, now, /*estimates=*/false);
        if (c.device != d && c.device != kAnyDevice && n_idle < idle_choices.size() &&
            ctx_->in_flight(c.device) < hot_[c.device].slots)
          idle_choices[n_idle++] = c.device;
        return c.device == d || (c.device == kAnyDevice && calibrate_ == kOff);
      });
      for (size_t i = 0; i < n_idle; ++i) ctx_->wake(idle_choices[i]);
      if (t) {
        t.set_policy_data(explored ? kExploreBit : 0);
        account(t, d);
        return t;
      }
    }
    return steal(d);
  }

  struct Choice {
    DeviceId device = kAnyDevice;
    double exec = 0, xfer = 0;
  };

  // Predicted seconds to copy `t`'s missing inputs into d's memory.
  double copy_in(TaskRef t, DeviceId d) {
    uint64_t bytes = ctx_->bytes_to_fetch(t, d);
    return bytes ? links_.predict(0, hot_[d].node, bytes) : 0;
  }
  // Adds a placed task's predicted work to its device, and its copies to the device's link: the
  // runtime prefetches at once, so the link is busy from now until they are through (time frees
  // it; nothing needs to be taken back).
  // `queued`: the task waits in d's queue (rather than starting at once), where dmdas orders it.
  void charge(TaskRef t, DeviceId d, bool queued = true) {
    Hot& dev = hot_[d];
    dev.pending_ns.fetch_add(exec_ns(t.policy_data()), std::memory_order_relaxed);
    if (by_priority_ && queued) devs_[d]->queued.add(t.priority(), exec_ns(t.policy_data()));
    if (dev.node != 0 && xfer_ns(t.policy_data()) > 0 && dev.node < node_capacity_) {
      const double now = ctx_->now();
      const double x = static_cast<double>(xfer_ns(t.policy_data())) * 1e-9;
      if (by_priority_) {
        link_by_priority_[dev.node].charge(t.priority(), now, x);
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
    if (by_priority_) return link_by_priority_[node].free_at(prio, now);
    return std::max(now, link_free_at_[node].load(std::memory_order_relaxed));
  }
  void discharge(TaskRef t, DeviceId d) {
    hot_[d].pending_ns.fetch_sub(exec_ns(t.policy_data()), std::memory_order_relaxed);
  }
  // A task charged as queued left d's queue (to run, to another device, or back to the core).
  void dequeued(TaskRef t, DeviceId d) {
    if (by_priority_) devs_[d]->queued.add(t.priority(), -exec_ns(t.policy_data()));
  }
  // Predicted work ahead of a task of priority `prio` on d: everything started, and (dmdas, whose
  // queues run by priority) only the queued tasks it would not overtake.
  int64_t ahead_ns(DeviceId d, int prio) const {
    const Hot& h = hot_[d];
    int64_t pending = h.pending_ns.load(std::memory_order_relaxed);
    if (!by_priority_ || prio <= h.lowest_queued.load(std::memory_order_acquire)) return pending;
    return std::max<int64_t>(0, pending - devs_[d]->queued.below(prio));
  }
  // The device where `t` is predicted to finish first: max(ready, inputs arrive) + execution.
  // Devices with no prediction are left out; none predicted at all gives kAnyDevice.
  // `capable`: which devices can run it, when the caller asked already.
  Choice choose(TaskRef t, const std::vector<CostModel::Pair*>& pairs, double now,
                bool estimates, const std::bitset<kMaxDevices>* capable = nullptr) {
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
      const Hot& dev = hot_[d];
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

  // An idle device takes a task queued elsewhere when it is predicted to finish it before the
  // device it waits for would even start it: queues placed on old predictions (a device that
  // slowed down since) drain to where the work now goes faster.
  TaskRef steal(DeviceId d) {
    std::vector<std::pair<int64_t, DeviceId>> victims;
    for (DeviceId v = 0, n = ctx_->device_count(); v < n; ++v)
      if (v != d && devs_[v]->queue.size() > 0)
        victims.push_back({hot_[v].pending_ns.load(std::memory_order_relaxed) / hot_[v].slots, v});
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
      const std::vector<CostModel::Pair*>& pairs = pairs_for(t);
      Prediction here = model_.predict(*pairs[d], t.footprint(), t.size());
      Prediction there = model_.predict(*pairs[v], t.footprint(), t.size());
      double start_there = static_cast<double>(pending) * 1e-9;  // behind everything queued
      double finish_there = start_there + (there.known() ? there.seconds : 0);
      double bytes_here = static_cast<double>(ctx_->bytes_to_fetch(t, d));
      double finish_here = (here.known() ? here.seconds : INFINITY) +
                           (bytes_here > 0 ? links_.predict(0, hot_[d].node, bytes_here) : 0);
      if (here.known() && finish_here < finish_there) {
        dequeued(t, v);
        discharge(t, v);
        t.set_policy_data(pack(here.seconds, copy_in(t, d), /*explore=*/false));
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
    Prediction pr = model_.predict(*pairs_for(t)[d], t.footprint(), t.size());
    t.set_policy_data(pack(pr.known() ? pr.seconds : 0, copy_in(t, d),
                           (t.policy_data() & kExploreBit) != 0));
    charge(t, d, /*queued=*/false);
  }

  void completed(TaskRef t, DeviceId d, double seconds) override {
    const uint64_t data = t.policy_data();
    discharge(t, d);
    CostModel::Pair& p = *pairs_for(t)[d];
    if (data & kExploreBit) p.exploring.fetch_sub(1, std::memory_order_relaxed);
    if (seconds >= 0) model_.record(p, t.footprint(), t.size(), seconds);
    maybe_save();
  }

  // d left scheduling: its queue goes back to the core with its predicted work (and any
  // calibration slot a queued task held) taken off d.
  std::vector<TaskRef> drain(DeviceId d) override {
    std::vector<TaskRef> queued = devs_[d]->queue.take_all();
    for (TaskRef t : queued) {
      dequeued(t, d);
      discharge(t, d);
      if (t.policy_data() & kExploreBit) pairs_for(t)[d]->exploring.fetch_sub(1, std::memory_order_relaxed);
      t.set_policy_data(0);
    }
    for (TaskRef t : unknown_.take_stranded()) queued.push_back(t);  // nowhere left to calibrate
    return queued;
  }

  void transferred(uint32_t from, uint32_t to, uint64_t bytes, double seconds) override {
    links_.record(from, to, bytes, seconds);
  }

 private:
  // Predicted work of the tasks waiting in a dmdas queue, per priority (few distinct ones in
  // practice: a short sorted list).
  class WorkByPriority {
   public:
    // `lowest`: where the lowest queued priority is published (the device's Hot entry).
    explicit WorkByPriority(std::atomic<int>& lowest) : lowest_(lowest) {}
    void add(int prio, int64_t ns) {
      std::lock_guard<detail::SpinLock> lock(lock_);
      auto it = std::lower_bound(w_.begin(), w_.end(), prio,
                                 [](const std::pair<int, int64_t>& e, int p) { return e.first < p; });
      if (it == w_.end() || it->first != prio) it = w_.insert(it, {prio, 0});
      it->second += ns;
      if (it->second == 0) w_.erase(it);
      lowest_.store(w_.empty() ? INT_MAX : w_.front().first, std::memory_order_release);
    }
    // Work queued with a priority below `prio` (what a task of `prio` overtakes). Without a
    // lock in the common case: nothing queued below it.
    int64_t below(int prio) const {
      if (prio <= lowest_.load(std::memory_order_acquire)) return 0;
      std::lock_guard<detail::SpinLock> lock(lock_);
      int64_t sum = 0;
      for (auto& [p, ns] : w_) {
        if (p >= prio) break;
        sum += ns;
      }
      return sum;
    }

   private:
    mutable detail::SpinLock lock_;
    std::vector<std::pair<int, int64_t>> w_;  // by ascending priority
    std::atomic<int>& lowest_;                // w_'s lowest priority
  };

  // What a decision reads of every device, packed densely (a decision over 64 devices touches
  // 16 cache lines rather than a few per device).
  struct Hot {
    std::atomic<int64_t> pending_ns{0};        // predicted work placed here, not finished
    std::atomic<int> lowest_queued{INT_MAX};   // dmdas: the lowest priority queued here
    uint16_t node = 0, slots = 1;
  };
  static_assert(sizeof(Hot) == 16);

  struct Dev {
    Dev(bool by_priority, Hot& hot) : queue(queue_order(by_priority)), queued(hot.lowest_queued) {}
    DeviceQueue queue;
    WorkByPriority queued;  // dmdas only
    std::string arch;
  };

  // The next device's state (devices join in id order).
  std::unique_ptr<Dev> make_dev(const Device& d) const {
    Hot& h = hot_[devs_.size()];
    h.node = static_cast<uint16_t>(d.memory_node);
    h.slots = static_cast<uint16_t>(std::clamp<uint32_t>(d.concurrency, 1, 65535));
    auto dev = std::make_unique<Dev>(by_priority_, h);
    dev->arch = d.arch;
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
  // The time a node's inbound link is busy until (a joined node past the capacity: none).
  // A link's time horizons per priority (dmdas): until when the copies of tasks of priority p or
  // higher keep it busy, for the priorities copies were charged with (a short sorted list).
  class LinkByPriority {
   public:
    void charge(int prio, double now, double seconds) {
      std::lock_guard<detail::SpinLock> lock(lock_);
      // Horizons already in the past hold nothing back: forget them.
      std::erase_if(h_, [&](const std::pair<int, double>& e) { return e.second <= now; });
      auto it = std::lower_bound(h_.begin(), h_.end(), prio,
                                 [](const std::pair<int, double>& e, int p) { return e.first < p; });
      if (it == h_.end() || it->first != prio)  // starts as what copies above it left
        it = h_.insert(it, {prio, it == h_.end() ? now : std::max(now, it->second)});
      for (auto i = h_.begin(); i <= it; ++i) i->second = std::max(now, i->second) + seconds;
      lowest_horizon_.store(h_.front().second, std::memory_order_relaxed);
      lowest_.store(h_.front().first, std::memory_order_release);
    }
    // Lock-free for a task at or below every charged priority (the common case: one priority).
    double free_at(int prio, double now) const {
      if (prio <= lowest_.load(std::memory_order_acquire))
        return std::max(now, lowest_horizon_.load(std::memory_order_relaxed));
      std::lock_guard<detail::SpinLock> lock(lock_);
      auto it = std::lower_bound(h_.begin(), h_.end(), prio,
                                 [](const std::pair<int, double>& e, int p) { return e.first < p; });
      return it == h_.end() ? now : std::max(now, it->second);
    }

   private:
    mutable detail::SpinLock lock_;
    std::vector<std::pair<int, double>> h_;  // by ascending priority; non-increasing horizons
    std::atomic<int> lowest_{INT_MAX};       // h_'s lowest priority (none charged: any task)
    std::atomic<double> lowest_horizon_{0};  // and its horizon, the latest of all
  };

  // The model pair of each device for the task's kernel; built once per kernel.
  const std::vector<CostModel::Pair*>& pairs_for(TaskRef t) {
    const uint32_t id = t.kernel_id();
    if (id < kFastKernels)
      if (auto* v = by_kernel_[id].load(std::memory_order_acquire)) return *v;
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    if (id < kFastKernels)
      if (auto* v = by_kernel_[id].load(std::memory_order_relaxed)) return *v;
    auto* v = new std::vector<CostModel::Pair*>();
    v->reserve(kMaxDevices);  // device_added appends while others read
    std::string kernel(t.kernel_name());
    for (auto& dev : devs_) v->push_back(model_.pair(kernel, dev->arch));
    kernel_names_[id] = kernel;
    if (id < kFastKernels) {
      by_kernel_[id].store(v, std::memory_order_release);
    } else {
      auto& slot = slow_kernels_[id];
      delete slot;
      slot = v;
    }
    return *v;
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

  const bool by_priority_;
  DeviceQueue unknown_;  // tasks no device has a prediction for yet
  enum Calibrate : uint8_t { kAuto, kForce, kOff };  // [scheduler] calibrate, parsed once
  const Calibrate calibrate_;
  const uint32_t min_samples_;
  const std::string dir_;
  Context* ctx_ = nullptr;
  std::vector<std::unique_ptr<Dev>> devs_;
  std::unique_ptr<Hot[]> hot_{new Hot[kMaxDevices]};
  CostModel model_;
  LinkModel links_;
  std::unique_ptr<std::atomic<double>[]> link_free_at_;  // when each node's inbound copies end
  std::unique_ptr<LinkByPriority[]> link_by_priority_;   // the same per priority (dmdas)
  std::vector<std::string> node_names_;
  static constexpr uint32_t kSpareNodes = 8;
  uint32_t node_capacity_ = 0;
  std::map<uint32_t, std::string> kernel_names_;  // kernels with a pairs vector (kernels_mutex_)
  std::vector<std::atomic<std::vector<CostModel::Pair*>*>> by_kernel_;
  std::mutex kernels_mutex_;
  std::map<uint32_t, std::vector<CostModel::Pair*>*> slow_kernels_;
  std::atomic<double> last_save_{0};
  std::mutex save_mutex_;
};

const bool registered = [] {
  register_policy("dmda", [](const Config& c) { return std::make_unique<Dmda>(c, false); });
  register_policy("dmdas", [](const Config& c) { return std::make_unique<Dmda>(c, true); });
  return true;
}();

}  // namespace
}  // namespace hcr::sched
