// What keeping a tile on the same core is worth to a stencil over tiles (issue 31: the halo
// stencil against an OpenMP loop). Iterations of a 5-point Jacobi step over an N x N grid cut into
// T x T tiles, ping-pong between two grids, W threads with a barrier after each iteration, in
// four ways of handing the tiles out (tiles numbered row by row):
//   blocks      thread t takes the t-th contiguous run of tiles every iteration (OpenMP's
//               schedule(static)): it reads what it wrote the iteration before, ghosts included,
//               but for the edges of its run;
//   rotating    the same runs, moved one thread on each iteration: every tile changes core;
//   interleaved thread t takes tiles t, t + W, ... every iteration: its tiles stay, but most
//               ghosts are another core's writes;
//   shared      threads take the next tile from a shared counter (schedule(dynamic, 1), or a
//               runtime placing ready tiles on whichever worker is free).
// No runtime is involved: the figure is the machine's. The three alternate round by round; medians.
//
//   tile_affinity_bench [--n 2048] [--tile 512] [--threads 2] [--iterations 50] [--rounds 7]
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

// out = in + 0.2 * (the 4 neighbours - 4 in) over one tile; the grid's border keeps its value.
[[gnu::noinline]] void heat_tile(const float* in, float* out, size_t n, size_t r0, size_t c0,
                                 size_t rows, size_t cols) {
  for (size_t r = r0; r < r0 + rows; ++r)
    for (size_t c = c0; c < c0 + cols; ++c) {
      const size_t i = r * n + c;
      if (r == 0 || c == 0 || r + 1 == n || c + 1 == n) out[i] = in[i];
      else out[i] = in[i] + 0.2f * (in[i - n] + in[i + n] + in[i - 1] + in[i + 1] - 4.0f * in[i]);
    }
}

enum class Way { blocks, rotating, interleaved, shared };

double run(Way way, std::vector<float>& a, std::vector<float>& b, size_t n, size_t tile,
           int threads, int iterations) {
  const size_t per_side = (n + tile - 1) / tile, tiles = per_side * per_side;
  std::atomic<size_t> next[2] = {0, 0};  // `shared`: one counter per parity, reset a step ahead
  std::barrier sync(threads);
  auto body = [&](int me) {
    for (int it = 0; it < iterations; ++it) {
      const float* in = it % 2 == 0 ? a.data() : b.data();
      float* out = it % 2 == 0 ? b.data() : a.data();
      auto one = [&](size_t k) {
        const size_t r0 = k / per_side * tile, c0 = k % per_side * tile;
        heat_tile(in, out, n, r0, c0, std::min(tile, n - r0), std::min(tile, n - c0));
      };
      if (way == Way::shared) {
        for (size_t k; (k = next[it % 2].fetch_add(1)) < tiles;) one(k);
        if (me == 0) next[(it + 1) % 2] = 0;  // nobody takes from it before the barrier below
      } else if (way == Way::interleaved) {
        for (size_t k = static_cast<size_t>(me); k < tiles; k += static_cast<size_t>(threads))
          one(k);
      } else {
        const size_t run =
            way == Way::blocks ? static_cast<size_t>(me) : static_cast<size_t>((me + it) % threads);
        const size_t w = static_cast<size_t>(threads);
        for (size_t k = tiles * run / w; k < tiles * (run + 1) / w; ++k) one(k);
      }
      sync.arrive_and_wait();
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  body(0);
  for (std::thread& t : pool) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  long n = 2048, tile = 512, threads = 2, iterations = 50, rounds = 7;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    long* target = a == "--n"            ? &n
                   : a == "--tile"       ? &tile
                   : a == "--threads"    ? &threads
                   : a == "--iterations" ? &iterations
                   : a == "--rounds"     ? &rounds
                                         : nullptr;
    char* end = nullptr;
    const long v = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
    if (target == nullptr || i + 1 >= argc || *end != '\0' || v < 1 || v > 1'000'000) {
      std::fprintf(stderr,
                   "usage: %s [--n 2048] [--tile 512] [--threads 2] [--iterations 50] "
                   "[--rounds 7] (whole numbers from 1)\n",
                   argv[0]);
      return 2;
    }
    *target = v;
  }
  if (n < 3 || tile > n || threads > 256) {
    std::fprintf(stderr, "--n must be at least 3, --tile at most --n, --threads at most 256\n");
    return 2;
  }
  const size_t un = static_cast<size_t>(n);
  std::vector<float> a(un * un), b(un * un);
  const Way ways[] = {Way::blocks, Way::rotating, Way::interleaved, Way::shared};
  const char* names[] = {"blocks", "rotating", "interleaved", "shared"};
  std::vector<double> t[4];
  for (long r = 0; r < rounds; ++r)
    for (int w = 0; w < 4; ++w) {
      for (size_t i = 0; i < a.size(); ++i) a[i] = b[i] = static_cast<float>(i % 97);
      t[w].push_back(run(ways[w], a, b, un, static_cast<size_t>(tile), static_cast<int>(threads),
                         static_cast<int>(iterations)));
    }
  std::printf("%ld x %ld grid, %ld x %ld tiles, %ld threads, %ld iterations, medians of %ld\n", n,
              n, tile, tile, threads, iterations, rounds);
  const double own = median(t[0]);
  for (int w = 0; w < 4; ++w)
    std::printf("%-11s %8.1f ms  %.2fx the blocks' time\n", names[w], median(t[w]) * 1e3,
                median(t[w]) / own);
}
