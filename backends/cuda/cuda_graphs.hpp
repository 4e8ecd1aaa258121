// Device graphs (ABI 1.2) on CUDA graphs: a recorded graph captured once into a CUDA graph (stream
// capture of each node's work), launched with one cudaGraphLaunch, captured again and updated in
// place when a launch hands other memory. The kernels stay the backend's: it checks them at
// graph_create and enqueues each node's work through GraphNodeWork.
#pragma once

#include "cuda_device.hpp"

#include <hcr/sdk/backend.hpp>

#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace hcr::cuda {

/// What capturing a graph asks of the backend: a node's arguments and work, as launch() has them.
class GraphNodeWork {
 public:
  /// Each argument's device pointer, checked as launch() checks them (throws sdk::Error).
  virtual std::vector<void*> device_pointers(const hcr_launch_args_t& a) = 0;
  /// Enqueues node launch `a` (its own arguments; `ptrs` their device pointers) on `stream` as
  /// launch() would: a native function's failure is returned, argument mistakes are thrown.
  virtual hcr_error_t* enqueue_node(Gpu& g, const hcr_launch_args_t& a, std::vector<void*>& ptrs,
                                    cudaStream_t stream) = 0;

 protected:
  ~GraphNodeWork() = default;
};

/// The live device graphs of one plugin instance. Thread-safe; launches of one graph never overlap
/// (the ABI), and the host releases a graph only after its last launch's done.
class CudaGraphs {
 public:
  /// `work` and `host` must outlive the graphs.
  CudaGraphs(GraphNodeWork& work, const sdk::Host& host) : work_(work), host_(host) {}
  ~CudaGraphs() { destroy_all(); }
  CudaGraphs(const CudaGraphs&) = delete;
  CudaGraphs& operator=(const CudaGraphs&) = delete;

  /// Captures and instantiates `desc` on `g` (the backend has checked its kernels: sources and
  /// native functions of that device). `keep`: what every launch keeps alive until its done (the
  /// source kernels' modules). Throws Error(HCR_ERROR_UNSUPPORTED) for a graph that cannot be
  /// captured: the host then replays it task by task.
  hcr_graph_t* create(Gpu& g, sdk::GraphDesc desc, std::shared_ptr<const void> keep);
  void launch(const hcr_graph_launch_args_t& a);
  void release(hcr_graph_t* graph) noexcept;
  /// Destroys every graph the host left (plugin_destroy), while the devices still live.
  void destroy_all() noexcept;

 private:
  struct Graph;
  struct Capture;

  static size_t plan_streams(const Graph& cg, std::vector<size_t>& node_stream);
  Capture capture(Gpu& g, const Graph& cg, const std::vector<hcr_arg_t>& args,
                  std::vector<void*>& ptrs);
  hcr_error_t* enqueue_node(Gpu& g, const Graph& cg, size_t i, const std::vector<hcr_arg_t>& args,
                            std::vector<void*>& ptrs, cudaStream_t stream);
  std::vector<void*> graph_pointers(const Graph& cg, const std::vector<hcr_arg_t>& args,
                                    std::vector<bool>* missing = nullptr);
  Graph& graph_of(hcr_graph_t* graph);
  static void destroy(Graph* cg) noexcept;

  GraphNodeWork& work_;
  const sdk::Host& host_;
  std::mutex mutex_;
  std::unordered_set<Graph*> graphs_;  // live device graphs (mutex_)
};

}  // namespace hcr::cuda
