// Device graphs (device_graphs.hpp): the plugin's graphs, created, released and named in errors.
#include "device_graphs.hpp"

#include "recorded_graph.hpp"
#include "../buffer_state.hpp"
#include "../kernel_state.hpp"
#include "../log_internal.hpp"
#include "../plugins/plugin_loader.hpp"
#include "../task_node.hpp"

#include <algorithm>
#include <cstddef>

namespace hcr::detail {

void retain(DeviceGraph* g) noexcept { g->refs.fetch_add(1, std::memory_order_relaxed); }

void release(DeviceGraph* g) noexcept {
  if (g->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (g->owner != nullptr) g->owner->forget(g);
  delete g;
}

std::exception_ptr DeviceGraph::launch_error(ErrorCode code, const std::string& message) {
  tokens_dirty = true;
  const uint64_t i = failed_node;
  if (i >= tokens.size())  // (graph_launch itself refused)
    return std::make_exception_ptr(Error(code, "Graph::replay of " + std::to_string(tasks) +
                                                   " tasks on device '" + device->info.name +
                                                   "': " + message));
  if (tokens[i].error) return tokens[i].error;
  const std::string& kernel = tokens[i].kernel->name;
  return std::make_exception_ptr(Error(code, "Graph::replay: task " + std::to_string(i) +
                                                 " (kernel '" + kernel + "') failed on device '" +
                                                 device->info.name + "': " + message));
}

bool DeviceGraphs::supported(uint32_t d) const noexcept {
  const hcr_plugin_api_t* api = devices_[d].plugin->api;
  return api->struct_size >= HCR_PLUGIN_API_STRUCT_SIZE && api->graph_create != nullptr &&
         api->graph_launch != nullptr && api->graph_release != nullptr;
}

// The nodes (RecordedTask by RecordedTask) and their host tokens, each kind in one block sized
// first: a first replay makes them for every node.
DeviceGraph* DeviceGraphs::make(uint32_t d, const std::deque<RecordedTask>& tasks,
                                const std::vector<Ref<KernelState>>& kernels,
                                BufferState* const* bound, std::string& why) {
  for (const RecordedTask& r : tasks)
    if (!r.kernel->can_run(d) || r.kernel->devices[d].handle == nullptr) {
      why = "kernel '" + r.kernel->name + "' has no implementation there";
      return nullptr;
    }
  DeviceState& ds = devices_[d];
  const size_t n = tasks.size();
  auto* g = new DeviceGraph;
  g->device = &ds;
  g->tasks = n;
  g->kernels = kernels;
  size_t num_args = 0, params_size = 0, num_params = 0, num_successors = 0;
  for (const RecordedTask& r : tasks) {
    num_args += r.args.size();
    params_size += r.params.size();
    num_params += r.param_offsets.size();
    num_successors += r.successors.size();
  }
  g->first_arg.reserve(n + 1);
  g->slot.reserve(num_args);
  g->access.reserve(num_args);
  g->params.resize(params_size);
  g->param_offsets.resize(num_params);
  g->tokens.resize(n);
  std::vector<hcr_graph_node_t> nodes(n);
  std::vector<uint32_t> successors(num_successors);
  size_t at_param = 0, at_offset = 0, at_successor = 0;
  for (size_t i = 0; i < n; ++i) {
    const RecordedTask& r = tasks[i];
    g->first_arg.push_back(static_cast<uint32_t>(g->slot.size()));
    for (const RecordedTask::Arg& a : r.args) {
      g->slot.push_back(a.slot);
      g->access.push_back(abi_access(a.access));
    }
    g->tokens[i].graph = g;
    g->tokens[i].kernel = r.kernel;
    hcr_graph_node_t& node = nodes[i];
    node.struct_size = HCR_GRAPH_NODE_STRUCT_SIZE;
    node.kernel = r.kernel->devices[d].handle;
    node.num_args = r.args.size();
    node.params = g->params.data() + at_param;
    node.params_size = r.params.size();
    node.param_offsets = g->param_offsets.data() + at_offset;
    node.num_params = r.param_offsets.size();
    std::copy(r.params.begin(), r.params.end(), g->params.begin() + at_param);
    std::copy(r.param_offsets.begin(), r.param_offsets.end(), g->param_offsets.begin() + at_offset);
    at_param += r.params.size();
    at_offset += r.param_offsets.size();
    for (int k = 0; k < 3; ++k) {
      node.global_size[k] = r.global_size[k];
      node.local_size[k] = r.local_size[k];
    }
    node.host_token = host_token_of(&g->tokens[i]);
    node.successors = successors.data() + at_successor;
    node.num_successors = r.successors.size();
    for (const RecordedTask::Next& x : r.successors) successors[at_successor++] = x.task;
  }
  g->first_arg.push_back(static_cast<uint32_t>(g->slot.size()));
  // The arguments as they are now: host memory where the device works in it; a device's
  // replicas may not exist yet (each launch hands the memory it then has).
  g->args.resize(g->slot.size());
  for (size_t k = 0; k < g->slot.size(); ++k) {
    const BufferState& b = *bound[g->slot[k]];
    hcr_arg_t& x = g->args[k];
    x.struct_size = HCR_ARG_STRUCT_SIZE;
    x.dtype = static_cast<hcr_dtype_t>(b.dtype);
    x.access = g->access[k];
    x.rows = b.rows;
    x.cols = b.cols;
    if (ds.info.memory_node == 0) {
      x.host = b.host;
      x.ld = b.ld;
    } else {
      x.ld = b.cols;
    }
  }
  why = create(g, nodes);
  if (!why.empty()) {
    release(g);
    return nullptr;
  }
  return g;
}

std::string DeviceGraphs::create(DeviceGraph* g, const std::vector<hcr_graph_node_t>& nodes) {
  DeviceState& d = *g->device;
  const hcr_plugin_api_t* api = d.plugin->api;
  hcr_graph_create_args_t a{};
  a.struct_size = HCR_GRAPH_CREATE_ARGS_STRUCT_SIZE;
  a.device = d.index;
  a.nodes = nodes.data();
  a.num_nodes = nodes.size();
  a.args = g->args.data();
  a.num_args = g->args.size();
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return "the runtime has ended";
  if (hcr_error_t* err = api->graph_create(d.plugin->handle, &a)) return take_error(api, err);
  if (a.graph == nullptr) return "the plugin returned no graph";
  g->handle = a.graph;
  g->owner = this;
  live_.push_back(g);
  return {};
}

void DeviceGraphs::forget(DeviceGraph* g) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  live_.erase(std::remove(live_.begin(), live_.end(), g), live_.end());
  if (g->handle != nullptr && !g->abandoned.load(std::memory_order_acquire))
    g->device->plugin->api->graph_release(g->device->plugin->handle, g->handle);
  g->handle = nullptr;
}

void DeviceGraphs::release_all() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
  for (DeviceGraph* g : live_) {
    if (g->handle != nullptr && !g->abandoned.load(std::memory_order_acquire))
      g->device->plugin->api->graph_release(g->device->plugin->handle, g->handle);
    g->handle = nullptr;
  }
  live_.clear();
}

}  // namespace hcr::detail
