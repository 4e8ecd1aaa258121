// Device graphs (plugin ABI 1.2): a replayed graph whose tasks all ran on one device is handed to
// that device's plugin and run with one launch per replay. Each test sees the device graph used
// (RuntimeStats::graph_launches, the trace) or not used, and checks results against the same
// replays run task by task ([runtime] device_graphs = false): chains, diamonds, fan-in and
// fan-out, many independent roots, rebinding, a failing node, a concurrent replay, the workers the
// nodes see; not used across two devices, when switched off, or with a plugin of ABI 1.0.
#include "device_graph_support.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hcr {
namespace {

using test::device_graph::cpu;
using test::device_graph::fill;
using test::device_graph::mix_kernel;
using test::device_graph::Shape;

struct Outcome {
  std::vector<std::vector<int64_t>> values;
  uint64_t graph_launches = 0;
  uint64_t submitted_per_replay = 0;  // tasks counted by the last replay
};

// Records `shape` over `nbuf` buffers and replays it `replays` times (waiting for each).
Outcome run_shape(const Config& c, size_t nbuf, const Shape& shape, int replays) {
  Runtime rt(c);
  Kernel mix = mix_kernel(rt);
  std::vector<Buffer<int64_t>> bufs;
  for (size_t i = 0; i < nbuf; ++i) {
    bufs.push_back(rt.vector<int64_t>(4));
    fill(bufs.back(), static_cast<int64_t>(10 * i + 1));
  }
  rt.begin_recording();
  shape(rt, mix, bufs);
  Graph g = rt.end_recording();
  rt.wait_all();
  Outcome o;
  for (int r = 0; r < replays; ++r) {
    const uint64_t before = rt.stats().submitted;
    g.replay().get();
    o.submitted_per_replay = rt.stats().submitted - before;
  }
  o.graph_launches = rt.stats().graph_launches;
  for (auto& b : bufs) o.values.push_back(b.to_vector());
  return o;
}

// The same replays with and without device graphs: equal results, and the device graph ran every
// replay as one task.
void expect_same_as_task_by_task(size_t nbuf, const Shape& shape, int threads = 2) {
  const int replays = 5;
  const Outcome on = run_shape(cpu(threads, true), nbuf, shape, replays);
  const Outcome off = run_shape(cpu(threads, false), nbuf, shape, replays);
  EXPECT_EQ(on.values, off.values);
  EXPECT_EQ(off.graph_launches, 0u);
  EXPECT_EQ(on.graph_launches, static_cast<uint64_t>(replays));
  EXPECT_EQ(on.submitted_per_replay, 1u) << "a device graph counts as one task";
  EXPECT_GT(off.submitted_per_replay, 1u);
}

TEST(DeviceGraph, ChainEqualsTaskByTask) {
  expect_same_as_task_by_task(6, [](Runtime& rt, Kernel& mix, std::vector<Buffer<int64_t>>& b) {
    for (int round = 0; round < 3; ++round)
      for (size_t i = 1; i < b.size(); ++i)
        rt.submit(Task(mix).read(b[i - 1]).write(b[i]).param(int64_t{round}));
  });
}

// a -> (b, c) -> d, repeated: each diamond's end is the next one's start.
TEST(DeviceGraph, DiamondsEqualTaskByTask) {
  expect_same_as_task_by_task(4, [](Runtime& rt, Kernel& mix, std::vector<Buffer<int64_t>>& b) {
    for (int64_t k = 0; k < 4; ++k) {
      rt.submit(Task(mix).read(b[0]).write(b[1]).param(k));
      rt.submit(Task(mix).read(b[0]).write(b[2]).param(k + 1));
      rt.submit(Task(mix).read(b[1]).read(b[2]).write(b[3]).param(k + 2));
      rt.submit(Task(mix).read(b[3]).read(b[0]).write(b[0]).param(k + 3));
    }
  });
}

// One writer fanning out to eight readers, which fan in to one task reading them all.
TEST(DeviceGraph, FanOutFanInEqualsTaskByTask) {
  expect_same_as_task_by_task(10, [](Runtime& rt, Kernel& mix, std::vector<Buffer<int64_t>>& b) {
    rt.submit(Task(mix).read(b[9]).write(b[0]).param(int64_t{7}));
    for (size_t i = 1; i <= 8; ++i)
      rt.submit(Task(mix).read(b[0]).write(b[i]).param(static_cast<int64_t>(i)));
    Task all(mix);
    for (size_t i = 1; i <= 8; ++i) all.read(b[i]);
    rt.submit(all.write(b[9]).param(int64_t{1}));
  });
}

// Many roots (no edges at all), on four workers.
TEST(DeviceGraph, ManyIndependentRootsEqualTaskByTask) {
  expect_same_as_task_by_task(
      64,
      [](Runtime& rt, Kernel& mix, std::vector<Buffer<int64_t>>& b) {
        for (size_t i = 0; i < b.size(); ++i)
          rt.submit(Task(mix).read_write(b[i]).param(static_cast<int64_t>(i)));
      },
      4);
}

// The trace shows one task per replay, named after the graph, and none of the graph's kernels.
TEST(DeviceGraph, TraceShowsOneGraphTask) {
  Runtime rt(cpu(2));
  Kernel mix = mix_kernel(rt);
  auto a = rt.vector<int64_t>(4), b = rt.vector<int64_t>(4);
  fill(a, 1);
  rt.begin_recording();
  for (int64_t k = 0; k < 3; ++k) {
    rt.submit(Task(mix).read(a).write(b).param(k));
    rt.submit(Task(mix).read(b).write(a).param(k));
  }
  Graph g = rt.end_recording();
  rt.wait_all();
  rt.start_trace();
  g.replay().get();
  g.replay().get();
  rt.stop_trace();
  size_t graphs = 0, kernels = 0;
  for (const TraceEvent& e : rt.trace_events()) {
    if (e.kind != TraceEvent::Kind::task) continue;
    if (e.kernel == "graph (6 tasks)") ++graphs;
    if (e.kernel == "mix") ++kernels;
  }
  EXPECT_EQ(graphs, 2u);
  EXPECT_EQ(kernels, 0u);
}

// Tasks placed on two devices (two CPU partitions) replay task by task, with the same results.
TEST(DeviceGraph, NotUsedWhenTasksRanOnTwoDevices) {
  Config c = cpu(2);
  c.backends[0].options.push_back({"partitions", "2"});
  const Shape pinned = [](Runtime& rt, Kernel& mix, std::vector<Buffer<int64_t>>& b) {
    for (size_t i = 1; i < b.size(); ++i)
      rt.submit(Task(mix).read(b[i - 1]).write(b[i]).param(int64_t{1}).on(uint32_t(i % 2)));
  };
  const Outcome two = run_shape(c, 5, pinned, 3);
  EXPECT_EQ(two.graph_launches, 0u);
  EXPECT_GT(two.submitted_per_replay, 1u);
  // The same graph pinned to one partition is a device graph there.
  const Shape one = [](Runtime& rt, Kernel& mix, std::vector<Buffer<int64_t>>& b) {
    for (size_t i = 1; i < b.size(); ++i)
      rt.submit(Task(mix).read(b[i - 1]).write(b[i]).param(int64_t{1}).on(1));
  };
  const Outcome single = run_shape(c, 5, one, 3);
  EXPECT_EQ(single.graph_launches, 3u);
  EXPECT_EQ(single.values, two.values);
}

// [runtime] device_graphs = false, from TOML: every replay task by task.
TEST(DeviceGraph, SwitchedOffInTheConfiguration) {
  Config c = Config::parse("[runtime]\ndevice_graphs = false\n[[backend]]\nname = \"cpu\"\n"
                           "threads = 2\n[scheduler]\nmodel_dir = \"off\"\n");
  c.use_environment = false;
  EXPECT_FALSE(c.device_graphs);
  EXPECT_TRUE(Config::parse("[runtime]\n").device_graphs);
  EXPECT_THROW(Config::parse("[runtime]\ndevice_graphs = 1\n"), Error);
  const Outcome o = run_shape(
      c, 3,
      [](Runtime& rt, Kernel& mix, std::vector<Buffer<int64_t>>& b) {
        rt.submit(Task(mix).read(b[0]).write(b[1]).param(int64_t{1}));
        rt.submit(Task(mix).read(b[1]).write(b[2]).param(int64_t{1}));
      },
      3);
  EXPECT_EQ(o.graph_launches, 0u);
  EXPECT_EQ(o.submitted_per_replay, 4u);  // the two tasks and the replay's two joins
}

// Other buffers bound in place of recorded ones, alternately (ping-pong): the device graph reads
// and writes the bound ones.
TEST(DeviceGraph, RebindsBuffersBetweenReplays) {
  for (bool on : {true, false}) {
    Runtime rt(cpu(2, on));
    Kernel mix = mix_kernel(rt);
    auto a = rt.vector<int64_t>(4), b = rt.vector<int64_t>(4);
    auto a2 = rt.vector<int64_t>(4), b2 = rt.vector<int64_t>(4);
    fill(a, 1);
    fill(a2, 50);
    rt.begin_recording();
    rt.submit(Task(mix).read(a).write(b).param(int64_t{1}));  // b = 3a + 1
    rt.submit(Task(mix).read(b).write(a).param(int64_t{2}));  // a = 3b + 2
    Graph g = rt.end_recording();
    rt.wait_all();
    g.replay({{a, b}, {b, a}}).get();    // a = 3b + 1, b = 3a + 2
    g.replay({{a, a2}, {b, b2}}).get();  // on the second pair
    g.replay().get();
    std::vector<int64_t> want_a = {1, 2, 3, 4}, want_b(4), want_a2 = {50, 51, 52, 53};
    for (size_t i = 0; i < 4; ++i) {
      auto step = [](int64_t& x, int64_t& y) {
        y = 3 * x + 1;
        x = 3 * y + 2;
      };
      step(want_a[i], want_b[i]);     // the recording
      want_a[i] = 3 * want_b[i] + 1;  // the swapped replay
      want_b[i] = 3 * want_a[i] + 2;
      step(want_a[i], want_b[i]);  // the last replay
      int64_t unused = 0;
      step(want_a2[i], unused);
      (void)unused;
    }
    EXPECT_EQ(a.to_vector(), want_a) << on;
    EXPECT_EQ(b.to_vector(), want_b) << on;
    EXPECT_EQ(a2.to_vector(), want_a2) << on;
    EXPECT_EQ(rt.stats().graph_launches, on ? 3u : 0u);
  }
}

// A node failing: its dependents are skipped, independent nodes still run, the replay's Event
// rethrows the kernel's own exception, and a task reading what the failed chain writes fails as
// depending on it (as would one reading what any of the graph's tasks write: the replay is one
// task). The next replay runs whole again.
TEST(DeviceGraph, FailingNodeSkipsItsDependentsOnly) {
  Runtime rt(cpu(2));
  std::atomic<bool> fail{false};
  std::atomic<int> ran_after{0}, ran_independent{0};
  Kernel step = rt.kernel("step").cpu([&](TaskContext& ctx) {
    auto x = ctx.arg<int64_t>(ctx.num_args() - 1);
    const int64_t role = ctx.param<int64_t>(0);
    if (role == 0 && fail.load()) throw std::runtime_error("step 0 broke");
    if (role == 1) ran_after.fetch_add(1);
    if (role == 2) ran_independent.fetch_add(1);
    x(0, 0) += 1;
  });
  auto a = rt.vector<int64_t>(1), b = rt.vector<int64_t>(1), c = rt.vector<int64_t>(1);
  fill(a, 0);
  fill(b, 0);
  fill(c, 0);
  rt.begin_recording();
  rt.submit(Task(step).read_write(a).param(int64_t{0}));          // task 0: fails
  rt.submit(Task(step).read(a).read_write(b).param(int64_t{1}));  // task 1: after it
  rt.submit(Task(step).read_write(c).param(int64_t{2}));          // task 2: independent
  Graph g = rt.end_recording();
  rt.wait_all();
  g.replay().get();
  const uint64_t launches = rt.stats().graph_launches;
  EXPECT_EQ(launches, 1u);
  fail = true;
  const int after_before = ran_after.load(), independent_before = ran_independent.load();
  Event failed = g.replay();
  try {
    failed.get();
    ADD_FAILURE() << "the replay succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "step 0 broke");
  }
  EXPECT_EQ(rt.stats().graph_launches, launches + 1);
  EXPECT_EQ(ran_after.load(), after_before) << "a dependent of the failed node ran";
  EXPECT_EQ(ran_independent.load(), independent_before + 1);
  Event reader = rt.submit(Task(step).read(b).read_write(c).param(int64_t{3}));
  try {
    reader.get();
    ADD_FAILURE() << "a reader of the failed replay's writes succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::dependency);
    EXPECT_NE(std::string(e.what()).find("step 0 broke"), std::string::npos) << e.what();
  }
  fail = false;
  fill(a, 0);  // (written anew: no failed writer before the next replay)
  fill(b, 0);
  fill(c, 0);
  g.replay().get();
  EXPECT_EQ(rt.stats().graph_launches, launches + 2);
  EXPECT_EQ(ran_after.load(), after_before + 1);
}

// A graph that only reads, replayed twice at once: the second replay runs task by task while the
// first one's device graph runs (a launch of one graph at a time), side by side with it.
TEST(DeviceGraph, ConcurrentReplayOfAReadOnlyGraphRunsTaskByTask) {
  Runtime rt(cpu(2));
  std::atomic<bool> hold{false};
  std::atomic<int> calls{0};
  std::atomic<bool> met{false};
  Kernel look = rt.kernel("look").cpu([&](TaskContext& ctx) {
    (void)ctx.arg<int64_t>(0);
    const int n = calls.fetch_add(1) + 1;
    if (!hold.load() || n != 1) return;
    // The first call waits for the other replay's task: both replays run at once.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (calls.load() < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    met = calls.load() >= 2;
  });
  auto a = rt.vector<int64_t>(4);
  fill(a, 1);
  rt.begin_recording();
  rt.submit(Task(look).read(a));
  Graph g = rt.end_recording();
  rt.wait_all();
  g.replay().get();
  ASSERT_EQ(rt.stats().graph_launches, 1u);
  calls = 0;
  hold = true;
  Event first = g.replay(), second = g.replay();
  first.get();
  second.get();
  EXPECT_TRUE(met.load()) << "the two replays did not run side by side";
  EXPECT_EQ(rt.stats().graph_launches, 2u) << "exactly one of the two was a device graph";
  g.replay().get();  // and the next one is again
  EXPECT_EQ(rt.stats().graph_launches, 3u);
}

// TaskContext::worker is below the device's worker count and unique among the nodes running at
// once, as it is among launches.
TEST(DeviceGraph, WorkerIndexUniqueAmongConcurrentNodes) {
  constexpr int kThreads = 4;
  Runtime rt(cpu(kThreads));
  std::atomic<bool> busy[kThreads] = {};
  std::atomic<int> clashes{0}, out_of_range{0}, ran{0};
  Kernel work = rt.kernel("work").cpu([&](TaskContext& ctx) {
    (void)ctx.arg<int64_t>(0);
    const uint32_t w = ctx.worker();
    if (w >= kThreads) {
      out_of_range.fetch_add(1);
      return;
    }
    if (busy[w].exchange(true)) clashes.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    while (std::chrono::steady_clock::now() < until) {
    }
    busy[w] = false;
    ran.fetch_add(1);
  });
  std::vector<Buffer<int64_t>> bufs;
  for (int i = 0; i < 32; ++i) bufs.push_back(rt.vector<int64_t>(1));
  rt.begin_recording();
  for (auto& b : bufs) rt.submit(Task(work).read_write(b));
  Graph g = rt.end_recording();
  rt.wait_all();
  for (int r = 0; r < 4; ++r) g.replay().get();
  EXPECT_EQ(rt.stats().graph_launches, 4u);
  EXPECT_EQ(ran.load(), 5 * 32);
  EXPECT_EQ(clashes.load(), 0);
  EXPECT_EQ(out_of_range.load(), 0);
}

// Tasks a graph node's kernel submits count with the replay: wait_all waits for them.
TEST(DeviceGraph, TasksANodeSubmitsAreWaitedFor) {
  Runtime rt(cpu(2));
  std::atomic<int> children{0};
  Kernel child = rt.kernel("child").cpu([&](TaskContext&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    children.fetch_add(1);
  });
  Kernel parent = rt.kernel("parent").cpu([&](TaskContext& ctx) {
    (void)ctx.arg<int64_t>(0);
    rt.submit(Task(child));
  });
  auto a = rt.vector<int64_t>(1);
  rt.begin_recording();
  rt.submit(Task(parent).read(a));
  rt.submit(Task(parent).read(a));
  Graph g = rt.end_recording();
  rt.wait_all();
  for (int r = 0; r < 3; ++r) {
    g.replay();
    rt.wait_all();
    EXPECT_EQ(children.load(), 2 * (r + 2));
  }
  EXPECT_EQ(rt.stats().graph_launches, 3u);
}

// A node's kernel runs within its graph task, which holds every buffer of the graph until the
// node ends: acquiring one the graph writes is refused, as inside any task that has it as an
// argument, rather than waiting forever.
TEST(DeviceGraph, ANodeAcquiringWhatItsGraphWritesIsRefused) {
  Runtime rt(cpu(2));
  auto a = rt.vector<int64_t>(1);
  auto b = rt.vector<int64_t>(1);
  std::atomic<bool> peek{false};
  Kernel writer = rt.kernel("writer").cpu([](TaskContext& ctx) { ctx.arg<int64_t>(0)(0, 0) = 1; });
  Kernel reader = rt.kernel("reader").cpu([&](TaskContext& ctx) {
    (void)ctx.arg<int64_t>(0);
    if (peek.load()) auto view = b.acquire(Access::read);  // b: not this task's argument
  });
  rt.begin_recording();
  rt.submit(Task(writer).write(b));
  rt.submit(Task(reader).read(a));
  Graph g = rt.end_recording();
  rt.wait_all();
  peek = true;
  try {
    g.replay().get();
    FAIL() << "the replay succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("would wait forever"), std::string::npos) << e.what();
  }
  EXPECT_EQ(rt.stats().graph_launches, 1u);
}

// A plugin of ABI 1.0 (a table without the graph entries) still replays, task by task.
TEST(DeviceGraph, PluginWithoutGraphEntriesReplaysTaskByTask) {
  Config c;
  c.use_environment = false;
  c.model_dir = "off";
  c.plugin_paths = {HCR_TEST_ABI10_DIR};
  c.backends.push_back({"abi10", true, {}, "test"});
  const Outcome o = run_shape(
      c, 3,
      [](Runtime& rt, Kernel& mix, std::vector<Buffer<int64_t>>& b) {
        rt.submit(Task(mix).read(b[0]).write(b[1]).param(int64_t{1}));
        rt.submit(Task(mix).read(b[1]).write(b[2]).param(int64_t{2}));
      },
      3);
  const Outcome on_cpu = run_shape(
      cpu(1), 3,
      [](Runtime& rt, Kernel& mix, std::vector<Buffer<int64_t>>& b) {
        rt.submit(Task(mix).read(b[0]).write(b[1]).param(int64_t{1}));
        rt.submit(Task(mix).read(b[1]).write(b[2]).param(int64_t{2}));
      },
      3);
  EXPECT_EQ(o.graph_launches, 0u);
  EXPECT_EQ(on_cpu.graph_launches, 3u);
  EXPECT_EQ(o.values, on_cpu.values);
}

}  // namespace
}  // namespace hcr
