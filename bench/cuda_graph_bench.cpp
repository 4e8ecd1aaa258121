// Chains of small dependent kernels on GPU 0, launched one by one against the same chain as one
// device graph (ABI 1.2), at the CUDA plugin's table and through hcr::Runtime:
//
//   build/bin/cuda_graph_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only
//
// - BM_TaskChain/<tasks>/<graph>: a chain of small dependent tasks (a 1K-element f32 x += 1,
//   read_write, an NVRTC source kernel) through hcr::Runtime: graph 0 submits them one by one and
//   waits for the last, graph 1 replays the same chain recorded as an hcr::Graph (a device graph
//   where the runtime hands it to the plugin: device_graph 1, else 0). Read tasks_per_s; the
//   result is checked.
// - BM_DeviceGraph/<tasks>/<graph>: the same chain at the plugin's table: graph 0 launches each
//   kernel once the previous one's done has come back (what a dependent task costs the host),
//   graph 1 runs it as one device graph (graph_create once, then one graph_launch per
//   iteration: a CUDA graph). Read launches_per_s.
//
// BM_DeviceGraph drives the plugin through its C table (dlopen of libhcr-cuda.so from the build
// tree, or from $HCR_CUDA_BENCH_PLUGIN_DIR), as the runtime does. Without a GPU every benchmark
// reports an error and the program exits 0.
#include "cuda_bench_support.hpp"

#include <hcr/hcr.hpp>
#include <hcr/plugin.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

const char* const kIncSource = R"(
extern "C" __global__ void hcr_bench_inc(float* x, unsigned long long n) {
  unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
)";
constexpr size_t kChainElems = 1024;

// BM_TaskChain/<tasks>/<graph>: through hcr::Runtime (see the top of the file).
void BM_TaskChain(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const size_t tasks = static_cast<size_t>(state.range(0));
  const bool graph = state.range(1) == 1;
  hcr::Runtime& rt = runtime();
  std::string failure;
  try {
    auto x = rt.buffer<float>(1, kChainElems);
    {
      auto v = x.acquire(hcr::Access::write);
      std::fill(v.data(), v.data() + kChainElems, 0.0f);
    }
    hcr::Kernel inc = rt.kernel("hcr_bench_inc").source("cuda", kIncSource);
    const unsigned long long n = kChainElems;
    auto submit_chain = [&] {
      hcr::Event last;
      for (size_t t = 0; t < tasks; ++t)
        last = rt.submit(hcr::Task(inc).read_write(x).param(n).on(0));
      return last;
    };
    // Warm-up (compiles the kernel, moves x to the GPU), then the recording, which runs too.
    submit_chain().get();
    rt.begin_recording();
    submit_chain();
    hcr::Graph g = rt.end_recording();
    rt.wait_all();
    g.replay().get();  // a device graph is created at the first replay
    size_t runs = 3;
    double busy = 0;
    const uint64_t graph_launches = rt.stats().graph_launches;
    for (auto _ : state) {
      const auto t0 = Clock::now();
      if (graph) g.replay().get();
      else submit_chain().get();
      const double s = seconds_since(t0);
      busy += s;
      state.SetIterationTime(s);
      ++runs;
    }
    auto v = x.acquire(hcr::Access::read);
    const float want = static_cast<float>(runs * tasks);
    size_t wrong = 0;
    for (size_t i = 0; i < kChainElems; ++i) wrong += v.data()[i] != want;
    if (wrong != 0) {
      state.SkipWithError(("wrong result: " + std::to_string(wrong) + " elements differ from " +
                           std::to_string(want))
                              .c_str());
      return;
    }
    if (busy > 0)
      state.counters["tasks_per_s"] = static_cast<double>(tasks * state.iterations()) / busy;
    // 1: every replay ran as one device graph; 0: task by task (the plugin refused the graph).
    state.counters["device_graph"] =
        static_cast<double>(rt.stats().graph_launches - graph_launches) /
        static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
    state.SetLabel(std::to_string(tasks) + " tasks, " + (graph ? "hcr::Graph replay" : "submits"));
  } catch (const std::exception& e) {
    state.SkipWithError((std::string("task chain failed: ") + e.what()).c_str());
  }
}

// BM_DeviceGraph/<tasks>/<graph>: at the plugin's table (see the top of the file).
void BM_DeviceGraph(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Plugin& pl = plugin();
  if (pl.api->graph_create == nullptr || pl.api->struct_size < HCR_PLUGIN_API_STRUCT_SIZE) {
    state.SkipWithError("the cuda plugin has no device graphs (ABI 1.2)");
    return;
  }
  const size_t tasks = static_cast<size_t>(state.range(0));
  const bool graph = state.range(1) == 1;
  hcr_memory_t* m = pl.alloc(kChainElems * 4);
  if (m == nullptr) {
    state.SkipWithError(("mem_alloc: " + pl.why).c_str());
    return;
  }
  std::vector<float> host(kChainElems, 0.0f);
  std::string err = pl.copy(m, host.data(), kChainElems * 4, true);
  hcr_kernel_desc_t d{};
  d.struct_size = HCR_KERNEL_DESC_STRUCT_SIZE;
  d.name = "hcr_bench_inc";
  d.kind = HCR_IMPL_SOURCE;
  d.api = "cuda";
  d.source = kIncSource;
  d.source_size = std::strlen(kIncSource);
  hcr_kernel_get_args_t ka{};
  ka.struct_size = HCR_KERNEL_GET_ARGS_STRUCT_SIZE;
  ka.desc = &d;
  if (hcr_error_t* e = pl.api->kernel_get(pl.p, &ka)) err = pl.take(e);
  hcr_arg_t arg{};
  arg.struct_size = HCR_ARG_STRUCT_SIZE;
  arg.memory = m;
  arg.dtype = HCR_DTYPE_F32;
  arg.access = HCR_ACCESS_READ_WRITE;
  arg.rows = 1;
  arg.cols = arg.ld = kChainElems;
  const unsigned long long n = kChainElems;
  const uint32_t offset = 0;
  std::vector<hcr_graph_node_t> nodes(tasks);
  std::vector<uint32_t> next(tasks);
  for (size_t i = 0; i < tasks; ++i) {
    next[i] = static_cast<uint32_t>(i + 1);
    hcr_graph_node_t& x = nodes[i];
    x.struct_size = HCR_GRAPH_NODE_STRUCT_SIZE;
    x.kernel = ka.kernel;
    x.num_args = 1;
    x.params = &n;
    x.params_size = sizeof n;
    x.param_offsets = &offset;
    x.num_params = 1;
    x.successors = &next[i];
    x.num_successors = i + 1 < tasks ? 1 : 0;
  }
  const std::vector<hcr_arg_t> args(tasks, arg);
  hcr_graph_t* g = nullptr;
  if (err.empty() && graph) {
    hcr_graph_create_args_t ga{};
    ga.struct_size = HCR_GRAPH_CREATE_ARGS_STRUCT_SIZE;
    ga.nodes = nodes.data();
    ga.num_nodes = tasks;
    ga.args = args.data();
    ga.num_args = tasks;
    if (hcr_error_t* e = pl.api->graph_create(pl.p, &ga)) err = "graph_create: " + pl.take(e);
    g = ga.graph;
  }
  auto one_by_one = [&]() -> std::string {
    for (size_t t = 0; t < tasks; ++t) {
      Done done;
      done.api = pl.api;
      hcr_launch_args_t la{};
      la.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
      la.kernel = ka.kernel;
      la.args = &arg;
      la.num_args = 1;
      la.params = &n;
      la.params_size = sizeof n;
      la.param_offsets = &offset;
      la.num_params = 1;
      la.done = &Done::cb;
      la.done_user_data = &done;
      if (hcr_error_t* e = pl.api->launch(pl.p, &la)) return pl.take(e);
      done.wait();
      if (!done.error.empty()) return done.error;
    }
    return {};
  };
  auto as_graph = [&]() -> std::string {
    Done done;
    done.api = pl.api;
    hcr_graph_launch_args_t la{};
    la.struct_size = HCR_GRAPH_LAUNCH_ARGS_STRUCT_SIZE;
    la.graph = g;
    la.args = args.data();
    la.num_args = tasks;
    la.done = &Done::cb;
    la.done_user_data = &done;
    if (hcr_error_t* e = pl.api->graph_launch(pl.p, &la)) return pl.take(e);
    done.wait();
    return done.error;
  };
  size_t runs = 0;
  double busy = 0;
  if (err.empty()) err = graph ? as_graph() : one_by_one();  // warm-up
  ++runs;
  if (err.empty()) {
    for (auto _ : state) {
      const auto t0 = Clock::now();
      err = graph ? as_graph() : one_by_one();
      const double s = seconds_since(t0);
      state.SetIterationTime(s);
      busy += s;
      ++runs;
      if (!err.empty()) break;
    }
  }
  if (err.empty()) err = pl.copy(m, host.data(), kChainElems * 4, false);
  size_t wrong = 0;
  for (float v : host) wrong += v != static_cast<float>(runs * tasks);
  if (err.empty() && wrong != 0)
    err = std::to_string(wrong) + " elements differ from " + std::to_string(runs * tasks);
  if (g != nullptr) pl.api->graph_release(pl.p, g);
  if (ka.kernel != nullptr) pl.api->kernel_release(pl.p, ka.kernel);
  pl.api->mem_free(pl.p, 0, m);
  if (!err.empty()) {
    state.SkipWithError(err.c_str());
    return;
  }
  if (busy > 0)
    state.counters["launches_per_s"] = static_cast<double>(tasks * state.iterations()) / busy;
  state.SetLabel(std::to_string(tasks) + " kernels, " +
                 (graph ? "one device graph (CUDA graph)" : "launch, wait for done, launch"));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("BM_TaskChain", BM_TaskChain)
      ->ArgsProduct({{1000}, {0, 1}})
      ->ArgNames({"tasks", "graph"})
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(5);
  benchmark::RegisterBenchmark("BM_DeviceGraph", BM_DeviceGraph)
      ->ArgsProduct({{1000}, {0, 1}})
      ->ArgNames({"tasks", "graph"})
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(20);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
