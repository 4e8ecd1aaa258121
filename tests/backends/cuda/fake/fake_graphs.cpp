// The fake CUDA runtime's stream capture and graphs (see fake_cudart.cpp for the rest).
//
// Stream capture and graphs: work enqueued on a capturing stream becomes a node of the capture's
// graph (its dependencies: what the stream last captured, plus the events it waited for) instead of
// running; an instantiated graph runs its nodes in capture order on the stream it is launched on.
// The capture must join every forked stream back to the origin (else
// cudaErrorStreamCaptureUnjoined), and the calls CUDA forbids while a stream captures fail as on a
// GPU and invalidate the capture: synchronizing a capturing stream or a captured event, and (in
// global and thread-local mode, on the capturing thread) synchronous copies, memsets, allocation
// and device synchronization.
#include "fake_cudart.hpp"

#include <algorithm>
#include <atomic>
#include <cuda_runtime_api.h>
#include <mutex>
#include <set>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

using namespace fake;

struct FakeGraphNode {
  std::function<void()> op;
  std::vector<size_t> deps;
};
struct CUgraph_st {
  std::vector<FakeGraphNode> nodes;
};
struct CUgraphExec_st {
  std::vector<FakeGraphNode> nodes;
};
struct Capture {
  CUgraph_st* graph = nullptr;
  CUstream_st* origin = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  bool invalidated = false;
  std::set<CUstream_st*> streams;
};

namespace {

std::mutex g_capture_mutex;
// The capture this thread began, for the calls a global or thread-local capture forbids here.
__attribute__((tls_model("initial-exec"))) thread_local Capture* t_capture = nullptr;
std::atomic<long> g_instantiated{0}, g_updated{0};
std::atomic<long> g_shape_nodes{0}, g_shape_roots{0};  // of the last graph instantiated or updated

void note_shape(const std::vector<FakeGraphNode>& nodes) {
  long roots = 0;
  for (auto& n : nodes) roots += n.deps.empty();
  g_shape_nodes = static_cast<long>(nodes.size());
  g_shape_roots = roots;
}

}  // namespace

bool fake::captured(CUstream_st* s, std::function<void()>& op) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  if (s->capture == nullptr) return false;
  auto& nodes = s->capture->graph->nodes;
  nodes.push_back({std::move(op), s->tail});
  s->tail = {nodes.size() - 1};
  return true;
}

// A call the capture on this thread forbids (global or thread-local mode): fails it, as CUDA does.
bool fake::forbidden_in_capture() {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  if (t_capture == nullptr || t_capture->mode == cudaStreamCaptureModeRelaxed) return false;
  t_capture->invalidated = true;
  return true;
}

bool fake::capturing_refuses_sync(CUstream_st* s) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  if (s->capture == nullptr) return false;
  s->capture->invalidated = true;
  return true;
}

bool fake::captured_refuses_sync(CUevent_st* e) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  if (e->capture == nullptr) return false;
  e->capture->invalidated = true;
  return true;
}

// In a capture the event stands for what the stream captured so far (no node of its own).
bool fake::record_in_capture(CUevent_st* e, CUstream_st* s) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  e->capture = s != nullptr ? s->capture : nullptr;
  e->captured = s != nullptr && s->capture != nullptr ? s->tail : std::vector<size_t>{};
  return e->capture != nullptr;
}

bool fake::wait_in_capture(CUstream_st* s, CUevent_st* e, cudaError_t& result) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  Capture* c = s != nullptr ? s->capture : nullptr;
  if (e->capture != nullptr) {
    if (s == nullptr || (c != nullptr && c != e->capture)) {
      e->capture->invalidated = true;
      result = fail(cudaErrorStreamCaptureIsolation);
      return true;
    }
    if (c == nullptr) {  // forked into the capture: depends on the event's nodes only
      s->capture = e->capture;
      s->tail = e->captured;
      e->capture->streams.insert(s);
    } else {
      for (size_t n : e->captured)
        if (std::find(s->tail.begin(), s->tail.end(), n) == s->tail.end()) s->tail.push_back(n);
    }
    result = cudaSuccess;
    return true;
  }
  if (c != nullptr) {  // an event from outside the capture
    c->invalidated = true;
    result = fail(cudaErrorStreamCaptureIsolation);
    return true;
  }
  return false;
}

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  if (s == nullptr) return fail(cudaErrorStreamCaptureUnsupported);  // not the legacy stream
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  if (s->capture != nullptr) return fail(cudaErrorIllegalState);
  auto* c = new Capture;
  c->graph = new CUgraph_st;
  c->origin = s;
  c->mode = mode;
  c->streams.insert(s);
  s->capture = c;
  s->tail.clear();
  if (mode != cudaStreamCaptureModeRelaxed) t_capture = c;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  *graph = nullptr;
  Capture* c = nullptr;
  bool joined = true;
  {
    std::lock_guard<std::mutex> lock(g_capture_mutex);
    c = s != nullptr ? s->capture : nullptr;
    if (c == nullptr) return fail(cudaErrorIllegalState);
    if (c->origin != s) {
      c->invalidated = true;
      return fail(cudaErrorStreamCaptureUnmatched);
    }
    // Joined: every captured node is the origin's last work or comes before it.
    std::vector<bool> reached(c->graph->nodes.size(), false);
    std::vector<size_t> todo = s->tail;
    while (!todo.empty()) {
      const size_t n = todo.back();
      todo.pop_back();
      if (reached[n]) continue;
      reached[n] = true;
      for (size_t d : c->graph->nodes[n].deps) todo.push_back(d);
    }
    for (bool r : reached) joined = joined && r;
    for (CUstream_st* x : c->streams) {
      x->capture = nullptr;
      x->tail.clear();
    }
    if (t_capture == c) t_capture = nullptr;
  }
  const bool invalidated = c->invalidated;
  if (invalidated || !joined) {
    delete c->graph;
    delete c;
    return fail(invalidated ? cudaErrorStreamCaptureInvalidated : cudaErrorStreamCaptureUnjoined);
  }
  *graph = c->graph;
  ++g_live;
  delete c;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  Capture* c = s != nullptr ? s->capture : nullptr;
  *status = c == nullptr     ? cudaStreamCaptureStatusNone
            : c->invalidated ? cudaStreamCaptureStatusInvalidated
                             : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (graph == nullptr) return fail(cudaErrorInvalidValue);
  delete graph;
  --g_live;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (graph == nullptr) return fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->nodes};
  ++g_live;
  ++g_instantiated;
  note_shape(graph->nodes);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                          unsigned long long flags) {
  return cudaGraphInstantiate(exec, graph, flags);
}

// As CUDA: only the nodes' parameters may change, not the topology.
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                cudaGraphExecUpdateResultInfo* info) {
  if (exec == nullptr || graph == nullptr) return fail(cudaErrorInvalidValue);
  bool same = exec->nodes.size() == graph->nodes.size();
  for (size_t i = 0; same && i < graph->nodes.size(); ++i)
    same = exec->nodes[i].deps == graph->nodes[i].deps;
  if (!same) {
    if (info != nullptr) info->result = cudaGraphExecUpdateErrorTopologyChanged;
    return fail(cudaErrorGraphExecUpdateFailure);
  }
  if (info != nullptr) info->result = cudaGraphExecUpdateSuccess;
  exec->nodes = graph->nodes;
  ++g_updated;
  note_shape(graph->nodes);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  if (cudaError_t e = sticky()) return fail(e);
  if (exec == nullptr) return fail(cudaErrorInvalidValue);
  if (s != nullptr && s->device != t_device) return fail(cudaErrorInvalidResourceHandle);
  // The nodes in capture order, which respects their dependencies.
  std::vector<FakeGraphNode> nodes = exec->nodes;
  enqueue(s, [nodes = std::move(nodes)] {
    for (const FakeGraphNode& n : nodes) n.op();
  });
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (exec == nullptr) return fail(cudaErrorInvalidValue);
  delete exec;
  --g_live;
  return cudaSuccess;
}

}  // extern "C"

/// Graphs instantiated and updated so far, and the last one's node and root counts (a root: a node
/// without dependencies, free to run at once).
FAKE_EXPORT void hcr_fake_graph_stats(long* instantiated, long* updated, long* nodes, long* roots) {
  *instantiated = g_instantiated.load();
  *updated = g_updated.load();
  *nodes = g_shape_nodes.load();
  *roots = g_shape_roots.load();
}
