// Device graphs (plugin ABI 1.2) end to end on a simulated device with its own memory: a replayed
// hcr::Graph runs as one graph_launch of the sim plugin, whose nodes compute in the device's
// memory. What a replay hands the plugin must then be right — each node's arguments in the memory
// the data manager placed them in — and results must come home: every test compares the buffers,
// read on the host, with the same replays run task by task ([runtime] device_graphs = false), and
// checks that the device graph was used (RuntimeStats::graph_launches).
#include "device_graph_support.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace hcr {
namespace {

using test::device_graph::fill;
using test::device_graph::mix_kernel;
using test::device_graph::Shape;
using test::device_graph::sim_device;

struct Outcome {
  std::vector<std::vector<int64_t>> values;
  uint64_t graph_launches = 0;
};

// Records `shape` over `nbuf` buffers of `len` elements, replays it `replays` times (waiting for
// each), and reads every buffer back on the host.
Outcome run_shape(bool device_graphs, size_t nbuf, size_t len, const Shape& shape, int replays) {
  Runtime rt(sim_device(device_graphs));
  Kernel mix = mix_kernel(rt);
  std::vector<Buffer<int64_t>> bufs;
  for (size_t i = 0; i < nbuf; ++i) {
    bufs.push_back(rt.vector<int64_t>(len));
    fill(bufs.back(), static_cast<int64_t>(100 * i + 1));
  }
  rt.begin_recording();
  shape(rt, mix, bufs);
  Graph g = rt.end_recording();
  rt.wait_all();
  for (int r = 0; r < replays; ++r) g.replay().get();
  Outcome o;
  o.graph_launches = rt.stats().graph_launches;
  for (auto& b : bufs) o.values.push_back(b.to_vector());
  return o;
}

void expect_same_as_task_by_task(size_t nbuf, size_t len, const Shape& shape) {
  const int replays = 3;
  const Outcome graph = run_shape(true, nbuf, len, shape, replays);
  const Outcome tasks = run_shape(false, nbuf, len, shape, replays);
  EXPECT_EQ(graph.graph_launches, static_cast<uint64_t>(replays))
      << "the replays did not run as device graphs";
  EXPECT_EQ(tasks.graph_launches, 0u);
  EXPECT_EQ(graph.values, tasks.values);
}

// A chain through several buffers: each task reads the previous one's output.
TEST(DeviceGraphSim, ChainInDeviceMemoryEqualsTaskByTask) {
  expect_same_as_task_by_task(4, 1000, [](Runtime& rt, Kernel& mix, auto& b) {
    for (int step = 0; step < 12; ++step) {
      const size_t from = static_cast<size_t>(step) % 4, to = (from + 1) % 4;
      rt.submit(Task(mix).read(b[from]).write(b[to]).param(int64_t{step}));
    }
  });
}

// Fork and join: two branches from one buffer, joined into a third, twice over, with buffers of
// different lengths' worth of work per node.
TEST(DeviceGraphSim, ForkJoinInDeviceMemoryEqualsTaskByTask) {
  expect_same_as_task_by_task(5, 257, [](Runtime& rt, Kernel& mix, auto& b) {
    for (int round = 0; round < 2; ++round) {
      rt.submit(Task(mix).read(b[0]).write(b[1]).param(int64_t{1 + round}));
      rt.submit(Task(mix).read(b[0]).write(b[2]).param(int64_t{7}));
      rt.submit(Task(mix).read(b[1]).read(b[2]).write(b[3]).param(int64_t{11}));
      rt.submit(Task(mix).read(b[3]).read(b[4]).write(b[0]).param(int64_t{round}));
    }
  });
}

// A replay that binds another buffer in place of a recorded one: the device graph computes in the
// bound buffer's device memory (the recorded buffer keeps what the previous replay left), with the
// same results as task by task.
TEST(DeviceGraphSim, ABoundBufferIsWhereTheGraphComputes) {
  auto run = [](bool device_graphs) {
    Runtime rt(sim_device(device_graphs));
    Kernel mix = mix_kernel(rt);
    auto src = rt.vector<int64_t>(64), mid = rt.vector<int64_t>(64), out = rt.vector<int64_t>(64);
    auto other = rt.vector<int64_t>(64);
    fill(src, 1);
    fill(other, 5000);
    rt.begin_recording();
    rt.submit(Task(mix).read(src).write(mid).param(int64_t{2}));
    rt.submit(Task(mix).read(mid).write(out).param(int64_t{3}));
    Graph g = rt.end_recording();
    rt.wait_all();
    g.replay().get();
    const std::vector<int64_t> out_before = out.to_vector();
    g.replay({{out, other}}).get();
    g.replay({{src, other}, {out, src}}).get();
    return std::tuple{rt.stats().graph_launches, out_before,      out.to_vector(),
                      other.to_vector(),         src.to_vector(), mid.to_vector()};
  };
  const auto graph = run(true);
  const auto tasks = run(false);
  EXPECT_EQ(std::get<0>(graph), 3u) << "the rebound replays did not run as device graphs";
  EXPECT_EQ(std::get<2>(graph), std::get<1>(graph)) << "a replay bound elsewhere wrote `out`";
  EXPECT_EQ(std::get<1>(graph), std::get<1>(tasks));
  EXPECT_EQ(std::get<3>(graph), std::get<3>(tasks));
  EXPECT_EQ(std::get<4>(graph), std::get<4>(tasks));
  EXPECT_EQ(std::get<5>(graph), std::get<5>(tasks));
}

// A node that fails in a replay fails that replay with its error; the task after it does not run,
// the one that does not depend on it does.
TEST(DeviceGraphSim, AFailingNodeFailsItsReplaySkippingOnlyWhatFollowsIt) {
  Runtime rt(sim_device(true));
  std::atomic<int> flaky_calls{0}, after_calls{0}, independent_calls{0};
  auto inc = [](TaskContext& ctx) {
    auto x = ctx.arg<int64_t>(ctx.num_args() - 1);
    for (size_t c = 0; c < x.cols; ++c) x(0, c) += 1;
  };
  Kernel flaky = rt.kernel("flaky").cpu([&](TaskContext& ctx) {
    if (++flaky_calls == 3) throw std::runtime_error("flaky failed on purpose");
    inc(ctx);
  });
  Kernel after = rt.kernel("after").cpu([&](TaskContext& ctx) {
    ++after_calls;
    inc(ctx);
  });
  Kernel independent = rt.kernel("independent").cpu([&](TaskContext& ctx) {
    ++independent_calls;
    inc(ctx);
  });
  auto a = rt.vector<int64_t>(16), b = rt.vector<int64_t>(16), c = rt.vector<int64_t>(16);
  fill(a, 0);
  fill(b, 100);
  fill(c, 200);
  rt.begin_recording();
  rt.submit(Task(flaky).read_write(a));
  rt.submit(Task(after).read(a).read_write(b));
  rt.submit(Task(independent).read_write(c));
  Graph g = rt.end_recording();
  rt.wait_all();
  g.replay().get();  // flaky's second call
  ASSERT_EQ(rt.stats().graph_launches, 1u);
  ASSERT_EQ(after_calls.load(), 2);
  ASSERT_EQ(independent_calls.load(), 2);
  try {
    g.replay().get();  // the third: fails
    ADD_FAILURE() << "the replay did not fail";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("flaky failed on purpose"), std::string::npos) << e.what();
  }
  try {
    rt.wait_all();
  } catch (const std::exception&) {  // the failure, reported again: not what this test is about
  }
  EXPECT_EQ(rt.stats().graph_launches, 2u);
  EXPECT_EQ(after_calls.load(), 2) << "the failed node's successor ran";
  EXPECT_EQ(independent_calls.load(), 3) << "the node independent of the failed one did not run";
}

}  // namespace
}  // namespace hcr
