// Device graphs (ABI 1.2) on the CUDA backend, through the plugin's C table: graph_create captures
// the nodes into a CUDA graph, graph_launch replays it. Run against the real plugin on a GPU
// (CudaGpu/CudaGraph.*, skipped without one) and against the fake CUDA runtime (FakeCuda/...),
// whose stream capture records what a capturing stream is given and runs it at each launch, and
// refuses what CUDA refuses during a capture.
//
// The kernels: a native launcher scaling a vector on the stream it is handed (hcr_test_scale on a
// GPU; on the fake runtime a host twin that puts the same work on the stream, so that capture
// records it) and the axpy source kernel (NVRTC; emulated by the fake runtime).
#include "cuda_test_plugin.hpp"

#include <dlfcn.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace hcr {
namespace {

// ---- the fake runtime's side doors
// ---------------------------------------------------------------

template <class F>
F fake_symbol(const char* name) {
  void* h = dlopen("libhcr_fake_cudart.so", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  auto f = reinterpret_cast<F>(dlsym(h, name));
  dlclose(h);  // still loaded by the plugin
  return f;
}

struct GraphStats {
  long instantiated = 0, updated = 0, nodes = 0, roots = 0;
};

GraphStats fake_graph_stats() {
  GraphStats s;
  auto f = fake_symbol<void (*)(long*, long*, long*, long*)>("hcr_fake_graph_stats");
  EXPECT_NE(f, nullptr);
  if (f) f(&s.instantiated, &s.updated, &s.nodes, &s.roots);
  return s;
}

long fake_live() {
  auto f = fake_symbol<long (*)()>("hcr_fake_live");
  return f ? f() : -1;
}

// hcr_test_scale's twin for the fake runtime: the scaling runs on the stream (through the fake's
// hcr_fake_enqueue), as the GPU kernel would, so that a capture records it and a replay reruns it.
struct ScaleWork {
  float* x;
  uint64_t rows, cols, ld;
  float a;
};
std::mutex g_scale_mutex;
std::deque<ScaleWork> g_scale_work;  // what captured graphs point to: lives as long as the test

void run_scale(void* p) {
  auto* w = static_cast<ScaleWork*>(p);
  for (uint64_t r = 0; r < w->rows; ++r)
    for (uint64_t c = 0; c < w->cols; ++c) w->x[r * w->ld + c] *= w->a;
}

int fake_scale(void*, const hcr_exec_context_t* ctx, char* message, size_t size) {
  using Enqueue = void (*)(void*, void (*)(void*), void*);
  static const Enqueue enqueue = fake_symbol<Enqueue>("hcr_fake_enqueue");
  if (enqueue == nullptr || ctx->num_args != 1 || ctx->native_queue == nullptr ||
      ctx->num_params != 1) {
    std::snprintf(message, size, "fake_scale: bad context");
    return 1;
  }
  float a;
  std::memcpy(&a, static_cast<const char*>(ctx->params) + ctx->param_offsets[0], sizeof a);
  const hcr_arg_t& x = ctx->args[0];
  ScaleWork* w;
  {
    std::lock_guard<std::mutex> lock(g_scale_mutex);
    w = &g_scale_work.emplace_back(ScaleWork{static_cast<float*>(x.host), x.rows, x.cols, x.ld, a});
  }
  enqueue(ctx->native_queue, &run_scale, w);
  return 0;
}

// hcr_test_sync_stream's twin: synchronizes its stream through the fake runtime.
int fake_sync_stream(void*, const hcr_exec_context_t* ctx, char*, size_t) {
  using Sync = int (*)(void*);
  static const Sync sync = fake_symbol<Sync>("cudaStreamSynchronize");
  if (sync) (void)sync(ctx->native_queue);
  return 0;
}

// Scales like `inner` on its first call and fails on every later one: a node that fails when the
// graph is captured again for new memory.
struct FailLater {
  hcr_kernel_fn inner = nullptr;
  int calls = 0;
};
int fail_later(void* user, const hcr_exec_context_t* ctx, char* message, size_t size) {
  auto* f = static_cast<FailLater*>(user);
  if (f->calls++ > 0) {
    std::snprintf(message, size, "node failure on purpose");
    return 1;
  }
  return f->inner(nullptr, ctx, message, size);
}

// ---- graphs through the table
// --------------------------------------------------------------------

/// A graph under construction: nodes with their arguments, one float parameter or axpy's two.
struct Spec {
  struct Node {
    hcr_kernel_t* kernel = nullptr;
    std::vector<hcr_arg_t> args;
    std::vector<char> params;
    std::vector<uint32_t> offsets;
    std::vector<uint32_t> successors;
  };
  std::vector<Node> nodes;

  static Node scale(hcr_kernel_t* k, hcr_arg_t x, float a, std::vector<uint32_t> next) {
    Node n;
    n.kernel = k;
    n.args = {x};
    n.params.resize(sizeof a);
    std::memcpy(n.params.data(), &a, sizeof a);
    n.offsets = {0};
    n.successors = std::move(next);
    return n;
  }
  // y += a x over n elements (the axpy source kernel).
  static Node axpy(hcr_kernel_t* k, hcr_arg_t y, hcr_arg_t x, float a, unsigned long long n,
                   std::vector<uint32_t> next) {
    Node node;
    node.kernel = k;
    node.args = {y, x};
    node.params.resize(16);
    std::memcpy(node.params.data(), &a, sizeof a);
    std::memcpy(node.params.data() + 8, &n, sizeof n);
    node.offsets = {0, 8};
    node.successors = std::move(next);
    return node;
  }

  std::vector<hcr_arg_t> args() const {
    std::vector<hcr_arg_t> out;
    for (auto& n : nodes) out.insert(out.end(), n.args.begin(), n.args.end());
    return out;
  }
  CallError create(Plugin& p, hcr_graph_t** graph) const {
    std::vector<hcr_graph_node_t> ns;
    for (size_t i = 0; i < nodes.size(); ++i) {
      hcr_graph_node_t n{};
      n.struct_size = HCR_GRAPH_NODE_STRUCT_SIZE;
      n.kernel = nodes[i].kernel;
      n.num_args = nodes[i].args.size();
      n.params = nodes[i].params.data();
      n.params_size = nodes[i].params.size();
      n.param_offsets = nodes[i].offsets.data();
      n.num_params = nodes[i].offsets.size();
      n.successors = nodes[i].successors.data();
      n.num_successors = nodes[i].successors.size();
      ns.push_back(n);
    }
    std::vector<hcr_arg_t> all = args();
    hcr_graph_create_args_t a{};
    a.struct_size = HCR_GRAPH_CREATE_ARGS_STRUCT_SIZE;
    a.device = 0;
    a.nodes = ns.data();
    a.num_nodes = ns.size();
    a.args = all.data();
    a.num_args = all.size();
    CallError e = p.check(p.api()->graph_create(p.get(), &a));
    *graph = a.graph;
    return e;
  }
};

/// Launches `g` over `args`, measured, and waits for its done.
Outcome launch_graph(Plugin& p, hcr_graph_t* g, const std::vector<hcr_arg_t>& args,
                     uint64_t* failed_node = nullptr) {
  Waiter w(p.api());
  hcr_graph_launch_args_t a{};
  a.struct_size = HCR_GRAPH_LAUNCH_ARGS_STRUCT_SIZE;
  a.graph = g;
  a.args = args.data();
  a.num_args = args.size();
  a.flags = HCR_LAUNCH_MEASURE;
  a.done = &Waiter::on_done;
  a.done_user_data = &w;
  a.failed_node = failed_node;
  CallError e = p.check(p.api()->graph_launch(p.get(), &a));
  if (!e.ok) return {false, e.code, e.message, -1};
  std::vector<Outcome> o = w.wait(1);
  EXPECT_EQ(o.size(), 1u) << "done more than once";
  return o[0];
}

// Why source kernels cannot be tested here (NVRTC missing from the toolkit), or empty.
std::string nvrtc_missing(const std::string& file) {
  static const std::string why = [&file] {
    Plugin p(Options{{"cache_dir", ""}}, file);
    CallError e;
    hcr_kernel_t* k = p.source(0, "probe", "extern \"C\" __global__ void probe() {}", nullptr, &e);
    if (k != nullptr) p.release(k);
    return e.code == HCR_ERROR_UNSUPPORTED && e.message.find("need NVRTC") != std::string::npos
               ? e.message
               : std::string();
  }();
  return why;
}

const char* const kAxpySource = R"(
extern "C" __global__ void axpy(float* y, const float* x, float a, unsigned long long n) {
  unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
)";

class CudaGraph : public PluginFixture {
 protected:
  static constexpr size_t kN = 1000;

  hcr_kernel_t* native(const char* name, hcr_kernel_fn fn, void* user = nullptr) {
    hcr_kernel_desc_t d{};
    d.name = name;
    d.kind = HCR_IMPL_NATIVE_FUNCTION;
    d.api = "cuda";
    d.fn = fn;
    d.user_data = user;
    return p().kernel(0, d);
  }
  hcr_kernel_fn scale_fn() const { return fake() ? &fake_scale : &hcr_test_scale; }
  hcr_kernel_t* scale() { return native("scale", scale_fn()); }

  hcr_memory_t* vector(float base) {
    std::vector<float> v(kN);
    for (size_t i = 0; i < kN; ++i) v[i] = base + static_cast<float>(i % 17);
    hcr_memory_t* m = p().alloc(0, kN * 4);
    EXPECT_TRUE(p().upload(0, m, 0, kN * 4, v.data(), kN * 4, kN * 4, 1).ok);
    return m;
  }
  std::vector<float> read(hcr_memory_t* m) {
    std::vector<float> v(kN);
    EXPECT_TRUE(p().download(0, v.data(), kN * 4, m, 0, kN * 4, kN * 4, 1).ok);
    return v;
  }
  static hcr_arg_t rw(hcr_memory_t* m) {
    return matrix_arg(m, 0, HCR_DTYPE_F32, HCR_ACCESS_READ_WRITE, 1, kN, kN);
  }
  static hcr_arg_t rd(hcr_memory_t* m) {
    return matrix_arg(m, 0, HCR_DTYPE_F32, HCR_ACCESS_READ, 1, kN, kN);
  }
  // One launch per node, as the host's task-by-task replay does.
  void launch_one_by_one(const Spec& g) {
    for (const Spec::Node& n : g.nodes) {
      hcr_launch_args_t la{};
      la.kernel = n.kernel;
      la.args = n.args.data();
      la.num_args = n.args.size();
      la.params = n.params.data();
      la.params_size = n.params.size();
      la.param_offsets = n.offsets.data();
      la.num_params = n.offsets.size();
      Outcome o = p().launch(la);
      ASSERT_TRUE(o.ok) << o.message;
    }
  }
};

INSTANTIATE_TEST_SUITE_P(CudaGpu, CudaGraph, ::testing::Values(Target{false}),
                         [](const auto&) { return std::string("gpu"); });
INSTANTIATE_TEST_SUITE_P(FakeCuda, CudaGraph, ::testing::Values(Target{true}),
                         [](const auto&) { return std::string("fake"); });

// A chain of native kernels replayed as one CUDA graph computes what launching them one by one
// computes, at every replay; the captured graph is a chain (one root).
TEST_P(CudaGraph, ChainGivesWhatLaunchesGive) {
  hcr_kernel_t* k = scale();
  ASSERT_NE(k, nullptr);
  hcr_memory_t* a = vector(1);
  hcr_memory_t* b = vector(1);
  const float factors[] = {2, 3, 0.5f, -1, 4, 0.25f};
  Spec g, one_by_one;
  for (uint32_t i = 0; i < 6; ++i) {
    std::vector<uint32_t> next;
    if (i + 1 < 6) next.push_back(i + 1);
    g.nodes.push_back(Spec::scale(k, rw(a), factors[i], next));
    one_by_one.nodes.push_back(Spec::scale(k, rw(b), factors[i], {}));
  }
  hcr_graph_t* graph = nullptr;
  CallError ce = g.create(p(), &graph);
  ASSERT_TRUE(ce.ok) << ce.message;
  ASSERT_NE(graph, nullptr);
  if (fake()) {
    GraphStats s = fake_graph_stats();
    EXPECT_EQ(s.nodes, 6);
    EXPECT_EQ(s.roots, 1);
  }
  for (int replay = 0; replay < 3; ++replay) {
    Outcome o = launch_graph(p(), graph, g.args());
    ASSERT_TRUE(o.ok) << o.message;
    EXPECT_GE(o.seconds, 0.0) << "HCR_LAUNCH_MEASURE: the graph's device time";
    launch_one_by_one(one_by_one);
    const std::vector<float> x = read(a), y = read(b);
    float product = 1;  // the six factors make -3; each replay applies them again
    for (int r = 0; r <= replay; ++r) product *= -3;
    size_t wrong = 0;
    for (size_t i = 0; i < kN; ++i)
      wrong += x[i] != y[i] || x[i] != product * (1 + static_cast<float>(i % 17));
    EXPECT_EQ(wrong, 0u) << "replay " << replay;
  }
  p().api()->graph_release(p().get(), graph);
  p().release(k);
  p().free(0, a);
  p().free(0, b);
}

// Fork and join: two independent scalings, an axpy that waits for both, a scaling after it. The
// result is the launches' result; the captured graph has both branches as roots (they run side by
// side), not one stream's sequence.
TEST_P(CudaGraph, ForkJoinKeepsIndependentNodesConcurrent) {
  if (std::string why = nvrtc_missing(GetParam().file()); !why.empty()) GTEST_SKIP() << why;
  hcr_kernel_t* k = scale();
  hcr_kernel_t* axpy = p().source(0, "axpy", kAxpySource);
  ASSERT_TRUE(k && axpy);
  hcr_memory_t* a = vector(1);
  hcr_memory_t* b = vector(5);
  Spec g;
  g.nodes = {Spec::scale(k, rw(a), 2, {2}), Spec::scale(k, rw(b), 3, {2}),
             Spec::axpy(axpy, rw(a), rd(b), 1, kN, {3}), Spec::scale(k, rw(a), 0.5f, {})};
  hcr_graph_t* graph = nullptr;
  CallError ce = g.create(p(), &graph);
  ASSERT_TRUE(ce.ok) << ce.message;
  if (fake()) {
    GraphStats s = fake_graph_stats();
    EXPECT_EQ(s.nodes, 4);
    EXPECT_EQ(s.roots, 2) << "the two branches were serialized";
  }
  Outcome o = launch_graph(p(), graph, g.args());
  ASSERT_TRUE(o.ok) << o.message;
  const std::vector<float> x = read(a), y = read(b);
  size_t wrong = 0;
  for (size_t i = 0; i < kN; ++i) {
    const float a0 = 1 + static_cast<float>(i % 17), b0 = 5 + static_cast<float>(i % 17);
    wrong += x[i] != (2 * a0 + 3 * b0) * 0.5f || y[i] != 3 * b0;
  }
  EXPECT_EQ(wrong, 0u);
  p().api()->graph_release(p().get(), graph);
  p().release(k);
  p().release(axpy);
  p().free(0, a);
  p().free(0, b);
}

// A launch over other memory (a replay that binds other buffers) captures again and updates the
// executable graph in place: the work lands in the new memory, the old is left alone. A launch
// over the memory already bound captures nothing.
TEST_P(CudaGraph, OtherMemoryUpdatesTheGraph) {
  hcr_kernel_t* k = scale();
  hcr_memory_t* a = vector(1);
  hcr_memory_t* b = vector(2);
  auto chain = [&](hcr_memory_t* m) {
    Spec g;
    g.nodes = {Spec::scale(k, rw(m), 2, {1}), Spec::scale(k, rw(m), 5, {2}),
               Spec::scale(k, rw(m), 0.5f, {})};
    return g;
  };
  hcr_graph_t* graph = nullptr;
  ASSERT_TRUE(chain(a).create(p(), &graph).ok);
  ASSERT_TRUE(launch_graph(p(), graph, chain(a).args()).ok);
  const GraphStats before = fake() ? fake_graph_stats() : GraphStats{};
  Outcome o = launch_graph(p(), graph, chain(b).args());
  ASSERT_TRUE(o.ok) << o.message;
  std::vector<float> x = read(a), y = read(b);
  size_t wrong = 0;
  for (size_t i = 0; i < kN; ++i)
    wrong += x[i] != 5 * (1 + static_cast<float>(i % 17)) ||
             y[i] != 5 * (2 + static_cast<float>(i % 17));
  EXPECT_EQ(wrong, 0u);
  if (fake()) {
    GraphStats after = fake_graph_stats();
    EXPECT_EQ(after.updated, before.updated + 1) << "the executable graph was not updated";
    EXPECT_EQ(after.instantiated, before.instantiated) << "instantiated again, not updated";
    ASSERT_TRUE(launch_graph(p(), graph, chain(b).args()).ok);
    GraphStats same = fake_graph_stats();
    EXPECT_EQ(same.updated, after.updated) << "captured again for the memory already bound";
    y = read(b);
    EXPECT_EQ(y[3], 25 * (2 + 3.0f));
  }
  p().api()->graph_release(p().get(), graph);
  p().release(k);
  p().free(0, a);
  p().free(0, b);
}

// What cannot become a CUDA graph is refused as UNSUPPORTED, saying why, so that the host replays
// task by task: a launcher that synchronizes its stream (capture forbids it), a cuBLAS built-in, a
// launcher that fails while captured.
TEST_P(CudaGraph, WhatCannotBeCapturedIsUnsupported) {
  hcr_memory_t* a = vector(1);
  hcr_kernel_t* sync = native("sync", fake() ? &fake_sync_stream : &hcr_test_sync_stream);
  hcr_kernel_t* k = scale();
  Spec g;
  g.nodes = {Spec::scale(k, rw(a), 2, {1}), Spec::scale(sync, rw(a), 1, {})};
  hcr_graph_t* graph = nullptr;
  CallError e = g.create(p(), &graph);
  EXPECT_EQ(e.code, HCR_ERROR_UNSUPPORTED) << e.message;
  EXPECT_NE(e.message.find("not captured"), std::string::npos) << e.message;
  EXPECT_EQ(graph, nullptr);

  hcr_kernel_t* bad = native("fail", &hcr_test_fail);
  g.nodes[1].kernel = bad;
  e = g.create(p(), &graph);
  EXPECT_EQ(e.code, HCR_ERROR_UNSUPPORTED) << e.message;
  EXPECT_NE(e.message.find("node 1 failed: native failure on purpose"), std::string::npos)
      << e.message;

  CallError be;
  hcr_kernel_t* gemm = p().builtin(0, "gemm_f32", &be);
  if (gemm != nullptr) {
    g.nodes[1].kernel = gemm;
    e = g.create(p(), &graph);
    EXPECT_EQ(e.code, HCR_ERROR_UNSUPPORTED) << e.message;
    EXPECT_NE(e.message.find("built-in 'gemm_f32'"), std::string::npos) << e.message;
    p().release(gemm);
  }
  // The failed captures left nothing behind, and the device still works.
  std::vector<float> x = read(a);
  EXPECT_EQ(x[1], 2.0f) << "a refused graph's work ran (the capture was not discarded)";
  p().release(sync);
  p().release(bad);
  p().release(k);
  p().free(0, a);
}

// A node that fails when the graph is captured again for new memory: done once, with its error
// and index; the node after it is skipped; the independent branch runs.
TEST_P(CudaGraph, AFailingNodeSkipsItsSuccessorsOnly) {
  FailLater first_only{scale_fn()};
  hcr_kernel_t* flaky = native("flaky", &fail_later, &first_only);
  hcr_kernel_t* k = scale();
  hcr_memory_t* a = vector(1);
  hcr_memory_t* b = vector(2);
  hcr_memory_t* c = vector(3);
  auto spec = [&](hcr_memory_t* m) {
    Spec g;
    g.nodes = {Spec::scale(flaky, rw(m), 2, {1}), Spec::scale(k, rw(m), 3, {}),
               Spec::scale(k, rw(b), 10, {})};
    return g;
  };
  hcr_graph_t* graph = nullptr;
  CallError ce = spec(a).create(p(), &graph);
  ASSERT_TRUE(ce.ok) << ce.message;
  ASSERT_TRUE(launch_graph(p(), graph, spec(a).args()).ok);
  uint64_t failed = 99;
  Outcome o = launch_graph(p(), graph, spec(c).args(), &failed);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.code, HCR_ERROR_KERNEL) << o.message;
  EXPECT_NE(o.message.find("node failure on purpose"), std::string::npos) << o.message;
  EXPECT_EQ(failed, 0u);
  const std::vector<float> x = read(c), y = read(b);
  EXPECT_EQ(x[4], 3 + 4.0f) << "the failed node's successor ran";
  EXPECT_EQ(y[4], 100 * (2 + 4.0f)) << "the independent node did not run (twice: two launches)";
  p().api()->graph_release(p().get(), graph);
  p().release(flaky);
  p().release(k);
  p().free(0, a);
  p().free(0, b);
  p().free(0, c);
}

// The runtime creates a device graph before its data is on the device (arguments without memory,
// as the ABI allows): the graph is captured on a placeholder, and the first launch, handed the
// memory, captures again and computes there.
TEST_P(CudaGraph, CreatedBeforeItsDataIsOnTheDevice) {
  hcr_kernel_t* k = scale();
  hcr_memory_t* a = vector(1);
  auto chain = [&](hcr_memory_t* m) {
    Spec g;
    g.nodes = {Spec::scale(k, rw(m), 2, {1}), Spec::scale(k, rw(m), 7, {})};
    return g;
  };
  hcr_graph_t* graph = nullptr;
  CallError ce = chain(nullptr).create(p(), &graph);
  ASSERT_TRUE(ce.ok) << ce.message;
  const GraphStats before = fake() ? fake_graph_stats() : GraphStats{};
  Outcome o = launch_graph(p(), graph, chain(a).args());
  ASSERT_TRUE(o.ok) << o.message;
  if (fake()) {
    EXPECT_EQ(fake_graph_stats().updated, before.updated + 1);
  }
  const std::vector<float> x = read(a);
  size_t wrong = 0;
  for (size_t i = 0; i < kN; ++i) wrong += x[i] != 14 * (1 + static_cast<float>(i % 17));
  EXPECT_EQ(wrong, 0u);
  // A launch without memory is refused: only graph_create may leave it out.
  o = launch_graph(p(), graph, chain(nullptr).args());
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.code, HCR_ERROR_INVALID_ARGUMENT) << o.message;
  p().api()->graph_release(p().get(), graph);
  p().release(k);
  p().free(0, a);
}

// graph_release frees the executable graph (the fake runtime counts it); a released or foreign
// graph is not launched.
TEST_P(CudaGraph, ReleaseFreesTheGraph) {
  hcr_kernel_t* k = scale();
  hcr_memory_t* a = vector(1);
  Spec g;
  g.nodes = {Spec::scale(k, rw(a), 2, {})};
  const long live = fake() ? fake_live() : 0;
  hcr_graph_t* graph = nullptr;
  ASSERT_TRUE(g.create(p(), &graph).ok);
  if (fake()) {
    EXPECT_EQ(fake_live(), live + 1);
  }
  p().api()->graph_release(p().get(), graph);
  if (fake()) {
    EXPECT_EQ(fake_live(), live);
  }
  int not_a_graph = 0;
  Outcome o = launch_graph(p(), reinterpret_cast<hcr_graph_t*>(&not_a_graph), g.args());
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.code, HCR_ERROR_INVALID_ARGUMENT) << o.message;
  p().release(k);
  p().free(0, a);
}

// ---- through hcr::Runtime
// ------------------------------------------------------------------------

class CudaGraphRuntime : public RuntimeFixture {};

INSTANTIATE_TEST_SUITE_P(CudaGpu, CudaGraphRuntime, ::testing::Values(Target{false}),
                         [](const auto&) { return std::string("gpu"); });
INSTANTIATE_TEST_SUITE_P(FakeCuda, CudaGraphRuntime, ::testing::Values(Target{true}),
                         [](const auto&) { return std::string("fake"); });

// A recorded hcr::Graph whose tasks ran on one GPU replays as one device graph (a CUDA graph):
// every replay is one graph launch, the results are the tasks' (the data manager's device memory
// handed to the right nodes, brought home at the end), and a replay that binds another buffer
// computes in it.
TEST_P(CudaGraphRuntime, ReplaysRunAsOneCudaGraph) {
  Kernel k = rt().kernel("scale").native("cuda", fake() ? &fake_scale : &hcr_test_scale, nullptr);
  const size_t n = 300;
  auto x = rt().buffer<float>(1, n), y = rt().buffer<float>(1, n), other = rt().buffer<float>(1, n);
  for (auto* b : {&x, &y, &other}) {
    auto h = b->acquire(Access::write);
    for (size_t i = 0; i < n; ++i) h(0, i) = 1 + static_cast<float>(i % 7);
  }
  // x: a chain scaling it by 3 in all; y: an independent branch scaling it by 2.
  const float chain[] = {2, 2, 0.5f, 3, 0.5f, 2, 0.5f};
  rt().begin_recording();
  for (float f : chain) rt().submit(Task(k).read_write(x).param(f).on(0));
  rt().submit(Task(k).read_write(y).param(2.0f).on(0));
  Graph g = rt().end_recording();
  rt().wait_all();
  for (int r = 0; r < 3; ++r) g.replay().get();
  EXPECT_EQ(rt().stats().graph_launches, 3u) << "the replays ran task by task";
  g.replay({{y, other}}).get();
  EXPECT_EQ(rt().stats().graph_launches, 4u);
  const std::vector<float> vx = x.to_vector(), vy = y.to_vector(), vo = other.to_vector();
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = 1 + static_cast<float>(i % 7);
    wrong += vx[i] != 243 * v || vy[i] != 16 * v || vo[i] != 2 * v;  // 3^5; 2^4 (+ recording)
  }
  EXPECT_EQ(wrong, 0u);
}

}  // namespace
}  // namespace hcr
