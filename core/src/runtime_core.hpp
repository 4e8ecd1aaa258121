// The runtime's engine: devices and their drivers, the dependency graph, task completion.
#pragma once

#include "contexts/context_state.hpp"
#include "contexts/contexts.hpp"
#include "data/data_manager.hpp"
#include "energy/energy_account.hpp"
#include "engine/attempt_observers.hpp"
#include "engine/completion.hpp"
#include "engine/device_driver.hpp"
#include "engine/device_graphs.hpp"
#include "engine/device_health.hpp"
#include "engine/device_roster.hpp"
#include "engine/device_state.hpp"
#include "engine/device_table.hpp"
#include "engine/host_access.hpp"
#include "engine/landed_tasks.hpp"
#include "engine/launches.hpp"
#include "engine/pause.hpp"
#include "engine/placement.hpp"
#include "engine/recorded_graph.hpp"
#include "engine/reductions.hpp"
#include "engine/scheduling_view.hpp"
#include "engine/task_end.hpp"
#include "engine/task_graph.hpp"
#include "kernel_registry.hpp"
#include "kernel_state.hpp"
#include "launch_slots.hpp"
#include "observers/energy_share.hpp"
#include "observers/prediction_accuracy.hpp"
#include "observers/task_trace.hpp"
#include "plugins/plugin_loader.hpp"
#include "task_node.hpp"
#include "traces.hpp"

#include <hcr/runtime.hpp>
#include <hcr/sched.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace hcr::detail {

class ContextPolicy;
class TenantLink;

class RuntimeCore final : public GraphStages,
                          public PlaceTogether,
                          public HealthListener,
                          public PlacementStages,
                          public DataEvents,
                          public DeviceStatusView,
                          public ReductionStages,
                          public ReplayHost {
 public:
  explicit RuntimeCore(Config config);
  ~RuntimeCore();

  /// Finishes construction (needs shared_from_this-like access for kernels and buffers).
  void start(const std::shared_ptr<RuntimeCore>& self);
  /// Waits for everything, releases kernels and plugins. Idempotent. A plugin still running a
  /// launch the watchdog gave up on (task_timeout) is waited for a bounded time, then left
  /// running: it stays loaded, and this object (with the task, its buffers and its kernel) stays
  /// alive for it, so that nothing it may still touch is freed.
  void shutdown() noexcept;
  bool alive() const noexcept { return alive_.load(std::memory_order_acquire); }
  /// Throws Error(shutdown) once the runtime has ended; `what` names the call in the message.
  void check_alive(std::string_view what = {}) const;

  /// The devices that joined so far (hot-plug adds; removed ones stay, out of scheduling).
  const std::vector<Device>& devices() const noexcept { return devices_.infos(); }
  uint32_t device_count() const noexcept { return devices_.count(); }
  const Device& device(sched::DeviceId d) const noexcept { return devices_.infos()[d]; }
  /// What policies see of the engine (engine/scheduling_view.hpp).
  sched::Context& scheduling_view() noexcept { return view_; }
  /// Seconds on the runtime's clock.
  double now() const noexcept override { return view_.now(); }

  const Config& config() const noexcept { return config_; }
  DataManager& data() noexcept { return data_; }
  sched::Policy& policy() noexcept { return *pol(); }
  const sched::Policy& policy() const noexcept { return *pol(); }

  /// Contexts (contexts/contexts.hpp): Runtime::context, [[context]] tables, find_context.
  hcr::Context make_context(const ContextSpec& spec) { return contexts_.make(spec); }
  hcr::Context make_context(const ContextConfig& table) { return contexts_.make(table); }
  hcr::Context find_context(std::string_view name) const { return contexts_.find(name); }
  /// Hands a task a policy gave back, or a parked one, to placement again.
  void place_again(TaskNode* t) noexcept override { placement_.place(t); }
  // HealthListener: a device left scheduling, or came back.
  void left_scheduling(DeviceState& d) noexcept override;
  void back_in_scheduling(DeviceState& d) noexcept override;
  /// The kernel of that name, made on first use (kernel_registry.hpp).
  Ref<KernelState> kernel(std::string_view name) override;
  /// Asks every device whether it runs `k` (once per device, again after a new implementation).
  void resolve(KernelState& k) override { kernels_.resolve(k); }

  /// Takes ownership of the caller's reference to `t`. Blocks while max_tasks_in_flight tasks are
  /// unfinished (back-pressure), except on threads where waiting could deadlock (see runtime.hpp).
  void submit(TaskNode* t);
  /// ReductionStages: an identity or combine task, recorded while a recording is open (unless a
  /// kernel's own submit made it, as Runtime::submit does).
  void submit_made(TaskNode* t) override;
  /// Access::reduce: declared reductions, private copies, combine tasks (engine/reductions.hpp).
  Reductions& reductions() noexcept { return reductions_; }
  /// Ends `t` (success when `e` is null): releases successors, publishes state.
  void finish(TaskNode* t, std::exception_ptr e) noexcept { completion_.finish(t, std::move(e)); }
  /// Returns once every task whose submit() returned before this call began has finished
  /// (Runtime::wait_all): tasks submitted meanwhile may or may not have.
  void wait_all() noexcept;
  RuntimeStats stats() const;

  // DataEvents (data/data_events.hpp): what the data manager reports.
  /// The copies `t` waited for have completed: its driver launches it.
  void data_ready(TaskNode* t) noexcept override { driver_.data_ready(t); }
  /// Memory may have been freed on the node `t` waits for: its driver tries its acquire again.
  void retry_acquire(TaskNode* t) noexcept override { driver_.retry_acquire(t); }
  /// A write-through ended: `t` finishes, or is retried if the copy failed.
  void written_through(TaskNode* t, std::exception_ptr error) noexcept override {
    completion_.written_through(t, std::move(error));
  }
  /// A copy landed: the policy learns from it (its transfer model), the trace shows it.
  void transferred(const Transferred& copy) noexcept override;
  /// A device's plugin reported it gone during a copy: it is retired as lost.
  void device_lost(uint32_t device, const std::string& why) noexcept override {
    health_.retire(devices_[device], DeviceState::kLost, why);
  }
  uint64_t protocol_error(uint32_t device) noexcept override {
    return devices_[device].protocol_errors.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  // DeviceStatusView
  bool in_scheduling(uint32_t device) const noexcept override {
    return devices_[device].status.load(std::memory_order_seq_cst) == DeviceState::kActive;
  }
  /// The node arbiter (tenant/): device d is withheld (true: it leaves scheduling as a retired
  /// device does: what is queued for it is placed again, what runs there finishes) or given
  /// back (false: it takes work again, and the tasks that only it could run are placed again).
  /// False when d is not in the state asked to leave (a quarantined device stays out).
  bool set_withheld(uint32_t d, bool withheld) noexcept;
  /// Runtime::pause/resume (engine/pause.hpp): every kernel task submitted while paused waits, as
  /// for one more predecessor, until the last resume(); those then ready are placed together,
  /// highest priority first, before a device takes any of them. Pauses nest.
  Pause& pauses() noexcept { return pause_; }
  const Pause& pauses() const noexcept { return pause_; }
  /// Runtime::begin_recording/end_recording and what Runtime::submit records
  /// (engine/recorded_graph.hpp).
  Recorder& recorder() noexcept { return recorder_; }
  // ReplayHost
  void check_replay_alive(std::string_view what) const override { check_alive(what); }
  bool recording() const noexcept override { return recorder_.on(); }
  uint32_t replay_devices() const noexcept override { return device_count(); }
  DeviceGraphs& device_graphs() noexcept override { return device_graphs_; }
  /// Tasks submitted and not finished (the arbiter's busy/idle).
  uint64_t unfinished() const noexcept { return graph_.unfinished(); }

  // GraphStages: what the task graph hands on.
  void ready(TaskNode* t) noexcept override { placement_.place(t); }
  void ready_batch(std::span<TaskNode* const> tasks) noexcept override {
    placement_.place_batch(tasks);
  }
  void waiting_with_inputs(TaskNode* t, std::span<const Ref<BufferState>> inputs) noexcept override;
  void finished_before(TaskNode* t, std::span<const Edge> successors) noexcept override;
  bool moves_inputs_early(const TaskNode& t) const noexcept override;
  bool may_wait_for_room() const noexcept override;
  // PlaceTogether: tasks a resume made ready.
  void place_together(std::vector<TaskNode*> ready) noexcept override;
  /// Tasks handed to device d, plus one while a pumper may be handing it one: the node arbiter
  /// releases a withheld device at 0 (as remove_device waits).
  uint32_t occupied(uint32_t d) const noexcept {
    return devices_[d].in_flight.load(std::memory_order_seq_cst) +
           (devices_[d].pumping.load(std::memory_order_seq_cst) ? 1u : 0u);
  }
  /// RuntimeStats::arbiter.
  void tenant_stats(RuntimeStats& s) const;
  /// Whether device d takes work (not quarantined, lost, removed or withheld).
  bool usable(size_t d) const noexcept {
    return devices_[d].status.load(std::memory_order_relaxed) == DeviceState::kActive;
  }
  /// Whether device d's memory limit can hold `t`'s buffers at all.
  bool fits(const TaskNode* t, size_t d) const noexcept override {
    if (!data_.active()) return true;  // every device works in host memory
    const uint32_t node = devices_[d].info.memory_node;
    return node == 0 || (t->bytes <= data_.limit(node) &&
                         (t->context == nullptr || t->context->memory_quota == 0 ||
                          t->bytes <= t->context->memory_quota));
  }

  void start_trace();
  void stop_trace();
  std::vector<TraceEvent> trace_events() const { return traces_.events(); }
  void write_trace(const std::string& path) const { traces_.write_json(path); }
  void write_gantt(const std::string& path) const { traces_.write_gantt(path); }

  std::shared_ptr<RuntimeCore> self() const { return self_.lock(); }

  /// The plugins loaded and their devices, hot-plug (engine/device_roster.hpp).
  DeviceRoster& roster() noexcept { return roster_; }
  const DeviceRoster& roster() const noexcept { return roster_; }

  /// Host views and async accesses (engine/host_access.hpp).
  HostAccesses& host() noexcept { return host_; }
  const HostAccesses& host() const noexcept { return host_; }
  /// Throws when waiting for `target` on this thread would never end: held by a pause, or behind
  /// a host view this thread holds.
  void check_wait(const TaskNode* target) const;

 private:
  // PlacementStages: feeds device d (its driver).
  uint32_t pump(DeviceState& d) noexcept override { return driver_.pump(d); }
  // PlacementStages: a join or host access whose data is home.
  void host_task_ready(TaskNode* t) noexcept override { completion_.host_task_ready(t); }
  std::unique_ptr<TenantLink> tenant_;  // the node arbiter's client, when configured

  Config config_;
  const int64_t origin_ns_ = TraceRecorder::now_ns();  // "since the runtime started"
  TaskGraph graph_{this, *this, config_.max_tasks_in_flight};
  Pause pause_{graph_, *this};
  HealthKeeper health_{*this, data_, config_.quarantine_failures, config_.quarantine_window};
  DeviceTable devices_;
  KernelRegistry kernels_{devices_};
  DeviceGraphs device_graphs_{devices_, config_.device_graphs};
  Recorder recorder_{graph_, kernels_, reductions_};
  Launches launches_{devices_, completion_, data_, config_.task_timeout};
  Placement placement_{devices_, health_, data_, completion_, *this, config_.prefetch};
  // The policy in use. Read on every push, pop and completion (an acquire load, a plain load on
  // x86); replaced once, when the first context puts a ContextPolicy in front of it (which keeps
  // the old one alive, as its default context's).
  sched::Policy* pol() const noexcept { return placement_.policy(); }
  std::unique_ptr<sched::Policy> policy_owner_;
  std::string policy_name_;  // the configured policy, "auto" resolved: each context gets one
  // Set at start; switched on for good when a context needs measured device time.
  std::atomic<bool> timing_{false};
  std::atomic<uint32_t> launch_flags_{0};  // HCR_LAUNCH_MEASURE when someone uses execution times
  DataManager data_{*this, *this};
  mutable EnergyAccount energy_;  // joules per device and per task (energy/); reading updates it
  SchedulingView view_{devices_, devices_, data_, health_, graph_, energy_};
  // Features that watch attempts end attach here while they are on (engine/attempt_observers.hpp).
  AttemptObservers observers_;
  PredictionAccuracy accuracy_{[this](uint32_t id) { return kernel_name(id); }};  // timing on
  EnergyShare energy_share_{energy_, placement_, [this] { return now(); },        // figures known
                            [this](uint32_t id) { return kernel_name(id); }};
  // The policy learns execution times from now on: start times are taken, predictions checked.
  void time_executions() noexcept;
  Traces traces_{{observers_, energy_, kernels_, devices_, data_,
                  [this] { return contexts_.names(); }, origin_ns_}};
  DeviceDriver driver_{devices_,    placement_, data_,         launches_,
                       completion_, observers_, launch_flags_, timing_};
  Completion completion_{
      {devices_, placement_, driver_, health_, data_, graph_, host_, observers_, timing_}};
  std::weak_ptr<RuntimeCore> self_;
  DeviceRoster roster_{{config_, devices_, data_, completion_, health_, kernels_,
                        [this](std::string_view what) { check_alive(what); },
                        [this](DeviceState& d, const PluginInstance& p) { device_joining(d, p); },
                        [this](uint32_t id) {
                          if (sched::Policy* pl = pol()) pl->device_added(id);
                        },
                        [this](DeviceState& d) { pump(d); }}};
  // Energy accounting learns of a device before it is appended.
  void device_joining(DeviceState& d, const PluginInstance& p);
  // Scheduling contexts (contexts/contexts.hpp): none until Runtime::context is first called.
  Contexts contexts_{{devices_, placement_, data_, view_, config_, roster_.mutex(), policy_owner_,
                      policy_name_, self_, this,
                      [this](std::string_view what) { check_alive(what); },
                      [this](uint32_t d) {
                        if (d < device_count() && usable(d)) pump(devices_[d]);
                      },
                      [this](TaskNode* t) { place_again(t); }, [this] { measure_for_contexts(); }}};
  // Contexts share measured device time: launches are measured, decisions timed, the policy
  // learns execution times, from the first context on.
  void measure_for_contexts() noexcept;

  // A kernel's name by its id (traces, accuracy, energy).
  std::string kernel_name(uint32_t id) const { return kernels_.name(id); }

  HostAccesses host_{completion_};
  Reductions reductions_{*this};

  std::atomic<bool> alive_{true};
  std::atomic<uint64_t> retries_{0};
};

}  // namespace hcr::detail
