// A small tile kernel inside hcr against the same call outside (issue 31 item 6). One Jacobi sweep
// of a 5-point stencil over an N x N grid cut into T x T tiles, each tile one call of the same
// function: called by hand (one thread, or W threads taking tiles in turn), and as hcr tasks on a
// CPU device with W workers, on arrays the program allocates (the runtime wraps them) and on
// buffers the runtime allocates. Each way has a data set of its own; one sweep of each per round,
// in an order that rotates; per call, the median over every call of every round, taken on the
// thread that runs it (inside hcr: the device's own measurement of the kernel, what the trace and
// busy time show).
//
//   tile_kernel_bench [--n 2048] [--tile 512] [--workers 1] [--rounds 15]
#include <hcr/hcr.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// out = the 5-point average of in over the tile at (r0, c0) of an n x n grid (row stride ld);
// the grid's border keeps its value. Reads one row or column beyond the tile where there is one.
[[gnu::noinline]] void jacobi_tile(const float* in, float* out, size_t ld, size_t n, size_t r0,
                                   size_t c0, size_t rows, size_t cols) {
  for (size_t r = r0; r < r0 + rows; ++r) {
    const float* up = in + (r == 0 ? r : r - 1) * ld;
    const float* mid = in + r * ld;
    const float* down = in + (r + 1 == n ? r : r + 1) * ld;
    float* o = out + r * ld;
    if (r == 0 || r + 1 == n) {
      std::memcpy(o + c0, mid + c0, cols * sizeof(float));
      continue;
    }
    const size_t lo = std::max<size_t>(c0, 1), hi = std::min(c0 + cols, n - 1);
    if (c0 == 0) o[0] = mid[0];
    for (size_t c = lo; c < hi; ++c)
      o[c] = 0.2f * (mid[c] + mid[c - 1] + mid[c + 1] + up[c] + down[c]);
    if (c0 + cols == n) o[n - 1] = mid[n - 1];
  }
}

struct Args {
  size_t n = 2048, tile = 512;
  int workers = 1, rounds = 15;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "tile_kernel_bench: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return std::strtoll(argv[++i], nullptr, 10);
    };
    if (k == "--n") a.n = static_cast<size_t>(value());
    else if (k == "--tile") a.tile = static_cast<size_t>(value());
    else if (k == "--workers") a.workers = static_cast<int>(value());
    else if (k == "--rounds") a.rounds = static_cast<int>(value());
    else {
      std::fprintf(stderr, "tile_kernel_bench: unknown argument '%s'\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.n < 2 || a.tile == 0 || a.tile > a.n || a.n % a.tile != 0 || a.workers < 1 ||
      a.rounds < 1) {
    std::fprintf(stderr,
                 "tile_kernel_bench: need n >= 2, tile dividing n, workers and rounds >= 1\n");
    std::exit(2);
  }
  return a;
}

// One sweep by hand: `workers` threads take tiles in turn, each call timed on its thread.
double sweep_by_hand(const Args& a, const float* in, float* out, std::vector<double>& calls) {
  const size_t grid = a.n / a.tile;
  std::atomic<size_t> next{0};
  std::vector<std::vector<double>> per(static_cast<size_t>(a.workers));
  auto work = [&](size_t w) {
    for (size_t t; (t = next.fetch_add(1)) < grid * grid;) {
      const auto t0 = Clock::now();
      jacobi_tile(in, out, a.n, a.n, (t / grid) * a.tile, (t % grid) * a.tile, a.tile, a.tile);
      per[w].push_back(seconds_since(t0));
    }
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int w = 1; w < a.workers; ++w) threads.emplace_back(work, static_cast<size_t>(w));
  work(0);
  for (auto& t : threads) t.join();
  const double wall = seconds_since(t0);
  for (auto& p : per) calls.insert(calls.end(), p.begin(), p.end());
  return wall;
}

// One sweep as hcr tasks, one per tile: each reads the whole of `in` (it reads beyond its tile)
// and writes its tile of `out`; the tile's corner comes as parameters.
struct HcrGrid {
  hcr::Buffer<float> in, out;
  hcr::Tiles<float> out_tiles;
};

double sweep_in_hcr(hcr::Runtime& rt, hcr::Kernel& k, const Args& a, HcrGrid& g,
                    std::vector<double>& calls) {
  const size_t grid = a.n / a.tile;
  rt.start_trace();
  const auto t0 = Clock::now();
  for (size_t i = 0; i < grid; ++i)
    for (size_t j = 0; j < grid; ++j)
      rt.submit(hcr::Task(k)
                    .read(g.in)
                    .write(g.out_tiles(i, j))
                    .param(static_cast<uint64_t>(i * a.tile))
                    .param(static_cast<uint64_t>(j * a.tile)));
  rt.wait_all();
  const double wall = seconds_since(t0);
  rt.stop_trace();
  for (const hcr::TraceEvent& e : rt.trace_events())
    if (e.kind == hcr::TraceEvent::Kind::task && e.measured > 0) calls.push_back(e.measured);
  return wall;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  hcr::Config c;
  c.use_environment = false;
  c.policy = "eager";
  c.model_dir = "off";
  c.counters = true;  // the device measures each kernel
  c.backends.push_back({"cpu", true, {{"threads", std::to_string(a.workers)}}, "bench"});
  hcr::Runtime rt(c);
  const size_t n = a.n;
  hcr::Kernel k = rt.kernel("jacobi_tile").cpu([n](hcr::TaskContext& ctx) {
    const auto in = ctx.arg<float>(0);
    const auto out = ctx.arg<float>(1);
    const auto r0 = ctx.param<uint64_t>(0), c0 = ctx.param<uint64_t>(1);
    // out is the tile: its element (0, 0) is the grid's (r0, c0), with the grid's row stride.
    jacobi_tile(in.data, out.data - (r0 * out.ld + c0), out.ld, n, r0, c0, out.rows, out.cols);
  });

  // Three data sets of the same size, one per way of running, so that none finds another's data
  // in the cache; the order of the three rotates from round to round.
  std::vector<float> in(n * n), out(n * n), in2, out2(n * n);
  for (size_t i = 0; i < n * n; ++i) in[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000;
  in2 = in;
  HcrGrid wrapped{rt.wrap(in2.data(), n, n), rt.wrap(out2.data(), n, n), {}};
  wrapped.out_tiles = wrapped.out.partition(a.tile, a.tile);
  HcrGrid owned{rt.buffer<float>(n, n), rt.buffer<float>(n, n), {}};
  {
    auto v = owned.in.acquire(hcr::Access::write);
    std::memcpy(v.view().data, in.data(), n * n * sizeof(float));
  }
  owned.out_tiles = owned.out.partition(a.tile, a.tile);

  // Checked once: the tasks compute what the hand-called function does.
  std::vector<double> ignore;
  sweep_by_hand(a, in.data(), out.data(), ignore);
  sweep_in_hcr(rt, k, a, wrapped, ignore);
  if (out2 != out) {
    std::fprintf(stderr, "tile_kernel_bench: the tasks' result differs from the direct call's\n");
    return 1;
  }

  std::vector<double> by_hand, in_hcr, in_hcr_owned, wall_hand, wall_hcr, wall_owned;
  for (int r = 0; r < a.rounds; ++r)
    for (int m = 0; m < 3; ++m) switch ((r + m) % 3) {
        case 0: wall_hand.push_back(sweep_by_hand(a, in.data(), out.data(), by_hand)); break;
        case 1: wall_hcr.push_back(sweep_in_hcr(rt, k, a, wrapped, in_hcr)); break;
        default: wall_owned.push_back(sweep_in_hcr(rt, k, a, owned, in_hcr_owned)); break;
      }
  // One tile called again and again: its data stays in the cache, as in a micro-benchmark of the
  // kernel alone.
  std::vector<double> hot;
  const size_t corner = a.n > a.tile ? a.tile : 0;
  for (int r = 0; r < 10 * a.rounds; ++r) {
    const auto t0 = Clock::now();
    jacobi_tile(in.data(), out.data(), a.n, a.n, corner, corner, a.tile, a.tile);
    hot.push_back(seconds_since(t0));
  }
  const double hand = median(by_hand), inside = median(in_hcr), owned_m = median(in_hcr_owned);
  std::printf("tile_kernel_bench: n=%zu tile=%zu workers=%d rounds=%d (%zu calls each)\n", a.n,
              a.tile, a.workers, a.rounds, by_hand.size());
  std::printf("%-44s %12s %12s\n", "", "per call us", "sweep ms");
  std::printf("%-44s %12.1f\n", "one tile called by hand again and again", median(hot) * 1e6);
  std::printf("%-44s %12.1f %12.3f\n", "called by hand", hand * 1e6, median(wall_hand) * 1e3);
  std::printf("%-44s %12.1f %12.3f\n", "hcr tasks, the program's arrays (wrap)", inside * 1e6,
              median(wall_hcr) * 1e3);
  std::printf("%-44s %12.1f %12.3f\n", "hcr tasks, buffers the runtime allocated", owned_m * 1e6,
              median(wall_owned) * 1e3);
  std::printf("inside/outside per call: %.3f (program's arrays), %.3f (runtime's buffers)\n",
              inside / hand, owned_m / hand);
  return 0;
}
