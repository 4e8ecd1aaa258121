// Recorded graphs (Runtime::begin_recording, end_recording, Graph::replay): a Jacobi stencil over
// the tiles of a partitioned buffer and a Jacobi solver replayed until converged, each checked
// against a plain loop; Jacobi steps over halo tiles (ordered by their neighbours), ping-pong by
// rebinding; reductions replayed with fresh private copies; rebinding buffers; replays chained
// with ordinary submits; failures; and the misuses refused. On CPU slots in host memory and on two
// simulated devices with memories of their own (the data moves between them, and the first
// placement tried is the last run's).
#include "../test_support.hpp"

#include <atomic>
#include <cmath>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hcr {
namespace {

Config two_memories() {
  Config c;
  c.use_environment = false;
  c.policy = "eager";
  c.model_dir = "off";
  c.backends.push_back({"sim",
                        true,
                        {{"flops_per_byte", "0"},
                         {"device.0.name", "a"},
                         {"device.0.gflops", "1000"},
                         {"device.0.concurrency", "2"},
                         {"device.1.name", "b"},
                         {"device.1.gflops", "1000"},
                         {"device.1.concurrency", "2"}},
                        "test"});
  return c;
}

struct Param {
  const char* name;
  Config config;
};

void PrintTo(const Param& p, std::ostream* os) { *os << p.name; }

class Replay : public ::testing::TestWithParam<Param> {};

// ---- the stencil ------------------------------------------------------------------------------

// One Jacobi sweep of the 5-point stencil over a block of rows: `out` from `mid`, the block's rows
// [first, first + rows) of a grid of `total` rows; `up`'s last row and `down`'s first row are the
// rows beside it (the block itself where there is none). The grid's border stays as it is.
void sweep_block(MatrixView<double> up, MatrixView<double> mid, MatrixView<double> down,
                 MatrixView<double> out, size_t first, size_t total) {
  for (size_t r = 0; r < mid.rows; ++r) {
    const size_t g = first + r;
    for (size_t c = 0; c < mid.cols; ++c) {
      if (g == 0 || g + 1 == total || c == 0 || c + 1 == mid.cols) {
        out(r, c) = mid(r, c);
        continue;
      }
      const double n = r > 0 ? mid(r - 1, c) : up(up.rows - 1, c);
      const double s = r + 1 < mid.rows ? mid(r + 1, c) : down(0, c);
      out(r, c) = 0.25 * (n + s + mid(r, c - 1) + mid(r, c + 1));
    }
  }
}

std::vector<double> initial_grid(size_t rows, size_t cols) {
  std::vector<double> g(rows * cols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c)
      g[r * cols + c] = (r == 0 ? 100.0 : 0.0) + (c == 0 ? 50.0 : 0.0) + 0.01 * double(r * c % 7);
  return g;
}

std::vector<double> reference_sweeps(std::vector<double> u, size_t rows, size_t cols, int sweeps) {
  std::vector<double> v(u.size());
  for (int s = 0; s < sweeps; ++s) {
    MatrixView<double> whole{u.data(), rows, cols, cols};
    MatrixView<double> out{v.data(), rows, cols, cols};
    sweep_block(whole, whole, whole, out, 0, rows);
    std::swap(u, v);
  }
  return u;
}

// Two sweeps over the row blocks of u and v (u -> v, v -> u), recorded once and replayed: the same
// grid as a plain loop doing all the sweeps.
TEST_P(Replay, StencilOverTilesMatchesPlainLoop) {
  Runtime rt(GetParam().config);
  constexpr size_t kRows = 24, kCols = 10, kBlock = 4, kBlocks = kRows / kBlock;
  constexpr int kReplays = 9;
  const std::vector<double> start = initial_grid(kRows, kCols);
  Buffer<double> u = rt.buffer<double>(kRows, kCols), v = rt.buffer<double>(kRows, kCols);
  {
    auto h = u.acquire(Access::write);
    for (size_t r = 0; r < kRows; ++r)
      for (size_t c = 0; c < kCols; ++c) h(r, c) = start[r * kCols + c];
  }
  Kernel sweep = rt.kernel("jacobi_sweep").cpu([](TaskContext& ctx) {
    sweep_block(ctx.arg<double>(0), ctx.arg<double>(1), ctx.arg<double>(2), ctx.arg<double>(3),
                ctx.param<uint64_t>(0), ctx.param<uint64_t>(1));
  });
  Tiles<double> ut = u.partition(kBlock, kCols), vt = v.partition(kBlock, kCols);
  auto half = [&](Tiles<double>& from, Tiles<double>& to) {
    for (size_t b = 0; b < kBlocks; ++b)
      rt.submit(Task(sweep)
                    .read(from(b == 0 ? b : b - 1, 0))
                    .read(from(b, 0))
                    .read(from(b + 1 == kBlocks ? b : b + 1, 0))
                    .write(to(b, 0))
                    .param(uint64_t{b * kBlock})
                    .param(uint64_t{kRows}));
  };
  rt.begin_recording();
  half(ut, vt);
  half(vt, ut);
  Graph g = rt.end_recording();
  EXPECT_EQ(g.tasks(), 2 * kBlocks);
  EXPECT_EQ(g.buffers(), 2 * kBlocks);
  EXPECT_GT(g.edges(), 0u);
  Event last;
  for (int i = 0; i < kReplays; ++i) last = g.replay();  // chained by their buffers, no waits
  last.get();
  u.unpartition().get();
  v.unpartition().get();
  const std::vector<double> want = reference_sweeps(start, kRows, kCols, 2 * (kReplays + 1));
  const std::vector<double> got = u.to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << "element " << i;
}

// ---- the solver -------------------------------------------------------------------------------

// Jacobi iterations on a diagonally dominant system, one iteration recorded (a step, the change,
// the copy back), replayed until the change is below a tolerance: the solution Gaussian
// elimination gives, after as many iterations as the same loop on the host takes.
TEST_P(Replay, IterativeSolverConverges) {
  Runtime rt(GetParam().config);
  constexpr size_t n = 12;
  std::vector<double> a(n * n), b(n);
  for (size_t i = 0; i < n; ++i) {
    double off = 0;
    for (size_t j = 0; j < n; ++j)
      if (i != j) off += std::abs(a[i * n + j] = std::sin(double(i * n + j + 1)));
    a[i * n + i] = off + 1.0 + double(i % 3);
    b[i] = std::cos(double(i)) * 5.0;
  }
  Buffer<double> A = rt.buffer<double>(n, n), B = rt.vector<double>(n);
  Buffer<double> x = rt.vector<double>(n), next = rt.vector<double>(n),
                 change = rt.vector<double>(1);
  {
    auto ha = A.acquire(Access::write);
    for (size_t i = 0; i < n * n; ++i) ha(i / n, i % n) = a[i];
    auto hb = B.acquire(Access::write);
    for (size_t i = 0; i < n; ++i) hb(0, i) = b[i];
  }
  Kernel step = rt.kernel("jacobi_step").cpu([](TaskContext& ctx) {
    auto m = ctx.arg<double>(0), rhs = ctx.arg<double>(1), xs = ctx.arg<double>(2);
    auto out = ctx.arg<double>(3);
    for (size_t i = 0; i < m.rows; ++i) {
      double s = rhs(0, i);
      for (size_t j = 0; j < m.cols; ++j)
        if (j != i) s -= m(i, j) * xs(0, j);
      out(0, i) = s / m(i, i);
    }
  });
  Kernel diff = rt.kernel("max_change").cpu([](TaskContext& ctx) {
    auto p = ctx.arg<double>(0), q = ctx.arg<double>(1);
    double d = 0;
    for (size_t i = 0; i < p.cols; ++i) d = std::max(d, std::abs(p(0, i) - q(0, i)));
    ctx.arg<double>(2)(0, 0) = d;
  });
  Kernel copy = rt.kernel("copy_vector").cpu([](TaskContext& ctx) {
    auto from = ctx.arg<double>(0), to = ctx.arg<double>(1);
    for (size_t i = 0; i < from.cols; ++i) to(0, i) = from(0, i);
  });
  rt.begin_recording();
  rt.submit(Task(step).read(A).read(B).read(x).write(next));
  rt.submit(Task(diff).read(x).read(next).write(change));
  rt.submit(Task(copy).read(next).write(x));
  Graph g = rt.end_recording();
  ASSERT_EQ(g.tasks(), 3u);
  constexpr double kTolerance = 1e-13;
  int iterations = 1;
  while (change.to_vector()[0] >= kTolerance) {
    ASSERT_LT(iterations, 500) << "no convergence";
    g.replay().get();
    ++iterations;
  }
  // The same iterations on the host.
  std::vector<double> hx(n, 0.0), hn(n);
  int host_iterations = 0;
  for (double d = INFINITY; d >= kTolerance; ++host_iterations) {
    for (size_t i = 0; i < n; ++i) {
      double s = b[i];
      for (size_t j = 0; j < n; ++j)
        if (j != i) s -= a[i * n + j] * hx[j];
      hn[i] = s / a[i * n + i];
    }
    d = 0;
    for (size_t i = 0; i < n; ++i) d = std::max(d, std::abs(hn[i] - hx[i]));
    hx = hn;
  }
  EXPECT_EQ(iterations, host_iterations);
  // Gaussian elimination with partial pivoting, for the exact solution.
  std::vector<double> m = a, r = b;
  for (size_t k = 0; k < n; ++k) {
    size_t p = k;
    for (size_t i = k + 1; i < n; ++i)
      if (std::abs(m[i * n + k]) > std::abs(m[p * n + k])) p = i;
    for (size_t j = 0; j < n; ++j) std::swap(m[k * n + j], m[p * n + j]);
    std::swap(r[k], r[p]);
    for (size_t i = k + 1; i < n; ++i) {
      const double f = m[i * n + k] / m[k * n + k];
      for (size_t j = k; j < n; ++j) m[i * n + j] -= f * m[k * n + j];
      r[i] -= f * r[k];
    }
  }
  std::vector<double> exact(n);
  for (size_t i = n; i-- > 0;) {
    double s = r[i];
    for (size_t j = i + 1; j < n; ++j) s -= m[i * n + j] * exact[j];
    exact[i] = s / m[i * n + i];
  }
  const std::vector<double> got = x.to_vector();
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(got[i], exact[i], 1e-10) << "x[" << i << "]";
}

// ---- binding, chaining, failures --------------------------------------------------------------

Kernel affine_kernel(Runtime& rt) {
  // out = in * 2 + param, element by element (in and out may be one buffer).
  return rt.kernel("affine").cpu([](TaskContext& ctx) {
    auto in = ctx.arg<int64_t>(0), out = ctx.arg<int64_t>(1);
    const int64_t add = ctx.param<int64_t>(0);
    for (size_t i = 0; i < in.cols; ++i) {
      if (in(0, i) < 0) throw std::runtime_error("negative input " + std::to_string(in(0, i)));
      out(0, i) = in(0, i) * 2 + add;
    }
  });
}

void fill(Buffer<int64_t>& b, int64_t v) {
  auto h = b.acquire(Access::write);
  for (size_t i = 0; i < h.cols(); ++i) h(0, i) = v + int64_t(i);
}

// A replay with buffers bound in place of the recorded ones works on those, leaving the recorded
// ones as they were; a later replay without bindings is back on the recorded ones.
TEST_P(Replay, RebindsBuffersOfTheSameShape) {
  Runtime rt(GetParam().config);
  Kernel affine = affine_kernel(rt);
  auto a = rt.vector<int64_t>(5), t = rt.vector<int64_t>(5);
  auto a2 = rt.vector<int64_t>(5), t2 = rt.vector<int64_t>(5);
  fill(a, 1);
  fill(a2, 100);
  rt.begin_recording();
  rt.submit(Task(affine).read(a).write(t).param(int64_t{1}));   // t = 2a + 1
  rt.submit(Task(affine).read(t).write(a).param(int64_t{-1}));  // a = 2t - 1 = 4a + 1
  Graph g = rt.end_recording();
  EXPECT_EQ(g.buffers(), 2u);
  g.replay({{a, a2}, {t, t2}}).get();
  std::vector<int64_t> got = a2.to_vector(), mine = a.to_vector();
  for (size_t i = 0; i < 5; ++i) {
    const int64_t once = 4 * (1 + int64_t(i)) + 1;
    EXPECT_EQ(mine[i], once);                       // the recording run only
    EXPECT_EQ(got[i], 4 * (100 + int64_t(i)) + 1);  // one replay on a2
  }
  g.replay({{t, t2}}).get();  // a again, t2 as the temporary
  mine = a.to_vector();
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(mine[i], 4 * (4 * (1 + int64_t(i)) + 1) + 1);
  EXPECT_EQ(t2.to_vector()[0], 2 * (4 * 1 + 1) + 1);
}

// Ordinary submits before and after replays, none waited for: each replay sees what was submitted
// before it on its buffers, and what is submitted after sees the replay's results.
TEST_P(Replay, ChainsWithOrdinarySubmits) {
  Runtime rt(GetParam().config);
  Kernel affine = affine_kernel(rt);
  Kernel mod = rt.kernel("mod").cpu([](TaskContext& ctx) {
    auto x = ctx.arg<int64_t>(0);
    for (size_t i = 0; i < x.cols; ++i) x(0, i) %= 1000003;
  });
  auto a = rt.vector<int64_t>(3), side = rt.vector<int64_t>(3);
  fill(a, 0);
  rt.begin_recording();
  rt.submit(Task(affine).read(a).write(a).param(int64_t{0}));  // a = 2a
  Graph g = rt.end_recording();
  int64_t want = 0, want_side = 0;  // a(0, 0), side(0, 0)
  for (int round = 0; round < 12; ++round) {
    rt.submit(Task(affine).read(a).write(a).param(int64_t{1}));  // a = 2a + 1
    want = want * 2 + 1;
    g.replay();
    want *= 2;
    if (round % 3 == 0) {
      g.replay();
      want *= 2;
    }
    rt.submit(Task(affine).read(a).write(side).param(int64_t{0}));  // reads the replays' a
    want_side = 2 * want;
    rt.submit(Task(mod).read_write(a));
    want %= 1000003;
  }
  rt.wait_all();
  EXPECT_EQ(a.to_vector()[0], want);
  EXPECT_EQ(side.to_vector()[0], want_side);
}

// A task failing in a replay fails the replay's event, and a task submitted after it that reads
// what the replay writes fails as depending on it; the next replay on good data succeeds.
TEST_P(Replay, FailureReachesTheReplayAndWhatFollows) {
  Runtime rt(GetParam().config);
  Kernel affine = affine_kernel(rt);
  auto a = rt.vector<int64_t>(2), out = rt.vector<int64_t>(2), bad = rt.vector<int64_t>(2);
  fill(a, 3);
  fill(bad, -7);
  rt.begin_recording();
  rt.submit(Task(affine).read(a).write(out).param(int64_t{0}));
  Graph g = rt.end_recording();
  Event failed = g.replay({{a, bad}});
  EXPECT_THROW(
      {
        try {
          failed.get();
        } catch (const std::exception& e) {
          EXPECT_NE(std::string(e.what()).find("negative input -7"), std::string::npos) << e.what();
          throw;
        }
      },
      std::exception);
  Event after = rt.submit(Task(affine).read(out).write(a).param(int64_t{0}));  // fails too
  EXPECT_THROW(after.get(), Error);
  fill(a, 3);
  g.replay().get();
  EXPECT_EQ(out.to_vector()[0], 6);
}

Kernel add_kernel(Runtime& rt) {
  return rt.kernel("add").cpu([](TaskContext& ctx) {
    auto x = ctx.arg<int64_t>(0);
    for (size_t i = 0; i < x.cols; ++i) x(0, i) += ctx.param<int64_t>(0);
  });
}

// Many replays submitted without waiting (more than the graph keeps task records for), then the
// same graph replayed after each wait (its task records reused): every one runs, in order.
TEST_P(Replay, ManyReplaysInFlightAndReuse) {
  Runtime rt(GetParam().config);
  Kernel add = add_kernel(rt);
  auto a = rt.vector<int64_t>(1), b = rt.vector<int64_t>(1);
  rt.begin_recording();
  for (int i = 0; i < 5; ++i) {
    rt.submit(Task(add).read_write(a).param(int64_t{1}));
    rt.submit(Task(add).read_write(b).param(int64_t{i}));
  }
  Graph g = rt.end_recording();
  for (int r = 0; r < 20; ++r) g.replay();
  rt.wait_all();
  EXPECT_EQ(a.to_vector()[0], 21 * 5);
  EXPECT_EQ(b.to_vector()[0], 21 * 10);
  for (int r = 0; r < 30; ++r) {
    fill(a, r);
    g.replay().get();
    EXPECT_EQ(a.to_vector()[0], int64_t(r) + 5);
  }
}

// The graph keeps its buffers: a replay after the application dropped the handle of one still
// reads the memory it wraps.
TEST_P(Replay, KeepsItsBuffersAlive) {
  Runtime rt(GetParam().config);
  Kernel affine = affine_kernel(rt);
  std::vector<int64_t> host = {1, 2, 3};
  auto out = rt.vector<int64_t>(3);
  Graph g;
  {
    Buffer<int64_t> w = rt.wrap(host.data(), 1, 3);
    rt.begin_recording();
    rt.submit(Task(affine).read(w).write(out).param(int64_t{0}));
    g = rt.end_recording();
  }
  fill(out, 100);
  g.replay().get();
  EXPECT_EQ(out.to_vector(), (std::vector<int64_t>{2, 4, 6}));
}

// Commute accesses in a recorded graph: replayed, the tasks of a run still update the buffer one at
// a time (every addition counts) and a reader after the run sees all of it.
TEST_P(Replay, CommuteRunsStayExclusive) {
  Runtime rt(GetParam().config);
  std::atomic<int> inside{0}, overlaps{0};
  Kernel add = rt.kernel("add_slowly").cpu([&](TaskContext& ctx) {
    if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
    auto acc = ctx.arg<int64_t>(0);
    const int64_t v = acc(0, 0);
    for (volatile int spin = 0; spin < 2000; spin = spin + 1) {
    }
    acc(0, 0) = v + ctx.param<int64_t>(0);
    inside.fetch_sub(1);
  });
  Kernel copy = rt.kernel("copy_scalar").cpu([](TaskContext& ctx) {
    ctx.arg<int64_t>(1)(0, 0) = ctx.arg<int64_t>(0)(0, 0);
  });
  auto acc = rt.vector<int64_t>(1), seen = rt.vector<int64_t>(1);
  rt.begin_recording();
  for (int64_t i = 1; i <= 8; ++i) rt.submit(Task(add).commute(acc).param(i));
  rt.submit(Task(copy).read(acc).write(seen));
  Graph g = rt.end_recording();
  for (int r = 0; r < 5; ++r) g.replay();
  rt.wait_all();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(acc.to_vector()[0], 6 * 36);
  EXPECT_EQ(seen.to_vector()[0], 6 * 36);
}

// Explicit dependencies (Task::after) between recorded tasks are kept: the second task, which
// shares no buffer with the first, still runs after it in every replay.
TEST_P(Replay, ExplicitDependenciesAreKept) {
  Runtime rt(GetParam().config);
  std::atomic<int> order_errors{0};
  std::atomic<int> first_done{0}, second_done{0};
  Kernel first = rt.kernel("first").cpu([&](TaskContext&) {
    for (volatile int spin = 0; spin < 20000; spin = spin + 1) {
    }
    first_done.fetch_add(1);
  });
  Kernel second = rt.kernel("second").cpu([&](TaskContext&) {
    if (second_done.load() + 1 != first_done.load()) order_errors.fetch_add(1);
    second_done.fetch_add(1);
  });
  auto x = rt.vector<int64_t>(1), y = rt.vector<int64_t>(1);
  rt.begin_recording();
  Event e = rt.submit(Task(first).read_write(x));
  rt.submit(Task(second).read_write(y).after(e));
  Graph g = rt.end_recording();
  EXPECT_EQ(g.edges(), 1u);
  for (int r = 0; r < 10; ++r) g.replay().get();
  EXPECT_EQ(order_errors.load(), 0);
  EXPECT_EQ(second_done.load(), 11);
}

// Replays of one graph from several threads at once, each on buffers of its own, beside the
// recorded ones: every result is exact.
TEST_P(Replay, ReplaysFromSeveralThreads) {
  Runtime rt(GetParam().config);
  Kernel affine = affine_kernel(rt);
  auto a = rt.vector<int64_t>(4), t = rt.vector<int64_t>(4);
  fill(a, 1);
  rt.begin_recording();
  rt.submit(Task(affine).read(a).write(t).param(int64_t{1}));
  rt.submit(Task(affine).read(t).write(a).param(int64_t{-1}));
  Graph g = rt.end_recording();
  constexpr int kThreads = 3, kRounds = 10;
  std::vector<Buffer<int64_t>> as, ts;
  for (int i = 0; i < kThreads; ++i) {
    as.push_back(rt.vector<int64_t>(4));
    ts.push_back(rt.vector<int64_t>(4));
    fill(as.back(), 0);
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < kRounds; ++r) g.replay({{a, as[i]}, {t, ts[i]}});
    });
  for (int r = 0; r < kRounds; ++r) g.replay();
  for (auto& th : threads) th.join();
  rt.wait_all();
  int64_t want = 0;  // a = 4a + 1 per replay, from 0
  for (int r = 0; r < kRounds; ++r) want = 4 * want + 1;
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(as[i].to_vector()[0], want) << "thread " << i;
  int64_t mine = 5;  // the recording run, from 1
  for (int r = 0; r < kRounds; ++r) mine = 4 * mine + 1;
  EXPECT_EQ(a.to_vector()[0], mine);
}

// A replay while the runtime is paused is held with the rest, and runs on resume.
TEST_P(Replay, HeldWhilePaused) {
  Runtime rt(GetParam().config);
  Kernel add = add_kernel(rt);
  auto a = rt.vector<int64_t>(1);
  rt.begin_recording();
  rt.submit(Task(add).read_write(a).param(int64_t{1}));
  rt.submit(Task(add).read_write(a).param(int64_t{10}));
  Graph g = rt.end_recording();
  rt.wait_all();
  rt.pause();
  Event e = g.replay();
  EXPECT_FALSE(e.ready());
  rt.resume();
  e.get();
  EXPECT_EQ(a.to_vector()[0], 22);
}

// More tasks ready at once than one batch of placement takes (the runs of submit_prepared), on
// buffers bound in place of the recorded ones every other replay: each task runs once per replay.
TEST_P(Replay, ManyReadyTasksRunOncePerReplay) {
  Runtime rt(GetParam().config);
  Kernel add = add_kernel(rt);
  constexpr int kTasks = 700;
  std::vector<Buffer<int64_t>> xs, ys;
  for (int i = 0; i < kTasks; ++i) {
    xs.push_back(rt.vector<int64_t>(1));
    ys.push_back(rt.vector<int64_t>(1));
    fill(xs.back(), 0);
    fill(ys.back(), 0);
  }
  rt.begin_recording();
  for (int i = 0; i < kTasks; ++i) rt.submit(Task(add).read_write(xs[i]).param(int64_t{i}));
  Graph g = rt.end_recording();
  std::vector<Binding> to_ys;
  for (int i = 0; i < kTasks; ++i) to_ys.push_back({xs[i], ys[i]});
  for (int r = 0; r < 4; ++r) (r % 2 == 0 ? g.replay() : g.replay(to_ys)).get();
  rt.wait_all();
  for (int i = 0; i < kTasks; ++i) {
    EXPECT_EQ(xs[i].to_vector()[0], 3 * int64_t{i}) << "task " << i;  // recording + 2 replays
    EXPECT_EQ(ys[i].to_vector()[0], 2 * int64_t{i}) << "task " << i;
  }
}

// One task failing among many ready at once: the others run, and the replay's event fails with
// its error. The failing task's only successor does not read what it writes (a later write of
// the buffer it reads): its failure reaches the replay all the same.
TEST_P(Replay, OneFailureAmongManyReadyTasks) {
  Runtime rt(GetParam().config);
  static std::atomic<int> ran{0};
  Kernel copy = rt.kernel("copy_or_fail").cpu([](TaskContext& ctx) {
    auto in = ctx.arg<int64_t>(0), out = ctx.arg<int64_t>(1);
    if (in(0, 0) < 0) throw std::runtime_error("negative input " + std::to_string(in(0, 0)));
    out(0, 0) = in(0, 0);
    ran.fetch_add(1, std::memory_order_relaxed);
  });
  Kernel affine = affine_kernel(rt);
  constexpr int kTasks = 600, kBad = 300;
  auto a = rt.vector<int64_t>(1), b = rt.vector<int64_t>(1);
  fill(a, 3);
  fill(b, 3);
  std::vector<Buffer<int64_t>> outs;
  for (int i = 0; i < kTasks; ++i) outs.push_back(rt.vector<int64_t>(1));
  rt.begin_recording();
  for (int i = 0; i < kTasks; ++i) rt.submit(Task(copy).read(i == kBad ? b : a).write(outs[i]));
  rt.submit(Task(affine).read(a).write(b).param(int64_t{0}));  // after the read of b: no data edge
  Graph g = rt.end_recording();
  rt.wait_all();
  fill(b, -7);
  ran = 0;
  Event e = g.replay();
  try {
    e.get();
    ADD_FAILURE() << "the replay succeeded";
  } catch (const std::exception& x) {
    EXPECT_NE(std::string(x.what()).find("negative input -7"), std::string::npos) << x.what();
  }
  rt.wait_all();
  EXPECT_EQ(ran.load(), kTasks - 1);
  fill(b, 3);  // (a write: it does not inherit the failure)
  ran = 0;
  g.replay().get();
  EXPECT_EQ(ran.load(), kTasks);
  EXPECT_EQ(outs[kBad].to_vector()[0], 3);
}

// A paused runtime holds a replay of many ready tasks and chains; on resume each runs once.
TEST_P(Replay, ManyTasksHeldWhilePaused) {
  Runtime rt(GetParam().config);
  Kernel add = add_kernel(rt);
  constexpr int kChains = 300, kLength = 3;
  std::vector<Buffer<int64_t>> xs;
  for (int i = 0; i < kChains; ++i) {
    xs.push_back(rt.vector<int64_t>(1));
    fill(xs.back(), 0);
  }
  rt.begin_recording();
  for (int s = 0; s < kLength; ++s)
    for (int i = 0; i < kChains; ++i) rt.submit(Task(add).read_write(xs[i]).param(int64_t{1}));
  Graph g = rt.end_recording();
  rt.wait_all();
  rt.pause();
  Event e = g.replay();
  EXPECT_FALSE(e.ready());
  rt.resume();
  e.get();
  for (int i = 0; i < kChains; ++i) EXPECT_EQ(xs[i].to_vector()[0], 2 * kLength) << "chain " << i;
}

INSTANTIATE_TEST_SUITE_P(Backends, Replay,
                         ::testing::Values(Param{"cpu", test::cpu_config(2)},
                                           Param{"sim_two_memories", two_memories()}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- misuse -----------------------------------------------------------------------------------

template <class F>
std::string error_of(F&& f, ErrorCode code = ErrorCode::invalid_argument) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

bool says(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

TEST(ReplayMisuse, RecordingStatesAreChecked) {
  Runtime rt(test::cpu_config(1));
  Kernel affine = affine_kernel(rt);
  auto a = rt.vector<int64_t>(2);
  EXPECT_TRUE(says(error_of([&] { rt.end_recording(); }), "without a Runtime::begin_recording"));
  rt.begin_recording();
  EXPECT_TRUE(says(error_of([&] { rt.begin_recording(); }), "do not nest"));
  rt.submit(Task(affine).read(a).write(a).param(int64_t{0}));
  Graph g = rt.end_recording();
  rt.begin_recording();
  EXPECT_TRUE(says(error_of([&] { g.replay(); }), "while the runtime is recording"));
  Graph empty = rt.end_recording();
  EXPECT_TRUE(empty.empty());
  EXPECT_TRUE(empty.replay().ready());
  EXPECT_TRUE(Graph().replay().ready());
  g.replay().get();
}

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

// A replayed halo task is kept off the devices Runtime::submit keeps it off (those with their own
// memory, engine/halo_reads.hpp): with the CPU gone, the replay fares as the same task submitted.
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
  // (Placed on a device with its own memory, the task would fail there, for another reason.)
  const char* why = "no device can run kernel 'touch'";
  EXPECT_EQ(replayed == "ran", submitted == "ran") << replayed << "\n  vs submitted: " << submitted;
  EXPECT_EQ(says(replayed, why), says(submitted, why))
      << replayed << "\n  vs submitted: " << submitted;
}

TEST(ReplayMisuse, BindingsAreChecked) {
  Runtime rt(test::cpu_config(1));
  Kernel affine = affine_kernel(rt);
  auto a = rt.vector<int64_t>(4), t = rt.vector<int64_t>(4);
  auto longer = rt.vector<int64_t>(5), other = rt.vector<int64_t>(4);
  rt.begin_recording();
  rt.submit(Task(affine).read(a).write(t).param(int64_t{0}));
  Graph g = rt.end_recording();
  std::string m = error_of([&] { g.replay({{a, longer}}); });
  EXPECT_TRUE(says(m, "1x5 i64 buffer") && says(m, "1x4 i64 buffer") && says(m, "binding 0")) << m;
  m = error_of([&] { g.replay({{a, a}, {other, t}}); });
  EXPECT_TRUE(says(m, "binding 1") && says(m, "not one the graph uses")) << m;
  m = error_of([&] { g.replay({{a, other}, {t, other}}); });
  EXPECT_TRUE(says(m, "two of the graph's buffers")) << m;
  m = error_of([&] { g.replay({{a, t}}); });  // t would be both the input and the output
  EXPECT_TRUE(says(m, "two of the graph's buffers")) << m;
  Runtime rt2(test::cpu_config(1));
  auto foreign = rt2.vector<int64_t>(4);
  m = error_of([&] { g.replay({{a, foreign}}); });
  EXPECT_TRUE(says(m, "another runtime")) << m;
  g.replay({{a, other}}).get();  // still usable after refusals
}

// A recorded tile whose buffer was unpartitioned no longer exists; a recorded buffer partitioned
// since cannot be used whole. Both are refused, naming the buffer; binding another works.
TEST(ReplayMisuse, RecordedBuffersThatNoLongerExist) {
  Runtime rt(test::cpu_config(1));
  Kernel affine = affine_kernel(rt);
  auto whole = rt.vector<int64_t>(4), other = rt.vector<int64_t>(2);
  fill(other, 5);
  Tiles<int64_t> tiles = whole.partition(1, 2);
  Buffer<int64_t> tile = tiles(0, 1);
  rt.begin_recording();
  rt.submit(Task(affine).read(tile).write(tile).param(int64_t{0}));
  Graph g = rt.end_recording();
  g.replay().get();
  whole.unpartition().get();
  std::string m = error_of([&] { g.replay(); });
  EXPECT_TRUE(says(m, "no longer exists") && says(m, "tile at (0, 2)")) << m;
  g.replay({{tile, other}}).get();
  EXPECT_EQ(other.to_vector()[0], 10);

  auto plain = rt.vector<int64_t>(4);
  rt.begin_recording();
  rt.submit(Task(affine).read(plain).write(plain).param(int64_t{0}));
  Graph h = rt.end_recording();
  Tiles<int64_t> parts = plain.partition(1, 2);
  m = error_of([&] { h.replay(); });
  EXPECT_TRUE(says(m, "partitioned since")) << m;
  plain.unpartition().get();
  h.replay().get();
}

// A replay refused for want of room (tasks held by a pause fill max_tasks_in_flight) leaves no
// trace in its buffers' order: once resumed, replays and submits on them run.
TEST(ReplayMisuse, RefusedForRoomLeavesNoTrace) {
  Config c = test::cpu_config(1);
  c.max_tasks_in_flight = 4;
  Runtime rt(c);
  Kernel add = add_kernel(rt);
  auto a = rt.vector<int64_t>(1), other = rt.vector<int64_t>(1);
  rt.begin_recording();
  rt.submit(Task(add).read_write(a).param(int64_t{1}));
  Graph g = rt.end_recording();
  rt.wait_all();
  rt.pause();
  for (int i = 0; i < 4; ++i) rt.submit(Task(add).read_write(other).param(int64_t{1}));
  const std::string m = error_of([&] { g.replay(); });
  EXPECT_TRUE(says(m, "wait forever")) << m;
  rt.resume();
  g.replay().get();
  rt.submit(Task(add).read_write(a).param(int64_t{10})).get();
  EXPECT_EQ(a.to_vector()[0], 12);
  EXPECT_EQ(other.to_vector()[0], 4);
}

// A recording still open when the runtime ends is dropped with it (valgrind, LeakSanitizer: no
// cycle through the recorded buffers keeps the runtime alive).
TEST(ReplayMisuse, RecordingOpenAtTheEnd) {
  Runtime rt(test::cpu_config(1));
  Kernel add = add_kernel(rt);
  auto a = rt.vector<int64_t>(1);
  rt.begin_recording();
  rt.submit(Task(add).read_write(a).param(int64_t{1}));
  EXPECT_EQ(a.to_vector()[0], 1);
}

TEST(ReplayMisuse, AfterTheRuntimeEnded) {
  Graph g;
  {
    Runtime rt(test::cpu_config(1));
    Kernel affine = affine_kernel(rt);
    auto a = rt.vector<int64_t>(2);
    rt.begin_recording();
    rt.submit(Task(affine).read(a).write(a).param(int64_t{0}));
    g = rt.end_recording();
  }
  error_of([&] { g.replay(); }, ErrorCode::shutdown);
}

// Kernels that submit tasks: those are not recorded (the kernel submits them again when replayed).
TEST(ReplayCpu, TasksKernelsSubmitAreNotRecorded) {
  Runtime rt(test::cpu_config(2));
  auto counter = rt.vector<int64_t>(1);
  std::atomic<int> children{0};
  Kernel child = rt.kernel("child").cpu([&](TaskContext&) { children.fetch_add(1); });
  Kernel parent = rt.kernel("parent").cpu([&](TaskContext& ctx) {
    ctx.arg<int64_t>(0)(0, 0) += 1;
    rt.submit(Task(child));
  });
  rt.begin_recording();
  rt.submit(Task(parent).read_write(counter));
  Graph g = rt.end_recording();
  EXPECT_EQ(g.tasks(), 1u);
  g.replay().get();
  g.replay().get();
  rt.wait_all();
  EXPECT_EQ(children.load(), 3);
  EXPECT_EQ(counter.to_vector()[0], 3);
}

// Each task is first offered to the device it ran on in the previous run: with two idle devices,
// replays keep each task where the recording put it.
TEST(ReplayPlacement, StartsFromTheLastRunsDevices) {
  Runtime rt(two_memories());
  Kernel add = add_kernel(rt);
  // While recording, device 0's slots are busy (tasks not recorded): the recording's placement is
  // not the one idle devices would get.
  std::atomic<bool> go{false};
  Kernel block = rt.kernel("block").cpu([&](TaskContext&) {
    while (!go.load()) std::this_thread::yield();
  });
  rt.submit(Task(block).on(0));
  rt.submit(Task(block).on(0));
  std::vector<Buffer<int64_t>> bufs;
  for (int i = 0; i < 6; ++i) bufs.push_back(rt.vector<int64_t>(1));
  rt.begin_recording();
  std::vector<Event> events;
  for (auto& b : bufs) events.push_back(rt.submit(Task(add).read_write(b).param(int64_t{1})));
  Graph g = rt.end_recording();
  go.store(true);
  rt.wait_all();
  std::vector<uint64_t> per_device(2, 0);
  for (Event& e : events) {
    e.get();
    ++per_device[static_cast<size_t>(e.device())];
  }
  events.clear();  // the recording's task records are free for reuse
  constexpr int kReplays = 10;
  for (int r = 0; r < kReplays; ++r) g.replay().get();
  const RuntimeStats s = rt.stats();
  EXPECT_EQ(s.devices[0].tasks, 2 + per_device[0] * (kReplays + 1));
  EXPECT_EQ(s.devices[1].tasks, per_device[1] * (kReplays + 1));
  for (auto& b : bufs) EXPECT_EQ(b.to_vector()[0], kReplays + 1);
}

// The first placement tried is the device the task ran on last; a replay after that device left
// scheduling runs elsewhere.
TEST(ReplayPlacement, DeviceGoneRunsElsewhere) {
  Runtime rt(two_memories());
  Kernel affine = affine_kernel(rt);
  auto a = rt.vector<int64_t>(2);
  fill(a, 1);
  rt.begin_recording();
  Event first = rt.submit(Task(affine).read(a).write(a).param(int64_t{0}));
  Graph g = rt.end_recording();
  first.get();
  const int ran = first.device();
  ASSERT_GE(ran, 0);
  g.replay().get();
  rt.remove_device(static_cast<uint32_t>(ran));
  g.replay().get();
  EXPECT_EQ(a.to_vector()[0], 8);
}

}  // namespace
}  // namespace hcr
