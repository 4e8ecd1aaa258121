// Runtime construction and shutdown, kernel resolution, and the public Runtime/Task/Event entry
// points that hand work to the engine in runtime_core.cpp.
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
  for (TaskNode* t : after) release(t);
  if (kernel) release(kernel);
}

// ---- construction and shutdown --------------------------------------------------------------

RuntimeCore::RuntimeCore(Config config) : config_(std::move(config)) {
  if (config_.log_level) log::set_level(*config_.log_level);
  plugins_ = load_plugins(config_, report_);
  for (auto& p : plugins_) add_devices(*p);
  warn_if_oversubscribed();
  data_.set_eager_writeback(config_.writeback == "eager");
}

// CPU devices run one task per slot on a core of their own: more slots than the process may use
// cores (several cpu tables, a threads option above the affinity mask) make workers take turns on
// a core, and every prediction of their speed wrong. Said once per runtime (and again when a
// plugged-in device raises the count).
void RuntimeCore::warn_if_oversubscribed() {
  uint32_t slots = 0, devices = 0;
  for (size_t d = 0; d < devices_.appended(); ++d)
    if (devices_[d].info.kind == DeviceKind::cpu) {
      slots += std::max<uint32_t>(1, devices_[d].info.concurrency);
      ++devices;
    }
  cpu_set_t set;
  CPU_ZERO(&set);
  const uint32_t cores = ::sched_getaffinity(0, sizeof(set), &set) == 0
                             ? static_cast<uint32_t>(CPU_COUNT(&set))
                             : std::max(1u, std::thread::hardware_concurrency());
  if (slots <= cores || slots <= oversubscribed_warned_) return;
  oversubscribed_warned_ = slots;
  HCR_LOG(warn, devices << " CPU device(s) run " << slots << " worker(s) on the " << cores
                        << " core(s) this process may use: workers take turns and run slower "
                           "than their model predicts (give the cpu backends threads that add up "
                           "to at most "
                        << cores << ")");
}

void RuntimeCore::add_devices(PluginInstance& p) {
  if (devices_.appended() + p.devices.size() > kMaxDevices)
    throw Error(ErrorCode::config, "plugin '" + p.name + "': more than " +
                                       std::to_string(kMaxDevices) + " devices in one runtime");
  for (auto& rec : p.devices) {
    auto ds = std::make_unique<DeviceState>();
    DeviceState& d = *ds;
    d.info = rec.info;
    d.info.id = devices_.appended();
    d.plugin = &p;
    d.attempts = &completion_;
    d.index = rec.index;
    d.flags = rec.flags;
    // Keep every slot busy and, by default, one task queued behind each: a slot finishing a
    // task finds the next one in the plugin, its inputs already copied in.
    const uint32_t slots = std::max<uint32_t>(1, d.info.concurrency);
    d.window = slots + (config_.lookahead < 0 ? slots : static_cast<uint32_t>(config_.lookahead));
    // Memory nodes: host-memory devices share node 0; every other device has its own, with the
    // limit its [[backend]] table sets (default 90% of what it reports).
    if (!(d.flags & HCR_DEVICE_HOST_MEMORY)) {
      MemoryLimit limit{true, 90};
      if (!p.memory_limit.empty()) {
        auto parsed = parse_memory_limit(p.memory_limit);
        if (!parsed)
          throw Error(ErrorCode::config, p.origin + ": backend '" + p.name + "': memory_limit '" +
                                             p.memory_limit + "' is not a size or a share");
        limit = *parsed;
      }
      uint64_t bytes = limit.apply(d.info.memory_bytes);
      if (d.info.memory_bytes > 0) bytes = std::min(bytes, d.info.memory_bytes);
      d.info.memory_node = data_.add_node({&p, d.index, d.info.id, d.info.name, bytes});
    }
    energy_.add_device(d.info.id,
                       {p.api, p.handle, rec.index, std::max<uint32_t>(1, d.info.concurrency),
                        p.idle_watts, p.busy_watts, d.info.name},
                       now());
    if (energy_.active()) observers_.attach(&energy_share_, 0);
    health_.joined(d.info.id);
    devices_.append(std::move(ds), d.info.memory_node == 0 ? 0 : data_.limit(d.info.memory_node));
    if (sched::Policy* pl = pol()) pl->device_added(d.info.id);  // hot-plug: before anyone sees it
    devices_.publish();
  }
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
  if (!config_.trace_file.empty() || !config_.gantt_file.empty()) begin_trace();
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
  if (context_policy_ != nullptr) context_policy_->stop();  // (reserves: nothing left to pump)
  // A tenant of the node arbiter until its last task is done (grants still apply meanwhile);
  // then it leaves, and its devices go to the others.
  if (tenant_) tenant_->leave();
  launches_.stop();  // the watchdog
  // A plugin still running a launch the watchdog gave up on is left running; its devices' memory
  // counts as lost (no copy from it, nothing freed in it).
  const std::vector<PluginInstance*> stuck = settle_hung_launches();
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
  {
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    for (auto& [name, k] : kernels_) {
      std::lock_guard<std::mutex> klock(k->mutex);
      for (size_t d = 0, n = device_count(); d < n; ++d) {
        if (device_stuck[d]) continue;  // a stuck launch may still use the handle: it stays
        KernelDevice& kd = k->devices[d];
        if (kd.handle)
          devices_[d].plugin->api->kernel_release(devices_[d].plugin->handle, kd.handle);
        kd.handle = nullptr;
        k->set_capability(d, Capability::no);
      }
    }
  }
  placement_.set_policy(nullptr);
  policy_owner_.reset();
  // Destroying an instance unloads its library with the last one. Devices (and kernels, whose
  // names launch slots point at) outlive their plugins: a plugin may answer until it is gone.
  for (auto& p : plugins_)
    if (!is_stuck(p.get())) p.reset();
  for (size_t i = 0; i < devices_.appended(); ++i) {
    if (device_stuck[i]) continue;
    DeviceState* d = &devices_[i];
    // No answer can come any more: the slots go back to the table, releasing what a launch given
    // up on held if its plugin ended without answering.
    Launches::for_each_slot(*d, [](LaunchSlot& s) {
      uint64_t st = s.state.load(std::memory_order_acquire);
      if (LaunchSlot::status(st) == LaunchSlot::kGivenUp &&
          s.state.compare_exchange_strong(
              st, LaunchSlot::make(LaunchSlot::generation(st), LaunchSlot::kFree)))
        Launches::release_hung(s.hung.load(std::memory_order_relaxed));
    });
    for (uint32_t c = 0, n = d->slot_chunks_used.load(); c < n; ++c)
      LaunchTable::give_back(d->slot_chunks[c].load(std::memory_order_relaxed));
    d->slot_chunks_used.store(0, std::memory_order_release);
  }
  if (stuck.empty()) {
    std::lock_guard<std::mutex> lock(kernels_mutex_);
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

std::vector<PluginInstance*> RuntimeCore::settle_hung_launches() noexcept {
  std::vector<PluginInstance*> stuck;
  // A few timeouts, at least a second: time for a launch that was merely slow to come back.
  const auto grace = std::max<std::chrono::steady_clock::duration>(
      4 * std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::duration<double>(launches_.task_timeout())),
      std::chrono::seconds(1));
  for (auto& p : plugins_) {
    auto hung = [&] {
      std::vector<std::string> out;
      for (uint32_t i = 0; i < devices_.appended(); ++i) {
        DeviceState* d = &devices_[i];
        if (d->plugin != p.get()) continue;
        Launches::for_each_slot(*d, [&](LaunchSlot& s) {
          const auto st = LaunchSlot::status(s.state.load(std::memory_order_acquire));
          if (st == LaunchSlot::kGivenUp || st == LaunchSlot::kGivingUp)
            out.push_back(std::string("kernel '") + s.kernel.load(std::memory_order_relaxed) +
                          "' on device '" + d->info.name + "'");
        });
      }
      return out;
    };
    if (hung().empty()) continue;
    // Its synchronize ends what a simulated or GPU device can end; a CPU kernel that never
    // returns keeps it waiting forever: a helper thread calls it, and is left behind if so.
    struct Sync {
      std::mutex m;
      std::condition_variable cv;
      bool done = false;
    };
    auto sync = std::make_shared<Sync>();
    std::vector<size_t> indices;
    for (uint32_t i = 0; i < devices_.appended(); ++i)
      if (devices_[i].plugin == p.get()) indices.push_back(devices_[i].index);
    bool done = false;
    try {
      std::thread([sync, api = p->api, handle = p->handle, indices] {
        for (size_t i : indices)
          if (hcr_error_t* e = api->synchronize(handle, i)) api->error_destroy(e);
        std::lock_guard<std::mutex> g(sync->m);
        sync->done = true;
        sync->cv.notify_all();
      }).detach();
      std::unique_lock<std::mutex> lock(sync->m);
      done = sync->cv.wait_for(lock, grace, [&] { return sync->done; });
    } catch (...) {  // no thread: treat it as stuck rather than wait forever
    }
    std::vector<std::string> left = hung();
    if (done && left.empty()) continue;
    std::string list;
    for (const std::string& h : left) list += (list.empty() ? "" : ", ") + h;
    HCR_LOG(error, "shutdown: plugin '"
                       << p->name << "' has not returned from " << left.size()
                       << " launch(es) the task timeout gave up on (" << list << ") within "
                       << detail::format_seconds(std::chrono::duration<double>(grace).count())
                       << "; the runtime ends without it: the plugin stays "
                          "loaded and running, and the tasks' buffers allocated");
    stuck.push_back(p.get());
  }
  return stuck;
}

// ---- kernels --------------------------------------------------------------------------------

std::string RuntimeCore::kernel_name(uint32_t id) const {
  std::lock_guard<std::mutex> lock(kernels_mutex_);
  for (auto& [name, k] : kernels_)
    if (k->id == id) return name;
  return "?";
}

Ref<KernelState> RuntimeCore::kernel(std::string_view name) {
  check_alive("kernel");
  if (name.empty()) throw Error(ErrorCode::invalid_argument, "a kernel needs a name");
  std::lock_guard<std::mutex> lock(kernels_mutex_);
  auto it = kernels_.find(name);
  if (it != kernels_.end()) return it->second;
  auto* k = new KernelState();
  k->rt = self();
  k->name = std::string(name);
  k->id = static_cast<uint32_t>(kernels_.size());
  k->builtin = find_builtin(name);
  k->num_devices = kMaxDevices;
  k->devices = std::make_unique<KernelDevice[]>(k->num_devices);
  Ref<KernelState> ref = Ref<KernelState>::adopt(k);
  kernels_.emplace(k->name, ref);
  return ref;
}

void RuntimeCore::resolve(KernelState& k) {
  if (k.resolved.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(k.mutex);
  if (k.resolved.load(std::memory_order_relaxed)) return;
  bool any = false;
  for (size_t d = 0, n = device_count(); d < n; ++d) {
    KernelDevice& kd = k.devices[d];
    if (kd.capability.load(std::memory_order_relaxed) == Capability::unknown) {
      DeviceState& ds = devices_[d];
      const hcr_plugin_api_t* api = ds.plugin->api;
      std::string why;
      auto try_desc = [&](const hcr_kernel_desc_t& desc) {
        hcr_kernel_get_args_t a{};
        a.struct_size = HCR_KERNEL_GET_ARGS_STRUCT_SIZE;
        a.device = ds.index;
        a.desc = &desc;
        hcr_error_t* err = api->kernel_get(ds.plugin->handle, &a);
        if (err == nullptr && a.kernel != nullptr) {
          kd.handle = a.kernel;
          return true;
        }
        if (err == nullptr) {
          why += (why.empty() ? "" : ", ") + std::string("plugin returned no kernel");
          return false;
        }
        auto code = api->error_code(err);
        std::string msg = take_error(api, err);
        if (code != HCR_ERROR_NOT_FOUND && code != HCR_ERROR_UNSUPPORTED)
          HCR_LOG(warn, "kernel '" << k.name << "' on device '" << ds.info.name << "': " << msg);
        why += (why.empty() ? "" : "; ") + msg;
        return false;
      };
      hcr_kernel_desc_t builtin{};
      builtin.struct_size = HCR_KERNEL_DESC_STRUCT_SIZE;
      builtin.name = k.name.c_str();
      builtin.kind = HCR_IMPL_BUILTIN;
      bool ok = try_desc(builtin);
      for (size_t i = 0; !ok && i < k.impls.size(); ++i) {
        const KernelImpl& im = *k.impls[i];
        hcr_kernel_desc_t desc{};
        desc.struct_size = HCR_KERNEL_DESC_STRUCT_SIZE;
        desc.name = k.name.c_str();
        desc.kind = im.kind;
        desc.api = im.api.c_str();
        desc.fn = im.fn;
        desc.user_data = im.user_data;
        desc.source = im.source.empty() ? nullptr : im.source.c_str();
        desc.source_size = im.source.size();
        desc.build_options = im.build_options.empty() ? nullptr : im.build_options.c_str();
        desc.binary_path = im.binary_path.empty() ? nullptr : im.binary_path.c_str();
        desc.entry = im.entry.empty() ? nullptr : im.entry.c_str();
        ok = try_desc(desc);
      }
      kd.why_not = ok ? std::string() : why;
      k.set_capability(d, ok ? Capability::yes : Capability::no);
      HCR_LOG(debug, "kernel '" << k.name << "' on device '" << ds.info.name
                                << "': " << (ok ? "available" : "unavailable (" + why + ")"));
    }
    any = any || kd.capability.load(std::memory_order_relaxed) == Capability::yes;
  }
  k.any_capable.store(any, std::memory_order_relaxed);
  k.resolved.store(true, std::memory_order_release);
}

// ---- tasks ----------------------------------------------------------------------------------

TaskNode* task_create(KernelState* kernel) {
  if (kernel == nullptr)
    throw Error(ErrorCode::invalid_argument,
                "Task: a task needs a valid kernel, not an empty Kernel handle");
  if (!kernel->rt->alive())  // the message is built only then: this is the submit path
    kernel->rt->check_alive("Task: kernel '" + kernel->name + "'");
  auto* t = new TaskNode;
  t->rt = kernel->rt.get();
  retain(kernel);
  t->kernel = kernel;
  return t;
}

// The same buffer twice in one task is allowed, whatever the modes (an in-place kernel given its
// input and output as one buffer): dependencies and data movement use the union of the modes, and
// every argument sees the same memory.
void task_add_arg(TaskNode* t, BufferState* b, Access mode) {
  // The checks are a few compares; messages are only built on failure (the submit path).
  auto call = [&] {
    return std::string("Task::") + access_name(mode) + ": argument " +
           std::to_string(t->args.size());
  };
  if (mode != Access::read && mode != Access::write && mode != Access::read_write &&
      mode != Access::commute)
    throw Error(ErrorCode::invalid_argument, "Task::arg: argument " +
                                                 std::to_string(t->args.size()) + ": access mode " +
                                                 std::to_string(static_cast<int>(mode)) +
                                                 " is not read, write, read_write or commute");
  if (b == nullptr) throw Error(ErrorCode::invalid_argument, call() + " is an empty Buffer handle");
  if (b->rt.get() != t->rt) {
    if (!b->rt->alive())
      throw Error(ErrorCode::shutdown,
                  call() + " (a " + describe(*b) + ") belongs to a runtime that has ended");
    throw Error(ErrorCode::invalid_argument, call() + " (a " + describe(*b) +
                                                 ") belongs to another runtime than kernel '" +
                                                 t->kernel->name + "'");
  }
  retain(b);
  t->args.push_back({b, mode});
}

void task_add_scratch(TaskNode* t, DType dtype, size_t rows, size_t cols) {
  const size_t position = t->args.size() + t->scratch.size();
  auto call = [&] { return "Task::scratch: argument " + std::to_string(position); };
  const size_t esize = dtype_size(dtype);
  if (esize == 0)
    throw Error(ErrorCode::invalid_argument,
                call() + ": unknown dtype " + std::to_string(static_cast<int>(dtype)));
  uint64_t bytes = 0;
  if (rows == 0 || cols == 0 || __builtin_mul_overflow(uint64_t{rows}, uint64_t{cols}, &bytes) ||
      __builtin_mul_overflow(bytes, uint64_t{esize}, &bytes) ||
      __builtin_add_overflow(t->bytes, bytes, &t->bytes))
    throw Error(ErrorCode::invalid_argument,
                call() + ": a workspace of " + std::to_string(rows) + "x" + std::to_string(cols) +
                    " " + std::string(dtype_name(dtype)) +
                    (rows == 0 || cols == 0 ? " is empty" : " is implausibly large"));
  t->scratch.push_back({static_cast<uint32_t>(position), dtype, rows, cols, bytes, nullptr});
  t->scratch_bytes += bytes;
}

void task_add_param(TaskNode* t, const void* data, size_t size, size_t align) {
  if (t->param_offsets.size() >= 64)
    throw Error(ErrorCode::invalid_argument, "Task::param: parameter " +
                                                 std::to_string(t->param_offsets.size()) +
                                                 " is one too many (at most 64)");
  size_t off = (t->params.size() + align - 1) / align * align;
  if (off + size > 0xffff)
    throw Error(ErrorCode::invalid_argument, "Task::param: a " + std::to_string(size) +
                                                 "-byte parameter after " + std::to_string(off) +
                                                 " bytes of them exceeds 64 KiB");
  t->params.resize(off + size);
  std::memcpy(t->params.data() + off, data, size);
  t->param_offsets.push_back(static_cast<uint32_t>(off));
}

void task_set_priority(TaskNode* t, int priority) noexcept {
  t->priority = t->user_priority = priority;
}

void task_pin(TaskNode* t, uint32_t device) {
  const uint32_t n = t->rt->device_count();
  if (device >= n)
    throw Error(ErrorCode::invalid_argument,
                "Task::on: device " + std::to_string(device) + " does not exist (the runtime has " +
                    std::to_string(n) + (n == 1 ? " device)" : " devices)"));
  t->pinned = static_cast<int32_t>(device);
}

void task_set_context(TaskNode* t, ContextState* context) {
  if (context == nullptr)
    throw Error(ErrorCode::invalid_argument, "Task::in: an empty Context handle");
  if (context->rt != t->rt)
    throw Error(ErrorCode::invalid_argument,
                "Task::in: context '" + context->name + "' belongs to another runtime");
  t->context = context;
}

// An empty Event stands for work that is already done (Event::ready() is true): after() ignores
// it, so that `Event last; ... Task(k).after(last)` chains need no special first step.
void task_add_dependency(TaskNode* t, TaskNode* before) {
  if (before == nullptr) return;
  if (before->rt != t->rt)
    throw Error(ErrorCode::invalid_argument,
                std::string("Task::after: the event is of a task of another runtime") +
                    (before->kernel ? " (kernel '" + before->kernel->name + "')" : std::string()));
  if (!before->submitted)
    throw Error(ErrorCode::invalid_argument, "Task::after: a task that was never submitted");
  retain(before);
  t->after.push_back(before);
}

bool task_done(const TaskNode* t) noexcept {
  return t->state.load(std::memory_order_acquire) != kPending;
}
void task_wait(const TaskNode* t) {
  if (t->state.load(std::memory_order_acquire) == kPending && t->rt != nullptr)
    t->rt->check_wait(t);
  for (uint32_t s; (s = t->state.load(std::memory_order_acquire)) == kPending;)
    t->state.wait(s, std::memory_order_acquire);
}
std::exception_ptr task_error(const TaskNode* t) noexcept {
  return t->state.load(std::memory_order_acquire) == kFailed ? t->error : nullptr;
}
int task_device(const TaskNode* t) noexcept { return t->device.load(std::memory_order_relaxed); }

const void* task_param(const TaskNode* t, size_t index, size_t size) {
  if (index >= t->param_offsets.size())
    throw Error(ErrorCode::invalid_argument, "parameter " + std::to_string(index) +
                                                 " requested; the task has " +
                                                 std::to_string(t->param_offsets.size()));
  const size_t off = t->param_offsets[index];
  const bool last = index + 1 == t->param_offsets.size();
  const size_t end = last ? t->params.size() : t->param_offsets[index + 1];
  auto refuse = [&](const char* why) {
    throw Error(ErrorCode::invalid_argument,
                "parameter " + std::to_string(index) + " holds " + std::to_string(end - off) +
                    " bytes" + (last ? "" : " (up to the next)") + "; " + std::to_string(size) +
                    " requested" + why +
                    ": Task::param passes a value's bytes unconverted, so read it as the type it "
                    "was given as (a float given as 2.0 is a double; give 2.0f)");
  };
  if (size > end - off) refuse("");
  // What lies beyond the value read may only be the zero padding that aligns the next parameter
  // (to a power of two dividing its offset): else a double given for a float would be read as its
  // low half, 0 for 2.0, without a word.
  if (size < end - off) {
    bool padding = !last;
    for (size_t i = off + size; padding && i < end; ++i) padding = t->params[i] == std::byte{0};
    bool aligns = false;
    for (size_t align = 1; padding && !aligns && align <= (end & (~end + 1)); align *= 2)
      aligns = (off + size + align - 1) / align * align == end;
    if (!aligns) refuse(", and the rest is not the padding before the next parameter");
  }
  return t->params.data() + off;
}

void bad_arg_type(size_t index, DType have, DType want) {
  throw Error(ErrorCode::invalid_argument, "argument " + std::to_string(index) + " holds " +
                                               std::string(dtype_name(have)) + ", not " +
                                               std::string(dtype_name(want)));
}
void bad_arg_index(size_t index, size_t count) {
  throw Error(ErrorCode::invalid_argument, "argument " + std::to_string(index) +
                                               " requested; the task has " + std::to_string(count));
}

}  // namespace hcr::detail

namespace hcr {

using detail::TaskNode;

// ---- Task -----------------------------------------------------------------------------------

Task::Task(const Kernel& kernel) : t_(detail::task_create(kernel.state())) {}
Task::Task(Task&& o) noexcept : t_(std::exchange(o.t_, nullptr)) {}
Task& Task::operator=(Task&& o) noexcept {
  if (this != &o) {
    if (t_) detail::release(t_);
    t_ = std::exchange(o.t_, nullptr);
  }
  return *this;
}
Task::~Task() {
  if (t_) detail::release(t_);
}
TaskNode* Task::node_or_throw(const char* what) const {
  if (!t_)
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": the task is empty (already submitted, or moved from)");
  return t_;
}
Task& Task::arg(detail::BufferState* b, Access mode) {
  detail::task_add_arg(node_or_throw("Task::arg"), b, mode);
  return *this;
}
// Any int is a priority: higher runs earlier, negative ones after the default 0.
Task& Task::priority(int p) {
  detail::task_set_priority(node_or_throw("Task::priority"), p);
  return *this;
}
Task& Task::after(const Event& e) {
  detail::task_add_dependency(node_or_throw("Task::after"), e.node());
  return *this;
}
Task& Task::grid(uint64_t x, uint64_t y, uint64_t z) {
  detail::TaskNode* t = node_or_throw("Task::grid");
  if (x == 0 || y == 0 || z == 0)
    throw Error(ErrorCode::invalid_argument, "Task::grid: " + std::to_string(x) + "x" +
                                                 std::to_string(y) + "x" + std::to_string(z) +
                                                 ": every dimension must be at least 1");
  t->global_size[0] = x;
  t->global_size[1] = y;
  t->global_size[2] = z;
  return *this;
}
// block(0) lets the backend choose and a 0 in y or z counts as 1 (every backend agrees). A 0 in x
// beside a y or z above 1 is contradictory, and backends read it differently (OpenCL chooses,
// CUDA takes 1 x y x z): refused.
Task& Task::block(uint32_t x, uint32_t y, uint32_t z) {
  detail::TaskNode* t = node_or_throw("Task::block");
  if (x == 0 && (y > 1 || z > 1))
    throw Error(ErrorCode::invalid_argument,
                "Task::block: " + std::to_string(x) + "x" + std::to_string(y) + "x" +
                    std::to_string(z) +
                    ": x = 0 lets the backend choose the whole block, so y "
                    "and z must be 1");
  t->local_size[0] = x;
  t->local_size[1] = y;
  t->local_size[2] = z;
  return *this;
}
Task& Task::on(uint32_t device) {
  detail::task_pin(node_or_throw("Task::on"), device);
  return *this;
}
Task& Task::in(const Context& ctx) {
  detail::task_set_context(node_or_throw("Task::in"), ctx.state());
  return *this;
}
TaskNode* Task::release() noexcept { return std::exchange(t_, nullptr); }

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
  core_->shutdown();
}

std::vector<Device> Runtime::devices() const { return core_->devices_snapshot(); }
LoadReport Runtime::load_report() const { return core_->report_snapshot(); }
PluginRecord Runtime::load_plugin(const std::string& path, const BackendConfig& backend) {
  return core_->load_plugin(path, backend);
}
void Runtime::remove_device(uint32_t device) { core_->remove_device(device); }
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
  }
  if (const detail::BuiltinSpec* builtin = t->kernel->builtin)
    detail::check_builtin_task(*builtin, *t);
  core_->resolve(*t->kernel);
  Event e(owned);
  core_->submit(owned.detach());
  return e;
}

void Runtime::wait_all() {
  if (const TaskNode* t = detail::running_cpu_task(); t != nullptr && t->rt == core_.get())
    throw Error(ErrorCode::invalid_argument,
                "Runtime::wait_all inside kernel '" + t->kernel->name +
                    "' would wait forever: the kernel's own task is unfinished work");
  core_->host().check_no_view_held("Runtime::wait_all");
  core_->pauses().check_not_held("Runtime::wait_all", nullptr);
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
