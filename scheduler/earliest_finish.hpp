// The earliest-finish base that dmda, dmdas and peft share: per-device queues, the learned models
// and their persistence, calibration, stealing. The policies differ only through its hooks.
#pragma once

#include "calibration.hpp"
#include "cost_model.hpp"
#include "device_queue.hpp"
#include "energy_objective.hpp"
#include "horizons.hpp"
#include "kernel_pairs.hpp"
#include "placement.hpp"

#include <hcr/config.hpp>
#include <hcr/sched.hpp>

#include <atomic>
#include <bitset>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hcr::sched {

/// A ready task goes to the device where it is predicted to finish first (what "first" means,
/// with which copies, is the policy's: choose()), and waits in that device's queue. While a
/// (kernel, architecture) pair is explored (probe()), one calibration task at a time is sent there
/// on purpose; a task no device has a prediction for is parked until one has. An idle device
/// steals a queued task it would finish before its device even starts it. Models are loaded at
/// attach and saved at destruction and every 30 s.
///
/// Thread safety: as Policy; the hooks are called concurrently, from the Policy calls.
class EarliestFinish : public Policy {
 public:
  ~EarliestFinish() override;

  bool wants_timing() const noexcept override { return true; }
  void attach(Context& ctx) override;
  void device_added(DeviceId id) override;
  DeviceId push(TaskRef t) override;
  TaskRef pop(DeviceId d) override { return take(d); }
  double predicted(TaskRef t) const noexcept override;
  void completed(TaskRef t, DeviceId d, double seconds) override;
  std::vector<TaskRef> drain(DeviceId d) override;
  // Energy is learned by every policy (cheap, and only where a device has figures); the energy
  // objectives use it.
  bool wants_energy() const noexcept override { return true; }
  void energy(uint32_t kernel, std::string_view name, uint64_t footprint, double size, DeviceId d,
              double joules) override;
  void transferred(uint32_t from, uint32_t to, uint64_t bytes, double seconds) override;

 protected:
  /// `order`: how each device's queue runs its tasks. Where it runs them by priority, the work
  /// queued is counted by priority too, and a task is predicted to wait behind the queued work it
  /// would not overtake (ahead_ns).
  EarliestFinish(const Config& c, DeviceQueue::Order order);

  // ---- hooks: where the policies differ --------------------------------------------------------

  /// The device where `t` is predicted to finish first, with its predicted execution and copies
  /// there; kAnyDevice when no device has a prediction. `estimates`: a device the model knows
  /// nothing of is predicted from its plugin's estimate. `capable`: which devices can run it,
  /// when the caller asked already.
  virtual Choice choose(TaskRef t, const KernelPairs& pairs, double now, bool estimates,
                        const std::bitset<kMaxDevices>* capable) = 0;
  /// Seconds from `now` until `t`'s inputs would be in d's memory, nothing booked.
  virtual double copy_time(TaskRef t, DeviceId d, double now) = 0;
  /// `t` was placed on d, with copies predicted (its word's xfer > 0): books them on the links
  /// they cross, so that the next decisions see the links busy.
  virtual void book_copies(TaskRef t, DeviceId d) = 0;
  /// Whether the pair of device d, with `samples` measurements, is explored on purpose, and which
  /// slot the exploration takes. Here (dmda's calibration): every pair, until it has
  /// calibrate_samples.
  virtual Probe probe(const KernelPairs& /*kp*/, DeviceId /*d*/, uint32_t samples) const {
    return samples < calibration_.min_samples() ? Probe::pair : Probe::none;
  }
  /// Of the devices to explore with the fewest samples, the one of the highest rank goes first.
  virtual double explore_rank(DeviceId /*d*/) const { return 0; }
  /// A ready task, before anything is decided for it.
  virtual void prepare(TaskRef /*t*/) {}
  /// Where a planned placement sends `t`, before its own earliest finish is asked (kAnyDevice:
  /// nowhere planned).
  virtual Choice planned(TaskRef /*t*/, const KernelPairs& /*pairs*/, double /*now*/,
                         const std::bitset<kMaxDevices>& /*capable*/) {
    return {};
  }
  /// A task device d takes from its queue ahead of the first, or none.
  virtual TaskRef take_first(DeviceId /*d*/) { return {}; }
  /// Whether a parked task that no device has a prediction for runs on a device that asks for
  /// work though calibration is on (nothing under way will measure it).
  virtual bool runs_unpredicted(const KernelPairs& /*pairs*/) const { return false; }
  /// Whether idle device d may steal now.
  virtual bool may_steal(DeviceId /*d*/) const { return true; }
  /// A task queued on v that idle device d would finish sooner: adds to each side's finish what
  /// running it there leaves for what comes after it.
  virtual void weigh_steal(TaskRef /*t*/, DeviceId /*d*/, DeviceId /*v*/, double& /*finish_here*/,
                           double& /*finish_there*/) {}
  /// A duration of `t` on d was recorded; `first`: the pair's first sample.
  virtual void measured(TaskRef /*t*/, DeviceId /*d*/, double /*seconds*/, bool /*first*/) {}

  // ---- for the policies --------------------------------------------------------------------

  // Takes a task for d: from its queue, else a parked one it should run, else a stolen one.
  TaskRef take(DeviceId d);
  // completed() but the save: the measurement recorded, the task's work and slots released.
  void record_completion(TaskRef t, DeviceId d, double seconds);
  void maybe_save();
  // Adds a placed task's predicted work to its device, and its copies to the links: the runtime
  // prefetches at once, so a link is busy from now until they are through (time frees it;
  // nothing needs to be taken back).
  // `queued`: the task waits in d's queue (rather than starting at once).
  void charge(TaskRef t, DeviceId d, bool queued = true);
  void discharge(TaskRef t, DeviceId d) {
    loads_[d].pending_ns.fetch_sub(exec_ns(t.policy_data()), std::memory_order_relaxed);
  }
  // A task charged as queued left d's queue (to run, to another device, or back to the core).
  void dequeued(TaskRef t, DeviceId d) {
    if (order_ == DeviceQueue::Order::priority)
      devs_[d]->queued.add(t.priority(), -exec_ns(t.policy_data()));
  }
  // Predicted work ahead of a task of priority `prio` on d: everything started, and (queues by
  // priority) only the queued tasks it would not overtake.
  int64_t ahead_ns(DeviceId d, int prio) const {
    const DeviceLoad& h = loads_[d];
    int64_t pending = h.pending_ns.load(std::memory_order_relaxed);
    if (prio <= h.lowest_queued.load(std::memory_order_acquire)) return pending;
    return std::max<int64_t>(0, pending - devs_[d]->queued.below(prio));
  }
  DeviceQueue& queue(DeviceId d) { return devs_[d]->queue; }

  Context* ctx_ = nullptr;
  CostModel model_;
  LinkModel links_;
  KernelTable kernels_{model_};
  Calibration calibration_;
  std::unique_ptr<DeviceLoad[]> loads_{new DeviceLoad[kMaxDevices]};  // by device
  EnergyObjective objective_;
  DeviceQueue unknown_;  // parked: tasks no device has a prediction for yet
  // Memory nodes: those at attach and room for some that join later (hot-plug); beyond it copies
  // are predicted at the link model's figures without queueing.
  uint32_t node_capacity_ = 0;
  std::vector<std::string> node_names_;  // the link file's names of the nodes (under save_mutex_)
  std::mutex save_mutex_;

 private:
  struct Dev {
    Dev(DeviceQueue::Order order, DeviceLoad& load) : queue(order), queued(load.lowest_queued) {}
    DeviceQueue queue;
    WorkByPriority queued;  // queues by priority only
  };

  std::unique_ptr<Dev> make_dev(const Device& d);
  void add_node(const Device& d);
  TaskRef take_parked(DeviceId d);
  TaskRef steal(DeviceId d);
  // Charges a task taken from the parked queue to d.
  void account(TaskRef t, DeviceId d);
  // Takes the slots of an exploration of device d (Calibration::take), if probe() asks for one.
  uint64_t try_explore(const KernelPairs& kp, DeviceId d, uint32_t samples) {
    return calibration_.take(kp, d, probe(kp, d, samples));
  }
  // The task held an exploration of d (its word says): its slots are free.
  void end_explore(TaskRef t, DeviceId d, uint64_t word) {
    if (word & kExploreBit) calibration_.end(kernels_.of(t), d, word);
  }
  void load();
  void save() noexcept;

  const DeviceQueue::Order order_;
  const std::string dir_;
  std::vector<std::unique_ptr<Dev>> devs_;
  std::atomic<double> last_save_{0};
};

}  // namespace hcr::sched
