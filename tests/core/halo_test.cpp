// Halo tiles (Buffer::partition with an hcr::Halo) in host memory: regions, clamping at the
// border, a stencil over several iterations against a plain loop, ordering against the
// neighbours, misuse. On devices with their own memory: halo_device_test.cpp.
#include "halo_support.hpp"

#include <atomic>
#include <future>
#include <ostream>
#include <thread>

namespace hcr {
namespace {

class HaloStencil : public ::testing::TestWithParam<StencilCase> {};

// Several Jacobi iterations over halo tiles, ping-pong between two grids, submitted without any
// wait between iterations, equal to the plain loop element for element.
TEST_P(HaloStencil, IterationsMatchAPlainLoop) {
  const StencilCase p = GetParam();
  Runtime rt(test::cpu_config(p.threads));
  std::vector<double> want;
  EXPECT_EQ(run_stencil(rt, p, 7, want), want);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HaloStencil,
    ::testing::Values(StencilCase{32, 32, 8, 8, 1, 2},    // even grid
                      StencilCase{37, 45, 8, 10, 1, 3},   // smaller edge tiles (5 x 5)
                      StencilCase{37, 45, 8, 10, 2, 2},   // radius 2: corners from diagonals
                      StencilCase{30, 20, 30, 7, 3, 2},   // one row of tiles
                      StencilCase{16, 16, 16, 16, 1, 1},  // one tile: no ghosts at all
                      StencilCase{40, 40, 4, 4, 4, 4}));  // ghosts as wide as the tiles

TEST(HaloTiles, InPlaceSweepsRunAsIfInSubmissionOrder) {
  Runtime rt(test::cpu_config(3));
  std::vector<double> want;
  EXPECT_EQ(run_sweeps(rt, 4, want), want);
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
