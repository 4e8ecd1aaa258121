// Device graphs (device_graphs.hpp): the plugin's graphs, created, released and named in errors.
#include "device_graphs.hpp"

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
