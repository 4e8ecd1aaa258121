// The policy the runtime uses once a context exists: one instance of the configured policy per
// context, and arbitration between the contexts that share a device (priority class, then
// weighted fair queuing on measured device seconds).
#pragma once

#include "context_state.hpp"

#include <hcr/detail/spin_lock.hpp>
#include <hcr/sched.hpp>

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace hcr::detail {

/// Routes every call about a task to its context's policy (TaskNode::context; none: the default
/// context, whose policy is the one the runtime ran before any context existed, so tasks that
/// policy holds stay where they are when this one takes over). pop(d) asks the contexts that
/// include d, highest priority class first, then least virtual time (device seconds / weight).
///
/// Thread safety: as any Policy; add() is serialised by the caller (RuntimeCore's add_mutex_).
class ContextPolicy final : public sched::Policy {
 public:
  static constexpr uint32_t kMaxContexts = 64;  // the default one included

  ContextPolicy(std::unique_ptr<sched::Policy> default_policy, ContextState& default_context,
                sched::Context& core);
  ~ContextPolicy() override { stop(); }

  /// How to pump device d (RuntimeCore): a device a reserve held back from a lower class is
  /// pumped again when the hold lapses, by a thread of this policy's that runs while some context
  /// has a reserve. stop() ends it (the runtime's shutdown, once every task is done).
  void set_pump(std::function<void(sched::DeviceId)> pump) { pump_ = std::move(pump); }
  void stop() noexcept;

  /// A new context with its own policy (attached already). Its index must be the next one.
  void add(ContextState& c, std::unique_ptr<sched::Policy> policy);
  uint32_t size() const noexcept { return count_.load(std::memory_order_acquire); }
  /// Device d left context `c` (set_devices): what its policy queued for d, to be placed again.
  std::vector<sched::TaskRef> drain_context(uint32_t c, sched::DeviceId d);
  /// Tasks of context c placed and not finished.
  int64_t queued(uint32_t c) const noexcept;

  std::string_view name() const noexcept override { return slots_[0]->policy->name(); }
  void attach(sched::Context& /*ctx*/) override {}  // each context's policy is attached already
  void device_added(sched::DeviceId d) override;
  sched::DeviceId push(sched::TaskRef task) override;
  sched::TaskRef pop(sched::DeviceId d) override;
  void completed(sched::TaskRef task, sched::DeviceId d, double seconds) override;
  std::vector<sched::TaskRef> drain(sched::DeviceId d) override;
  void transferred(uint32_t from, uint32_t to, uint64_t bytes, double seconds) override;
  bool wants_energy() const noexcept override { return energy_; }
  void energy(uint32_t kernel, std::string_view name, uint64_t footprint, double size,
              sched::DeviceId d, double joules) override;
  sched::DeviceId expected_device(sched::TaskRef task) const noexcept override;
  bool wants_timing() const noexcept override { return true; }  // device time is what is shared
  double predicted(sched::TaskRef task) const noexcept override;
  void ready_together(std::span<const sched::TaskRef> tasks) override;

 private:
  struct Slot {
    ContextState* ctx = nullptr;
    std::unique_ptr<sched::Policy> policy;
    // Under lock_: fair-queuing state.
    double vtime = 0;     // device seconds used / weight, brought up when it becomes busy again
    int64_t pending = 0;  // pushed, not completed or drained
  };
  Slot& slot_of(sched::TaskRef t) const noexcept;
  // Counts a task into its context's backlog; a context that was idle catches up first.
  void activate(Slot& s) noexcept;
  int64_t now_ns() const noexcept;
  // Whether device d is among the first `reserve` devices of a context active now (reserve).
  static bool reserved_for(const ContextState& c, sched::DeviceId d, int64_t now) noexcept;

  sched::Context& core_;
  std::array<std::unique_ptr<Slot>, kMaxContexts> slots_;
  std::atomic<uint32_t> count_{0};
  bool energy_ = false;
  std::atomic<bool> reserving_{false};  // some context has a reserve
  // Reserves: devices that gave a lower class nothing because of one, pumped again when it lapses.
  void lapse_loop();
  std::atomic<uint64_t> held_[2] = {0, 0};
  std::function<void(sched::DeviceId)> pump_;
  std::mutex timer_mutex_;
  std::condition_variable timer_cv_;
  bool timer_stop_ = false;  // under timer_mutex_
  std::thread timer_;
  mutable SpinLock lock_;
  double floor_ = 0;  // the least virtual time of the busy contexts when last looked at
};

}  // namespace hcr::detail
