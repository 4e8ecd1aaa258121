// A 2-D heat diffusion stencil over halo tiles: each tile's task reads its region (the tile and one
// ghost row and column of each neighbour) and writes its tile of the next grid. The same tile
// kernel, looped by hand with OpenMP, is the baseline: both run in turn, several times, and the
// medians are printed with their ratio. The results must be equal, element for element.
//
//   build/bin/stencil [--mode=replay|submit|both] [--placement=blocks|any] [n=2048] [tile=512]
//                     [iterations=100] [runs=5]
//
// --mode: how the iterations reach the runtime. `replay` (the default) records a ping-pong pair of
// iterations once (hcr::Runtime::begin_recording, end_recording) and replays the graph for the
// rest; `submit` submits every task of every iteration; `both` times the two against OpenMP.
//
// --placement: `blocks` (the default) makes the CPU one device per thread (the cpu backend's
// `partitions`, each on its own core) and pins each thread's contiguous run of tiles to it, as
// OpenMP's schedule(static) hands them out: a tile's ghosts are then mostly its own core's writes.
// `any` leaves the tasks to the policy on one CPU device of all the threads, where any worker runs
// any tile. By hand, on the 2-core development machine, threads whose tiles' ghosts another core
// wrote swept 1.2-1.35x slower (bench/tile_affinity_bench); through hcr the two placements were
// within noise of each other on a quiet machine, and `blocks` the steadier on a loaded one.
//
// The kernel has a CPU implementation and an OpenCL C one. The timed stencil runs on the CPU
// backend; where an OpenCL device is found (PoCL's CPU device counts), the same iterations run over
// halo tiles there too, in the device's own memory (only changed ghost edges move between tasks),
// and its grid must equal the OpenMP loop's, element for element.
#include <hcr/hcr.hpp>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr float kDiffusion = 0.2f;

// The tile kernel: one explicit step of the heat equation on a rows x cols block whose element
// (0, 0) is `a` (and `b`), with the rows above and below and the columns left and right readable
// (ghosts, or the neighbouring elements of the whole grid). (row0, col0) is the block's place in
// the n x n grid, whose border keeps its values. Kept out of line, so that the tasks and the OpenMP
// loop run the same machine code (inlined, the compiler vectorises the two callers differently:
// bench/tile_kernel_bench measured 4-18%).
[[gnu::noinline]] void heat_block(const float* a, size_t lda, float* b, size_t ldb, size_t rows,
                                  size_t cols, size_t row0, size_t col0, size_t n) {
  for (size_t r = 0; r < rows; ++r) {
    const float* in = a + r * lda;
    float* out = b + r * ldb;
    const size_t gr = row0 + r;
    if (gr == 0 || gr + 1 == n) {
      std::copy(in, in + cols, out);
      continue;
    }
    for (size_t c = 0; c < cols; ++c) {
      const size_t gc = col0 + c;
      if (gc == 0 || gc + 1 == n) out[c] = in[c];
      else
        out[c] =
            in[c] + kDiffusion * (in[c - lda] + in[c + lda] + in[c - 1] + in[c + 1] - 4.0f * in[c]);
    }
  }
}

// The same in OpenCL C. On a device a buffer is packed: the region's row stride is its width,
// left + cols + right, with one work item per interior element (Task::grid(cols, rows)). No
// contraction of a * b + c into one rounding: the grid must equal the CPU's, element for element.
const char* kHeatCl = R"CL(
#pragma OPENCL FP_CONTRACT OFF
__kernel void heat(__global const float* a, __global float* b, ulong top, ulong left,
                   ulong bottom, ulong right, ulong row0, ulong col0, ulong n) {
  const ulong c = get_global_id(0), r = get_global_id(1);
  const ulong ld = left + get_global_size(0) + right;
  const ulong i = (top + r) * ld + left + c;
  const ulong gr = row0 + r, gc = col0 + c;
  if (gr == 0 || gc == 0 || gr + 1 == n || gc + 1 == n) {
    b[i] = a[i];
    return;
  }
  b[i] = a[i] + 0.2f * (a[i - ld] + a[i + ld] + a[i - 1] + a[i + 1] - 4.0f * a[i]);
}
)CL";

// Arguments: the input's region, the output's region (its interior written). Parameters: the
// ghosts on each side, the interior's first row and column in the grid, the grid's size.
hcr::Kernel heat_kernel(hcr::Runtime& rt) {
  return rt.kernel("heat")
      .cpu([](hcr::TaskContext& ctx) {
        auto a = ctx.arg<float>(0);
        auto b = ctx.arg<float>(1);
        const auto top = ctx.param<uint64_t>(0), left = ctx.param<uint64_t>(1);
        const auto bottom = ctx.param<uint64_t>(2), right = ctx.param<uint64_t>(3);
        heat_block(a.data + top * a.ld + left, a.ld, b.data + top * b.ld + left, b.ld,
                   a.rows - top - bottom, a.cols - left - right, ctx.param<uint64_t>(4),
                   ctx.param<uint64_t>(5), ctx.param<uint64_t>(6));
      })
      .source("opencl", kHeatCl);
}

hcr::Task heat_task(const hcr::Kernel& k, hcr::Buffer<float> in, hcr::Buffer<float> out,
                    hcr::Ghosts g, size_t row0, size_t col0, size_t n) {
  hcr::Task t(k);
  t.read(in).write(out);
  for (size_t v : {g.top, g.left, g.bottom, g.right, row0, col0, n}) t.param(uint64_t{v});
  t.grid(in.cols() - g.left - g.right, in.rows() - g.top - g.bottom);
  return t;
}

std::vector<float> initial(size_t n) {  // a hot square in a cold plate, a warm left edge
  std::vector<float> v(n * n, 0.0f);
  for (size_t r = n / 4; r < n / 2; ++r)
    for (size_t c = n / 4; c < n / 2; ++c) v[r * n + c] = 100.0f;
  for (size_t r = 0; r < n; ++r) v[r * n] = 50.0f;
  return v;
}

enum class Mode { submit, replay };

// `iterations` steps over halo tiles of two grids in turn; returns the last grid. Mode::replay
// records the first two steps (a -> b, b -> a: the pair leaves the grids where it found them) and
// replays that graph for each following pair; an odd count's last step is submitted, and fewer
// than four iterations are all submitted (there would be nothing to replay).
std::vector<float> run_hcr(hcr::Runtime& rt, const hcr::Kernel& k, const std::vector<float>& start,
                           size_t n, size_t tile, int iterations, Mode mode) {
  std::vector<float> a = start, b = start;  // the border is never written: both hold it
  auto ba = rt.wrap(a.data(), n, n), bb = rt.wrap(b.data(), n, n);
  hcr::Tiles<float> ta = ba.partition(tile, tile, hcr::Halo{1});
  hcr::Tiles<float> tb = bb.partition(tile, tile, hcr::Halo{1});
  auto step = [&](int it) {
    const hcr::Tiles<float>& in = it % 2 == 0 ? ta : tb;
    const hcr::Tiles<float>& out = it % 2 == 0 ? tb : ta;
    const std::vector<hcr::Device> devices = rt.devices();  // one, or one per thread (blocks)
    const size_t tiles = in.rows() * in.cols();
    for (size_t i = 0; i < in.rows(); ++i)
      for (size_t j = 0; j < in.cols(); ++j) {
        hcr::Task t = heat_task(k, in(i, j), out(i, j), in.ghosts(i, j), i * tile, j * tile, n);
        if (devices.size() > 1) t.on(devices[(i * in.cols() + j) * devices.size() / tiles].id);
        rt.submit(t);
      }
  };
  int it = 0;
  if (mode == Mode::replay && iterations >= 4) {
    rt.begin_recording();  // the recorded tasks run too: the first pair
    step(0);
    step(1);
    hcr::Graph pair = rt.end_recording();
    for (it = 2; it + 1 < iterations; it += 2) pair.replay();  // chained by their buffers, no waits
  }
  for (; it < iterations; ++it) step(it);
  ba.unpartition();
  bb.unpartition();
  rt.wait_all();
  return iterations % 2 == 0 ? a : b;
}

// The baseline: the same tile kernel over the same tiles, looped with OpenMP.
std::vector<float> run_openmp(const std::vector<float>& start, size_t n, size_t tile,
                              int iterations) {
  std::vector<float> a = start, b = start;
  const auto tiles = static_cast<long>((n + tile - 1) / tile);
  for (int it = 0; it < iterations; ++it) {
    const float* in = it % 2 == 0 ? a.data() : b.data();
    float* out = it % 2 == 0 ? b.data() : a.data();
#pragma omp parallel for collapse(2) schedule(static)
    for (long i = 0; i < tiles; ++i)
      for (long j = 0; j < tiles; ++j) {
        const size_t r0 = static_cast<size_t>(i) * tile, c0 = static_cast<size_t>(j) * tile;
        heat_block(in + r0 * n + c0, n, out + r0 * n + c0, n, std::min(tile, n - r0),
                   std::min(tile, n - c0), r0, c0, n);
      }
  }
  return iterations % 2 == 0 ? a : b;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The same iterations over halo tiles on an OpenCL device, which has its own memory: each tile
// lives there as its region, and only the ghost edges that changed are copied between tasks.
// Returns false when its grid differs from `want` (the OpenMP loop's) in any element; says so
// and returns true when there is no OpenCL device.
bool check_opencl(const std::vector<float>& start, size_t n, size_t tile, int iterations,
                  const std::vector<float>& want) {
  hcr::Config c;
  c.use_environment = false;
  c.backends.push_back({"opencl", true, {{"device_types", "all"}}, "stencil sample"});
  hcr::Runtime rt(c);
  if (rt.devices().empty()) {
    std::printf("opencl: no OpenCL device, its kernel not run\n");
    return true;
  }
  hcr::Kernel k = heat_kernel(rt);
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> got = run_hcr(rt, k, start, n, tile, iterations, Mode::submit);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
  const hcr::DataCounters d = rt.stats().data;
  uint64_t in = 0, out = 0;
  for (const hcr::LinkCounters& l : d.links) (l.to != 0 ? in : out) += l.bytes;
  const std::string verdict = differ == 0 ? "grid equal to the OpenMP loop's"
                                          : "DIFFERS in " + std::to_string(differ) + " elements";
  std::printf("opencl: %d iterations over halo tiles on '%s' in %.1f ms (%.2f MB in, %.2f MB out): "
              "%s\n",
              iterations, rt.devices()[0].name.c_str(), s * 1e3, static_cast<double>(in) / 1e6,
              static_cast<double>(out) / 1e6, verdict.c_str());
  return differ == 0;
}

const char* const kUsage =
    "usage: stencil [--mode=replay|submit|both] [--placement=blocks|any] [n=2048] [tile=512]\n"
    "               [iterations=100] [runs=5]\n";

// Argument `i` as a whole number in [lo, hi], `fallback` when absent; 0 after a message if not.
size_t argument(int argc, char** argv, int i, const char* name, size_t fallback, size_t lo,
                size_t hi) {
  if (argc <= i) return fallback;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(argv[i], &end, 10);
  if (end == argv[i] || *end != '\0' || argv[i][0] == '-' || v < lo || v > hi) {
    std::fprintf(stderr, "stencil: %s = '%s' is not a whole number from %zu to %zu\n%s", name,
                 argv[i], lo, hi, kUsage);
    return 0;
  }
  return static_cast<size_t>(v);
}

}  // namespace

int main(int argc_all, char** argv_all) try {
  // --mode=... (or --mode ...) anywhere; the rest are the numbers, in order.
  std::vector<char*> positional{argv_all[0]};
  std::string mode = "replay", placement = "blocks";
  for (int i = 1; i < argc_all; ++i) {
    const std::string a = argv_all[i];
    if (a.rfind("--mode=", 0) == 0) mode = a.substr(7);
    else if (a == "--mode" && i + 1 < argc_all) mode = argv_all[++i];
    else if (a.rfind("--placement=", 0) == 0) placement = a.substr(12);
    else if (a == "--placement" && i + 1 < argc_all) placement = argv_all[++i];
    else if (a.rfind("--", 0) == 0 || a == "-h") {
      std::fprintf(stderr, "stencil: unknown option '%s'\n%s", a.c_str(), kUsage);
      return 2;
    } else positional.push_back(argv_all[i]);
  }
  if (mode != "replay" && mode != "submit" && mode != "both") {
    std::fprintf(stderr, "stencil: --mode '%s' is not replay, submit or both\n%s", mode.c_str(),
                 kUsage);
    return 2;
  }
  if (placement != "blocks" && placement != "any") {
    std::fprintf(stderr, "stencil: --placement '%s' is not blocks or any\n%s", placement.c_str(),
                 kUsage);
    return 2;
  }
  const int argc = static_cast<int>(positional.size());
  char** argv = positional.data();
  const size_t n = argument(argc, argv, 1, "n", 2048, 3, 65536);
  const size_t tile = argument(argc, argv, 2, "tile", 512, 1, 65536);
  const int iterations = static_cast<int>(argument(argc, argv, 3, "iterations", 100, 1, 1000000));
  const int runs = static_cast<int>(argument(argc, argv, 4, "runs", 5, 1, 1000));
  if (n == 0 || tile == 0 || iterations == 0 || runs == 0 || argc > 5) {
    if (argc > 5) std::fprintf(stderr, "stencil: at most four arguments\n");
    return 2;
  }
  const int threads = omp_get_max_threads();

  hcr::Config config;  // the CPU backend with as many workers as OpenMP has threads
  config.backends.push_back(
      {"cpu",
       true,
       {{"threads", std::to_string(threads)},
        {"partitions", placement == "blocks" ? std::to_string(threads) : "1"}},
       "stencil"});
  hcr::Runtime rt(config);
  hcr::Kernel k = heat_kernel(rt);
  const std::vector<float> start = initial(n);
  std::printf("%zu x %zu grid, %zu x %zu halo tiles, %d iterations, %d threads, %d runs, %s, %s\n",
              n, n, tile, tile, iterations, threads, runs,
              mode == "both"     ? "submitted and replayed"
              : mode == "submit" ? "every task submitted"
                                 : "a recorded pair of iterations replayed",
              placement == "blocks" ? "tiles in blocks, one CPU partition per thread"
                                    : "tiles placed by the policy");

  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  std::vector<Mode> modes;
  if (mode != "replay") modes.push_back(Mode::submit);
  if (mode != "submit") modes.push_back(Mode::replay);
  const char* const label[] = {"hcr, submitted", "hcr, replayed"};
  std::vector<double> hcr_s[2], omp_s;
  std::vector<float> want;  // the OpenMP loop's grid, which the OpenCL run must equal too
  bool equal = true;  // a warm-up of each, four iterations (the replay's shortest), compared too
  for (Mode m : modes)
    equal = equal && run_hcr(rt, k, start, n, tile, 4, m) == run_openmp(start, n, tile, 4);
  // Idle OpenMP threads spin for a while after a parallel loop, and so do idle TBB workers: each
  // run starts once the other side's threads have gone to sleep, not while they still take a core.
  auto settle = [] { std::this_thread::sleep_for(std::chrono::milliseconds(100)); };
  for (int r = 0; r < runs; ++r) {  // alternated, so all see the same machine
    settle();
    auto t0 = clock::now();
    const std::vector<float> y = run_openmp(start, n, tile, iterations);
    omp_s.push_back(seconds(t0));
    want = y;
    for (Mode m : modes) {
      settle();
      t0 = clock::now();
      const std::vector<float> x = run_hcr(rt, k, start, n, tile, iterations, m);
      hcr_s[static_cast<int>(m)].push_back(seconds(t0));
      equal = equal && x == y;
    }
  }
  const double o = median(omp_s);
  for (Mode m : modes)
    std::printf("%-14s: median %.1f ms\n", label[static_cast<int>(m)],
                median(hcr_s[static_cast<int>(m)]) * 1e3);
  std::printf("OpenMP loop   : median %.1f ms\n", o * 1e3);
  for (Mode m : modes)
    std::printf("%s vs OpenMP: %.2fx (OpenMP time / hcr time)\n", label[static_cast<int>(m)],
                o / median(hcr_s[static_cast<int>(m)]));
  std::printf("results %s\n", equal ? "equal" : "DIFFER");
  const bool opencl_ok = check_opencl(start, n, tile, iterations, want);
  return equal && opencl_ok ? 0 : 1;
} catch (const hcr::Error& e) {
  std::fprintf(stderr, "stencil: %s\n", e.what());
  return 1;
}
