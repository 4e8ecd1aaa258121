// peft, the default on machines of several architectures: the earliest finish with each copy
// planned over the links it crosses, a look ahead at the readers, upward ranks, a window plan.
#pragma once

#include "cold_start.hpp"
#include "copy_plan.hpp"
#include "lookahead.hpp"
#include "priorities.hpp"
#include "../earliest_finish.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <unordered_map>
#include <vector>

namespace hcr::sched {

/// peft predicts what dmda gets wrong where data movement matters: each copy from where a valid
/// replica is, over every link it crosses (device -> host, host -> device, through host memory
/// between devices of different plugins), each link direction busy until the copies booked on it
/// are through (copy_plan.hpp); a look ahead at the consumers already submitted (lookahead.hpp:
/// what reading this task's outputs costs them if it runs here); upward ranks as priorities where
/// the application gives none (upward_rank.hpp: HEFT's order); a plan of the submitted window that
/// keeps the graph on one device unless spreading is predicted to pay (window_plan.hpp); and a
/// cold start that predicts an unmeasured (kernel, architecture) from the speed ratio of the
/// architectures learned on other kernels (cold_start.hpp), exploring only one task per kernel
/// and per architecture until that ratio is known. The energy objectives place by its
/// predictions too (energy_objective.hpp).
class Peft final : public EarliestFinish {
 public:
  explicit Peft(const Config& c);
  std::string_view name() const noexcept override { return "peft"; }
  void attach(Context& ctx) override;
  void device_added(DeviceId id) override;
  TaskRef pop(DeviceId d) override;
  void completed(TaskRef t, DeviceId d, double seconds) override;
  void transferred(uint32_t from, uint32_t to, uint64_t bytes, double seconds) override;
  DeviceId expected_device(TaskRef t) const noexcept override;
  void ready_together(std::span<const TaskRef> tasks) override;

 private:
  // The hooks of the earliest-finish base.
  Choice choose(TaskRef t, const KernelPairs& pairs, double now, bool estimates,
                const std::bitset<kMaxDevices>* capable) override {
    return choose_preferring(t, pairs, now, estimates, capable, kAnyDevice);
  }
  double copy_time(TaskRef t, DeviceId d, double now) override {
    return arrival(t, d, now, /*book=*/false) - now;
  }
  void book_copies(TaskRef t, DeviceId d) override { arrival(t, d, ctx_->now(), /*book=*/true); }
  Probe probe(const KernelPairs& kp, DeviceId d, uint32_t samples) const override;
  // A kernel measured nowhere is explored on the fastest device by peak first.
  double explore_rank(DeviceId d) const override { return ctx_->device(d).peak_gflops; }
  void prepare(TaskRef t) override { priorities_.assign(t); }
  Choice planned(TaskRef t, const KernelPairs& pairs, double now,
                 const std::bitset<kMaxDevices>& capable) override;
  TaskRef take_first(DeviceId d) override;
  // peft explores by kernel or architecture, not by pair: with none of the kernel under way,
  // nothing will measure a task nothing predicts.
  bool runs_unpredicted(const KernelPairs& pairs) const override {
    return !Calibration::exploring(pairs);
  }
  bool may_steal(DeviceId d) const override;
  void weigh_steal(TaskRef t, DeviceId d, DeviceId v, double& finish_here,
                   double& finish_there) override;
  void measured(TaskRef t, DeviceId d, double seconds, bool first) override;

  // `prefer`: a device the window plan chose (kAnyDevice: none).
  Choice choose_preferring(TaskRef t, const KernelPairs& pairs, double now, bool estimates,
                           const std::bitset<kMaxDevices>* capable, DeviceId prefer);
  // When `t`'s inputs would all be in d's memory (CopyPlanner); `book`: t was placed on d.
  double arrival(TaskRef t, DeviceId d, double now, bool book) {
    InputSite ins[CopyPlanner::kInputs];
    uint64_t extra = 0;
    const size_t n = read_inputs(*ctx_, t, ins, extra);
    return arrival(t, d, ins, n, extra, now, book);
  }
  double arrival(TaskRef t, DeviceId d, const InputSite* ins, size_t n, uint64_t extra, double now,
                 bool book) {
    return copies_.arrival(ins, n, extra, loads_[d].node, t.priority(), now, book,
                           [this](uint32_t a, uint32_t b) { return ctx_->direct_copy(a, b); });
  }

  // The window plan.
  Choice follow_plan(TaskRef t, const KernelPairs& pairs, double now,
                     const std::bitset<kMaxDevices>& capable);
  bool verdict_fresh(uint64_t v) const;
  bool verdict_fresh() const { return verdict_fresh(verdict_.load(std::memory_order_acquire)); }
  bool plan(TaskRef t, bool completing = false) { return plan({&t, 1}, completing); }
  bool plan(std::span<const TaskRef> roots, bool completing);

  // The mean copy the ranks count, from the links of every memory node known.
  void refresh_mean_copy() {
    priorities_.refresh_mean_copy(
        std::min<uint32_t>(node_capacity_, static_cast<uint32_t>(node_names_.size())));
  }

  ColdStart cold_{model_, kernels_};
  LookaheadTable lookahead_{kernels_, cold_, links_, loads_.get()};
  CopyPlanner copies_{links_};  // both directions of each link, per priority
  RankPriorities priorities_{kernels_, cold_, links_};
  std::atomic<uint32_t> transfers_{0};  // copies measured
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

}  // namespace hcr::sched
