// Per-task overhead, submit to completion: batches of empty CPU tasks (and tasks with one
// read-write buffer, and tasks each writing a buffer made for it just before) through hcr, with
// one worker and with all cores, against a bare oneTBB task_group running the same number of empty
// functions in the same process. The *Replayed variants run the same batch recorded once
// (Runtime::begin_recording) and replayed (hcr::Graph::replay) beside the submitted ones.
//
//   build/bin/task_overhead_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
//
// The figure to read is the counter per_task (wall seconds per task) of the median; submit_side is
// the part of it spent in the submitting call (the submit loop, or Graph::replay).
#include <hcr/hcr.hpp>

#include <benchmark/benchmark.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <chrono>
#include <map>
#include <memory>
#include <thread>

namespace {

constexpr int kBatch = 20000;

int all_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

hcr::Runtime& runtime(int threads) {
  static std::map<int, std::unique_ptr<hcr::Runtime>> runtimes;
  auto& rt = runtimes[threads];
  if (!rt) {
    hcr::Config c;
    c.use_environment = false;
    c.backends.push_back({"cpu", true, {{"threads", std::to_string(threads)}}, "bench"});
    rt = std::make_unique<hcr::Runtime>(c);
    // Warm up before anything is timed: the task-node pool grows to its working size and the
    // workers start; otherwise the first benchmark on a runtime pays for both.
    hcr::Kernel warm = rt->kernel("warm-up").cpu([](hcr::TaskContext&) {});
    for (int round = 0; round < 20; ++round) {
      for (int i = 0; i < kBatch; ++i) rt->submit(hcr::Task(warm));
      rt->wait_all();
    }
  }
  return *rt;
}

void report(benchmark::State& state, int64_t tasks, double submit_seconds = -1) {
  state.SetItemsProcessed(tasks);
  // Wall seconds per task, printed with an SI prefix (e.g. 348n = 0.348 us).
  state.counters["per_task"] = benchmark::Counter(
      static_cast<double>(tasks), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  // Of which in the submitting call (the submit loop, or Graph::replay), seconds per task.
  if (submit_seconds >= 0)
    state.counters["submit_side"] = submit_seconds / static_cast<double>(tasks);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_HcrEmptyTasks(benchmark::State& state) {
  const int threads = state.range(0) == 0 ? all_cores() : static_cast<int>(state.range(0));
  hcr::Runtime& rt = runtime(threads);
  hcr::Kernel empty = rt.kernel("empty").cpu([](hcr::TaskContext&) {});
  int64_t tasks = 0;
  double submit = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) rt.submit(hcr::Task(empty));
    submit += seconds_since(t0);
    rt.wait_all();
    tasks += kBatch;
  }
  report(state, tasks, submit);
  state.SetLabel(std::to_string(threads) + " worker(s)");
}

// The same empty tasks with tracing on: the difference to BM_HcrEmptyTasks is what recording costs.
void BM_HcrEmptyTasksTraced(benchmark::State& state) {
  const int threads = state.range(0) == 0 ? all_cores() : static_cast<int>(state.range(0));
  hcr::Runtime& rt = runtime(threads);
  hcr::Kernel empty = rt.kernel("empty").cpu([](hcr::TaskContext&) {});
  int64_t tasks = 0;
  for (auto _ : state) {
    rt.start_trace();  // also clears the previous batch's events
    for (int i = 0; i < kBatch; ++i) rt.submit(hcr::Task(empty));
    rt.wait_all();
    rt.stop_trace();
    tasks += kBatch;
  }
  report(state, tasks);
  state.SetLabel(std::to_string(threads) + " worker(s), tracing");
}

void BM_HcrOneReadWriteBuffer(benchmark::State& state) {
  const int threads = state.range(0) == 0 ? all_cores() : static_cast<int>(state.range(0));
  hcr::Runtime& rt = runtime(threads);
  hcr::Kernel touch = rt.kernel("touch").cpu([](hcr::TaskContext&) {});
  // 64 buffers used round robin: 64 independent chains of read-write tasks.
  std::vector<hcr::Buffer<float>> bufs;
  for (int i = 0; i < 64; ++i) bufs.push_back(rt.vector<float>(16));
  int64_t tasks = 0;
  double submit = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) rt.submit(hcr::Task(touch).read_write(bufs[i & 63]));
    submit += seconds_since(t0);
    rt.wait_all();
    tasks += kBatch;
  }
  report(state, tasks, submit);
  state.SetLabel(std::to_string(threads) + " worker(s)");
}

// A small buffer made in the submit loop, written by the task and dropped: what a buffer per task
// costs on top of BM_HcrOneReadWriteBuffer (made uninitialised: the task writes it).
void BM_HcrNewBufferPerTask(benchmark::State& state) {
  const int threads = state.range(0) == 0 ? all_cores() : static_cast<int>(state.range(0));
  hcr::Runtime& rt = runtime(threads);
  hcr::Kernel touch = rt.kernel("touch").cpu([](hcr::TaskContext&) {});
  int64_t tasks = 0;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i)
      rt.submit(hcr::Task(touch).write(rt.vector<float>(16, hcr::uninitialized)));
    rt.wait_all();
    tasks += kBatch;
  }
  report(state, tasks);
  state.SetLabel(std::to_string(threads) + " worker(s)");
}

// Replays `g` (one batch) in the timed loop. The first replay after a recording is made before
// it, timed on its own (first_replay, per task): it is where a device graph is created (plugin ABI
// 1.2), once per graph as a CUDA graph is instantiated once. device_graph: the share of timed
// replays that ran as one device graph.
void replay_loop(benchmark::State& state, hcr::Runtime& rt, hcr::Graph& g) {
  const auto first = std::chrono::steady_clock::now();
  g.replay();
  rt.wait_all();
  state.counters["first_replay"] = seconds_since(first) / static_cast<double>(kBatch);
  const uint64_t launches = rt.stats().graph_launches;
  int64_t tasks = 0, replays = 0;
  double submit = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    g.replay();
    submit += seconds_since(t0);
    rt.wait_all();
    tasks += kBatch;
    ++replays;
  }
  report(state, tasks, submit);
  if (replays > 0)
    state.counters["device_graph"] =
        static_cast<double>(rt.stats().graph_launches - launches) / static_cast<double>(replays);
}

// The batch of BM_HcrEmptyTasks recorded once and replayed: what a replay costs per task.
void BM_HcrEmptyTasksReplayed(benchmark::State& state) {
  const int threads = state.range(0) == 0 ? all_cores() : static_cast<int>(state.range(0));
  hcr::Runtime& rt = runtime(threads);
  hcr::Kernel empty = rt.kernel("empty").cpu([](hcr::TaskContext&) {});
  rt.begin_recording();
  for (int i = 0; i < kBatch; ++i) rt.submit(hcr::Task(empty));
  hcr::Graph g = rt.end_recording();
  rt.wait_all();
  replay_loop(state, rt, g);
  state.SetLabel(std::to_string(threads) + " worker(s), replayed");
}

// The batch of BM_HcrOneReadWriteBuffer (64 chains) recorded once and replayed: no dependency
// analysis per task.
void BM_HcrOneReadWriteBufferReplayed(benchmark::State& state) {
  const int threads = state.range(0) == 0 ? all_cores() : static_cast<int>(state.range(0));
  hcr::Runtime& rt = runtime(threads);
  hcr::Kernel touch = rt.kernel("touch").cpu([](hcr::TaskContext&) {});
  std::vector<hcr::Buffer<float>> bufs;
  for (int i = 0; i < 64; ++i) bufs.push_back(rt.vector<float>(16));
  rt.begin_recording();
  for (int i = 0; i < kBatch; ++i) rt.submit(hcr::Task(touch).read_write(bufs[i & 63]));
  hcr::Graph g = rt.end_recording();
  rt.wait_all();
  replay_loop(state, rt, g);
  state.SetLabel(std::to_string(threads) + " worker(s), replayed");
}

void BM_TbbTaskGroupBaseline(benchmark::State& state) {
  const int threads = state.range(0) == 0 ? all_cores() : static_cast<int>(state.range(0));
  tbb::task_arena arena(threads, 1);
  tbb::task_group group;
  int64_t tasks = 0;
  for (auto _ : state) {
    arena.execute([&] {
      for (int i = 0; i < kBatch; ++i) group.run([] { benchmark::ClobberMemory(); });
      group.wait();
    });
    tasks += kBatch;
  }
  report(state, tasks);
  state.SetLabel(std::to_string(threads) + " thread(s)");
}

BENCHMARK(BM_TbbTaskGroupBaseline)->Arg(1)->Arg(0)->UseRealTime()->MinTime(0.3);
BENCHMARK(BM_HcrEmptyTasks)->Arg(1)->Arg(0)->UseRealTime()->MinTime(0.3);
BENCHMARK(BM_HcrEmptyTasksReplayed)->Arg(1)->Arg(0)->UseRealTime()->MinTime(0.3);
BENCHMARK(BM_HcrEmptyTasksTraced)->Arg(1)->Arg(0)->UseRealTime()->MinTime(0.3);
BENCHMARK(BM_HcrOneReadWriteBuffer)->Arg(1)->Arg(0)->UseRealTime()->MinTime(0.3);
BENCHMARK(BM_HcrOneReadWriteBufferReplayed)->Arg(1)->Arg(0)->UseRealTime()->MinTime(0.3);
BENCHMARK(BM_HcrNewBufferPerTask)->Arg(1)->Arg(0)->UseRealTime()->MinTime(0.3);

}  // namespace

BENCHMARK_MAIN();
