// Recorded graphs (Runtime::begin_recording, end_recording, Graph::replay): a Jacobi stencil over
// the tiles of a partitioned buffer and a Jacobi solver replayed until converged, each checked
// against a plain loop; rebinding buffers; replays chained with ordinary submits, ordered with
// commute runs and explicit dependencies, from several threads, held by a pause; failures;
// kernels that submit; where replayed tasks are placed. On CPU slots in host memory and on two
// simulated devices with memories of their own (the data moves between them, and the first
// placement tried is the last run's). Misuse: replay_misuse_test; halo tiles and reductions:
// replay_reduce_halo_test.
#include "replay_support.hpp"

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hcr::test {
namespace {

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

// Busy work the compiler cannot drop, so that an overlap or a wrong order has time to show: each
// step reads and writes a volatile in plain statements (C++20 deprecates ++, compound assignment
// and an assignment's value used on one).
void spin(int steps) {
  volatile int done = 0;
  while (done < steps) done = done + 1;
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
    spin(2000);
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
    spin(20000);
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

INSTANTIATE_TEST_SUITE_P(Backends, Replay, replay_backends(), backend_name);

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
}  // namespace hcr::test
