// What the halo tile tests share (halo_test.cpp on host memory, halo_device_test.cpp on devices
// with their own memory): the box stencil and its plain loop, the tile kernel, stencils submitted
// over halo tiles, in-place sweeps.
#pragma once

#include "../test_support.hpp"

#include <algorithm>
#include <ostream>
#include <vector>

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

inline std::vector<double> reference(std::vector<double> a, size_t n, size_t m, size_t h,
                                     int steps) {
  std::vector<double> b = a;
  for (int s = 0; s < steps; ++s) {
    for (size_t r = h; r + h < n; ++r)
      for (size_t c = h; c + h < m; ++c) b[r * m + c] = box_step(a.data(), m, r, c, h);
    std::swap(a, b);
  }
  return a;
}

inline std::vector<double> start_values(size_t n, size_t m) {
  std::vector<double> v(n * m);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7919) % 101) - 50.0;
  return v;
}

// The tile kernel: argument 0 the input's region (interior and ghosts), argument 1 the output's
// region, of which it writes the interior. Parameters: the ghosts on each side (top, left,
// bottom, right), the interior's first row and column in the grid, the grid's shape, the radius.
inline Kernel box_kernel(Runtime& rt) {
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

// `pin` > 0: tile (i, j) of step `step` goes to device (i + j + step) % pin, so that every tile's
// neighbours and its previous writer are on another device.
inline void submit_step(Runtime& rt, const Kernel& k, const Tiles<double>& in,
                        const Tiles<double>& out, size_t tile_rows, size_t tile_cols, size_t n,
                        size_t m, size_t h, int pin = 0, int step = 0) {
  for (size_t i = 0; i < in.rows(); ++i)
    for (size_t j = 0; j < in.cols(); ++j) {
      const Ghosts g = in.ghosts(i, j);
      Task task(k);
      if (pin > 0) task.on(static_cast<uint32_t>((i + j + static_cast<size_t>(step)) % pin));
      rt.submit(task.read(in(i, j))
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

inline void PrintTo(const StencilCase& c, std::ostream* os) {
  *os << c.n << "x" << c.m << " in " << c.tile_rows << "x" << c.tile_cols << " tiles, halo "
      << c.halo << ", " << c.threads << " threads";
}

// Several Jacobi iterations over halo tiles, ping-pong between two grids, submitted without any
// wait between iterations; returns the last grid, and the reference in `want`.
inline std::vector<double> run_stencil(Runtime& rt, const StencilCase& p, int steps,
                                       std::vector<double>& want, int pin = 0) {
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
  for (int s = 0; s < steps; ++s) {
    if (s % 2 == 0) submit_step(rt, k, ta, tb, p.tile_rows, p.tile_cols, p.n, p.m, p.halo, pin, s);
    else submit_step(rt, k, tb, ta, p.tile_rows, p.tile_cols, p.n, p.m, p.halo, pin, s);
  }
  Event ea = a.unpartition(), eb = b.unpartition();
  eb.get();
  ea.get();
  want = reference(start, p.n, p.m, p.halo, steps);
  return (steps % 2 == 1 ? b : a).to_vector();
}

// In place (read_write of halo tiles, Gauss-Seidel sweeps): tasks that update their tile reading
// the neighbours' edges give the result of running them one by one in submission order. Returns
// the grid, and that order's result in `want`.
constexpr size_t kSweepN = 23, kSweepM = 29, kSweepTr = 6, kSweepTc = 7;

// Each interior element becomes a mix of itself and its four neighbours, in place, row by row.
inline void sweep_block(double* a, size_t ld, size_t rows, size_t cols, size_t row0, size_t col0) {
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) {
      const size_t gr = row0 + r, gc = col0 + c;
      if (gr == 0 || gc == 0 || gr + 1 == kSweepN || gc + 1 == kSweepM) continue;
      double* x = a + r * ld + c;
      *x = 0.25 * *x + 0.2 * (x[-1] + x[1]) + 0.15 * (x[-static_cast<ptrdiff_t>(ld)] + x[ld]);
    }
}

inline std::vector<double> run_sweeps(Runtime& rt, int sweeps, std::vector<double>& want) {
  Kernel gs = rt.kernel("gs").cpu([](TaskContext& ctx) {
    auto a = ctx.arg<double>(0);
    const auto top = ctx.param<uint64_t>(0), left = ctx.param<uint64_t>(1);
    const auto bottom = ctx.param<uint64_t>(2), right = ctx.param<uint64_t>(3);
    sweep_block(a.data + top * a.ld + left, a.ld, a.rows - top - bottom, a.cols - left - right,
                ctx.param<uint64_t>(4), ctx.param<uint64_t>(5));
  });
  want = start_values(kSweepN, kSweepM);
  auto g = rt.buffer<double>(kSweepN, kSweepM);
  {
    auto v = g.acquire(Access::write);
    std::copy(want.begin(), want.end(), v.data());
  }
  Tiles<double> t = g.partition(kSweepTr, kSweepTc, Halo{1});
  for (int s = 0; s < sweeps; ++s)
    for (size_t i = 0; i < t.rows(); ++i)
      for (size_t j = 0; j < t.cols(); ++j) {
        const Ghosts gh = t.ghosts(i, j);
        rt.submit(Task(gs)
                      .read_write(t(i, j))
                      .param(uint64_t{gh.top})
                      .param(uint64_t{gh.left})
                      .param(uint64_t{gh.bottom})
                      .param(uint64_t{gh.right})
                      .param(uint64_t{i * kSweepTr})
                      .param(uint64_t{j * kSweepTc}));
        const size_t r0 = i * kSweepTr, c0 = j * kSweepTc;
        sweep_block(want.data() + r0 * kSweepM + c0, kSweepM, std::min(kSweepTr, kSweepN - r0),
                    std::min(kSweepTc, kSweepM - c0), r0, c0);
      }
  g.unpartition().get();
  return g.to_vector();
}

}  // namespace
}  // namespace hcr
