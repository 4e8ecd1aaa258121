// Recorded graphs over halo tiles and reductions: Jacobi steps over halo tiles (ordered by their
// neighbours), ping-pong by rebinding, bindings that split neighbours refused, devices kept off as
// for submit; reductions replayed with fresh private copies, the user's reduction kernels, what
// was contributed before a replay or before the recording. On CPU slots in host memory and on two
// simulated devices with memories of their own (the Replay suite).
#include "replay_support.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

namespace hcr::test {
namespace {

// ---- halo tiles -------------------------------------------------------------------------------

// A 5-point Jacobi step over halo tiles (halo 1): argument 0 the input's region, argument 1 the
// output's, of which it writes the interior; the grid's border keeps its values. The reference
// below runs the same arithmetic, so the grids compare exactly.
Kernel halo_step_kernel(Runtime& rt) {
  return rt.kernel("halo_jacobi").cpu([](TaskContext& ctx) {
    auto a = ctx.arg<double>(0);
    auto b = ctx.arg<double>(1);
    const auto top = ctx.param<uint64_t>(0), left = ctx.param<uint64_t>(1);
    const auto bottom = ctx.param<uint64_t>(2), right = ctx.param<uint64_t>(3);
    const auto row0 = ctx.param<uint64_t>(4), col0 = ctx.param<uint64_t>(5);
    const auto n = ctx.param<uint64_t>(6), m = ctx.param<uint64_t>(7);
    for (size_t r = top; r + bottom < a.rows; ++r)
      for (size_t c = left; c + right < a.cols; ++c) {
        const size_t gr = row0 + r - top, gc = col0 + c - left;
        if (gr == 0 || gc == 0 || gr + 1 == n || gc + 1 == m) b(r, c) = a(r, c);
        else b(r, c) = 0.25 * (a(r - 1, c) + a(r + 1, c) + a(r, c - 1) + a(r, c + 1));
      }
  });
}

std::vector<double> halo_reference(std::vector<double> a, size_t n, size_t m, int steps) {
  std::vector<double> b = a;
  for (int s = 0; s < steps; ++s) {
    for (size_t r = 1; r + 1 < n; ++r)
      for (size_t c = 1; c + 1 < m; ++c)
        b[r * m + c] =
            0.25 * (a[(r - 1) * m + c] + a[(r + 1) * m + c] + a[r * m + c - 1] + a[r * m + c + 1]);
    std::swap(a, b);
  }
  return a;
}

struct HaloGrids {
  static constexpr size_t kN = 37, kM = 45, kTr = 8, kTc = 10;  // 5 x 5 tiles, the last ones 5 x 5
  Runtime rt;
  Kernel step = halo_step_kernel(rt);
  std::vector<double> start = initial_grid(kN, kM);
  Buffer<double> a = rt.buffer<double>(kN, kM), b = rt.buffer<double>(kN, kM);
  Tiles<double> ta, tb;
  explicit HaloGrids(Config c = test::cpu_config(3)) : rt(std::move(c)) {
    {
      auto va = a.acquire(Access::write), vb = b.acquire(Access::write);
      for (size_t i = 0; i < start.size(); ++i) va.data()[i] = vb.data()[i] = start[i];
    }
    ta = a.partition(kTr, kTc, Halo{1});
    tb = b.partition(kTr, kTc, Halo{1});
  }
  // One Jacobi step, `from`'s tiles to `to`'s.
  void submit_step(const Tiles<double>& from, const Tiles<double>& to, int priority = 0) {
    for (size_t i = 0; i < from.rows(); ++i)
      for (size_t j = 0; j < from.cols(); ++j) {
        const Ghosts g = from.ghosts(i, j);
        rt.submit(Task(step)
                      .priority(priority)
                      .read(from(i, j))
                      .write(to(i, j))
                      .param(uint64_t{g.top})
                      .param(uint64_t{g.left})
                      .param(uint64_t{g.bottom})
                      .param(uint64_t{g.right})
                      .param(uint64_t{i * kTr})
                      .param(uint64_t{j * kTc})
                      .param(uint64_t{kN})
                      .param(uint64_t{kM}));
      }
  }
  // Tile (i, j) and its neighbours, over the grid: what a ping-pong pair's second step waits for.
  size_t pair_edges() const {
    size_t edges = 0;
    for (size_t i = 0; i < ta.rows(); ++i)
      for (size_t j = 0; j < ta.cols(); ++j)
        edges += (std::min(i + 1, ta.rows() - 1) - (i > 0 ? i - 1 : 0) + 1) *
                 (std::min(j + 1, ta.cols() - 1) - (j > 0 ? j - 1 : 0) + 1);
    return edges;
  }
  std::vector<double> result(Buffer<double>& which) {
    Event ea = a.unpartition(), eb = b.unpartition();
    ea.get();
    eb.get();
    return which.to_vector();
  }
};

// A ping-pong pair of Jacobi steps over halo tiles, recorded once and replayed k times without a
// wait: each step of the pair waits for the writers of its input tile's neighbours (the recorded
// edges are those, one per neighbour), and the grid is the plain loop's, exactly. One worker, the
// second step's tasks more urgent (dmdas queues by priority): a tile of it that waited only for
// its own tile's writer would run before its neighbours' writers, every time.
TEST(ReplayHalo, PingPongPairMatchesPlainLoop) {
  HaloGrids h(test::cpu_config(1, "dmdas"));
  constexpr int kReplays = 6;
  h.rt.begin_recording();
  h.submit_step(h.ta, h.tb);
  h.submit_step(h.tb, h.ta, 1);
  Graph g = h.rt.end_recording();
  EXPECT_EQ(g.tasks(), 2 * h.ta.rows() * h.ta.cols());
  EXPECT_EQ(g.buffers(), 2 * h.ta.rows() * h.ta.cols());
  // Step 2's task (i, j) writes a(i, j), which step 1's tasks at (i, j) and its neighbours read,
  // and reads b(i, j) and its neighbours' edges, which the same tasks wrote: one edge each.
  EXPECT_EQ(g.edges(), h.pair_edges());
  for (int i = 0; i < kReplays; ++i) g.replay();
  EXPECT_EQ(h.result(h.a), halo_reference(h.start, h.kN, h.kM, 2 * (kReplays + 1)));
}

// One step recorded (a -> b), replayed with every tile of each grid bound to the other's for the
// steps b -> a: the ping-pong by rebinding, equal to the plain loop.
TEST(ReplayHalo, OneStepRecordedPingPongByRebinding) {
  HaloGrids h;
  constexpr int kSteps = 7;  // the recording's, then 6 replays
  h.rt.begin_recording();
  h.submit_step(h.ta, h.tb);
  Graph g = h.rt.end_recording();
  EXPECT_EQ(g.tasks(), h.ta.rows() * h.ta.cols());
  EXPECT_EQ(g.edges(), 0u);  // readers of a, each the only writer of its tile of b
  std::vector<Binding> swap;
  for (size_t i = 0; i < h.ta.rows(); ++i)
    for (size_t j = 0; j < h.ta.cols(); ++j) {
      swap.emplace_back(h.ta(i, j), h.tb(i, j));
      swap.emplace_back(h.tb(i, j), h.ta(i, j));
    }
  for (int s = 1; s < kSteps; ++s) {
    if (s % 2 == 1) g.replay(swap);  // b -> a
    else g.replay();                 // a -> b
  }
  EXPECT_EQ(h.result(h.b), halo_reference(h.start, h.kN, h.kM, kSteps));
}

// A halo tile bound without its neighbours would read ghosts the recorded edges do not order: the
// replay is refused, naming the neighbour; so is a plain buffer in place of a halo tile.
TEST(ReplayHalo, BindingsMustKeepNeighboursTogether) {
  HaloGrids h;
  h.rt.begin_recording();
  h.submit_step(h.ta, h.tb);
  Graph g = h.rt.end_recording();
  std::string m = error_of([&] { g.replay({{h.ta(1, 1), h.tb(1, 1)}, {h.tb(1, 1), h.ta(1, 1)}}); });
  EXPECT_TRUE(says(m, "its neighbour at (1, 1)") && says(m, "bind the neighbours")) << m;
  auto plain = h.rt.buffer<double>(h.kTr + 2, h.kTc + 2);
  m = error_of([&] { g.replay({{h.ta(1, 1), plain}}); });
  EXPECT_TRUE(says(m, "halo tile in place of a halo tile")) << m;
  g.replay().get();  // still usable after refusals
}

// A replayed halo task is kept off the devices Runtime::submit kept the recorded one off: none,
// since a device with its own memory runs halo tasks too (the data manager refreshes the ghost
// edges of the tile's region there, data/ghosts.hpp). With the CPU gone, the replay fares as the
// same task submitted: both run on the device with its own memory.
TEST(ReplayHalo, DevicesExcludedAsForSubmit) {
  Config c = test::cpu_config(1);
  c.backends.push_back(
      {"sim",
       true,
       {{"flops_per_byte", "0"}, {"device.0.name", "own"}, {"device.0.gflops", "1000"}},
       "test"});
  Runtime rt(c);
  Kernel touch = rt.kernel("touch").cpu([](TaskContext& ctx) { ctx.arg<double>(0)(0, 0) += 1; });
  auto grid = rt.buffer<double>(12, 12);
  Tiles<double> tiles = grid.partition(4, 4, Halo{1});  // 3 x 3: (0, 0) and (2, 2) apart
  rt.begin_recording();
  rt.submit(Task(touch).read_write(tiles(0, 0)));
  Graph g = rt.end_recording();
  g.replay().get();
  int cpu = -1;
  for (const Device& d : rt.devices())
    if (d.memory_node == 0) cpu = static_cast<int>(d.id);
  ASSERT_GE(cpu, 0);
  rt.remove_device(static_cast<uint32_t>(cpu));
  auto outcome = [](auto&& run) {
    try {
      run();
      return std::string("ran");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  const std::string submitted =
      outcome([&] { rt.submit(Task(touch).read_write(tiles(2, 2))).get(); });
  const std::string replayed = outcome([&] { g.replay().get(); });
  // (Were devices with their own memory kept off halo tasks again, both would fail, saying so.)
  const char* why = "no device can run kernel 'touch'";
  EXPECT_EQ(replayed == "ran", submitted == "ran") << replayed << "\n  vs submitted: " << submitted;
  EXPECT_EQ(says(replayed, why), says(submitted, why))
      << replayed << "\n  vs submitted: " << submitted;
}

// ---- reductions -------------------------------------------------------------------------------

// A dot product into a sum reduction, recorded once, replayed with other inputs bound and into
// another target: each replay's tasks start from fresh copies holding the identity, combined into
// the target when it is next read (or at wait_all), as submitted reductions are.
TEST_P(Replay, DotProductReduceWithReboundInputs) {
  Runtime rt(GetParam().config);
  constexpr size_t kN = 600, kChunk = 50, kChunks = kN / kChunk;
  std::atomic<int> not_identity{0};
  Kernel dot = rt.kernel("partial_dot").cpu([&](TaskContext& ctx) {
    auto x = ctx.arg<double>(0), y = ctx.arg<double>(1);
    auto acc = ctx.arg<double>(2);
    if (acc(0, 0) != 0.0) not_identity.fetch_add(1);
    double s = 0;
    for (size_t i = 0; i < x.cols; ++i) s += x(0, i) * y(0, i);
    acc(0, 0) += s;
  });
  auto make = [&](double scale, std::vector<double>& v) {
    v.resize(kN);
    for (size_t i = 0; i < kN; ++i) v[i] = scale * std::sin(0.1 * double(i) + scale);
    auto b = rt.vector<double>(kN);
    auto w = b.acquire(Access::write);
    for (size_t i = 0; i < kN; ++i) w.data()[i] = v[i];
    return b;
  };
  auto ref = [](const std::vector<double>& x, const std::vector<double>& y) {
    double s = 0;
    for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
    return s;
  };
  auto near = [](double got, double want) {
    return std::abs(got - want) <= 1e-12 * std::max(1.0, std::abs(want));
  };
  std::vector<double> xs, ys, x2s, y2s;
  auto x = make(1.0, xs), y = make(2.0, ys), x2 = make(3.0, x2s), y2 = make(-0.5, y2s);
  Tiles<double> xt = x.partition(1, kChunk), yt = y.partition(1, kChunk);
  Tiles<double> x2t = x2.partition(1, kChunk), y2t = y2.partition(1, kChunk);
  auto sum = rt.vector<double>(1), other = rt.vector<double>(1);
  sum.set_reduction(Reduction::sum);
  other.set_reduction(Reduction::sum);
  rt.begin_recording();
  for (size_t i = 0; i < kChunks; ++i)
    rt.submit(Task(dot).read(xt(0, i)).read(yt(0, i)).reduce(sum));
  Graph g = rt.end_recording();
  EXPECT_EQ(g.tasks(), kChunks);
  EXPECT_EQ(g.edges(), 0u);
  const double d1 = ref(xs, ys), d2 = ref(x2s, y2s);
  EXPECT_TRUE(near(sum.to_vector()[0], d1)) << sum.to_vector()[0] << " vs " << d1;
  // Three replays on the recorded buffers: three more contributions of each chunk, combined at
  // wait_all.
  for (int i = 0; i < 3; ++i) g.replay();
  rt.wait_all();
  EXPECT_TRUE(near(sum.to_vector()[0], 4 * d1)) << sum.to_vector()[0] << " vs " << 4 * d1;
  // Other inputs, and another target.
  std::vector<Binding> rebound;
  for (size_t i = 0; i < kChunks; ++i) {
    rebound.emplace_back(xt(0, i), x2t(0, i));
    rebound.emplace_back(yt(0, i), y2t(0, i));
  }
  g.replay(rebound);
  EXPECT_TRUE(near(sum.to_vector()[0], 4 * d1 + d2)) << sum.to_vector()[0];
  rebound.emplace_back(sum, other);
  g.replay(rebound);
  g.replay(rebound);
  EXPECT_TRUE(near(other.to_vector()[0], 2 * d2)) << other.to_vector()[0] << " vs " << 2 * d2;
  EXPECT_TRUE(near(sum.to_vector()[0], 4 * d1 + d2)) << sum.to_vector()[0];
  EXPECT_EQ(not_identity.load(), 0) << "a replay's private copy did not start at the identity";
  // A target without the recorded reduction is refused, naming it.
  auto bare = rt.vector<double>(1);
  std::string m = error_of([&] { g.replay({{sum, bare}}); });
  EXPECT_TRUE(says(m, "declares no reduction") && says(m, "hcr_reduce_sum_f64")) << m;
}

// The user's reduction kernels (identity, combine), and the target read inside the recording: the
// identity and combine tasks submitted while recording are recorded with the reduce tasks, so each
// replay fills its fresh copies with the identity and folds them before the recorded reader.
TEST_P(Replay, ReduceReadInsideTheRecording) {
  Runtime rt(GetParam().config);
  constexpr int kTasks = 5;
  // A product reduction over i64: identity 1, combine multiplies.
  Kernel one = rt.kernel("one").cpu([](TaskContext& ctx) { ctx.arg<int64_t>(0)(0, 0) = 1; });
  Kernel times = rt.kernel("times").cpu(
      [](TaskContext& ctx) { ctx.arg<int64_t>(0)(0, 0) *= ctx.arg<int64_t>(1)(0, 0); });
  Kernel factor = rt.kernel("factor").cpu([](TaskContext& ctx) {
    ctx.arg<int64_t>(1)(0, 0) *= ctx.arg<int64_t>(0)(0, 0) + ctx.param<int64_t>(0);
  });
  Kernel take = rt.kernel("take").cpu([](TaskContext& ctx) {
    auto from = ctx.arg<int64_t>(0), to = ctx.arg<int64_t>(1), count = ctx.arg<int64_t>(2);
    to(0, 0) = from(0, 0);
    from(0, 0) = 1;  // the product starts again
    count(0, 0) += 1;
  });
  auto base = rt.vector<int64_t>(1), prod = rt.vector<int64_t>(1), out = rt.vector<int64_t>(1);
  auto count = rt.vector<int64_t>(1);
  fill(base, 1);
  fill(prod, 1);
  fill(count, 0);
  prod.set_reduction(one, times);
  rt.begin_recording();
  for (int k = 0; k < kTasks; ++k)
    rt.submit(Task(factor).read(base).reduce(prod).param(int64_t{k}));
  rt.submit(Task(take).read_write(prod).write(out).read_write(count));
  Graph g = rt.end_recording();
  auto want = [&](int64_t b) {
    int64_t p = 1;
    for (int k = 0; k < kTasks; ++k) p *= b + k;
    return p;
  };
  EXPECT_EQ(out.to_vector()[0], want(1));
  for (int64_t b = 2; b < 5; ++b) {
    fill(base, b);
    g.replay();
    EXPECT_EQ(out.to_vector()[0], want(b)) << "base " << b;
  }
  EXPECT_EQ(count.to_vector()[0], 4);
  EXPECT_EQ(prod.to_vector()[0], 1);  // nothing left to combine after the recorded reader
  // Into another target declaring the same reduction: the recorded combines fold into it.
  auto prod2 = rt.vector<int64_t>(1), out2 = rt.vector<int64_t>(1);
  fill(prod2, 1);
  prod2.set_reduction(one, times);
  g.replay({{prod, prod2}, {out, out2}}).get();
  EXPECT_EQ(out2.to_vector()[0], want(4));
  EXPECT_EQ(count.to_vector()[0], 5);
  auto summed = rt.vector<int64_t>(1);
  summed.set_reduction(Reduction::sum);
  const std::string m = error_of([&] { g.replay({{prod, summed}}); });
  EXPECT_TRUE(says(m, "declares another reduction") && says(m, "'times'")) << m;
}

// What was contributed to a buffer before a replay that reads it is combined first, as a submitted
// reader's arguments are: the replay sees the reduction's value.
TEST_P(Replay, CombinesContributionsBeforeReadingThem) {
  Runtime rt(GetParam().config);
  Kernel add = rt.kernel("add_k").cpu(
      [](TaskContext& ctx) { ctx.arg<int64_t>(0)(0, 0) += ctx.param<int64_t>(0); });
  Kernel affine = affine_kernel(rt);
  auto sum = rt.vector<int64_t>(1), out = rt.vector<int64_t>(1);
  fill(sum, 0);
  sum.set_reduction(Reduction::sum);
  rt.begin_recording();
  rt.submit(Task(affine).read(sum).write(out).param(int64_t{1}));
  Graph g = rt.end_recording();
  EXPECT_EQ(out.to_vector()[0], 1);
  for (int64_t k = 1; k <= 4; ++k) rt.submit(Task(add).reduce(sum).param(k));  // 10 in all
  g.replay().get();
  EXPECT_EQ(out.to_vector()[0], 21);
}

// What tasks contributed before begin_recording is combined then, not by combine tasks the
// recording would keep: a replay does not fold those contributions again.
TEST_P(Replay, ContributionsFromBeforeTheRecordingAreNotRecorded) {
  Runtime rt(GetParam().config);
  Kernel add = rt.kernel("add_k").cpu(
      [](TaskContext& ctx) { ctx.arg<int64_t>(0)(0, 0) += ctx.param<int64_t>(0); });
  Kernel affine = affine_kernel(rt);
  auto sum = rt.vector<int64_t>(1), out = rt.vector<int64_t>(1);
  fill(sum, 0);
  sum.set_reduction(Reduction::sum);
  for (int64_t k = 1; k <= 3; ++k) rt.submit(Task(add).reduce(sum).param(k));  // 6 in all
  rt.begin_recording();
  rt.submit(Task(affine).read(sum).write(out).param(int64_t{0}));
  Graph g = rt.end_recording();
  EXPECT_EQ(g.tasks(), 1u);
  EXPECT_EQ(out.to_vector()[0], 12);
  g.replay().get();
  g.replay().get();
  EXPECT_EQ(out.to_vector()[0], 12);
  EXPECT_EQ(sum.to_vector()[0], 6);
}

INSTANTIATE_TEST_SUITE_P(Backends, Replay, replay_backends(), backend_name);

}  // namespace
}  // namespace hcr::test
