// Halo tiles (Buffer::partition with an hcr::Halo): regions, clamping at the border, a stencil
// over several iterations against a plain loop, ordering against the neighbours, misuse.
#include "../test_support.hpp"

#include <atomic>
#include <future>
#include <ostream>
#include <thread>

namespace hcr {
namespace {

// One Jacobi step of a box stencil of radius h on an n x m grid: cells within h of the border
// keep their value, the others become the mean of their own value and their box's mean. The
// reference and the tile kernel call this same function, so results compare exactly.
inline double box_step(const double* a, size_t ld, size_t r, size_t c, size_t h) {
  double sum = 0;
  for (size_t dr = 0; dr <= 2 * h; ++dr)
    for (size_t dc = 0; dc <= 2 * h; ++dc) sum += a[(r + dr - h) * ld + (c + dc - h)];
  const double box = static_cast<double>((2 * h + 1) * (2 * h + 1));
  return 0.5 * a[r * ld + c] + 0.5 * (sum / box);
}

std::vector<double> reference(std::vector<double> a, size_t n, size_t m, size_t h, int steps) {
  std::vector<double> b = a;
  for (int s = 0; s < steps; ++s) {
    for (size_t r = h; r + h < n; ++r)
      for (size_t c = h; c + h < m; ++c) b[r * m + c] = box_step(a.data(), m, r, c, h);
    std::swap(a, b);
  }
  return a;
}

std::vector<double> start_values(size_t n, size_t m) {
  std::vector<double> v(n * m);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7919) % 101) - 50.0;
  return v;
}

// The tile kernel: argument 0 the input's region (interior and ghosts), argument 1 the output's
// region, of which it writes the interior. Parameters: the ghosts on each side (top, left,
// bottom, right), the interior's first row and column in the grid, the grid's shape, the radius.
Kernel box_kernel(Runtime& rt) {
  return rt.kernel("box").cpu([](TaskContext& ctx) {
    auto a = ctx.arg<double>(0);
    auto b = ctx.arg<double>(1);
    const auto top = ctx.param<uint64_t>(0), left = ctx.param<uint64_t>(1);
    const auto bottom = ctx.param<uint64_t>(2), right = ctx.param<uint64_t>(3);
    const auto row0 = ctx.param<uint64_t>(4), col0 = ctx.param<uint64_t>(5);
    const auto n = ctx.param<uint64_t>(6), m = ctx.param<uint64_t>(7), h = ctx.param<uint64_t>(8);
    ASSERT_EQ(a.rows, b.rows);
    ASSERT_EQ(a.cols, b.cols);
    for (size_t r = top; r + bottom < a.rows; ++r)
      for (size_t c = left; c + right < a.cols; ++c) {
        const size_t gr = row0 + r - top, gc = col0 + c - left;  // in the whole grid
        if (gr < h || gc < h || gr + h >= n || gc + h >= m) b(r, c) = a(r, c);
        else b(r, c) = box_step(a.data, a.ld, r, c, h);
      }
  });
}

void submit_step(Runtime& rt, const Kernel& k, const Tiles<double>& in, const Tiles<double>& out,
                 size_t tile_rows, size_t tile_cols, size_t n, size_t m, size_t h) {
  for (size_t i = 0; i < in.rows(); ++i)
    for (size_t j = 0; j < in.cols(); ++j) {
      const Ghosts g = in.ghosts(i, j);
      rt.submit(Task(k)
                    .read(in(i, j))
                    .write(out(i, j))
                    .param(uint64_t{g.top})
                    .param(uint64_t{g.left})
                    .param(uint64_t{g.bottom})
                    .param(uint64_t{g.right})
                    .param(uint64_t{i * tile_rows})
                    .param(uint64_t{j * tile_cols})
                    .param(uint64_t{n})
                    .param(uint64_t{m})
                    .param(uint64_t{h}));
    }
}

struct StencilCase {
  size_t n, m, tile_rows, tile_cols, halo;
  int threads;
};

void PrintTo(const StencilCase& c, std::ostream* os) {
  *os << c.n << "x" << c.m << " in " << c.tile_rows << "x" << c.tile_cols << " tiles, halo "
      << c.halo << ", " << c.threads << " threads";
}

class HaloStencil : public ::testing::TestWithParam<StencilCase> {};

// Several Jacobi iterations over halo tiles, ping-pong between two grids, submitted without any
// wait between iterations, equal to the plain loop element for element.
TEST_P(HaloStencil, IterationsMatchAPlainLoop) {
  const StencilCase p = GetParam();
  constexpr int kSteps = 7;
  Runtime rt(test::cpu_config(p.threads));
  Kernel k = box_kernel(rt);
  const std::vector<double> start = start_values(p.n, p.m);
  auto a = rt.buffer<double>(p.n, p.m), b = rt.buffer<double>(p.n, p.m);
  {
    auto va = a.acquire(Access::write), vb = b.acquire(Access::write);
    for (size_t r = 0; r < p.n; ++r)
      for (size_t c = 0; c < p.m; ++c) va(r, c) = vb(r, c) = start[r * p.m + c];
  }
  Tiles<double> ta = a.partition(p.tile_rows, p.tile_cols, Halo{p.halo});
  Tiles<double> tb = b.partition(p.tile_rows, p.tile_cols, Halo{p.halo});
  EXPECT_EQ(ta.halo(), p.halo);
  for (int s = 0; s < kSteps; ++s) {
    if (s % 2 == 0) submit_step(rt, k, ta, tb, p.tile_rows, p.tile_cols, p.n, p.m, p.halo);
    else submit_step(rt, k, tb, ta, p.tile_rows, p.tile_cols, p.n, p.m, p.halo);
  }
  Event ea = a.unpartition(), eb = b.unpartition();
  eb.get();
  ea.get();
  EXPECT_EQ((kSteps % 2 == 1 ? b : a).to_vector(), reference(start, p.n, p.m, p.halo, kSteps));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HaloStencil,
    ::testing::Values(StencilCase{32, 32, 8, 8, 1, 2},    // even grid
                      StencilCase{37, 45, 8, 10, 1, 3},   // smaller edge tiles (5 x 5)
                      StencilCase{37, 45, 8, 10, 2, 2},   // radius 2: corners from diagonals
                      StencilCase{30, 20, 30, 7, 3, 2},   // one row of tiles
                      StencilCase{16, 16, 16, 16, 1, 1},  // one tile: no ghosts at all
                      StencilCase{40, 40, 4, 4, 4, 4}));  // ghosts as wide as the tiles

// In place (read_write of halo tiles, Gauss-Seidel sweeps): tasks that update their tile reading
// the neighbours' edges give the result of running them one by one in submission order.
TEST(HaloTiles, InPlaceSweepsRunAsIfInSubmissionOrder) {
  constexpr size_t kN = 23, kM = 29, kTr = 6, kTc = 7;
  constexpr int kSweeps = 4;
  Runtime rt(test::cpu_config(3));
  // Each interior element becomes a mix of itself and its four neighbours, in place, row by row.
  auto sweep_block = [](double* a, size_t ld, size_t rows, size_t cols, size_t row0, size_t col0) {
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) {
        const size_t gr = row0 + r, gc = col0 + c;
        if (gr == 0 || gc == 0 || gr + 1 == kN || gc + 1 == kM) continue;
        double* x = a + r * ld + c;
        *x = 0.25 * *x + 0.2 * (x[-1] + x[1]) + 0.15 * (x[-static_cast<ptrdiff_t>(ld)] + x[ld]);
      }
  };
  Kernel gs = rt.kernel("gs").cpu([&](TaskContext& ctx) {
    auto a = ctx.arg<double>(0);
    const auto top = ctx.param<uint64_t>(0), left = ctx.param<uint64_t>(1);
    const auto bottom = ctx.param<uint64_t>(2), right = ctx.param<uint64_t>(3);
    sweep_block(a.data + top * a.ld + left, a.ld, a.rows - top - bottom, a.cols - left - right,
                ctx.param<uint64_t>(4), ctx.param<uint64_t>(5));
  });
  std::vector<double> want = start_values(kN, kM);
  auto g = rt.buffer<double>(kN, kM);
  {
    auto v = g.acquire(Access::write);
    std::copy(want.begin(), want.end(), v.data());
  }
  Tiles<double> t = g.partition(kTr, kTc, Halo{1});
  for (int s = 0; s < kSweeps; ++s)
    for (size_t i = 0; i < t.rows(); ++i)
      for (size_t j = 0; j < t.cols(); ++j) {
        const Ghosts gh = t.ghosts(i, j);
        rt.submit(Task(gs)
                      .read_write(t(i, j))
                      .param(uint64_t{gh.top})
                      .param(uint64_t{gh.left})
                      .param(uint64_t{gh.bottom})
                      .param(uint64_t{gh.right})
                      .param(uint64_t{i * kTr})
                      .param(uint64_t{j * kTc}));
        const size_t r0 = i * kTr, c0 = j * kTc;
        sweep_block(want.data() + r0 * kM + c0, kM, std::min(kTr, kN - r0), std::min(kTc, kM - c0),
                    r0, c0);
      }
  g.unpartition().get();
  EXPECT_EQ(g.to_vector(), want);
}

// Regions, clamped at the border: a tile's rows() and cols() are its region's, its ghosts() say
// where the interior sits, and a host view of it sees the neighbours' elements around it.
TEST(HaloTiles, RegionsAreClampedAtTheBorder) {
  Runtime rt(test::cpu_config(1));
  auto g = rt.buffer<int32_t>(10, 12);
  {
    auto v = g.acquire(Access::write);
    for (size_t r = 0; r < 10; ++r)
      for (size_t c = 0; c < 12; ++c) v(r, c) = static_cast<int32_t>(r * 100 + c);
  }
  Tiles<int32_t> t = g.partition(4, 5, Halo{2});  // 3 x 3 tiles; the last row 2, column 2 wide
  ASSERT_EQ(t.rows(), 3u);
  ASSERT_EQ(t.cols(), 3u);
  struct Want {
    size_t rows, cols;
    Ghosts g;
  };
  const Want want[3][3] = {{{6, 7, {0, 0, 2, 2}}, {6, 9, {0, 2, 2, 2}}, {6, 4, {0, 2, 2, 0}}},
                           {{8, 7, {2, 0, 2, 2}}, {8, 9, {2, 2, 2, 2}}, {8, 4, {2, 2, 2, 0}}},
                           {{4, 7, {2, 0, 0, 2}}, {4, 9, {2, 2, 0, 2}}, {4, 4, {2, 2, 0, 0}}}};
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < 3; ++j) {
      SCOPED_TRACE("tile " + std::to_string(i) + "," + std::to_string(j));
      const Ghosts gh = t.ghosts(i, j);
      EXPECT_EQ(t(i, j).rows(), want[i][j].rows);
      EXPECT_EQ(t(i, j).cols(), want[i][j].cols);
      EXPECT_EQ(t(i, j).ld(), 12u);  // a view of the grid's memory
      EXPECT_EQ(gh.top, want[i][j].g.top);
      EXPECT_EQ(gh.left, want[i][j].g.left);
      EXPECT_EQ(gh.bottom, want[i][j].g.bottom);
      EXPECT_EQ(gh.right, want[i][j].g.right);
      auto v = t(i, j).acquire(Access::read);
      for (size_t r = 0; r < v.rows(); ++r)
        for (size_t c = 0; c < v.cols(); ++c)
          ASSERT_EQ(v(r, c),
                    static_cast<int32_t>((i * 4 + r - gh.top) * 100 + j * 5 + c - gh.left));
    }
  EXPECT_EQ(test::expect_error([&] { (void)t.ghosts(3, 0); }).code(), ErrorCode::invalid_argument);
}

// A kernel that writes `value` into its buffer's interior, after `gate` opens.
Kernel gated_fill(Runtime& rt) {
  return rt.kernel("fill").cpu([](TaskContext& ctx) {
    auto* gate = ctx.param<std::shared_future<void>*>(0);
    gate->wait();
    auto v = ctx.arg<double>(0);
    const auto top = ctx.param<uint64_t>(1), left = ctx.param<uint64_t>(2);
    const auto rows = ctx.param<uint64_t>(3), cols = ctx.param<uint64_t>(4);
    const auto value = ctx.param<double>(5);
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) v(top + r, left + c) = value;
  });
}

// A neighbour's writer, then a reader of the tile: the reader waits for it and sees its edge in
// its ghosts; a reader, then a neighbour's writer: the writer waits for the reader, which sees the
// old edge. A tile two away is no neighbour: its writer runs while the reader is held.
TEST(HaloTiles, ReadsAreOrderedWithTheNeighboursWrites) {
  Runtime rt(test::cpu_config(3));
  auto g = rt.buffer<double>(4, 12);
  Tiles<double> t = g.partition(4, 4, Halo{1});  // 1 x 3 tiles: regions 4x5, 4x6, 4x5
  Kernel fill = gated_fill(rt);
  std::promise<void> open_writer;
  std::shared_future<void> writer_gate = open_writer.get_future().share();
  std::shared_future<void> open_now = [] {
    std::promise<void> p;
    p.set_value();
    return p.get_future().share();
  }();
  auto fill_task = [&](size_t j, std::shared_future<void>* gate, double value) {
    const Ghosts gh = t.ghosts(0, j);
    Task task(fill);
    task.write(t(0, j)).param(gate).param(uint64_t{gh.top}).param(uint64_t{gh.left});
    task.param(uint64_t{4}).param(uint64_t{4}).param(value);
    return task;
  };
  // Reader of tile 0: its right ghost column is tile 1's first column.
  std::promise<std::vector<double>> seen1;
  Kernel look = rt.kernel("look").cpu([&](TaskContext& ctx) {
    auto* gate = ctx.param<std::shared_future<void>*>(0);
    auto* out = ctx.param<std::promise<std::vector<double>>*>(1);
    gate->wait();
    auto v = ctx.arg<double>(0);
    std::vector<double> ghost;
    for (size_t r = 0; r < v.rows; ++r) ghost.push_back(v(r, v.cols - 1));
    out->set_value(ghost);
  });
  Event w = rt.submit(fill_task(1, &writer_gate, 5.0));
  Event r = rt.submit(Task(look).read(t(0, 0)).param(&open_now).param(&seen1));
  EXPECT_FALSE(r.ready());  // it waits for its neighbour's writer (run early, it would see 0s)
  open_writer.set_value();
  r.get();
  w.get();
  EXPECT_EQ(seen1.get_future().get(), std::vector<double>(4, 5.0));

  // Now the other way round: a held reader of tile 0, then writers of tiles 1 and 2.
  std::promise<void> open_reader;
  std::shared_future<void> reader_gate = open_reader.get_future().share();
  std::promise<std::vector<double>> seen2;
  Event r2 = rt.submit(Task(look).read(t(0, 0)).param(&reader_gate).param(&seen2));
  Event w1 = rt.submit(fill_task(1, &open_now, 9.0));
  Event w2 = rt.submit(fill_task(2, &open_now, 7.0));
  w2.get();  // tile 2 is no neighbour of tile 0: it does not wait for the held reader
  EXPECT_FALSE(w1.ready());
  open_reader.set_value();
  w1.get();
  r2.get();
  EXPECT_EQ(seen2.get_future().get(), std::vector<double>(4, 5.0));  // the edge before w1
  Event done = g.unpartition();
  done.get();
  const std::vector<double> all = g.to_vector();
  for (size_t row = 0; row < 4; ++row) {
    EXPECT_EQ(all[row * 12 + 0], 0.0);
    EXPECT_EQ(all[row * 12 + 4], 9.0);
    EXPECT_EQ(all[row * 12 + 8], 7.0);
  }
}

// Unpartition waits for the tasks on the tiles; the tiles are gone afterwards.
TEST(HaloTiles, UnpartitionWaitsForGhostReadersAndEndsTheTiles) {
  Runtime rt(test::cpu_config(2));
  auto g = rt.buffer<double>(8, 8);
  Tiles<double> t = g.partition(4, 4, Halo{1});
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  Kernel hold = rt.kernel("hold").cpu(
      [](TaskContext& ctx) { ctx.param<std::shared_future<void>*>(0)->wait(); });
  Event reader = rt.submit(Task(hold).read(t(0, 0)).param(&gate));
  Event joined = g.unpartition();
  EXPECT_FALSE(joined.ready());
  open.set_value();
  joined.get();
  reader.get();
  Error e = test::expect_error([&] { rt.submit(Task(hold).read(t(1, 1)).param(&gate)); });
  EXPECT_NE(std::string(e.what()).find("halo tile"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("unpartitioned"), std::string::npos) << e.what();
}

TEST(HaloTiles, BadPartitionsAreRefused) {
  Runtime rt(test::cpu_config(1));
  auto g = rt.buffer<float>(10, 12);
  Error e = test::expect_error([&] { g.partition(4, 4, Halo{5}); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("Halo{5}"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("wider than a tile"), std::string::npos) << e.what();
  // 10 rows in tiles of 4: the last row of tiles has 2 rows, narrower than ghosts of 3.
  e = test::expect_error([&] { g.partition(4, 6, Halo{3}); });
  EXPECT_NE(std::string(e.what()).find("which has 2 rows"), std::string::npos) << e.what();
  e = test::expect_error([&] { g.partition(0, 4, Halo{1}); });
  EXPECT_NE(std::string(e.what()).find("at least one element"), std::string::npos) << e.what();
  // A refused partition leaves the buffer usable.
  EXPECT_EQ(g.to_vector().size(), 120u);

  Tiles<float> t = g.partition(5, 6, Halo{1});
  e = test::expect_error([&] { g.partition(5, 6, Halo{1}); });
  EXPECT_NE(std::string(e.what()).find("already partitioned"), std::string::npos) << e.what();
  Buffer<float> tile = t(0, 0);
  e = test::expect_error([&] { tile.partition(2, 2); });
  EXPECT_NE(std::string(e.what()).find("cannot be partitioned again"), std::string::npos)
      << e.what();
  e = test::expect_error([&] { tile.partition(2, 2, Halo{1}); });
  EXPECT_NE(std::string(e.what()).find("cannot be partitioned again"), std::string::npos)
      << e.what();
  g.unpartition().get();

  // Halo{0}: plain tiles.
  Tiles<float> plain = g.partition(5, 6, Halo{0});
  EXPECT_EQ(plain.halo(), 0u);
  EXPECT_EQ(plain(1, 1).rows(), 5u);
  EXPECT_EQ(plain.ghosts(1, 1).top, 0u);
  g.unpartition().get();
  // A single tile has nothing around it: any width fits.
  Tiles<float> whole = g.partition(10, 12, Halo{20});
  EXPECT_EQ(whole(0, 0).rows(), 10u);
  EXPECT_EQ(whole(0, 0).cols(), 12u);
}

// A task with a halo tile is not placed on a device with its own memory, and says why.
TEST(HaloTiles, DevicesWithTheirOwnMemoryAreNotUsed) {
  Config c;
  c.use_environment = false;
  c.model_dir = "off";
  c.backends.push_back({"sim",
                        true,
                        {{"compute", "false"},
                         {"kernel.use.flops", "1e6"},
                         {"device.0.name", "gpu"},
                         {"device.0.host_memory", "false"}},
                        "test"});
  Runtime rt(c);
  auto g = rt.buffer<float>(8, 8);
  Tiles<float> t = g.partition(4, 4, Halo{1});
  Kernel use = rt.kernel("use").cpu([](TaskContext&) {});
  Error e = test::expect_error([&] { rt.submit(Task(use).read(t(0, 0))).get(); });
  EXPECT_EQ(e.code(), ErrorCode::no_device);
  EXPECT_NE(std::string(e.what()).find("has its own memory"), std::string::npos) << e.what();
  // Plain tiles go there as ever.
  g.unpartition().get();
  Tiles<float> p = g.partition(4, 4);
  rt.submit(Task(use).read(p(0, 0))).get();
}

// A host view of a halo tile waits for its neighbours' writers, as a task would.
TEST(HaloTiles, HostViewsWaitForTheNeighboursWriters) {
  Runtime rt(test::cpu_config(2));
  auto g = rt.buffer<double>(4, 8);
  Tiles<double> t = g.partition(4, 4, Halo{1});  // 1 x 2 tiles: regions 4x5 and 4x5
  Kernel fill = gated_fill(rt);
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  const Ghosts gh = t.ghosts(0, 1);
  Event w = rt.submit(Task(fill)
                          .write(t(0, 1))
                          .param(&gate)
                          .param(uint64_t{gh.top})
                          .param(uint64_t{gh.left})
                          .param(uint64_t{4})
                          .param(uint64_t{4})
                          .param(3.0));
  std::promise<std::vector<double>> seen;
  std::atomic<bool> granted{false};
  t(0, 0).acquire_async(Access::read, [&](AsyncAccess<double> v) {
    granted = true;
    std::vector<double> ghost;  // the region's last column: tile 1's first
    for (size_t r = 0; r < v.rows(); ++r) ghost.push_back(v.view()(r, v.cols() - 1));
    seen.set_value(ghost);
  });
  EXPECT_FALSE(granted.load());  // the neighbour's writer is held
  open.set_value();
  EXPECT_EQ(seen.get_future().get(), std::vector<double>(4, 3.0));
  w.get();
  g.unpartition().get();
}

// A thread holding a view of a halo tile that asks for a neighbour's, where one reads the other's
// edge through its ghosts and the other writes, would wait for itself: refused, naming both.
// Views that only read, or only write their own interiors, or are not neighbours, are granted.
TEST(HaloTiles, AViewThatWouldWaitForItsNeighbourViewIsRefused) {
  Runtime rt(test::cpu_config(2));
  auto g = rt.buffer<double>(4, 12);
  Tiles<double> t = g.partition(4, 4, Halo{1});  // 1 x 3 tiles
  {
    auto held = t(0, 1).acquire(Access::write);
    try {
      (void)t(0, 0).acquire(Access::read);
      FAIL() << "a read of tile (0, 0) waits for the write view of its neighbour (0, 1)";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("would wait forever"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("neighbouring 4x6 f64 halo tile at (0, 3)"),
                std::string::npos)
          << e.what();
    }
    auto far = t(0, 2).acquire(Access::write);                 // its own interior only: no wait
    EXPECT_THROW((void)t(0, 2).acquire(Access::read), Error);  // the same tile, as before
  }
  {
    auto held = t(0, 0).acquire(Access::read);
    EXPECT_THROW((void)t(0, 1).acquire(Access::write), Error);
    auto far = t(0, 2).acquire(Access::write);                 // (0, 0)'s ghosts do not reach it
    EXPECT_THROW((void)t(0, 1).acquire(Access::read), Error);  // its ghosts read (0, 2)'s edge
  }
  {
    auto held = t(0, 0).acquire(Access::read);
    auto both = t(0, 1).acquire(Access::read);  // two reads share
  }
  {
    auto w0 = t(0, 0).acquire(Access::write);
    auto w1 = t(0, 1).acquire(Access::write);  // each writes its own interior
  }
  g.unpartition().get();
}

// The same inside a kernel whose task has a neighbouring halo tile as argument.
TEST(HaloTiles, AKernelAcquiringItsArgumentsNeighbourIsRefused) {
  Runtime rt(test::cpu_config(2));
  auto g = rt.buffer<double>(8, 4);
  Tiles<double> t = g.partition(4, 4, Halo{1});  // 2 x 1 tiles
  Buffer<double> below = t(1, 0);
  std::string refused;
  Kernel k = rt.kernel("peek").cpu([&](TaskContext&) {
    try {
      (void)below.acquire(Access::write);
    } catch (const Error& e) {
      refused = e.what();
    }
  });
  rt.submit(Task(k).read(t(0, 0))).get();
  EXPECT_NE(refused.find("kernel 'peek'"), std::string::npos) << refused;
  EXPECT_NE(refused.find("through its ghosts"), std::string::npos) << refused;
  g.unpartition().get();
}

}  // namespace
}  // namespace hcr
