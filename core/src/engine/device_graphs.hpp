// Device graphs (plugin ABI 1.2): a recorded graph whose tasks all ran on one device, handed to
// that device's plugin once (graph_create) and replayed as one task of the engine (the "graph
// task") whose launch is one graph_launch. The plugin follows the recorded edges itself.
//
// DeviceGraph is one recorded graph's device graph on one device: the plugin's handle, the layout
// of the nodes' arguments over the graph task's buffers, and one host token per node (a NodeToken,
// all in one block: a C++ CPU implementation keeps its exception there, nodes running at once each
// in their own, and sees the graph task as the running task). DeviceGraphs, one per runtime, knows
// the live handles so that the runtime's end releases them before their plugins go.
//
// Thread safety: DeviceGraphs' members may be called from any thread. A DeviceGraph is built by
// one replay under its recorded graph's lock; a launch of it is used by one graph task at a time
// (`in_flight`), which holds a reference until it is destroyed.
#pragma once

#include "device_table.hpp"

#include <hcr/detail/handles.hpp>
#include <hcr/error.hpp>
#include <hcr/plugin.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

namespace hcr::detail {

struct BufferState;
class DataManager;
struct DeviceGraph;
class DeviceGraphs;
struct KernelState;
struct RecordedTask;
struct TaskNode;

// A node's host token. The plugin is given it tagged (host_token_of): kernel.cpp's trampoline tells
// it from a launch's token, a TaskNode, by the low bit no TaskNode's address has. A token is a few
// words, not a TaskNode of its own: making one per node was most of a first replay's cost.
struct NodeToken {
  DeviceGraph* graph;
  KernelState* kernel;       // the node's (a reference held by DeviceGraph::kernels)
  std::exception_ptr error;  // what its C++ implementation threw in the last launch
};

inline void* host_token_of(NodeToken* n) noexcept {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(n) | 1u);
}
/// The node token a host token stands for, or null for a launch's (its TaskNode).
inline NodeToken* node_token(void* host_token) noexcept {
  const auto v = reinterpret_cast<uintptr_t>(host_token);
  return (v & 1u) != 0 ? reinterpret_cast<NodeToken*>(v & ~uintptr_t{1}) : nullptr;
}

struct DeviceGraph {
  std::atomic<uint32_t> refs{1};
  DeviceGraphs* owner = nullptr;
  DeviceState* device = nullptr;
  hcr_graph_t* handle = nullptr;  // the plugin's (under owner's lock); null once released
  size_t tasks = 0;
  // Node i's arguments are args[first_arg[i] .. first_arg[i + 1]): slot[k] is the graph task's
  // argument (one per buffer of the recorded graph, in slot order) that argument k stands for.
  std::vector<uint32_t> first_arg;
  std::vector<uint32_t> slot;
  std::vector<hcr_access_t> access;
  std::vector<hcr_arg_t> args;  // this launch's, filled by the driver (alive until done)
  // What each slot's memory was at the last launch (host memory and its ld where the device works
  // in it, else the device's replica): a launch finding every slot as it was hands `args` as they
  // are, without a pass over every node's arguments. Empty until the first launch.
  struct SlotMemory {
    const void* at;
    uint64_t ld;
    bool operator==(const SlotMemory&) const = default;
  };
  std::vector<SlotMemory> slot_memory;
  std::vector<NodeToken> tokens;  // host token of each node
  // The nodes' scalar parameters, node after node (the plugin borrows them for the graph's life,
  // which may outlast the recording's).
  std::vector<std::byte> params;
  std::vector<uint32_t> param_offsets;
  std::vector<Ref<KernelState>> kernels;  // the distinct kernels of the nodes
  uint64_t failed_node = 0;               // graph_launch's out
  // The graph task of the launch in progress: the running task its nodes' kernels see (its epoch
  // for the tasks they submit, its buffers), set by the driver for each launch.
  TaskNode* task = nullptr;
  bool tokens_dirty = false;  // a launch failed: a token may hold its kernel's exception
  // A graph task holding it is unfinished: a second replay meanwhile runs task by task (the ABI
  // allows no overlapping launches of one graph). Set by the replay, cleared when that task ends.
  std::atomic<bool> in_flight{false};
  // A launch was given up on (task timeout): the plugin may still run it, so it is never launched
  // nor released again.
  std::atomic<bool> abandoned{false};

  /// The error of a failed launch: the exception a node's C++ implementation threw, unchanged, or
  /// one naming the recorded task and its kernel.
  std::exception_ptr launch_error(ErrorCode code, const std::string& message);
};

void retain(DeviceGraph* g) noexcept;
/// The last reference releases the plugin's graph (unless the runtime's end released it).
void release(DeviceGraph* g) noexcept;

class DeviceGraphs {
 public:
  /// `enabled`: [runtime] device_graphs.
  DeviceGraphs(DeviceTable& devices, bool enabled) : devices_(devices), enabled_(enabled) {}
  DeviceGraphs(const DeviceGraphs&) = delete;
  DeviceGraphs& operator=(const DeviceGraphs&) = delete;

  bool enabled() const noexcept { return enabled_; }
  DeviceTable& devices() noexcept { return devices_; }
  /// Whether device d's plugin has the ABI 1.2 entries.
  bool supported(uint32_t d) const noexcept;
  /// Device d's graph of a recording's `tasks` (`kernels`: the distinct kernels they use) over the
  /// buffers `bound` (one per slot), made and handed to d's plugin; null, with why not, when a
  /// task's kernel has no implementation on d or the plugin refused it.
  DeviceGraph* make(uint32_t d, const std::deque<RecordedTask>& tasks,
                    const std::vector<Ref<KernelState>>& kernels, BufferState* const* bound,
                    std::string& why);
  /// Releases `g`'s plugin graph (its last reference).
  void forget(DeviceGraph* g) noexcept;
  /// The runtime's end, every launch finished, before the plugins go: every graph released.
  void release_all() noexcept;
  /// Launches of device graphs so far (RuntimeStats::graph_launches).
  std::atomic<uint64_t> launches{0};

 private:
  /// Asks the plugin of `g->device` for the graph of `nodes` (args as they are now); on success
  /// `g` is known here until released. Returns the plugin's error message, empty on success.
  std::string create(DeviceGraph* g, const std::vector<hcr_graph_node_t>& nodes);

  DeviceTable& devices_;
  const bool enabled_;
  std::mutex mutex_;
  std::vector<DeviceGraph*> live_;
  bool closed_ = false;
};

}  // namespace hcr::detail
