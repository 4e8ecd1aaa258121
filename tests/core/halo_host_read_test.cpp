// A halo tile read on the host while its neighbours' latest data live on a device with its own
// memory: only the ghost edges it reads come home from each neighbour (and its interior when
// stale), tagged with the neighbour's version, never the neighbours' whole interiors.
#include "halo_support.hpp"

#include <atomic>

namespace hcr {
namespace {

using Options = std::vector<std::pair<std::string, std::string>>;

// One simulated device with its own memory that runs the CPU kernels for real (time scaled far
// down), and `cpu_threads` CPU workers beside it (0: none).
Config one_device(int cpu_threads = 0) {
  Config c;
  c.use_environment = false;
  c.model_dir = "off";
  c.policy = "eager";
  c.backends.push_back({"sim",
                        true,
                        {{"compute", "true"},
                         {"time_scale", "0.01"},
                         {"seed", "7"},
                         {"device.0.name", "gpu0"},
                         {"device.0.host_memory", "false"},
                         {"device.0.concurrency", "2"},
                         {"device.0.memory", "1GiB"}},
                        "test"});
  if (cpu_threads > 0)
    c.backends.push_back({"cpu", true, {{"threads", std::to_string(cpu_threads)}}, "test"});
  return c;
}

uint32_t device_of(const Runtime& rt, const std::string& backend) {
  for (const Device& d : rt.devices())
    if (d.backend == backend) return d.id;
  ADD_FAILURE() << "no " << backend << " device";
  return 0;
}

// Bytes copied into host memory so far.
uint64_t home(const Runtime& rt) {
  uint64_t bytes = 0;
  for (const LinkCounters& l : rt.stats().data.links)
    if (l.to == 0) bytes += l.bytes;
  return bytes;
}

// A 16 x 24 grid in 8 x 8 tiles (2 x 3) with ghosts 1 wide, two stencil steps run on the device
// (into `b`, then back into `a`): every tile's latest data lives there alone.
constexpr size_t kN = 16, kM = 24, kT = 8, kH = 1;
constexpr int kSteps = 2;

struct Grid {
  Buffer<double> a, b;
  Tiles<double> ta, tb;
  std::vector<double> want;  // `a` after the steps, by the plain loop
};

Grid stencil_on_device(Runtime& rt, int pin = -1) {
  Kernel k = box_kernel(rt);
  const std::vector<double> start = start_values(kN, kM);
  Grid g{rt.buffer<double>(kN, kM), rt.buffer<double>(kN, kM), {}, {}, {}};
  {
    auto va = g.a.acquire(Access::write), vb = g.b.acquire(Access::write);
    std::copy(start.begin(), start.end(), va.data());
    std::copy(start.begin(), start.end(), vb.data());
  }
  g.ta = g.a.partition(kT, kT, Halo{kH});
  g.tb = g.b.partition(kT, kT, Halo{kH});
  for (int s = 0; s < kSteps; ++s) {
    const Tiles<double>& in = s % 2 == 0 ? g.ta : g.tb;
    const Tiles<double>& out = s % 2 == 0 ? g.tb : g.ta;
    for (size_t i = 0; i < in.rows(); ++i)
      for (size_t j = 0; j < in.cols(); ++j) {
        const Ghosts gh = in.ghosts(i, j);
        Task task(k);
        if (pin >= 0) task.on(static_cast<uint32_t>(pin));
        rt.submit(task.read(in(i, j))
                      .write(out(i, j))
                      .param(uint64_t{gh.top})
                      .param(uint64_t{gh.left})
                      .param(uint64_t{gh.bottom})
                      .param(uint64_t{gh.right})
                      .param(uint64_t{i * kT})
                      .param(uint64_t{j * kT})
                      .param(uint64_t{kN})
                      .param(uint64_t{kM})
                      .param(uint64_t{kH}));
      }
  }
  rt.wait_all();
  g.want = reference(start, kN, kM, kH, kSteps);
  return g;
}

// The elements of tile (i, j)'s region (interior and ghosts) that differ from `want`.
size_t wrong_in_region(const Tiles<double>& t, size_t i, size_t j, const MatrixView<double>& v,
                       const std::vector<double>& want) {
  const Ghosts gh = t.ghosts(i, j);
  const size_t r0 = i * kT - gh.top, c0 = j * kT - gh.left;
  size_t wrong = 0;
  for (size_t r = 0; r < v.rows; ++r)
    for (size_t c = 0; c < v.cols; ++c) wrong += v(r, c) != want[(r0 + r) * kM + c0 + c];
  return wrong;
}

// Tile (i, j)'s region less its interior, in elements.
size_t ghost_elements(const Tiles<double>& t, size_t i, size_t j) {
  const Ghosts g = t.ghosts(i, j);
  const size_t rows = t(i, j).rows(), cols = t(i, j).cols();
  return rows * cols - (rows - g.top - g.bottom) * (cols - g.left - g.right);
}

// Writes `value` into the interior of a tile (parameters: its ghosts top and left, the value).
Kernel fill_interior(Runtime& rt) {
  return rt.kernel("fill_interior").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<double>(0);
    const auto top = ctx.param<uint64_t>(0), left = ctx.param<uint64_t>(1);
    const auto value = ctx.param<double>(2);
    for (size_t r = 0; r < kT; ++r)
      for (size_t c = 0; c < kT; ++c) v(top + r, left + c) = value;
  });
}

// The top middle tile (0, 1), read on the host: its interior comes home (the device wrote it)
// and, from each of its five neighbours, the edge its ghosts read: (8 * 8 + 26) doubles, where the
// neighbours' whole interiors would be (8 * 8 + 5 * 8 * 8). Its ghosts hold the plain loop's.
TEST(HaloHostRead, OnlyTheGhostEdgesComeHome) {
  Runtime rt(one_device());
  Grid g = stencil_on_device(rt);
  const uint64_t before = home(rt);
  {
    auto v = g.ta(0, 1).acquire(Access::read);
    EXPECT_EQ(wrong_in_region(g.ta, 0, 1, v.view(), g.want), 0u);
  }
  ASSERT_EQ(ghost_elements(g.ta, 0, 1), 26u);
  const uint64_t moved = home(rt) - before;
  RecordProperty("bytes_home", std::to_string(moved));
  EXPECT_EQ(moved, (kT * kT + 26) * sizeof(double));
  g.a.unpartition().get();
  g.b.unpartition().get();
  EXPECT_EQ(g.a.to_vector(), g.want);
}

// Nothing changed since: a second read moves nothing at all, the edges the first brought home
// being tagged with their neighbours' versions.
TEST(HaloHostRead, ASecondReadMovesNothing) {
  Runtime rt(one_device());
  Grid g = stencil_on_device(rt);
  const uint64_t before = home(rt);
  g.ta(0, 1).acquire(Access::read).release();
  const uint64_t once = home(rt);
  EXPECT_EQ(once - before, (kT * kT + 26) * sizeof(double));
  {
    auto v = g.ta(0, 1).acquire(Access::read);
    EXPECT_EQ(wrong_in_region(g.ta, 0, 1, v.view(), g.want), 0u);
  }
  EXPECT_EQ(home(rt), once);
  g.a.unpartition().get();
  EXPECT_EQ(g.a.to_vector(), g.want);
}

// A neighbour written on the device again: its edge in the tile's ghosts is stale, and the next
// host read brings that edge home (8 doubles, tile (0, 2)'s first column) and nothing else. Then
// the neighbour itself, read on the host, is whole: the rest of its interior comes home (only its
// edge had: 8 * 8 - 8 doubles), with the 7 doubles of tile (1, 2)'s top row its ghosts read that
// tile (0, 1)'s read left there (its corner came home then, and tile (1, 1)'s corner too).
TEST(HaloHostRead, ANeighbourWrittenAgainOnTheDeviceIsFreshThenWhole) {
  Runtime rt(one_device());
  Grid g = stencil_on_device(rt);
  g.ta(0, 1).acquire(Access::read).release();
  const Ghosts g02 = g.ta.ghosts(0, 2);
  rt.submit(Task(fill_interior(rt))
                .write(g.ta(0, 2))
                .param(uint64_t{g02.top})
                .param(uint64_t{g02.left})
                .param(7.0));
  rt.wait_all();
  std::vector<double> want = g.want;
  for (size_t r = 0; r < kT; ++r)
    for (size_t c = 2 * kT; c < 3 * kT; ++c) want[r * kM + c] = 7.0;
  uint64_t before = home(rt);
  {
    auto v = g.ta(0, 1).acquire(Access::read);
    EXPECT_EQ(wrong_in_region(g.ta, 0, 1, v.view(), want), 0u);
    for (size_t r = 0; r < kT; ++r) EXPECT_EQ(v(r, v.cols() - 1), 7.0);
  }
  EXPECT_EQ(home(rt) - before, kT * sizeof(double));
  before = home(rt);
  {
    auto v = g.ta(0, 2).acquire(Access::read);
    EXPECT_EQ(wrong_in_region(g.ta, 0, 2, v.view(), want), 0u);
  }
  EXPECT_EQ(home(rt) - before, (kT * kT - kT + 7) * sizeof(double));
  g.a.unpartition().get();
  EXPECT_EQ(g.a.to_vector(), want);
}

// A neighbour whose edge came home is not valid there as a whole: read on the host, tile (0, 0)
// gets the rest of its interior (8 * 8 less its last column, home already), with the 7 doubles of
// tile (1, 0)'s top row not home yet, and all of it is the plain loop's; so is the whole grid.
TEST(HaloHostRead, ANeighbourReadAfterItsEdgeCameHomeIsWhole) {
  Runtime rt(one_device());
  Grid g = stencil_on_device(rt);
  g.ta(0, 1).acquire(Access::read).release();
  const uint64_t before = home(rt);
  {
    auto v = g.ta(0, 0).acquire(Access::read);
    EXPECT_EQ(wrong_in_region(g.ta, 0, 0, v.view(), g.want), 0u);
  }
  EXPECT_EQ(home(rt) - before, (kT * kT - kT + 7) * sizeof(double));
  g.a.unpartition().get();
  EXPECT_EQ(g.a.to_vector(), g.want);
}

// A neighbour's edge home, then the neighbour written on the host: the rest of its interior comes
// home first (8 * 8 less its first column; with the 7 doubles of tile (1, 2)'s top row its ghosts
// read that were not home), the tile read
// on the host again sees the host write (in place: nothing to copy for it), and the grid is exact.
TEST(HaloHostRead, ANeighbourWrittenOnTheHostAfterItsEdgeCameHome) {
  Runtime rt(one_device());
  Grid g = stencil_on_device(rt);
  g.ta(0, 1).acquire(Access::read).release();
  std::vector<double> want = g.want;
  const uint64_t edges_home = home(rt);
  {
    auto v = g.ta(0, 2).acquire(Access::read_write);
    EXPECT_EQ(home(rt) - edges_home, (kT * kT - kT + 7) * sizeof(double));
    const Ghosts gh = g.ta.ghosts(0, 2);
    for (size_t r = 0; r < kT; ++r) {
      v(gh.top + r, gh.left) = -3.0;
      want[r * kM + 2 * kT] = -3.0;
    }
  }
  const uint64_t before = home(rt);
  {
    auto v = g.ta(0, 1).acquire(Access::read);
    EXPECT_EQ(wrong_in_region(g.ta, 0, 1, v.view(), want), 0u);
  }
  EXPECT_EQ(home(rt), before);
  g.a.unpartition().get();
  EXPECT_EQ(g.a.to_vector(), want);
}

// Host tasks on CPU workers read three tiles at once, their edge copies home in flight together
// (some share a neighbour's corner): each sees the plain loop's values, and far less than every
// interior came home.
TEST(HaloHostRead, HostTasksReadingAtOnceShareTheEdgesInFlight) {
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    Runtime rt(one_device(2));
    Grid g = stencil_on_device(rt, static_cast<int>(device_of(rt, "sim")));
    std::atomic<size_t> wrong{0};
    Kernel check = rt.kernel("check").cpu([&](TaskContext& ctx) {
      auto v = ctx.arg<double>(0);
      const auto i = ctx.param<uint64_t>(0), j = ctx.param<uint64_t>(1);
      wrong += wrong_in_region(g.ta, i, j, v, g.want);
    });
    const uint64_t before = home(rt);
    const uint32_t cpu = device_of(rt, "cpu");
    for (auto [i, j] : {std::pair<size_t, size_t>{0, 0}, {1, 1}, {0, 2}})
      rt.submit(Task(check).read(g.ta(i, j)).param(uint64_t{i}).param(uint64_t{j}).on(cpu));
    rt.wait_all();
    EXPECT_EQ(wrong.load(), 0u);
    EXPECT_LT(home(rt) - before, 6 * kT * kT * sizeof(double));
    g.a.unpartition().get();
    EXPECT_EQ(g.a.to_vector(), g.want);
  }
}

}  // namespace
}  // namespace hcr
