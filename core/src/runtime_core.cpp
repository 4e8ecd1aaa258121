// The task engine: dependency edges, readiness, device pumping and completion. Everything here is
// on the per-task hot path unless it says otherwise: no global lock, no allocation beyond the
// task's own small vectors.
#include "runtime_core.hpp"
#include "tenant/tenant_link.hpp"

#include "buffer_state.hpp"
#include "log_internal.hpp"
#include "node_pool.hpp"
#include "units.hpp"

#include <hcr/error.hpp>

#include <thread>
#include <unordered_set>

#include <filesystem>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <sstream>

namespace hcr::detail {

namespace {

inline uint64_t mix(uint64_t h, uint64_t v) noexcept {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

// The footprint must mean the same in every process (cost models persist): shapes and types only;
// the kernel is part of the model's key already.
void compute_footprint(TaskNode* t) noexcept {
  uint64_t h = 0xcbf29ce484222325ull;
  double size = 0;
  for (const ArgRec& a : t->args) {
    const BufferState& b = *a.buffer;
    h = mix(h, static_cast<uint64_t>(b.dtype));
    h = mix(h, b.rows);
    h = mix(h, b.cols);
    size += static_cast<double>(b.bytes());
  }
  t->footprint = h;
  t->size = size;
  t->footprint_valid = true;
}

void RuntimeCore::check_alive(std::string_view what) const {
  if (!alive())
    throw Error(ErrorCode::shutdown, what.empty() ? "the runtime has ended"
                                                  : std::string(what) + ": the runtime has ended");
}

void RuntimeCore::check_wait(const TaskNode* target) const {
  pause_.check_not_held("Event::wait", target);
  host_.check_wait(target);
}

void RuntimeCore::submit(TaskNode* t) {
  if (timing_.load(std::memory_order_relaxed) && !t->footprint_valid) compute_footprint(t);
  graph_.submit(t);
}

void RuntimeCore::submit_made(TaskNode* t) {
  if (recorder_.on()) [[unlikely]] {
    const TaskNode* running = running_cpu_task();
    if (running == nullptr || running->rt != this) {
      recorder_.record_and_submit(t, [&] { submit(t); });
      return;
    }
  }
  submit(t);
}

void RuntimeCore::waiting_with_inputs(TaskNode* t,
                                      std::span<const Ref<BufferState>> inputs) noexcept {
  placement_.move_ahead(t, inputs);
}

void RuntimeCore::finished_before(TaskNode* t, std::span<const Edge> successors) noexcept {
  placement_.move_ahead_for(t, successors);
}

void RuntimeCore::place_together(std::vector<TaskNode*> now) noexcept {
  placement_.place_together(std::move(now));
}

bool RuntimeCore::moves_inputs_early(const TaskNode& t) const noexcept {
  return t.kind == TaskKind::kernel && data_.active() && config_.prefetch;
}

bool RuntimeCore::may_wait_for_room() const noexcept {
  return running_cpu_task() == nullptr && !host_.holds_view();
}

void RuntimeCore::left_scheduling(DeviceState& d) noexcept {
  placement_.take_back(d.info.id);
  driver_.give_back_landed(d);
}

void RuntimeCore::back_in_scheduling(DeviceState& d) noexcept { driver_.pump(d); }

void RuntimeCore::wait_all() noexcept {
  graph_.wait_all();
  return_freed_memory();  // after a burst of tasks: back to where the process was before it
}

void RuntimeCore::transferred(const Transferred& copy) noexcept {
  if (sched::Policy* p = pol()) p->transferred(copy.from, copy.to, copy.bytes, copy.seconds);
  traces_.transferred(copy);
}

static_assert(DeviceBudget::kOwnMemory == DataManager::kMaxNodes - 1,
              "every device the loader keeps must get a memory node");
static_assert(DeviceState::kQuarantined == static_cast<uint8_t>(DeviceHealth::quarantined) &&
              DeviceState::kLost == static_cast<uint8_t>(DeviceHealth::lost) &&
              DeviceState::kRemoved == static_cast<uint8_t>(DeviceHealth::removed) &&
              DeviceState::kWithheld == static_cast<uint8_t>(DeviceHealth::withheld));

RuntimeStats RuntimeCore::stats() const {
  RuntimeStats s;
  s.wall_seconds = static_cast<double>(TraceRecorder::now_ns() - origin_ns_) * 1e-9;
  const TaskGraph::Counts counts = graph_.counts();
  s.submitted = counts.submitted;
  s.completed = counts.completed;
  s.throttled = counts.throttled;
  s.failed = counts.failed;
  s.graph_launches = device_graphs_.launches.load(std::memory_order_relaxed);
  s.decisions = placement_.decisions();
  s.decision_seconds = placement_.decision_seconds();
  s.data = data_.counters();
  for (size_t i = 0, n = device_count(); i < n; ++i) {
    DeviceState* d = &devices_[i];
    DeviceCounters c;
    c.tasks = d->tasks.load(std::memory_order_relaxed);
    c.failed = d->failed.load(std::memory_order_relaxed);
    c.protocol_errors = d->protocol_errors.load(std::memory_order_relaxed);
    c.health = static_cast<DeviceHealth>(d->status.load(std::memory_order_relaxed));
    {
      std::lock_guard<SpinLock> g(d->fault_lock);
      c.last_fault = d->last_fault;
    }
    c.busy_seconds = static_cast<double>(d->busy_ns.load(std::memory_order_relaxed)) * 1e-9;
    if (energy_.active()) {
      const EnergyAccount::Reading r = energy_.read(static_cast<uint32_t>(i), now());
      c.energy_source = EnergyAccount::source_name(r.source);
      c.energy_joules = r.joules;
      c.watts = r.watts;
      if (r.source != EnergyAccount::kNone) s.energy_joules += r.joules;
    }
    c.idle_seconds =
        std::max(0.0, s.wall_seconds * std::max<uint32_t>(1, d->info.concurrency) - c.busy_seconds);
    const uint32_t node = d->info.memory_node;
    if (node != 0)
      for (const LinkCounters& l : s.data.links) {
        if (l.to == node) c.bytes_in += l.bytes;
        if (l.from == node) c.bytes_out += l.bytes;
      }
    s.devices.push_back(c);
  }
  contexts_.stats(s);
  tenant_stats(s);
  accuracy_.report(s.accuracy);
  return s;
}

void RuntimeCore::time_executions() noexcept {
  timing_.store(true, std::memory_order_relaxed);
  observers_.attach(&accuracy_, AttemptObservers::kTimes | AttemptObservers::kPrediction);
}

void RuntimeCore::start_trace() { traces_.start(); }
void RuntimeCore::stop_trace() { traces_.stop(); }

void RuntimeCore::measure_for_contexts() noexcept {
  launch_flags_.fetch_or(HCR_LAUNCH_MEASURE, std::memory_order_relaxed);
  placement_.measure_decisions(true);
  time_executions();
}

}  // namespace hcr::detail
