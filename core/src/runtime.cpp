// Runtime construction and shutdown, kernel resolution, and the public Runtime entry points
// that hand work to the engine in runtime_core.cpp (tasks are built in task.cpp).
#include "buffer_state.hpp"
#include "builtin_check.hpp"
#include "contexts/context_policy.hpp"
#include "log_internal.hpp"
#include "node_pool.hpp"
#include "runtime_core.hpp"
#include "tenant/tenant_link.hpp"
#include "units.hpp"

#include <hcr/runtime.hpp>
#include <hcr/sched.hpp>

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace hcr::detail {

// ---- reference counting ---------------------------------------------------------------------

void retain(TaskNode* p) noexcept { p->refs.fetch_add(1, std::memory_order_relaxed); }
void release(TaskNode* p) noexcept {
  if (p->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p;
}
void retain(KernelState* p) noexcept { p->refs.fetch_add(1, std::memory_order_relaxed); }
void release(KernelState* p) noexcept {
  if (p->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p;
}

using TaskPool = NodePool<sizeof(TaskNode), alignof(TaskNode)>;
void* TaskNode::operator new(size_t size) {
  if (size != sizeof(TaskNode)) return ::operator new(size);
  return TaskPool::allocate();
}
void TaskNode::operator delete(void* p) noexcept { TaskPool::deallocate(p); }

TaskNode::~TaskNode() {
  for (ArgRec& a : args) release(a.buffer);
  for (ReduceRec& r : reduces) release(r.target);
  for (TaskNode* t : after) release(t);
  // (Before the kernel: its reference may be the last one keeping the runtime, and the graph's
  // release goes through the runtime's DeviceGraphs.)
  if (device_graph) release(device_graph);
  if (kernel) release(kernel);
}

// ---- construction and shutdown --------------------------------------------------------------

RuntimeCore::RuntimeCore(Config config) : config_(std::move(config)) {
  if (config_.log_level) log::set_level(*config_.log_level);
  roster_.load_configured();
  data_.set_eager_writeback(config_.writeback == "eager");
}

void RuntimeCore::device_joining(DeviceState& d, const PluginInstance& p) {
  energy_.add_device(d.info.id,
                     {p.api, p.handle, d.index, std::max<uint32_t>(1, d.info.concurrency),
                      p.idle_watts, p.busy_watts, d.info.name},
                     now());
  if (energy_.active()) observers_.attach(&energy_share_, 0);
}

void RuntimeCore::start(const std::shared_ptr<RuntimeCore>& self) {
  self_ = self;
  // "auto" (the default): chosen from the devices found at the start.
  policy_name_ = config_.policy == "auto" ? sched::default_policy(devices_.infos())
                                          : std::string_view(config_.policy);
  policy_owner_ = sched::make_policy(policy_name_, config_);
  policy_owner_->attach(view_);
  placement_.set_policy(policy_owner_.get());
  const bool timing = policy_owner_->wants_timing();
  if (timing) time_executions();
  energy_share_.set_policy_learns(policy_owner_->wants_energy());
  // Plugins measure execution (two clock reads per task) only when something uses it.
  launch_flags_.store((timing || config_.counters) ? HCR_LAUNCH_MEASURE : 0u,
                      std::memory_order_relaxed);
  placement_.measure_decisions(timing || config_.counters);
  for (const ContextConfig& c : config_.contexts) make_context(c);
  if (!config_.trace_file.empty() || !config_.gantt_file.empty()) traces_.begin();
  if (!config_.arbiter_socket.empty()) tenant_ = TenantLink::join(*this);  // before any task
  HCR_LOG(info,
          "runtime started: " << device_count() << " device(s), policy '" << pol()->name() << "'");
}

RuntimeCore::~RuntimeCore() { shutdown(); }

void RuntimeCore::shutdown() noexcept {
  if (!alive_.exchange(false, std::memory_order_acq_rel)) return;
  while (pause_.resume()) {
  }  // what a pause still holds runs: the end drains every task
  graph_.wait_idle();
  contexts_.stop();  // (reserves: nothing left to pump)
  // A tenant of the node arbiter until its last task is done (grants still apply meanwhile);
  // then it leaves, and its devices go to the others.
  if (tenant_) tenant_->leave();
  launches_.stop();  // the watchdog
  // A plugin still running a launch the watchdog gave up on is left running; its devices' memory
  // counts as lost (no copy from it, nothing freed in it).
  const std::vector<PluginInstance*> stuck = launches_.settle_hung(roster_.plugins());
  auto is_stuck = [&](const PluginInstance* p) {
    return std::find(stuck.begin(), stuck.end(), p) != stuck.end();
  };
  // By device: its plugin will not be destroyed
  std::vector<bool> device_stuck(devices_.appended());
  for (size_t i = 0; i < devices_.appended(); ++i) {
    device_stuck[i] = is_stuck(devices_[i].plugin);
    if (device_stuck[i] && devices_[i].info.memory_node != 0)
      data_.abandon_node(devices_[i].info.memory_node, devices_[i].info.name);
  }
  data_.shutdown();  // every buffer's data home, device memory freed
  for (auto [file, write] : {std::pair{config_.trace_file, &RuntimeCore::write_trace},
                             std::pair{config_.gantt_file, &RuntimeCore::write_gantt}}) {
    if (file.empty()) continue;
    try {
      (this->*write)(file);
      HCR_LOG(info, "wrote " << file);
    } catch (const std::exception& e) {
      HCR_LOG(error, e.what());
    }
  }
  for (size_t i = 0; i < devices_.appended(); ++i) {
    if (device_stuck[i]) continue;
    DeviceState* d = &devices_[i];
    if (hcr_error_t* e = d->plugin->api->synchronize(d->plugin->handle, d->index))
      HCR_LOG(warn, "device '" << d->info.name << "': synchronize at shutdown failed: "
                               << take_error(d->plugin->api, e));
  }
  device_graphs_.release_all();  // (they use the kernels' handles)
  kernels_.release_handles(device_stuck);
  placement_.set_policy(nullptr);
  policy_owner_.reset();
  // Destroying an instance unloads its library with the last one. Devices (and kernels, whose
  // names launch slots point at) outlive their plugins: a plugin may answer until it is gone.
  for (auto& p : roster_.plugins())
    if (!is_stuck(p.get())) p.reset();
  for (size_t i = 0; i < devices_.appended(); ++i) {
    if (!device_stuck[i]) Launches::return_slots(devices_[i]);  // no answer can come any more
  }
  if (stuck.empty()) {
    kernels_.clear();
    return;
  }
  // What the stuck launches may touch stays: this object, its devices, kernels and the stuck
  // plugins, reachable from a list that is never freed. (The hung task's kernel holds this object
  // too, but only until the plugin's late done releases it: on the plugin's own thread, which must
  // not be where the plugin is destroyed and its library unloaded.)
  static auto* abandoned = new std::vector<std::shared_ptr<RuntimeCore>>();
  static auto* abandoned_mutex = new std::mutex();
  if (std::shared_ptr<RuntimeCore> me = self()) {
    try {
      std::lock_guard<std::mutex> g(*abandoned_mutex);
      abandoned->push_back(std::move(me));
    } catch (...) {  // no memory even for that: nothing better to do
      HCR_LOG(error, "shutdown: cannot keep the runtime for its stuck plugins");
    }
  }
}

// ---- kernels --------------------------------------------------------------------------------

Ref<KernelState> RuntimeCore::kernel(std::string_view name) {
  check_alive("kernel");
  return kernels_.get(name, self());
}

}  // namespace hcr::detail

namespace hcr {

using detail::TaskNode;

// ---- Runtime --------------------------------------------------------------------------------

namespace {
Config with_environment(Config c) {
  if (!c.use_environment) return c;
  if (const char* v = std::getenv("HCR_LOG"); v && *v) {
    if (auto l = log::parse_level(v)) c.log_level = *l;
    else log::write(LogLevel::warn, std::string("HCR_LOG='") + v + "' is not a log level; ignored");
  }
  if (const char* v = std::getenv("HCR_SCHED"); v && *v) c.policy = v;
  if (const char* v = std::getenv("HCR_TRACE"); v && *v) c.trace_file = v;
  if (const char* v = std::getenv("HCR_ARBITER_SOCKET"); v && *v) c.arbiter_socket = v;
  return c;
}

// A Config built by hand skips the TOML parser's checks: the same ranges hold here, so that a bad
// value is an error at start, not a device quarantined at its first fault (quarantine_failures 0),
// a timeout that overflows the clock (task_timeout inf) or a word the code never compares with
// (writeback "eagre"). The policy name is checked where the policy is made.
Config validated(Config c) {
  auto fail = [&](const std::string& key, const std::string& what) {
    throw Error(ErrorCode::config, c.origin + ": " + key + ": " + what);
  };
  auto seconds = [](double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  if (c.quarantine_failures < 1 || c.quarantine_failures > 1000000)
    fail("runtime.quarantine_failures",
         std::to_string(c.quarantine_failures) + " is not 1 to 1000000");
  if (!(c.quarantine_window > 0) || !std::isfinite(c.quarantine_window))
    fail("runtime.quarantine_window",
         seconds(c.quarantine_window) + " is not a positive number of seconds");
  // The clock counts nanoseconds in 64 bits: about 292 years.
  if (!(c.task_timeout >= 0) || !(c.task_timeout <= 1e9))
    fail("runtime.task_timeout",
         seconds(c.task_timeout) + " is not a number of seconds from 0 (no limit) to 1e9");
  if (c.calibrate != "auto" && c.calibrate != "force" && c.calibrate != "off")
    fail("scheduler.calibrate", "'" + c.calibrate + "' is not one of auto, force, off");
  if (c.calibrate_samples < 1 || c.calibrate_samples > 1000)
    fail("scheduler.calibrate_samples", std::to_string(c.calibrate_samples) + " is not 1 to 1000");
  if (c.max_tasks_in_flight > (uint64_t{1} << 62))
    fail("runtime.max_tasks_in_flight",
         std::to_string(c.max_tasks_in_flight) + " is not 0 (no bound) to 2^62");
  if (c.lookahead < -1 || c.lookahead > 1024)
    fail("data.lookahead", std::to_string(c.lookahead) + " is not -1 or 0 to 1024");
  if (c.writeback != "lazy" && c.writeback != "eager")
    fail("data.writeback", "'" + c.writeback + "' is not lazy or eager");
  if (c.objective != "time" && c.objective != "energy" && c.objective != "weighted")
    fail("scheduler.objective", "'" + c.objective + "' is not one of time, energy, weighted");
  // (HCR_ARBITER_SOCKET lands here too.) A relative path would be looked up in the working
  // directory: whichever socket happens to be there.
  if (!c.arbiter_socket.empty() &&
      (!std::filesystem::path(c.arbiter_socket).is_absolute() || c.arbiter_socket.size() > 107))
    fail("arbiter.socket", "'" + c.arbiter_socket +
                               "' is not an absolute path of at most 107 bytes (a Unix socket's)");
  if (!(c.arbiter_weight > 0) || !(c.arbiter_weight <= 1e6))
    fail("arbiter.weight", seconds(c.arbiter_weight) + " is not a positive number, at most 1e6");
  if (!(c.max_slowdown >= 1 && c.max_slowdown <= 100))
    fail("scheduler.max_slowdown", seconds(c.max_slowdown) + " is not a factor from 1 to 100");
  if (!(c.gamma >= 0) || !std::isfinite(c.gamma))
    fail("scheduler.gamma", seconds(c.gamma) + " is not a non-negative number");
  if (!(c.idle_power >= 0) || !std::isfinite(c.idle_power))
    fail("scheduler.idle_power", seconds(c.idle_power) + " is not a non-negative number");
  for (size_t i = 0; i < c.backends.size(); ++i) {
    const BackendConfig& b = c.backends[i];
    const std::string which =
        "backend " + std::to_string(i) + (b.origin.empty() ? std::string() : " (" + b.origin + ")");
    if (b.name.empty()) fail(which, "every backend needs a name");
    if (!b.memory_limit.empty() && !detail::parse_memory_limit(b.memory_limit))
      fail(which, "memory_limit '" + b.memory_limit +
                      "' is not a size (\"4GiB\", \"512MB\", bytes) or a share (\"75%\")");
    for (auto [name, w] : {std::pair{"idle_watts", b.idle_watts}, {"busy_watts", b.busy_watts}})
      if (!(w < 0 || w <= 1e6))  // (< 0: not declared)
        fail(which, std::string(name) + " " + seconds(w) + " is not a number of watts to 1e6");
  }
  return c;
}
}  // namespace

Runtime::Runtime() : Runtime(Config{}) {}

Runtime::Runtime(Config config)
    : core_(std::make_shared<detail::RuntimeCore>(validated(with_environment(std::move(config))))) {
  core_->start(core_);
}

Runtime::~Runtime() {
  if (!core_) return;
  // Views this thread still holds would keep the wait below from ever ending.
  core_->host().end_views_of_this_thread();
  core_->host().end_async_accesses();  // likewise for acquire_async accesses never released
  // A recording never ended: its graph (which holds the runtime through its buffers) goes.
  if (core_->recorder().on()) (void)core_->recorder().end();
  try {
    core_->reductions().combine_all();  // contributions not combined yet reach their buffers
  } catch (const std::exception& e) {
    log::write(LogLevel::error, std::string("runtime end: combining reductions: ") + e.what());
  }
  core_->shutdown();
}

std::vector<Device> Runtime::devices() const { return core_->roster().snapshot(); }
LoadReport Runtime::load_report() const { return core_->roster().report(); }
PluginRecord Runtime::load_plugin(const std::string& path, const BackendConfig& backend) {
  return core_->roster().load_plugin(path, backend);
}
void Runtime::remove_device(uint32_t device) { core_->roster().remove_device(device); }
const Config& Runtime::config() const noexcept { return core_->config(); }
std::string_view Runtime::policy() const noexcept { return core_->policy().name(); }

Kernel Runtime::kernel(std::string_view name) { return Kernel(core_->kernel(name)); }

Event Runtime::submit(Task& task) {
  TaskNode* t = task.release();
  if (t == nullptr)
    throw Error(ErrorCode::invalid_argument,
                "Runtime::submit: the task is empty (already submitted, or moved from)");
  detail::Ref<TaskNode> owned = detail::Ref<TaskNode>::adopt(t);
  if (t->rt != core_.get())
    throw Error(ErrorCode::invalid_argument, "Runtime::submit: the task's kernel '" +
                                                 t->kernel->name + "' belongs to another runtime");
  core_->check_alive("Runtime::submit");
  if (core_->recorder().on()) [[unlikely]] {
    const TaskNode* running = detail::running_cpu_task();
    if (running == nullptr || running->rt != core_.get()) detail::Recorder::check_recordable(*t);
  }
  for (size_t i = 0; i < t->args.size(); ++i) {
    detail::BufferState* b = t->args[i].buffer;
    if (b->detached.load(std::memory_order_acquire))
      throw Error(ErrorCode::invalid_argument,
                  "Runtime::submit: argument " + std::to_string(i) + " (a " + describe(*b) +
                      ") no longer exists: the buffer was unpartitioned");
    b->lock.lock();
    bool partitioned = b->partitioned;
    b->lock.unlock();
    if (partitioned)
      throw Error(ErrorCode::invalid_argument,
                  "Runtime::submit: argument " + std::to_string(i) + " (a " + describe(*b) +
                      ") is partitioned: use its tiles, or unpartition it first");
    detail::combine_reductions(*b);
  }
  if (!t->reduces.empty()) core_->reductions().join(*t);
  if (const detail::BuiltinSpec* builtin = t->kernel->builtin)
    detail::check_builtin_task(*builtin, *t);
  core_->resolve(*t->kernel);
  Event e(owned);
  if (core_->recorder().on()) {
    const TaskNode* running = detail::running_cpu_task();
    if (running == nullptr || running->rt != core_.get()) {  // a kernel's own submits: not kept
      core_->recorder().record_and_submit(t, [&] { core_->submit(owned.detach()); });
      return e;
    }
  }
  core_->submit(owned.detach());
  return e;
}

void Runtime::begin_recording() {
  core_->check_alive("Runtime::begin_recording");
  // Contributions from before are combined now: a combine while recording is recorded, and
  // folds only the recording's own private copies, which each replay makes afresh.
  core_->reductions().combine_all();
  core_->recorder().begin(core_->self(), *core_);
}

Graph Runtime::end_recording() { return Graph(core_->recorder().end()); }

void Runtime::wait_all() {
  if (const TaskNode* t = detail::running_cpu_task(); t != nullptr && t->rt == core_.get())
    throw Error(ErrorCode::invalid_argument,
                "Runtime::wait_all inside kernel '" + t->kernel->name +
                    "' would wait forever: the kernel's own task is unfinished work");
  core_->host().check_no_view_held("Runtime::wait_all");
  core_->pauses().check_not_held("Runtime::wait_all", nullptr);
  // Contributions are combined too, unless a pause would hold the combines (and this wait with
  // them): they are then combined at the buffer's next access.
  if (!core_->pauses().closed()) core_->reductions().combine_all();
  core_->wait_all();
}

void Runtime::pause() {
  core_->check_alive("Runtime::pause");
  core_->pauses().pause();
}

void Runtime::resume() {
  if (!core_->pauses().resume())
    throw Error(ErrorCode::invalid_argument, "Runtime::resume without a Runtime::pause to end");
}

RuntimeStats Runtime::stats() const { return core_->stats(); }

Context Runtime::context(const ContextSpec& spec) { return core_->make_context(spec); }
Context Runtime::find_context(std::string_view name) const { return core_->find_context(name); }

void Runtime::start_trace() { core_->start_trace(); }
void Runtime::stop_trace() { core_->stop_trace(); }
std::vector<TraceEvent> Runtime::trace_events() const { return core_->trace_events(); }
void Runtime::write_trace(const std::string& path) const { core_->write_trace(path); }
void Runtime::write_gantt(const std::string& path) const { core_->write_gantt(path); }

}  // namespace hcr
