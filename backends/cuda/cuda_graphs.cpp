// Device graphs (ABI 1.2) on CUDA graphs.
//
// A graph is captured into a CUDA graph once (stream capture of each node's work, as launch()
// would enqueue it, branches on streams of their own joined by events) and each launch is one
// cudaGraphLaunch on a compute lane, completed like any launch. A native function is called while
// its node is captured, not at each launch: what it enqueues on its stream is what the graph
// replays. New memory at a launch (another buffer bound by a replay) is captured again and the
// executable graph updated in place.
#include "cuda_graphs.hpp"

#include "cuda_check.hpp"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>

namespace hcr::cuda {

using sdk::Error;

namespace {

constexpr uint32_t kGraphMagic = 0x68637247;
// Independent branches of a device graph are captured on at most this many streams; beyond that,
// branches share streams round robin (ordered where they need not be, never wrongly).
constexpr size_t kMaxCaptureStreams = 8;
// What graph_create captures an argument without memory on: any device address does, nothing runs.
constexpr uint64_t kPlaceholderBytes = 256;

void destroy_error(hcr_error_t* e) noexcept {
  if (e != nullptr && e != sdk::out_of_memory_error()) delete e;
}

}  // namespace

/// A device graph: its nodes as graph_create handed them over, and the CUDA graph captured from
/// them for the arguments' device pointers it was last bound to.
struct CudaGraphs::Graph {
  uint32_t magic = kGraphMagic;
  Gpu* gpu = nullptr;
  size_t device = 0;
  std::vector<sdk::GraphNode> nodes;
  std::vector<std::vector<uint32_t>> predecessors;  // per node, in node order
  size_t num_args = 0;
  std::shared_ptr<const void> keep;  // live while launches are
  std::mutex mutex;                  // launches of one graph never overlap (the ABI); cheap anyway
  cudaGraphExec_t exec = nullptr;
  std::vector<void*> bound;  // every argument's device pointer when `exec` was captured
  bool partial = false;      // `exec` lacks nodes that failed to capture: capture again next time
};

/// What capturing a graph's nodes gave: a CUDA graph (owned by the caller), unless `refused`
/// says why the capture failed. A node whose work could not be enqueued (a native function
/// that failed) is left out with everything after it; node_error is the first such failure.
struct CudaGraphs::Capture {
  cudaGraph_t graph = nullptr;
  std::string refused;
  hcr_error_t* node_error = nullptr;
  uint64_t failed_node = 0;
};

hcr_graph_t* CudaGraphs::create(Gpu& g, sdk::GraphDesc d, std::shared_ptr<const void> keep) {
  auto cg = std::make_unique<Graph>();
  cg->gpu = &g;
  cg->device = d.device;
  cg->num_args = d.num_args;
  cg->keep = std::move(keep);
  cg->nodes = std::move(d.nodes);
  cg->predecessors.resize(cg->nodes.size());
  for (size_t i = 0; i < cg->nodes.size(); ++i)
    for (uint32_t s : cg->nodes[i].successors)
      cg->predecessors[s].push_back(static_cast<uint32_t>(i));
  std::vector<hcr_arg_t> args;
  for (size_t i = 0; i < d.num_args; ++i)
    args.push_back(sdk::read_struct(sdk::GraphDesc::arg_at(d.args, i)));
  // The host may not have placed the graph's data on the device yet (each launch hands the
  // memory it then has): an argument without memory is captured on a placeholder allocation,
  // so that what cannot be captured is refused now, and the first launch captures again (and
  // updates the executable graph) with the memory it hands.
  std::vector<bool> missing;
  std::vector<void*> ptrs = graph_pointers(*cg, args, &missing);
  Capture c;
  {
    // Freed right after the capture: nothing ran on it, the capture only recorded.
    std::unique_ptr<void, std::function<void(void*)>> placeholder(nullptr,
                                                                  [&g](void* p) { g.release(p); });
    if (std::find(missing.begin(), missing.end(), true) != missing.end()) {
      placeholder.reset(g.allocate(kPlaceholderBytes));
      for (size_t i = 0; i < ptrs.size(); ++i)
        if (missing[i]) ptrs[i] = placeholder.get();
    }
    c = capture(g, *cg, args, ptrs);
  }
  if (!c.refused.empty())
    throw Error(HCR_ERROR_UNSUPPORTED,
                "device graph not captured: " + c.refused + "; the host replays it task by task");
  if (c.node_error != nullptr) {
    // Reported where the host's task-by-task replay reports it: with its own task.
    std::string msg = c.node_error->message;
    destroy_error(c.node_error);
    cudaGraphDestroy(c.graph);
    throw Error(HCR_ERROR_UNSUPPORTED, "device graph not captured: node " +
                                           std::to_string(c.failed_node) + " failed: " + msg +
                                           "; the host replays it task by task");
  }
  {
    DeviceGuard guard(g.ordinal());
    cudaError_t e = cudaGraphInstantiate(&cg->exec, c.graph, 0);
    cudaGraphDestroy(c.graph);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      cg->exec = nullptr;
      throw Error(HCR_ERROR_UNSUPPORTED, "device graph not instantiated: " + error_text(e) +
                                             "; the host replays it task by task");
    }
  }
  cg->bound = std::move(ptrs);
  std::lock_guard<std::mutex> lock(mutex_);
  graphs_.insert(cg.get());
  return reinterpret_cast<hcr_graph_t*>(cg.release());
}

void CudaGraphs::launch(const hcr_graph_launch_args_t& a) {
  Graph& cg = graph_of(a.graph);
  Gpu& g = *cg.gpu;
  g.ensure_started();
  if (a.num_args != cg.num_args)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, "graph_launch: " + std::to_string(a.num_args) +
                                                " arguments; the graph's nodes take " +
                                                std::to_string(cg.num_args));
  std::vector<hcr_arg_t> args;
  for (size_t i = 0; i < a.num_args; ++i)
    args.push_back(sdk::read_struct(sdk::GraphDesc::arg_at(a.args, i)));
  std::vector<void*> ptrs = graph_pointers(cg, args);
  std::lock_guard<std::mutex> lock(cg.mutex);
  hcr_error_t* node_error = nullptr;
  if (ptrs != cg.bound || cg.partial) {
    Capture c = capture(g, cg, args, ptrs);
    if (!c.refused.empty())
      throw Error(HCR_ERROR_BACKEND, "graph_launch: capturing the graph again for its new "
                                     "memory failed: " +
                                         c.refused);
    DeviceGuard guard(g.ordinal());
    cudaError_t e = cudaErrorGraphExecUpdateFailure;
    if (c.node_error == nullptr && !cg.partial) {
      cudaGraphExecUpdateResultInfo info{};
      e = cudaGraphExecUpdate(cg.exec, c.graph, &info);
    }
    if (e != cudaSuccess) {
      // Refused (another topology: a node failed to capture, or did before): a new one.
      (void)cudaGetLastError();
      cudaGraphExec_t fresh = nullptr;
      if (cudaError_t ie = cudaGraphInstantiate(&fresh, c.graph, 0); ie != cudaSuccess) {
        (void)cudaGetLastError();
        cudaGraphDestroy(c.graph);
        destroy_error(c.node_error);
        throw Error(error_code(ie), "graph_launch: instantiating the graph captured for its "
                                    "new memory failed: " +
                                        error_text(ie));
      }
      cudaGraphExecDestroy(cg.exec);
      cg.exec = fresh;
    }
    cudaGraphDestroy(c.graph);
    // A graph without its failed node and what follows it runs once for the nodes that do not
    // depend on it; the next launch captures all of it again.
    cg.partial = c.node_error != nullptr;
    cg.bound = cg.partial ? std::vector<void*>{} : std::move(ptrs);
    node_error = c.node_error;
    if (node_error != nullptr && a.failed_node != nullptr) *a.failed_node = c.failed_node;
  }
  std::shared_ptr<const void> keep = cg.keep;
  try {
    g.run_on(
        g.compute_lane(), a.done, a.done_user_data, (a.flags & HCR_LAUNCH_MEASURE) != 0,
        [&](Lane& l) -> hcr_error_t* {
          HCR_CUDA_CHECK(cudaGraphLaunch(cg.exec, l.stream()));
          return node_error;
        },
        std::move(keep));
  } catch (...) {
    destroy_error(node_error);
    throw;
  }
}

void CudaGraphs::release(hcr_graph_t* graph) noexcept {
  auto* cg = reinterpret_cast<Graph*>(graph);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (graphs_.erase(cg) == 0) {
      host_.warn("graph_release of a graph this plugin did not create: ignored");
      return;
    }
  }
  destroy(cg);
}

void CudaGraphs::destroy_all() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Graph* cg : graphs_) destroy(cg);
  graphs_.clear();
}

// Which stream each node is captured on: its first predecessor's when no other successor
// continues that one, else one of its own (the first root: the origin, stream 0), so that
// independent branches stay concurrent in the CUDA graph; past kMaxCaptureStreams, branches
// share streams round robin. Returns the number of streams.
size_t CudaGraphs::plan_streams(const Graph& cg, std::vector<size_t>& node_stream) {
  const size_t n = cg.nodes.size();
  node_stream.assign(n, 0);
  std::vector<bool> continued(n, false);
  size_t streams = 1;
  bool origin_taken = false;
  for (size_t i = 0; i < n; ++i) {
    const auto& preds = cg.predecessors[i];
    auto p = std::find_if(preds.begin(), preds.end(), [&](uint32_t q) { return !continued[q]; });
    if (p != preds.end()) {
      continued[*p] = true;
      node_stream[i] = node_stream[*p];
    } else if (preds.empty() && !origin_taken) {
      origin_taken = true;
      node_stream[i] = 0;
    } else if (streams < kMaxCaptureStreams) {
      node_stream[i] = streams++;
    } else {
      node_stream[i] = i % streams;
    }
  }
  return streams;
}

// Captures every node's work, as launch() enqueues it, in node order (predecessors first), each
// on its planned stream after waiting for its predecessors on other streams; every stream joins
// the origin before the capture ends. Streams and events are made before the capture begins:
// nothing but the nodes' work and the ordering between streams is called while it runs.
CudaGraphs::Capture CudaGraphs::capture(Gpu& g, const Graph& cg, const std::vector<hcr_arg_t>& args,
                                        std::vector<void*>& ptrs) {
  Capture out;
  DeviceGuard guard(g.ordinal());
  const size_t n = cg.nodes.size();
  std::vector<size_t> node_stream;
  const size_t num_streams = plan_streams(cg, node_stream);
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> events;  // one per node, then the fork, then one per stream's join
  auto cleanup = [&] {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    for (cudaStream_t s : streams) cudaStreamDestroy(s);
    (void)cudaGetLastError();
  };
  try {
    for (size_t i = 0; i < num_streams; ++i) {
      cudaStream_t s = nullptr;
      HCR_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams.push_back(s);
    }
    for (size_t i = 0; i < n + 1 + num_streams; ++i) {
      cudaEvent_t e = nullptr;
      HCR_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events.push_back(e);
    }
  } catch (const Error& e) {
    cleanup();
    out.refused = e.what();
    return out;
  }
  cudaEvent_t fork = events[n];
  if (cudaError_t e = cudaStreamBeginCapture(streams[0], cudaStreamCaptureModeThreadLocal);
      e != cudaSuccess) {
    (void)cudaGetLastError();
    cleanup();
    out.refused = "cudaStreamBeginCapture: " + error_text(e);
    return out;
  }
  std::string refused;
  auto check = [&](cudaError_t e, const char* call, size_t node) {
    if (e == cudaSuccess || !refused.empty()) return e == cudaSuccess;
    (void)cudaGetLastError();
    refused = std::string(call) + " for node " + std::to_string(node) + ": " + error_text(e);
    return false;
  };
  std::vector<bool> joined(num_streams, false);  // the stream has entered the capture
  std::vector<bool> skipped(n, false);
  joined[0] = check(cudaEventRecord(fork, streams[0]), "cudaEventRecord", 0);
  for (size_t i = 0; i < n && refused.empty(); ++i) {
    const std::vector<uint32_t>& preds = cg.predecessors[i];
    if (std::any_of(preds.begin(), preds.end(), [&](uint32_t p) { return skipped[p]; })) {
      skipped[i] = true;  // after a node that failed to capture
      continue;
    }
    const size_t s = node_stream[i];
    if (!joined[s] && preds.empty())
      check(cudaStreamWaitEvent(streams[s], fork, 0), "cudaStreamWaitEvent", i);
    joined[s] = true;
    for (uint32_t p : preds)
      if (node_stream[p] != s)
        check(cudaStreamWaitEvent(streams[s], events[p], 0), "cudaStreamWaitEvent", i);
    if (!refused.empty()) break;
    hcr_error_t* err = nullptr;
    try {
      err = enqueue_node(g, cg, i, args, ptrs, streams[s]);
    } catch (const Error& e) {
      err = sdk::make_error(e.code(), e.what());
    } catch (const std::exception& e) {
      err = sdk::make_error(HCR_ERROR_INTERNAL, e.what());
    }
    if (err != nullptr) {
      skipped[i] = true;
      if (out.node_error == nullptr) {
        out.node_error = err;
        out.failed_node = i;
      } else {
        destroy_error(err);
      }
      continue;
    }
    check(cudaEventRecord(events[i], streams[s]), "cudaEventRecord", i);
  }
  for (size_t s = 1; s < num_streams && refused.empty(); ++s)
    if (joined[s] && check(cudaEventRecord(events[n + 1 + s], streams[s]), "cudaEventRecord", n))
      check(cudaStreamWaitEvent(streams[0], events[n + 1 + s], 0), "cudaStreamWaitEvent", n);
  cudaGraph_t graph = nullptr;
  if (cudaError_t e = cudaStreamEndCapture(streams[0], &graph); e != cudaSuccess) {
    (void)cudaGetLastError();
    graph = nullptr;
    if (refused.empty())
      refused = "cudaStreamEndCapture: " + error_text(e) +
                " (a native function did something a stream capture cannot record, such as "
                "synchronizing)";
  }
  cleanup();
  if (!refused.empty()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    destroy_error(out.node_error);
    out.node_error = nullptr;
    out.refused = refused;
    return out;
  }
  out.graph = graph;
  return out;
}

// Enqueues node i's work on `stream` as launch() would, through the backend.
hcr_error_t* CudaGraphs::enqueue_node(Gpu& g, const Graph& cg, size_t i,
                                      const std::vector<hcr_arg_t>& args, std::vector<void*>& ptrs,
                                      cudaStream_t stream) {
  const sdk::GraphNode& node = cg.nodes[i];
  const hcr_launch_args_t a = node.launch(cg.device, args.data() + node.first_arg);
  std::vector<void*> mine(ptrs.begin() + static_cast<ptrdiff_t>(node.first_arg),
                          ptrs.begin() + static_cast<ptrdiff_t>(node.first_arg + node.num_args));
  return work_.enqueue_node(g, a, mine, stream);
}

// Every argument's device pointer, node by node, checked as a launch checks them.
// `missing` (graph_create): an argument without memory is no error; its pointer is null and
// its entry in *missing true.
std::vector<void*> CudaGraphs::graph_pointers(const Graph& cg, const std::vector<hcr_arg_t>& args,
                                              std::vector<bool>* missing) {
  std::vector<void*> out;
  out.reserve(args.size());
  std::vector<hcr_arg_t> checked = args;
  if (missing != nullptr) {
    missing->assign(args.size(), false);
    for (size_t k = 0; k < args.size(); ++k)
      if (args[k].memory == nullptr && args[k].rows > 0 && args[k].cols > 0) {
        (*missing)[k] = true;
        checked[k].rows = 0;  // an empty view: no pointer asked for
      }
  }
  for (size_t i = 0; i < cg.nodes.size(); ++i) {
    try {
      const sdk::GraphNode& node = cg.nodes[i];
      std::vector<void*> p =
          work_.device_pointers(node.launch(cg.device, checked.data() + node.first_arg));
      out.insert(out.end(), p.begin(), p.end());
    } catch (const Error& e) {
      throw Error(e.code(), "graph node " + std::to_string(i) + ": " + e.what());
    }
  }
  return out;
}

CudaGraphs::Graph& CudaGraphs::graph_of(hcr_graph_t* graph) {
  auto* cg = reinterpret_cast<Graph*>(graph);
  std::lock_guard<std::mutex> lock(mutex_);
  if (graphs_.count(cg) == 0 || cg->magic != kGraphMagic)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, "graph_launch of a graph this plugin did not create");
  return *cg;
}

void CudaGraphs::destroy(Graph* cg) noexcept {
  if (cg->exec != nullptr) {
    DeviceGuard guard(cg->gpu->ordinal());
    if (cudaGraphExecDestroy(cg->exec) != cudaSuccess) (void)cudaGetLastError();
  }
  cg->magic = 0;
  delete cg;
}

}  // namespace hcr::cuda
