// Placement: a ready task goes to the policy, which puts it in a device's queue or a shared one;
// its inputs start moving to where it will run; an idle device that can take it is fed. A task
// no device in scheduling can run is parked for a withheld device, or fails saying why each
// device refuses it. Tasks still waiting for others have what they read moved ahead of need, to
// where the policy expects them to run.
//
// Thread safety: every member may be called from any thread; tasks made ready while a thread
// places others are queued on that thread (no deep recursion through chains finishing at once).
#pragma once

#include "device_table.hpp"
#include "task_end.hpp"
#include "../task_node.hpp"

#include <hcr/detail/handles.hpp>
#include <hcr/sched.hpp>

#include <atomic>
#include <cstdint>
#include <exception>
#include <span>
#include <vector>

namespace hcr::detail {

class DataManager;
class HealthKeeper;
struct BufferState;

/// What placement hands on to.
class PlacementStages {
 public:
  /// A join or host access whose data is home (they run nowhere).
  virtual void host_task_ready(TaskNode* t) noexcept = 0;
  /// Feeds device `d` from the policy; how many tasks it launched (or 1 when another feeds it).
  virtual uint32_t pump(DeviceState& d) noexcept = 0;
  /// Whether device d's memory limit (and t's context's quota) can hold `t`'s buffers at all.
  virtual bool fits(const TaskNode* t, size_t d) const noexcept = 0;

 protected:
  ~PlacementStages() = default;
};

class Placement {
 public:
  Placement(DeviceTable& devices, HealthKeeper& health, DataManager& data, TaskEnd& end,
            PlacementStages& stages, bool prefetch)
      : devices_(devices),
        health_(health),
        data_(data),
        end_(end),
        stages_(stages),
        prefetch_(prefetch) {}
  Placement(const Placement&) = delete;
  Placement& operator=(const Placement&) = delete;

  /// The policy in use. Read on every push, pop and completion (an acquire load, a plain load on
  /// x86); replaced once, when the first context puts a ContextPolicy in front of it.
  sched::Policy* policy() const noexcept { return policy_.load(std::memory_order_acquire); }
  void set_policy(sched::Policy* p) noexcept { policy_.store(p, std::memory_order_release); }
  /// Measures each decision's cost (RuntimeStats::decisions, decision_seconds).
  void measure_decisions(bool on) noexcept { measure_.store(on, std::memory_order_relaxed); }
  uint64_t decisions() const noexcept { return decisions_.load(std::memory_order_relaxed); }
  double decision_seconds() const noexcept {
    return static_cast<double>(decision_ns_.load(std::memory_order_relaxed)) * 1e-9;
  }

  /// `t` waits for nothing any more: placed now, or after what this thread places already.
  void place(TaskNode* t) noexcept;
  /// Tasks ready at once that the caller keeps alive until this returns (a replay's): placed in
  /// order, as place() would, while no device takes work (their pumps held, as place_together
  /// holds them), each device then fed once. Cheaper per task than place(): no reference taken
  /// per task, no device offered each one.
  void place_batch(std::span<TaskNode* const> tasks) noexcept;
  /// Tasks made ready at once (a resume): the policy hears of them together, and they are
  /// placed highest priority first while no device takes work, so each device starts the most
  /// urgent of what it was given.
  void place_together(std::vector<TaskNode*> ready) noexcept;
  /// `t` ends: the commute buffers it holds go to the tasks waiting for them, which are placed
  /// (engine/commute_locks.hpp). Before its successors are released.
  void release_commute(TaskNode* t) noexcept;
  /// Device `d` left scheduling: what the policy queued for it is placed again.
  void take_back(uint32_t d) noexcept;
  /// The memory node where `t`, not ready yet, is expected to run (its pin, or the policy's
  /// expected_device among the devices in scheduling); -1 when nobody can say.
  int64_t expected_node(TaskNode* t) noexcept;
  /// `t` still waits for others: `inputs`, ready, move to where it is expected to run.
  void move_ahead(TaskNode* t, std::span<const Ref<BufferState>> inputs) noexcept;
  /// `t` finished: what it wrote moves towards where its `successors` that still wait for
  /// others are expected to run.
  void move_ahead_for(TaskNode* t, std::span<const Edge> successors) noexcept;
  /// The error of a task no device can run, naming each device's reason.
  std::exception_ptr no_device_error(const TaskNode& t) const;

 private:
  // `batch`: within place_batch, which keeps `t` alive and feeds the devices once at its end.
  void dispatch(TaskNode* t, bool batch = false) noexcept;
  bool park(TaskNode* t) noexcept;
  bool usable(size_t d) const noexcept {
    return devices_[d].status.load(std::memory_order_relaxed) == DeviceState::kActive;
  }

  DeviceTable& devices_;
  HealthKeeper& health_;
  DataManager& data_;
  TaskEnd& end_;
  PlacementStages& stages_;
  const bool prefetch_;
  std::atomic<sched::Policy*> policy_{nullptr};
  std::atomic<bool> measure_{false};
  std::atomic<size_t> next_offer_{0};
  // Time spent in the policy's placement decisions (push), measured with the counters.
  alignas(64) std::atomic<uint64_t> decisions_{0};
  std::atomic<int64_t> decision_ns_{0};
};

}  // namespace hcr::detail
