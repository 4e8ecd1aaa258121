/// \file sched.hpp
/// The scheduling interface: what a placement policy sees and implements. Policies live in
/// scheduler/ and depend on this header only.
///
/// The core calls push() when a task becomes ready (all dependencies done) and pop(d) when device
/// d has a free slot. A policy keeps ready tasks in its own queues (one shared queue, one per
/// device, ...) and must only hand device d a task with can_run(d). completed() reports how long
/// a task took, for policies that learn.
///
/// Thread safety: push, pop and completed are called concurrently from any thread; a policy
/// protects its own state. They sit on the per-task hot path: keep them short.
#pragma once

#include <hcr/config.hpp>
#include <hcr/device.hpp>
#include <hcr/export.hpp>
#include <hcr/types.hpp>

#include <bitset>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hcr::detail {
struct TaskNode;
}

namespace hcr::sched {

using DeviceId = uint32_t;
/// push()'s answer when the task waits in a queue any capable device may take it from.
inline constexpr DeviceId kAnyDevice = ~0u;

/// One buffer argument of a task, as a policy sees it.
struct TaskArg {
  const void* buffer = nullptr;  ///< identifies the buffer (compare, or pass to Context::locate)
  uint64_t bytes = 0;
  Access access = Access::read;
};

/// Non-owning handle to a ready task, valid from push() until pop() hands it out, and during
/// completed(). A task reached through successors() is valid while the task it was reached from
/// is (a successor cannot finish before its predecessor).
class HCR_API TaskRef {
 public:
  TaskRef() = default;
  explicit TaskRef(detail::TaskNode* n) noexcept : n_(n) {}
  explicit operator bool() const noexcept { return n_ != nullptr; }

  std::string_view kernel_name() const noexcept;
  /// Dense id of the kernel within its runtime (0, 1, 2, ...).
  uint32_t kernel_id() const noexcept;
  /// The priority queues and copies order the task by: the application's (Task::priority) until
  /// a policy sets its own with set_priority().
  int priority() const noexcept;
  /// The priority the application gave (0 when it gave none), whatever set_priority() did.
  int user_priority() const noexcept;
  /// Sets the priority the task is ordered by from now on (device queues, the data manager's
  /// copies, tasks made ready at once): for policies that derive priorities (upward ranks).
  void set_priority(int p) const noexcept;
  /// Hash of the arguments' shapes and types: tasks with equal footprints cost the same.
  uint64_t footprint() const noexcept;
  /// Bytes of all buffer arguments: the size a cost model regresses on.
  double size() const noexcept;
  /// Whether device d has an implementation of the kernel and room in its memory for the task.
  bool can_run(DeviceId d) const noexcept;
  /// Whether any device can still run it (false once every capable device left scheduling).
  bool can_run_anywhere() const noexcept;
  /// One word a policy may keep on the task between push() and completed().
  uint64_t policy_data() const noexcept;
  void set_policy_data(uint64_t v) const noexcept;
  /// A second word, readable and writable from any thread at any time while the task is valid
  /// (relaxed atomic): for what a policy computes about tasks not yet ready (ranks over the
  /// graph). Zero until set.
  uint64_t policy_aux() const noexcept;
  void set_policy_aux(uint64_t v) const noexcept;

  /// The task's buffer arguments, in the order given (a buffer named twice appears twice).
  size_t arg_count() const noexcept;
  TaskArg arg(size_t i) const noexcept;
  /// Bytes of the buffers the task writes (write or read_write).
  uint64_t output_bytes() const noexcept;
  /// Whether the task waited for others: it was submitted behind unfinished tasks it depends on.
  bool waited() const noexcept;
  /// The tasks submitted so far that wait for this one: up to `max` into `out` (with `data[i]`
  /// true when out[i] reads what this task writes); returns how many there are in all.
  size_t successors(TaskRef* out, bool* data, size_t max) const noexcept;

  detail::TaskNode* node() const noexcept { return n_; }
  friend bool operator==(TaskRef a, TaskRef b) noexcept { return a.n_ == b.n_; }

 private:
  detail::TaskNode* n_ = nullptr;
};

/// What the core tells a policy about the machine.
class Context {
 public:
  virtual ~Context() = default;
  /// The devices at attach(); later ones arrive through Policy::device_added.
  virtual const std::vector<Device>& devices() const noexcept = 0;
  /// Devices so far, hot-plugged ones included (ids below it are valid; removed ones stay, with
  /// can_run false).
  virtual uint32_t device_count() const noexcept = 0;
  virtual const Device& device(DeviceId d) const noexcept = 0;
  /// Tasks handed to device d and not finished yet.
  virtual uint32_t in_flight(DeviceId d) const noexcept = 0;
  /// Seconds on a steady clock (the clock completed() durations are comparable with).
  virtual double now() const noexcept = 0;
  /// Bytes of `task`'s inputs that have no valid copy in device d's memory and none on its way
  /// there (what placing it there would add to d's link). Lock-free; may be momentarily stale.
  virtual uint64_t bytes_to_fetch(TaskRef task, DeviceId d) const noexcept = 0;
  /// The plugin's own first estimate of `task`'s duration on d, if it offers one (seconds < 0:
  /// none). Meant for tasks the model knows nothing about: it calls into the plugin.
  virtual double plugin_estimate(TaskRef task, DeviceId d) const noexcept = 0;
  /// Asks the core to offer device d its work again (pop(d)) soon, from this thread once the
  /// policy call in progress has returned. For a policy that, asked by one device, finds work
  /// meant for another device that is idle: an idle device is otherwise asked only when a task
  /// is pushed or one of its own finishes. Cheap; safe to call under the policy's locks.
  virtual void wake(DeviceId /*d*/) noexcept {}
  /// Which of the first `count` devices can run `task` (TaskRef::can_run for each), in one pass:
  /// a decision over many devices asks this once rather than once per device.
  virtual void capable(TaskRef task, DeviceId count, std::bitset<kMaxDevices>& out) const noexcept {
    out.reset();
    for (DeviceId d = 0; d < count; ++d) out[d] = task.can_run(d);
  }
  /// bytes_to_fetch() for each of the first `count` devices into bytes[0..count), in one pass
  /// over the task's buffers.
  virtual void bytes_to_fetch(TaskRef task, DeviceId count, uint64_t* bytes) const noexcept {
    for (DeviceId d = 0; d < count; ++d) bytes[d] = bytes_to_fetch(task, d);
  }
  /// Where a buffer's data is (TaskArg::buffer): bit sets over memory nodes (bit n of
  /// word n / 64) of the nodes holding a valid replica, and of those a copy is on its way to.
  /// Lock-free; may be momentarily stale. Without devices of their own memory: host only.
  virtual void locate(const void* /*buffer*/, uint64_t valid[2],
                      uint64_t arriving[2]) const noexcept {
    valid[0] = 1, valid[1] = 0, arriving[0] = arriving[1] = 0;
  }
  /// Whether a copy from memory node `from` to node `to` (both devices' own memories) goes
  /// directly, over `to`'s inbound link, rather than through host memory (device -> host, then
  /// host -> device): the data manager copies directly between the memories of one plugin.
  virtual bool direct_copy(uint32_t /*from*/, uint32_t /*to*/) const noexcept { return false; }
  /// Tasks submitted so far (grows by one per submission): when it has not changed, nothing was
  /// added to the task graph (policies' memos of graph walks stay valid).
  virtual uint64_t submitted() const noexcept { return 0; }
  /// Device d's draw when idle, watts, from its meter or its [[backend]] table (< 0: unknown):
  /// what an energy objective counts for every device over the makespan.
  virtual double idle_watts(DeviceId /*d*/) const noexcept { return -1; }
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const noexcept = 0;
  /// Called once before the first push, with the devices fixed.
  virtual void attach(Context& ctx) = 0;
  /// Device d joined (hot-plug), d == the previous device_count(). Called before any push or
  /// pop can name d, one device at a time; a policy sizes its per-device state for it here.
  virtual void device_added(DeviceId /*d*/) {}
  /// A ready task. Returns the device it was placed on, or kAnyDevice.
  virtual DeviceId push(TaskRef task) = 0;
  /// Device d has a free slot: a task it can run, or an empty ref.
  virtual TaskRef pop(DeviceId d) = 0;
  /// A task popped for d finished after `seconds` on the device (< 0: unknown, e.g. it failed).
  virtual void completed(TaskRef /*task*/, DeviceId /*d*/, double /*seconds*/) {}
  /// Device d left scheduling (quarantined, lost or removed): hand back every task queued for it,
  /// and every task in a shared queue that no device can run any more (!can_run_anywhere()); the
  /// core places them again or fails them with every device's reason.
  virtual std::vector<TaskRef> drain(DeviceId /*d*/) { return {}; }
  /// A copy of `bytes` from memory node `from` to node `to` took `seconds` (node 0 is host memory;
  /// Device::memory_node says whose memory a node is).
  virtual void transferred(uint32_t /*from*/, uint32_t /*to*/, uint64_t /*bytes*/,
                           double /*seconds*/) {}
  /// Whether the policy learns energy costs: then the core reads the devices' meters as tasks
  /// complete and reports each task's share through energy().
  virtual bool wants_energy() const noexcept { return false; }
  /// A task of kernel `kernel` (TaskRef::kernel_id, its name, footprint and size as TaskRef gave
  /// them) used `joules` on device d above the device's idle draw: reported by its plugin for it
  /// alone, from the power its [[backend]] table declares, or a measured meter's reading shared
  /// over the tasks of an interval by their busy time. After completed(); from any thread.
  virtual void energy(uint32_t /*kernel*/, std::string_view /*name*/, uint64_t /*footprint*/,
                      double /*size*/, DeviceId /*d*/, double /*joules*/) {}
  /// Where the policy expects a task that is not ready yet to run (its plan), or kAnyDevice. When
  /// one of the task's predecessors finishes, the core starts copying what that predecessor wrote
  /// for it there, while the others finish. Called from any thread; cheap.
  virtual DeviceId expected_device(TaskRef /*task*/) const noexcept { return kAnyDevice; }
  /// Whether completed() needs measured durations (costs two clock reads per task).
  virtual bool wants_timing() const noexcept { return false; }
  /// The execution time the policy predicted for a task it placed (seconds), or < 0; asked
  /// before completed(), for traces and accuracy counters.
  virtual double predicted(TaskRef /*task*/) const noexcept { return -1; }
  /// Tasks that became ready together (Runtime::resume), before any of them is pushed: a policy
  /// may give them priorities (TaskRef::set_priority; the core then pushes them highest first)
  /// and plan them as one window. Called from any thread.
  virtual void ready_together(std::span<const TaskRef> /*tasks*/) {}
};

using PolicyFactory = std::function<std::unique_ptr<Policy>(const Config&)>;

/// One learned cell of a cost model file, for reports (`hcr models`).
struct ModelRow {
  std::string kernel, arch;
  uint64_t footprint = 0;
  double size = 0;     ///< bytes of the task's buffers
  double seconds = 0;  ///< robust estimate (median of recent samples)
  double spread = 0;   ///< standard deviation (from the MAD)
  uint32_t samples = 0;
  bool fit_valid = false;  ///< the (kernel, arch) power law t = a * size^b + c
  double fit_a = 0, fit_b = 0, fit_c = 0;
  double joules = 0;            ///< energy per launch above the device's idle draw, where known
  uint32_t joules_samples = 0;  ///< (0: none measured)
};
/// The directory learned models persist in for `config` on this host ("" when turned off).
HCR_API std::string model_directory(const Config& config);
/// Every cell in the model files of `dir`; a file that is not a model is skipped with a message
/// in `warnings` naming it.
HCR_API std::vector<ModelRow> read_models(const std::string& dir,
                                          std::vector<std::string>& warnings);
/// Why `text` would not load whole as the file `name` of a model directory, or "" when it would:
/// the loader's own checks (format and version, every cell's fields), the architecture it holds is
/// the one whose file is called `name`, and it holds no more bytes or cells than a model keeps. For
/// a file from elsewhere (hcr::mpi::share_models), before it is written into a model directory.
HCR_API std::string check_model_file(std::string_view name, std::string_view text);

/// The policy named "auto" (Config's default) resolves to on a machine of these devices: "peft"
/// when they are of more than one architecture, else "eager".
HCR_API std::string_view default_policy(const std::vector<Device>& devices);

/// Adds a policy by name (replacing one of the same name). Thread-safe.
HCR_API void register_policy(std::string name, PolicyFactory factory);
/// Names of every registered policy, sorted.
HCR_API std::vector<std::string> policy_names();
/// A new policy; throws Error(ErrorCode::config) naming the known ones when `name` is unknown.
HCR_API std::unique_ptr<Policy> make_policy(std::string_view name, const Config& config);

}  // namespace hcr::sched
