// Tiled Cholesky through hcr::linalg on every core against one direct multi-threaded LAPACKE
// spotrf (OpenBLAS), interleaved in one process:
//
//   build/bin/linalg_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
//
// n = 8192 f32 (`--n N` for another order), tiles of 256, 512 and 1024. Read the medians of
// hcr_over_direct (above 1: hcr faster) and hcr_GFLOPs / direct_GFLOPs (n^3/3 flops).
#include <hcr/hcr.hpp>
#include <hcr/linalg.hpp>

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

size_t g_n = 8192;
int g_settle_ms = 250;

int all_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// A symmetric, strictly diagonally dominant (so positive definite) matrix, made once.
const std::vector<float>& spd() {
  static const std::vector<float> m = [] {
    std::vector<float> a(g_n * g_n);
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> d(-1, 1);
    for (size_t i = 0; i < g_n; ++i) {
      for (size_t j = 0; j < i; ++j) a[i * g_n + j] = a[j * g_n + i] = d(gen);
      a[i * g_n + i] = static_cast<float>(g_n) + 1;
    }
    return a;
  }();
  return m;
}

hcr::Runtime& cpu_runtime() {
  static hcr::Runtime* rt = [] {
    hcr::Config c;
    c.use_environment = false;
    c.backends.push_back({"cpu", true, {{"threads", "0"}}, "bench"});
    return new hcr::Runtime(c);
  }();
  return *rt;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The matrix copied into the buffer again (a factorisation overwrites it), through a host view:
// hcr knows the host copy is current and the tiles' old replicas are not.
void reset(const hcr::Buffer<float>& a) {
  auto v = a.acquire(hcr::Access::write);
  std::memcpy(v.data(), spd().data(), spd().size() * sizeof(float));
}

// One iteration = one direct LAPACKE spotrf on all cores and the same factorisation tiled through
// hcr, on the same matrix: interleaving cancels the drift of a shared machine, so the ratio is the
// figure (hcr_over_direct).
void BM_SpotrfHcrVsDirect(benchmark::State& state) {
  const size_t n = g_n, tile = static_cast<size_t>(state.range(0));
  hcr::Runtime& rt = cpu_runtime();
  std::vector<float> mem(n * n);
  auto a = rt.wrap(mem.data(), n, n);
  const double flops = static_cast<double>(n) * n * n / 3.0;
  double direct = 0, hcr = 0;
  // Both sides leave threads spinning for a while after they finish (OpenBLAS's pool busy-waits
  // for its next job; TBB workers spin before sleeping): let them settle so neither run pays for
  // the other's.
  auto settle = [] { std::this_thread::sleep_for(std::chrono::milliseconds(g_settle_ms)); };
  for (auto _ : state) {
    reset(a);
    openblas_set_num_threads(all_cores());
    settle();
    double d = 0;
    {
      auto v = a.acquire(hcr::Access::read_write);
      auto t0 = std::chrono::steady_clock::now();
      // Row-major lower is column-major upper: the same factor, and no transposed copy (which
      // LAPACKE's row-major path would make and time).
      const lapack_int info = LAPACKE_spotrf(LAPACK_COL_MAJOR, 'U', static_cast<lapack_int>(n),
                                             v.data(), static_cast<lapack_int>(n));
      d = seconds_since(t0);
      if (info != 0) state.SkipWithError(("spotrf info " + std::to_string(info)).c_str());
    }
    reset(a);
    // A CPU backend sharing the application's OpenBLAS must find it single-threaded (parallelism
    // comes from the tiles side by side); one with a BLAS of its own is not affected.
    openblas_set_num_threads(1);
    settle();
    auto t0 = std::chrono::steady_clock::now();
    hcr::linalg::potrf(rt, hcr::linalg::Uplo::lower, a, tile).get();
    const double h = seconds_since(t0);
    direct += d;
    hcr += h;
    state.SetIterationTime(d + h);
  }
  rt.wait_all();
  const double iters = static_cast<double>(state.iterations());
  state.counters["direct_GFLOPs"] = flops * iters / direct * 1e-9;
  state.counters["hcr_GFLOPs"] = flops * iters / hcr * 1e-9;
  state.counters["hcr_over_direct"] = direct / hcr;
  state.SetLabel("n=" + std::to_string(n) + " tile " + std::to_string(tile) + ", " +
                 std::to_string(all_cores()) + " cores");
}

BENCHMARK(BM_SpotrfHcrVsDirect)
    ->Arg(256)
    ->Arg(512)
    ->Arg(1024)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

// Google Benchmark's main, with this program's own options taken out of the arguments first:
// `--n N` (the matrix order) and `--settle-ms MS` (the pause before each timed run; 0 for a quick
// check that the benchmark runs).
int main(int argc, char** argv) {
  std::vector<char*> args;
  long long n = static_cast<long long>(g_n), settle = g_settle_ms;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    bool ours = false;
    for (auto [flag, value] : {std::pair{"--n", &n}, std::pair{"--settle-ms", &settle}}) {
      const std::string f = flag;
      if (a != f && a.rfind(f + "=", 0) != 0) continue;
      const std::string v = a == f ? (i + 1 < argc ? argv[++i] : "") : a.substr(f.size() + 1);
      *value = !v.empty() && v.size() < 12 && v.find_first_not_of("0123456789") == std::string::npos
                   ? std::stoll(v)
                   : -1;
      if (*value < 0) {
        std::fprintf(stderr, "linalg_bench: %s '%s' is not a number\n", flag, v.c_str());
        return 2;
      }
      ours = true;
    }
    if (!ours) args.push_back(argv[i]);
  }
  if (n == 0) {
    std::fprintf(stderr, "linalg_bench: --n must be at least 1\n");
    return 2;
  }
  g_n = static_cast<size_t>(n);
  g_settle_ms = static_cast<int>(std::min<long long>(settle, 60000));
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
