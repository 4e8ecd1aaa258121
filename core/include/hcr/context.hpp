/// \file context.hpp
/// Scheduling contexts: groups of tasks inside one runtime that share devices by weight and
/// priority class (StarPU's scheduling contexts, with weighted fair sharing of device time).
///
/// \code
/// hcr::Context batch = rt.context({.name = "batch", .weight = 3});
/// hcr::Context live = rt.context({.name = "live", .devices = {0}, .priority = 1});
/// rt.submit(hcr::Task(k).read(a).write(b).in(batch));   // runs on any device, 3 shares
/// rt.submit(hcr::Task(k).read(c).write(d).in(live));    // device 0 only, ahead of batch there
/// live.set_devices({0, 1});                             // grows while tasks run
/// \endcode
///
/// A task submitted without a context is in the runtime's default context: every device, weight
/// 1, priority class 0 — exactly today's behaviour, at no cost while no context exists.
///
/// Sharing: each context has its own instance of the runtime's policy. When a device has a free
/// slot, the contexts that include it are asked in order: higher priority class first; within a
/// class, the one with the least device time per weight used so far (weighted fair queuing on
/// measured device seconds). A context that had nothing to run banks no credit: when it has work
/// again it starts from the least device time per weight of the contexts that were busy, so an
/// idle context's share goes to the others at once and comes back without a burst.
///
/// Thread safety: a Context handle may be copied and used from any thread. Ownership: the handle
/// shares the context's record with its runtime; contexts live as long as their runtime (there is
/// no removal), and a handle used after its runtime ended throws Error(shutdown).
#pragma once

#include <hcr/export.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hcr {

namespace detail {
struct ContextState;
}

/// What Runtime::context creates.
struct ContextSpec {
  std::string name;               ///< unique in its runtime, not empty, not "default"
  std::vector<uint32_t> devices;  ///< device ids (Device::id); empty: every device, joiners too
  double weight = 1;              ///< share of device time among its priority class (> 0)
  int priority = 0;               ///< priority class: a higher class is served first
  /// Bytes this context's data may hold in each device's own memory (devices working in host
  /// memory: no limit). Over it, the context evicts its own data only (least recently used
  /// first); a task whose buffers alone exceed it runs on none of those devices (it fails with
  /// ErrorCode::no_device naming the context and its quota when no other device is left). Unset:
  /// only the device's memory limit applies. Data counts as the context's whose task brought it to
  /// the device.
  std::optional<uint64_t> memory_quota;
  /// Devices held back for this context while it is active (a task of it submitted within the
  /// last 50 ms): the first `reserve` of its devices (lowest ids) give lower priority classes no
  /// task meanwhile. Devices do not preempt a running task, so without a reserve a task of a
  /// latency class waits for the lower class's task running (and the ones handed to the device
  /// behind it, [data] lookahead) to end; with it, only its own. The cost: what the lower classes
  /// could have run there in the gaps. 0 (the default): none. At most its number of devices.
  uint32_t reserve = 0;
};

/// A context's counters since it was created (RuntimeStats::contexts).
struct ContextStats {
  std::string name;
  std::vector<uint32_t> devices;  ///< its devices now
  double weight = 1;
  int priority = 0;
  uint64_t memory_quota = 0;  ///< bytes per device (0: none)
  uint32_t reserve = 0;       ///< devices held back for it while it is active (ContextSpec)
  uint64_t tasks = 0;         ///< runs that ended with a measured duration (successful launches)
  uint64_t failed = 0;        ///< runs that ended without one (failed or abandoned launches)
  /// Measured device seconds its tasks used, indexed by Device::id.
  std::vector<double> device_seconds;
  double busy_seconds = 0;  ///< the sum of device_seconds
  /// Seconds its tasks waited between becoming ready and being handed to a device, summed.
  double wait_seconds = 0;
  uint64_t queued = 0;  ///< tasks placed and not finished now
  /// Bytes of its data in each device's own memory now, indexed by Device::id (0 for devices
  /// working in host memory).
  std::vector<uint64_t> memory_bytes;
};

/// A handle to a context of a runtime (cheap to copy). Default-constructed: no context.
class HCR_API Context {
 public:
  Context() = default;
  explicit Context(std::shared_ptr<detail::ContextState> s) noexcept : s_(std::move(s)) {}

  explicit operator bool() const noexcept { return s_ != nullptr; }
  const std::string& name() const;
  /// Its devices now (ids, ascending).
  std::vector<uint32_t> devices() const;
  double weight() const;
  int priority() const;

  /// Moves the context to `devices` (ids; empty: every device) while tasks run: tasks already
  /// queued for a device it loses are handed back and placed again among its devices; tasks
  /// running there finish there. Throws Error(invalid_argument) naming an id that does not exist,
  /// Error(shutdown) after the runtime ended.
  void set_devices(std::vector<uint32_t> devices);

  detail::ContextState* state() const noexcept { return s_.get(); }

 private:
  std::shared_ptr<detail::ContextState> s_;
};

}  // namespace hcr
