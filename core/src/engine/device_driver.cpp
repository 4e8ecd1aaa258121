// The devices' drivers (device_driver.hpp): feeding, acquiring, launching.
#include "device_driver.hpp"

#include "device_graphs.hpp"
#include "placement.hpp"
#include "../buffer_state.hpp"
#include "../data/data_manager.hpp"
#include "../kernel_state.hpp"

#include <hcr/error.hpp>

#include <algorithm>
#include <chrono>
#include <string>

namespace hcr::detail {

// One pumper per device at a time; a caller that finds another pumping leaves a request, which
// the pumper notices before it stops. So no ready task is left behind with a free slot.
// The request count and the flag are seq_cst: "request, then try to become the pumper" here
// against "stop pumping, then look at the requests" in the pumper is the store-buffering pattern,
// where with acquire/release each side may miss the other's write (x86 lets a store pass a later
// load), and a queued task was left with an idle device and no pumper.
uint32_t DeviceDriver::pump(DeviceState& d) noexcept {
  d.pump_requests.fetch_add(1, std::memory_order_seq_cst);
  uint32_t launched = 0;
  for (;;) {
    // Another thread pumping counts as taking the work: it sees our request before it stops.
    if (d.pumping.exchange(true, std::memory_order_seq_cst)) return launched + 1;
    uint32_t seen = d.pump_requests.load(std::memory_order_acquire);
    while (d.status.load(std::memory_order_relaxed) == DeviceState::kActive) {
      // Handed to the plugin: taken, less those waiting for copies or for room.
      const uint32_t in_flight = d.in_flight.load(std::memory_order_acquire);
      const uint32_t landed = d.landed.size();
      const uint32_t waiting = d.fetching.load(std::memory_order_acquire) + landed;
      if (in_flight - std::min(in_flight, waiting) >= d.window) break;
      if (landed != 0) {  // taken earlier, its data there now: first
        if (TaskNode* t = d.landed.take()) {
          ++launched;
          start_kernel(t, d);
          continue;
        }
      }
      if (in_flight >= 2 * d.window) break;
      sched::TaskRef t = placement_.policy()->pop(d.info.id);
      if (!t) break;
      d.in_flight.fetch_add(1, std::memory_order_acq_rel);
      ++launched;
      if (!launches_.arm(d, t.node())) {
        stages_.failed_before_launch(
            t.node(), d,
            std::make_exception_ptr(
                Error(ErrorCode::internal,
                      "device '" + d.info.name + "' has " +
                          std::to_string(DeviceState::kMaxSlotChunks * LaunchTable::kChunk) +
                          " launches outstanding (launches given up on that never came back), or "
                          "the process has " +
                          std::to_string(LaunchTable::kMaxChunks * LaunchTable::kChunk))));
        continue;
      }
      launch(t.node(), d);
    }
    d.pumping.store(false, std::memory_order_seq_cst);
    if (d.pump_requests.load(std::memory_order_seq_cst) == seen) break;
  }
  if (devices_.wakes_pending()) pump_woken();
  return launched;
}

// Feeds the devices the policy asked to wake, after the policy call that asked has returned.
void DeviceDriver::pump_woken() noexcept {
  for (uint32_t i = 0, n = devices_.count(); i < n && devices_.wakes_pending(); ++i)
    if (devices_.take_wake(i) &&
        devices_[i].status.load(std::memory_order_relaxed) == DeviceState::kActive)
      pump(devices_[i]);
}

void DeviceDriver::launch(TaskNode* t, DeviceState& d) noexcept {
  t->device.store(static_cast<int32_t>(d.info.id), std::memory_order_relaxed);
  if (data_.active()) {
    d.fetching.fetch_add(1, std::memory_order_acq_rel);  // (before: data_ready may come first)
    const DataManager::Status s = data_.acquire(t, d.info.memory_node);
    // Waiting for room counts as waiting for copies: it holds no place in the window. Held there,
    // tasks waiting for room kept the window full while those whose copies had landed, pinning
    // the memory they waited for, could not start: a device smaller than its window needs hung.
    if (s == DataManager::Status::pending || s == DataManager::Status::blocked)
      return;  // data_ready() or retry_acquire() goes on
    d.fetching.fetch_sub(1, std::memory_order_acq_rel);
    if (s == DataManager::Status::failed) {
      stages_.failed_before_launch(t, d, t->transfer_error);
      return;
    }
  } else if (!t->scratch.empty() && !data_.take_host_scratch(t)) {
    stages_.failed_before_launch(t, d, t->transfer_error);
    return;
  }
  start_kernel(t, d);
}

void DeviceDriver::data_ready(TaskNode* t) noexcept {
  if (t->kind == TaskKind::kernel) {
    DeviceState& d = devices_[static_cast<size_t>(t->device.load(std::memory_order_relaxed))];
    d.fetching.fetch_sub(1, std::memory_order_acq_rel);
    if (t->transfer_error) {
      start_kernel(t, d);  // (fails it before launch)
      return;
    }
    // Launched when the window has room (pump), unless the device left scheduling meanwhile:
    // then, never started, it is placed again as its queued tasks were (give_back_landed sees it
    // in the list, or this sees the state that retire() set before it looked).
    if (d.landed.add(
            t, [&] { return d.status.load(std::memory_order_seq_cst) != DeviceState::kActive; }))
      pump(d);
    else stages_.give_back(t, d);
  } else {
    stages_.host_task_ready(t);
  }
}

// Still counted as fetching since launch(): what it acquires now goes through data_ready, which
// starts it when the window has room (or fails it, t->transfer_error set).
void DeviceDriver::retry_acquire(TaskNode* t) noexcept {
  const DeviceState& d = devices_[static_cast<size_t>(t->device.load(std::memory_order_relaxed))];
  const DataManager::Status s = data_.acquire(t, d.info.memory_node);
  if (s == DataManager::Status::pending || s == DataManager::Status::blocked) return;
  data_ready(t);
}

void DeviceDriver::start_kernel(TaskNode* t, DeviceState& d) noexcept {
  if (t->transfer_error) {
    stages_.failed_before_launch(t, d, t->transfer_error);
    return;
  }
  if (t->device_graph != nullptr) {
    start_graph(t, *t->device_graph, d);
    return;
  }
  KernelDevice& kd = t->kernel->devices[d.info.id];
  const hcr_plugin_api_t* api = d.plugin->api;
  const uint32_t node = d.info.memory_node;
  t->abi_args.clear();
  // Scratch arguments take their places among the buffers: read_write, contiguous, in the block
  // this attempt holds (their contents are whatever the last user left).
  size_t next_scratch = 0;
  auto add_scratch = [&] {
    for (; next_scratch < t->scratch.size() &&
           t->scratch[next_scratch].position == t->abi_args.size();
         ++next_scratch) {
      const ScratchRec& s = t->scratch[next_scratch];
      hcr_arg_t x{};
      x.struct_size = HCR_ARG_STRUCT_SIZE;
      x.dtype = static_cast<hcr_dtype_t>(s.dtype);
      x.access = HCR_ACCESS_READ_WRITE;
      x.rows = s.rows;
      x.cols = s.cols;
      x.ld = s.cols;
      if (node == 0) x.host = s.block;
      else x.memory = static_cast<hcr_memory_t*>(s.block);
      t->abi_args.push_back(x);
    }
  };
  add_scratch();
  for (const ArgRec& a : t->args) {
    BufferState& b = *a.buffer;
    hcr_arg_t x{};
    x.struct_size = HCR_ARG_STRUCT_SIZE;
    x.dtype = static_cast<hcr_dtype_t>(b.dtype);
    x.access = abi_access(a.access);
    x.rows = b.rows;
    x.cols = b.cols;
    if (node == 0) {
      x.host = b.host;
      x.ld = b.ld;
    } else {  // device replicas are contiguous
      x.memory = data_.memory(b, node);
      x.ld = b.cols;
    }
    t->abi_args.push_back(x);
    add_scratch();
  }
  hcr_launch_args_t la{};
  la.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
  la.device = d.index;
  la.kernel = kd.handle;
  la.args = t->abi_args.data();
  la.num_args = t->abi_args.size();
  la.params = t->params.data();
  la.params_size = t->params.size();
  la.host_token = t;
  const bool times = (observers_.wants() & AttemptObservers::kTimes) != 0;
  la.flags = launch_flags_.load(std::memory_order_relaxed) | (times ? HCR_LAUNCH_MEASURE : 0u);
  // A token, not the task: once done is called, `t` may finish and its node be reused at once.
  void* const token = t->launch_token;
  la.done = &Launches::on_done;
  la.done_user_data = token;
  la.param_offsets = t->param_offsets.data();
  la.num_params = t->param_offsets.size();
  for (int i = 0; i < 3; ++i) {
    la.global_size[i] = t->global_size[i];
    la.local_size[i] = t->local_size[i];
  }
  if (timing_.load(std::memory_order_relaxed) || times) t->start = std::chrono::steady_clock::now();
  // From now on the watchdog keeps an eye on this launch, and may end the attempt.
  launches_.watch(token);
  if (hcr_error_t* err = api->launch(d.plugin->handle, &la))
    Launches::answered(token, err, nullptr, true);  // not `t`: done may have come first
}

// A replay's device graph: every node's arguments from the graph task's buffers (one per slot of
// the recorded graph) as start_kernel makes one task's, then one launch of the whole graph. The
// arguments are filled again only when a slot's memory moved since the last launch (another buffer
// bound, a replica made or moved): a replay's launch is then a pass over its slots, not its nodes.
void DeviceDriver::start_graph(TaskNode* t, DeviceGraph& g, DeviceState& d) noexcept {
  const hcr_plugin_api_t* api = d.plugin->api;
  const uint32_t node = d.info.memory_node;
  const size_t num_args = g.slot.size();
  const size_t num_slots = t->args.size();
  hcr_arg_t* out = g.args.data();
  bool moved = g.slot_memory.size() != num_slots;
  if (moved) g.slot_memory.resize(num_slots);
  for (size_t s = 0; s < num_slots; ++s) {
    BufferState& b = *t->args[s].buffer;
    const DeviceGraph::SlotMemory now =
        node == 0 ? DeviceGraph::SlotMemory{b.host, b.ld}
                  : DeviceGraph::SlotMemory{data_.memory(b, node), b.cols};  // contiguous replicas
    if (now != g.slot_memory[s]) {
      g.slot_memory[s] = now;
      moved = true;
    }
  }
  if (moved) {
    for (size_t k = 0; k < num_args; ++k) {
      const DeviceGraph::SlotMemory& m = g.slot_memory[g.slot[k]];
      if (node == 0) out[k].host = const_cast<void*>(m.at);
      else out[k].memory = static_cast<hcr_memory_t*>(const_cast<void*>(m.at));
      out[k].ld = m.ld;
    }
  }
  // The nodes' running task (its epoch for the tasks their kernels submit: fork-join, as for
  // running_cpu_task's task), and no exception from an earlier launch.
  g.task = t;
  if (g.tokens_dirty) {
    for (NodeToken& token : g.tokens) token.error = nullptr;
    g.tokens_dirty = false;
  }
  g.failed_node = UINT64_MAX;
  hcr_graph_launch_args_t la{};
  la.struct_size = HCR_GRAPH_LAUNCH_ARGS_STRUCT_SIZE;
  la.graph = g.handle;
  la.args = out;
  la.num_args = num_args;
  const bool times = (observers_.wants() & AttemptObservers::kTimes) != 0;
  la.flags = launch_flags_.load(std::memory_order_relaxed) | (times ? HCR_LAUNCH_MEASURE : 0u);
  void* const token = t->launch_token;  // (as start_kernel's)
  la.done = &Launches::on_done;
  la.done_user_data = token;
  la.failed_node = &g.failed_node;
  if (timing_.load(std::memory_order_relaxed) || times) t->start = std::chrono::steady_clock::now();
  launches_.watch(token);
  if (hcr_error_t* err = api->graph_launch(d.plugin->handle, &la))
    Launches::answered(token, err, nullptr, true);
}

void DeviceDriver::give_back_landed(DeviceState& d) noexcept {
  for (TaskNode* t : d.landed.take_all()) stages_.give_back(t, d);
}

}  // namespace hcr::detail
