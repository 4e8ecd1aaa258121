// Halo tiles on devices with their own memory (simulated devices that compute for real, alone or
// beside the CPU; OpenCL through PoCL where found), where only ghost edges move: stencils against a
// plain loop, bytes moved, prefetch, eviction, write-back, host views, ordering, replays.
#include "halo_support.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <ostream>
#include <thread>

namespace hcr {
namespace {

// ---- devices with their own memory ------------------------------------------------------------
//
// There a halo tile is a region-sized copy: its interior is its own data, its ghost edges are
// copied in from the neighbours' valid copies when they changed (data/ghosts.hpp).

using Options = std::vector<std::pair<std::string, std::string>>;

// `own` simulated devices with their own memory that run the CPU kernels for real (time scaled
// far down), and `cpu_threads` CPU workers beside them (0: none), under `policy`.
Config own_memory_machine(int own, int cpu_threads, std::string policy,
                          const char* memory = "8GiB") {
  Config c;
  c.use_environment = false;
  c.model_dir = "off";
  c.policy = std::move(policy);
  Options o{{"compute", "true"}, {"time_scale", "0.01"}, {"seed", "7"}};
  for (int i = 0; i < own; ++i) {
    const std::string d = "device." + std::to_string(i) + ".";
    o.push_back({d + "name", "gpu" + std::to_string(i)});
    o.push_back({d + "host_memory", "false"});
    o.push_back({d + "concurrency", "2"});
    o.push_back({d + "memory", memory});
  }
  c.backends.push_back({"sim", true, std::move(o), "test"});
  if (cpu_threads > 0)
    c.backends.push_back({"cpu", true, {{"threads", std::to_string(cpu_threads)}}, "test"});
  return c;
}

// The machines: one device of its own memory alone; two of them beside CPU workers, tasks spread
// at random (ghosts between the devices, and between them and host memory); two of them, each
// tile's task on the other device than its neighbours' and its previous writer's.
enum class Machine { one_device, two_devices_and_cpu, two_devices_alternating, alternating_peft };

Config machine_config(Machine m) {
  switch (m) {
    case Machine::one_device: return own_memory_machine(1, 0, "eager");
    case Machine::two_devices_and_cpu: return own_memory_machine(2, 2, "random");
    case Machine::two_devices_alternating: break;
    // peft explores a kernel on one device at a time: the tasks pinned to the other device wait
    // parked until the exploration ends, and must then be taken (they once never were).
    case Machine::alternating_peft: return own_memory_machine(2, 0, "peft");
  }
  return own_memory_machine(2, 0, "dmda");
}

struct DeviceCase {
  Machine machine;
  StencilCase shape;
};

void PrintTo(const DeviceCase& c, std::ostream* os) {
  *os << (c.machine == Machine::one_device            ? "one device: "
          : c.machine == Machine::two_devices_and_cpu ? "two devices and the CPU: "
          : c.machine == Machine::alternating_peft    ? "two devices, alternating, peft: "
                                                      : "two devices, alternating: ");
  *os << c.shape.n << "x" << c.shape.m << " in " << c.shape.tile_rows << "x" << c.shape.tile_cols
      << " tiles, halo " << c.shape.halo;
}

class HaloStencilOnDevices : public ::testing::TestWithParam<DeviceCase> {};

TEST_P(HaloStencilOnDevices, IterationsMatchAPlainLoop) {
  const DeviceCase p = GetParam();
  Runtime rt(machine_config(p.machine));
  std::vector<double> want;
  const int pin =
      p.machine == Machine::two_devices_alternating || p.machine == Machine::alternating_peft ? 2
                                                                                              : 0;
  EXPECT_EQ(run_stencil(rt, p.shape, 7, want, pin), want);
  // The devices ran tasks: the data went there and came back.
  EXPECT_GT(rt.stats().data.bytes_moved(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HaloStencilOnDevices,
    ::testing::Values(DeviceCase{Machine::one_device, {32, 32, 8, 8, 1, 0}},
                      DeviceCase{Machine::one_device, {37, 45, 8, 10, 2, 0}},
                      DeviceCase{Machine::one_device, {40, 40, 4, 4, 4, 0}},
                      DeviceCase{Machine::two_devices_and_cpu, {37, 45, 8, 10, 1, 0}},
                      DeviceCase{Machine::two_devices_and_cpu, {37, 45, 8, 10, 2, 0}},
                      DeviceCase{Machine::two_devices_and_cpu, {30, 20, 30, 7, 3, 0}},
                      DeviceCase{Machine::two_devices_alternating, {37, 45, 8, 10, 1, 0}},
                      DeviceCase{Machine::two_devices_alternating, {40, 40, 4, 4, 4, 0}},
                      DeviceCase{Machine::alternating_peft, {37, 45, 8, 10, 1, 0}}));

TEST(HaloTilesOnDevices, InPlaceSweepsRunAsIfInSubmissionOrder) {
  for (Machine m : {Machine::one_device, Machine::two_devices_and_cpu}) {
    SCOPED_TRACE(m == Machine::one_device ? "one device" : "two devices and the CPU");
    Runtime rt(machine_config(m));
    std::vector<double> want;
    EXPECT_EQ(run_sweeps(rt, 4, want), want);
  }
}

// Bytes into and out of the device's memory, from the data manager's counters.
struct Moved {
  uint64_t in = 0, out = 0;
};
Moved moved(const Runtime& rt) {
  Moved m;
  for (const LinkCounters& l : rt.stats().data.links) {
    if (l.to != 0) m.in += l.bytes;  // from host memory, or within the device
    else m.out += l.bytes;
  }
  return m;
}

// Only ghost edges move between the steps: into the device go the first grid's interiors once
// and, per step, each tile's ghost edges (its region less its interior), every neighbour having
// changed; home come the two grids' interiors once, at the end. Whole regions would be more in
// both directions, and a region copied home would write the neighbours' edges over.
TEST(HaloTilesOnDevices, OnlyGhostEdgesMove) {
  constexpr size_t kN = 40, kM = 36, kTr = 8, kTc = 12, kH = 2;
  constexpr int kSteps = 5;
  Runtime rt(own_memory_machine(1, 0, "eager"));
  std::vector<double> want;
  const std::vector<double> got = run_stencil(rt, {kN, kM, kTr, kTc, kH, 0}, kSteps, want);
  EXPECT_EQ(got, want);
  uint64_t ghost_elements = 0;  // per step: every tile's region less its interior
  auto grid = rt.buffer<double>(kN, kM);
  Tiles<double> t = grid.partition(kTr, kTc, Halo{kH});
  for (size_t i = 0; i < t.rows(); ++i)
    for (size_t j = 0; j < t.cols(); ++j) {
      const Ghosts g = t.ghosts(i, j);
      const size_t rows = t(i, j).rows(), cols = t(i, j).cols();
      ghost_elements += rows * cols - (rows - g.top - g.bottom) * (cols - g.left - g.right);
    }
  const Moved m = moved(rt);
  EXPECT_EQ(m.in, (kN * kM + kSteps * ghost_elements) * sizeof(double));
  EXPECT_EQ(m.out, 2 * kN * kM * sizeof(double));
}

// A step whose inputs did not change moves nothing at all: the ghosts hold the neighbours'
// current versions already.
TEST(HaloTilesOnDevices, UnchangedNeighboursAreNotCopiedAgain) {
  Runtime rt(own_memory_machine(1, 0, "eager"));
  auto g = rt.buffer<double>(16, 16);
  Tiles<double> t = g.partition(8, 8, Halo{1});
  Kernel look = rt.kernel("look").cpu([](TaskContext&) {});
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j) rt.submit(Task(look).read(t(i, j)));
  rt.wait_all();
  const Moved first = moved(rt);
  // The interiors and, per tile, 2 edges of 8 and a corner: (16 * 16 + 4 * 17) doubles.
  EXPECT_EQ(first.in, (16 * 16 + 4 * 17) * sizeof(double));
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j) rt.submit(Task(look).read(t(i, j)));
  rt.wait_all();
  EXPECT_EQ(moved(rt).in, first.in);
  g.unpartition().get();
}

// Tasks placed on a device whose slots are busy: prefetch moves each tile's interior there and its
// ghost edges too (interiors plus, per tile, 2 edges of 8 and a corner: (16 * 16 + 4 * 17)
// doubles, as acquire would), so every task then finds its tile current, ghosts and all: hits, no
// miss. Edges left to acquire would be misses, the tasks waiting for them.
TEST(HaloTilesOnDevices, PrefetchRefreshesTheGhostEdges) {
  Config c = own_memory_machine(1, 0, "random");  // placed when ready, so prefetched then
  c.lookahead = 0;  // the device takes no task while its two slots are busy
  c.backends[0].options.push_back({"workers", "4"});  // the simulator copies while they are
  Runtime rt(c);
  auto g = rt.buffer<double>(16, 16);
  g.acquire(Access::write);  // valid in host memory
  Tiles<double> t = g.partition(8, 8, Halo{1});
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  Kernel hold = rt.kernel("hold").cpu(
      [](TaskContext& ctx) { ctx.param<std::shared_future<void>*>(0)->wait(); });
  auto x = rt.vector<double>(1), y = rt.vector<double>(1);
  Event h1 = rt.submit(Task(hold).write(x).param(&gate).on(0));
  Event h2 = rt.submit(Task(hold).write(y).param(&gate).on(0));
  Kernel look = rt.kernel("look").cpu([](TaskContext&) {});
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j) rt.submit(Task(look).read(t(i, j)));
  const uint64_t want = (16 * 16 + 4 * 17) * sizeof(double);
  // The copies are asynchronous: wait (bounded) for them to land while the slots stay busy.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (moved(rt).in < want && std::chrono::steady_clock::now() < give_up)
    std::this_thread::yield();
  EXPECT_EQ(moved(rt).in, want) << "prefetch moved the interiors but not every ghost edge";
  const DataCounters before = rt.stats().data;
  open.set_value();
  h1.get();
  h2.get();
  rt.wait_all();
  const DataCounters after = rt.stats().data;
  EXPECT_EQ(after.misses - before.misses, 0u);
  EXPECT_EQ(after.hits - before.hits, 4u);
  EXPECT_EQ(moved(rt).in, want);  // nothing moved twice
  g.unpartition().get();
}

// Eager write-back copies each task's results home as it ends: the interiors only (a region would
// write the neighbours' edges over with the stale ghosts), one grid's per step, and nothing is left
// to bring home at the end.
TEST(HaloTilesOnDevices, EagerWriteBackBringsInteriorsHome) {
  constexpr size_t kN = 40, kM = 36;
  constexpr int kSteps = 4;
  Config c = own_memory_machine(1, 0, "eager");
  c.writeback = "eager";
  Runtime rt(c);
  std::vector<double> want;
  EXPECT_EQ(run_stencil(rt, {kN, kM, 8, 12, 2, 0}, kSteps, want), want);
  EXPECT_EQ(moved(rt).out, kSteps * kN * kM * sizeof(double));
}

// A device too small for the grids: tiles are evicted (their interiors written home when only
// the device held them) and fetched again, their ghosts refilled; the result is the same.
TEST(HaloTilesOnDevices, EvictionKeepsTheStencilExact) {
  // 10 regions of at most 10 x 14 doubles (1120 bytes) fit, of the grids' 30; a task holds two.
  Runtime rt(own_memory_machine(1, 0, "eager", "12000B"));
  std::vector<double> want;
  EXPECT_EQ(run_stencil(rt, {40, 36, 8, 12, 1, 0}, 5, want), want);
  EXPECT_GT(rt.stats().data.evictions, 0u);
}

// A device smaller than its window of tasks needs (7000 bytes: 6 regions of at most 1120 bytes,
// a task holds two, the device runs two and takes more ahead): the tasks run fewer at a time, the
// result is the same. It hung most runs: the tasks waiting for room held the window, so those
// whose copies had landed, pinning the room they waited for, never started.
TEST(HaloTilesOnDevices, ADeviceSmallerThanItsWindowRunsTheStencilExactly) {
  Runtime rt(own_memory_machine(1, 0, "eager", "7000B"));
  std::vector<double> want;
  EXPECT_EQ(run_stencil(rt, {40, 36, 8, 12, 1, 0}, 5, want), want);
  EXPECT_GT(rt.stats().data.evictions, 0u);
}

// A ping-pong pair of stencil steps over halo tiles, recorded once and replayed without a wait, on
// devices with their own memory (one device; two, each tile's task on the other device than its
// neighbours' and its previous writer's): each replayed task's ghosts are refreshed where it runs,
// and the grid is the plain loop's, exactly.
TEST(HaloTilesOnDevices, ReplayedStencilMatchesAPlainLoop) {
  for (Machine machine : {Machine::one_device, Machine::two_devices_alternating}) {
    SCOPED_TRACE(machine == Machine::one_device ? "one device" : "two devices, alternating");
    Runtime rt(machine_config(machine));
    const StencilCase p{37, 45, 8, 10, 1, 0};
    const int pin = machine == Machine::one_device ? 0 : 2;
    constexpr int kReplays = 4;
    Kernel k = box_kernel(rt);
    const std::vector<double> start = start_values(p.n, p.m);
    auto a = rt.buffer<double>(p.n, p.m), b = rt.buffer<double>(p.n, p.m);
    {
      auto va = a.acquire(Access::write), vb = b.acquire(Access::write);
      std::copy(start.begin(), start.end(), va.data());
      std::copy(start.begin(), start.end(), vb.data());
    }
    Tiles<double> ta = a.partition(p.tile_rows, p.tile_cols, Halo{p.halo});
    Tiles<double> tb = b.partition(p.tile_rows, p.tile_cols, Halo{p.halo});
    rt.begin_recording();
    submit_step(rt, k, ta, tb, p.tile_rows, p.tile_cols, p.n, p.m, p.halo, pin, 0);
    submit_step(rt, k, tb, ta, p.tile_rows, p.tile_cols, p.n, p.m, p.halo, pin, 1);
    Graph g = rt.end_recording();
    EXPECT_EQ(g.tasks(), 2 * ta.rows() * ta.cols());
    for (int i = 0; i < kReplays; ++i) g.replay();
    Event ea = a.unpartition(), eb = b.unpartition();
    ea.get();
    eb.get();
    EXPECT_EQ(a.to_vector(), reference(start, p.n, p.m, p.halo, 2 * (kReplays + 1)));
    EXPECT_EQ(rt.stats().failed, 0u);
    EXPECT_GT(moved(rt).in, 0u);  // the devices ran them
  }
}

// A kernel that writes `value` into the interior of its tile (arguments: the tile; parameters:
// ghosts top and left, interior rows and columns, the value).
Kernel fill_interior(Runtime& rt) {
  return rt.kernel("fill_interior").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<double>(0);
    const auto top = ctx.param<uint64_t>(0), left = ctx.param<uint64_t>(1);
    const auto rows = ctx.param<uint64_t>(2), cols = ctx.param<uint64_t>(3);
    const auto value = ctx.param<double>(4);
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) v(top + r, left + c) = value;
  });
}

// Written on the device, read on the host: a host view of a tile sees its neighbours' device
// writes in its ghosts, and the unpartitioned grid holds every tile's (no tile's copy home wrote
// stale ghosts over a neighbour).
TEST(HaloTilesOnDevices, HostViewsSeeTheNeighboursDeviceWrites) {
  Runtime rt(own_memory_machine(1, 0, "eager"));
  auto g = rt.buffer<double>(4, 12);
  Tiles<double> t = g.partition(4, 4, Halo{1});  // 1 x 3 tiles: regions 4x5, 4x6, 4x5
  Kernel fill = fill_interior(rt);
  for (size_t j = 0; j < 3; ++j) {
    const Ghosts gh = t.ghosts(0, j);
    rt.submit(Task(fill)
                  .write(t(0, j))
                  .param(uint64_t{gh.top})
                  .param(uint64_t{gh.left})
                  .param(uint64_t{4})
                  .param(uint64_t{4})
                  .param(static_cast<double>(j + 1)));
  }
  {
    auto v = t(0, 1).acquire(Access::read);  // its ghosts: tile 0's last, tile 2's first column
    for (size_t r = 0; r < 4; ++r) {
      EXPECT_EQ(v(r, 0), 1.0);
      EXPECT_EQ(v(r, 1), 2.0);
      EXPECT_EQ(v(r, 5), 3.0);
    }
  }
  // Now a read of tile 1 on the device after tile 0 was written on the host: its ghost follows.
  {
    auto v = t(0, 0).acquire(Access::read_write);
    for (size_t r = 0; r < 4; ++r) v(r, 3) = 9.0;
  }
  std::promise<std::vector<double>> seen;
  Kernel look = rt.kernel("look_left").cpu([&](TaskContext& ctx) {
    auto v = ctx.arg<double>(0);
    std::vector<double> ghost;
    for (size_t r = 0; r < v.rows; ++r) ghost.push_back(v(r, 0));
    seen.set_value(ghost);
  });
  rt.submit(Task(look).read(t(0, 1))).get();
  EXPECT_EQ(seen.get_future().get(), std::vector<double>(4, 9.0));
  g.unpartition().get();
  const std::vector<double> all = g.to_vector();
  for (size_t r = 0; r < 4; ++r)
    for (size_t c = 0; c < 12; ++c)
      EXPECT_EQ(all[r * 12 + c], c == 3 ? 9.0 : static_cast<double>(c / 4 + 1)) << r << "," << c;
}

// The order holds on a device too: a reader held on the device sees the neighbour's edge from
// before the writer submitted after it, and a reader after that writer sees the new edge.
TEST(HaloTilesOnDevices, ReadsAreOrderedWithTheNeighboursWrites) {
  Runtime rt(own_memory_machine(1, 0, "eager"));
  auto g = rt.buffer<double>(4, 8);
  Tiles<double> t = g.partition(4, 4, Halo{1});  // 1 x 2 tiles: regions 4x5 and 4x5
  Kernel fill = fill_interior(rt);
  auto fill_task = [&](double value) {
    const Ghosts gh = t.ghosts(0, 1);
    Task task(fill);
    task.write(t(0, 1)).param(uint64_t{gh.top}).param(uint64_t{gh.left});
    task.param(uint64_t{4}).param(uint64_t{4}).param(value);
    return task;
  };
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  std::vector<std::promise<std::vector<double>>> seen(2);
  Kernel look = rt.kernel("look_right").cpu([](TaskContext& ctx) {
    ctx.param<std::shared_future<void>*>(0)->wait();
    auto* out = ctx.param<std::promise<std::vector<double>>*>(1);
    auto v = ctx.arg<double>(0);
    std::vector<double> ghost;
    for (size_t r = 0; r < v.rows; ++r) ghost.push_back(v(r, v.cols - 1));
    out->set_value(ghost);
  });
  std::shared_future<void> open_now = [] {
    std::promise<void> p;
    p.set_value();
    return p.get_future().share();
  }();
  rt.submit(fill_task(5.0));
  Event r1 = rt.submit(Task(look).read(t(0, 0)).param(&gate).param(&seen[0]));
  Event w = rt.submit(fill_task(6.0));
  Event r2 = rt.submit(Task(look).read(t(0, 0)).param(&open_now).param(&seen[1]));
  EXPECT_FALSE(w.ready());  // waits for the held reader of its edge
  open.set_value();
  r1.get();
  w.get();
  r2.get();
  EXPECT_EQ(seen[0].get_future().get(), std::vector<double>(4, 5.0));
  EXPECT_EQ(seen[1].get_future().get(), std::vector<double>(4, 6.0));
  g.unpartition().get();
}

// ---- OpenCL (PoCL's CPU device is enough; skipped where no OpenCL device is found) ------------

// An integer box stencil, exact on any device: `ibox_step` for the host, the same in OpenCL C
// over a tile's packed region (one work item per interior element).
inline int64_t ibox_step(const int64_t* a, size_t ld, size_t r, size_t c, size_t h) {
  int64_t sum = 0;
  for (size_t dr = 0; dr <= 2 * h; ++dr)
    for (size_t dc = 0; dc <= 2 * h; ++dc) sum += a[(r + dr - h) * ld + (c + dc - h)];
  return (3 * a[r * ld + c] + sum) % 1000003;
}

const char* kHaloCl = R"CL(
__kernel void ibox(__global const long* a, __global long* b, ulong top, ulong left, ulong bottom,
                   ulong right, ulong row0, ulong col0, ulong n, ulong m, ulong h) {
  const ulong c = get_global_id(0), r = get_global_id(1);
  const ulong ld = left + get_global_size(0) + right;
  const ulong i = (top + r) * ld + left + c;
  const ulong gr = row0 + r, gc = col0 + c;
  if (gr < h || gc < h || gr + h >= n || gc + h >= m) {
    b[i] = a[i];
    return;
  }
  long sum = 0;
  for (ulong dr = 0; dr <= 2 * h; ++dr)
    for (ulong dc = 0; dc <= 2 * h; ++dc) sum += a[(top + r + dr - h) * ld + left + c + dc - h];
  b[i] = (3 * a[i] + sum) % 1000003;
}
// Gauss-Seidel in place, one work item walking the interior row by row.
__kernel void igs(__global long* a, ulong top, ulong left, ulong rows, ulong cols, ulong ld,
                  ulong row0, ulong col0, ulong n, ulong m) {
  for (ulong r = 0; r < rows; ++r)
    for (ulong c = 0; c < cols; ++c) {
      const ulong gr = row0 + r, gc = col0 + c;
      if (gr == 0 || gc == 0 || gr + 1 == n || gc + 1 == m) continue;
      const ulong i = (top + r) * ld + left + c;
      a[i] = (2 * a[i] + a[i - 1] + a[i + 1] + a[i - ld] + a[i + ld]) % 1000003;
    }
}
)CL";

Config opencl_machine(bool with_sim) {
  Config c;
  c.use_environment = false;
  c.model_dir = "off";
  c.policy = with_sim ? "random" : "eager";
  c.backends.push_back(
      {"opencl", true, {{"device_types", "cpu,gpu,accelerator"}, {"cache_dir", ""}}, "test"});
  if (with_sim) {
    Config s = own_memory_machine(1, 0, "random");
    c.backends.push_back(s.backends[0]);
  }
  return c;
}

bool has_opencl(const Runtime& rt) {
  for (const Device& d : rt.devices())
    if (d.backend == "opencl") return true;
  return false;
}

std::vector<int64_t> istart(size_t n, size_t m) {
  std::vector<int64_t> v(n * m);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7919) % 1009);
  return v;
}

// One step of the integer stencil (kHaloCl's ibox) over n x m: a task per tile of `in` (tiles of
// tr x tc, halo h) writing the same tile of `out`, one work item per element it computes.
void submit_ibox_step(Runtime& rt, const Kernel& k, const Tiles<int64_t>& in,
                      const Tiles<int64_t>& out, size_t tr, size_t tc, size_t n, size_t m,
                      size_t h) {
  for (size_t i = 0; i < in.rows(); ++i)
    for (size_t j = 0; j < in.cols(); ++j) {
      const Ghosts g = in.ghosts(i, j);
      Task task(k);
      task.read(in(i, j)).write(out(i, j));
      for (size_t v : {g.top, g.left, g.bottom, g.right, i * tr, j * tc, n, m, h})
        task.param(uint64_t{v});
      task.grid(in(i, j).cols() - g.left - g.right, in(i, j).rows() - g.top - g.bottom);
      rt.submit(task);
    }
}

// The same `steps` steps as a plain loop over `grid`, its border of width h left as it is.
std::vector<int64_t> ibox_loop(std::vector<int64_t> grid, size_t n, size_t m, size_t h, int steps) {
  std::vector<int64_t> next = grid;
  for (int s = 0; s < steps; ++s) {
    for (size_t r = h; r + h < n; ++r)
      for (size_t c = h; c + h < m; ++c) next[r * m + c] = ibox_step(grid.data(), m, r, c, h);
    std::swap(grid, next);
  }
  return grid;
}

// Iterations of the integer stencil over halo tiles on the OpenCL device (alone, or beside a
// simulated device of another plugin, tasks spread at random: edges then cross through host
// memory) equal the plain loop.
TEST(HaloTilesOnOpenCL, StencilIterationsMatchAPlainLoop) {
  for (bool with_sim : {false, true}) {
    SCOPED_TRACE(with_sim ? "OpenCL and a simulated device" : "OpenCL alone");
    Runtime rt(opencl_machine(with_sim));
    if (!has_opencl(rt)) GTEST_SKIP() << "no OpenCL device";
    constexpr size_t kN = 37, kM = 45, kTr = 8, kTc = 10, kH = 2;
    constexpr int kSteps = 6;
    Kernel k = rt.kernel("ibox")
                   .cpu([](TaskContext& ctx) {
                     auto a = ctx.arg<int64_t>(0);
                     auto b = ctx.arg<int64_t>(1);
                     const auto top = ctx.param<uint64_t>(0), left = ctx.param<uint64_t>(1);
                     const auto bottom = ctx.param<uint64_t>(2), right = ctx.param<uint64_t>(3);
                     const auto row0 = ctx.param<uint64_t>(4), col0 = ctx.param<uint64_t>(5);
                     const auto n = ctx.param<uint64_t>(6), m = ctx.param<uint64_t>(7);
                     const auto h = ctx.param<uint64_t>(8);
                     for (size_t r = top; r + bottom < a.rows; ++r)
                       for (size_t c = left; c + right < a.cols; ++c) {
                         const size_t gr = row0 + r - top, gc = col0 + c - left;
                         if (gr < h || gc < h || gr + h >= n || gc + h >= m) b(r, c) = a(r, c);
                         else b(r, c) = ibox_step(a.data, a.ld, r, c, h);
                       }
                   })
                   .source("opencl", kHaloCl);
    std::vector<int64_t> want = istart(kN, kM);
    auto a = rt.buffer<int64_t>(kN, kM), b = rt.buffer<int64_t>(kN, kM);
    {
      auto va = a.acquire(Access::write), vb = b.acquire(Access::write);
      std::copy(want.begin(), want.end(), va.data());
      std::copy(want.begin(), want.end(), vb.data());
    }
    Tiles<int64_t> ta = a.partition(kTr, kTc, Halo{kH}), tb = b.partition(kTr, kTc, Halo{kH});
    for (int s = 0; s < kSteps; ++s)
      submit_ibox_step(rt, k, s % 2 == 0 ? ta : tb, s % 2 == 0 ? tb : ta, kTr, kTc, kN, kM, kH);
    a.unpartition().get();
    b.unpartition().get();
    want = ibox_loop(want, kN, kM, kH, kSteps);
    EXPECT_EQ((kSteps % 2 == 1 ? b : a).to_vector(), want);
    uint64_t on_opencl = 0;
    const RuntimeStats st = rt.stats();
    for (const Device& d : rt.devices())
      if (d.backend == "opencl") on_opencl += st.devices[d.id].tasks;
    EXPECT_GT(on_opencl, 0u);
  }
}

// The OpenCL stencil's two steps recorded once and replayed twice on the OpenCL device alone: the
// grid after six steps is the plain loop's, exactly.
TEST(HaloTilesOnOpenCL, ReplayedStencilMatchesAPlainLoop) {
  Runtime rt(opencl_machine(false));
  if (!has_opencl(rt)) GTEST_SKIP() << "no OpenCL device";
  constexpr size_t kN = 37, kM = 45, kTr = 8, kTc = 10, kH = 2;
  constexpr int kReplays = 2;
  Kernel k = rt.kernel("ibox").source("opencl", kHaloCl);
  std::vector<int64_t> want = istart(kN, kM);
  auto a = rt.buffer<int64_t>(kN, kM), b = rt.buffer<int64_t>(kN, kM);
  {
    auto va = a.acquire(Access::write), vb = b.acquire(Access::write);
    std::copy(want.begin(), want.end(), va.data());
    std::copy(want.begin(), want.end(), vb.data());
  }
  Tiles<int64_t> ta = a.partition(kTr, kTc, Halo{kH}), tb = b.partition(kTr, kTc, Halo{kH});
  rt.begin_recording();
  submit_ibox_step(rt, k, ta, tb, kTr, kTc, kN, kM, kH);
  submit_ibox_step(rt, k, tb, ta, kTr, kTc, kN, kM, kH);
  Graph graph = rt.end_recording();
  for (int r = 0; r < kReplays; ++r) graph.replay();
  a.unpartition().get();
  b.unpartition().get();
  want = ibox_loop(want, kN, kM, kH, 2 * (kReplays + 1));
  EXPECT_EQ(a.to_vector(), want);
  EXPECT_EQ(rt.stats().failed, 0u);
}

// Gauss-Seidel sweeps in place on the OpenCL device equal the sequential order.
TEST(HaloTilesOnOpenCL, InPlaceSweepsRunAsIfInSubmissionOrder) {
  Runtime rt(opencl_machine(false));
  if (!has_opencl(rt)) GTEST_SKIP() << "no OpenCL device";
  constexpr size_t kN = 23, kM = 29, kTr = 6, kTc = 7;
  Kernel gs = rt.kernel("igs").source("opencl", kHaloCl);
  std::vector<int64_t> want = istart(kN, kM);
  auto g = rt.buffer<int64_t>(kN, kM);
  {
    auto v = g.acquire(Access::write);
    std::copy(want.begin(), want.end(), v.data());
  }
  Tiles<int64_t> t = g.partition(kTr, kTc, Halo{1});
  for (int s = 0; s < 3; ++s)
    for (size_t i = 0; i < t.rows(); ++i)
      for (size_t j = 0; j < t.cols(); ++j) {
        const Ghosts gh = t.ghosts(i, j);
        const size_t rows = t(i, j).rows() - gh.top - gh.bottom;
        const size_t cols = t(i, j).cols() - gh.left - gh.right;
        Task task(gs);
        task.read_write(t(i, j));
        for (size_t v : {gh.top, gh.left, rows, cols, t(i, j).cols(), i * kTr, j * kTc, kN, kM})
          task.param(uint64_t{v});
        rt.submit(task.grid(1));           // one work item walks the tile
        for (size_t r = 0; r < rows; ++r)  // the same on the host, in submission order
          for (size_t c = 0; c < cols; ++c) {
            const size_t gr = i * kTr + r, gc = j * kTc + c;
            if (gr == 0 || gc == 0 || gr + 1 == kN || gc + 1 == kM) continue;
            int64_t* x = want.data() + gr * kM + gc;
            *x = (2 * *x + x[-1] + x[1] + x[-static_cast<ptrdiff_t>(kM)] + x[kM]) % 1000003;
          }
      }
  g.unpartition().get();
  EXPECT_EQ(g.to_vector(), want);
}

}  // namespace
}  // namespace hcr
