// Tiled sgemm through hcr on every core against one direct multi-threaded OpenBLAS call, and the
// cores' measured FMA peak, all in one process:
//
//   build/bin/gemm_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
//
// Read the medians: hcr_over_direct, hcr_GFLOPs, and GFLOPs of the FMA peak (hcr / peak: the
// larger of the AVX2 and AVX-512F peaks); threads_over_direct is the same tiling on bare threads,
// without hcr (what tiling itself costs). On this development machine (AMD EPYC, AVX-512F, 2 cores)
// the AVX-512F peak is 500-527 GFLOP/s, twice the AVX2 one (the same over 36 ms and 360 ms of
// FMAs: no down-clocking). Its environment sets OPENBLAS_CORETYPE=Haswell, so OpenBLAS runs its
// AVX2 kernels (237 GFLOP/s direct); left to detect the processor (Cooperlake kernels, 512-bit)
// it ran 467 direct, hcr 459 at tiles of 2048: 0.886 and 0.872 of the peak. OpenBLAS 0.3.21's
// kernel is the ceiling there: its direct call, single-threaded calls on row or column panels,
// and whole-K tiles on bare threads all land at 455-476 GFLOP/s.
#include <hcr/hcr.hpp>

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace {

constexpr size_t kN = 4096;

int all_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

struct Matrices {
  std::vector<float> a, b, c;
  Matrices() : a(kN * kN), b(kN * kN), c(kN * kN) {
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> d(-1, 1);
    for (auto& x : a) x = d(gen);
    for (auto& x : b) x = d(gen);
  }
};
Matrices& matrices() {
  static Matrices m;
  return m;
}

void gflops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOPs"] =
      benchmark::Counter(flops_per_iter * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
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

// The tiling hcr::blas::gemm uses, with no runtime at all: one bare thread per core takes C tiles
// in turn and runs each tile's k-chain as single-threaded OpenBLAS calls. What the tiling itself
// costs against the direct call, apart from hcr.
void tiles_on_bare_threads(const float* a, const float* b, float* c, size_t tile) {
  const size_t per_side = (kN + tile - 1) / tile;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t t; (t = next.fetch_add(1)) < per_side * per_side;) {
      const size_t i = t / per_side * tile, j = t % per_side * tile;
      const size_t rows = std::min(tile, kN - i), cols = std::min(tile, kN - j);
      for (size_t k = 0; k < kN; k += tile)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                    static_cast<int>(cols), static_cast<int>(std::min(tile, kN - k)), 1.0f,
                    a + i * kN + k, kN, b + k * kN + j, kN, k == 0 ? 0.0f : 1.0f, c + i * kN + j,
                    kN);
    }
  };
  std::vector<std::thread> threads;
  for (int n = 0; n < all_cores(); ++n) threads.emplace_back(work);
  for (auto& th : threads) th.join();
}

// One iteration = one direct multi-threaded OpenBLAS sgemm, the same product tiled through hcr,
// and the same tiles on bare threads, on the same matrices: interleaving cancels the drift of a
// shared machine, so the ratios are the figures (hcr_over_direct, threads_over_direct).
void BM_SgemmHcrVsDirect(benchmark::State& state) {
  const size_t tile = static_cast<size_t>(state.range(0));
  hcr::Runtime& rt = cpu_runtime();
  Matrices& m = matrices();
  auto A = rt.wrap(m.a.data(), kN, kN), B = rt.wrap(m.b.data(), kN, kN),
       C = rt.wrap(m.c.data(), kN, kN);
  const double flops = 2.0 * kN * kN * kN;
  double direct = 0, hcr = 0, threads = 0;
  // Both sides leave threads spinning for a while after they finish (OpenBLAS's pool busy-waits
  // for its next job; TBB workers spin before sleeping): let them settle so neither run pays for
  // the other's.
  auto settle = [] { std::this_thread::sleep_for(std::chrono::milliseconds(250)); };
  for (auto _ : state) {
    openblas_set_num_threads(all_cores());
    settle();
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.0f, m.a.data(), kN,
                m.b.data(), kN, 0.0f, m.c.data(), kN);
    double d = seconds_since(t0);
    openblas_set_num_threads(1);  // hcr's CPU backend runs single-threaded BLAS per tile
    settle();
    t0 = std::chrono::steady_clock::now();
    hcr::blas::gemm(rt, A, B, C, tile).get();
    double h = seconds_since(t0);
    settle();
    t0 = std::chrono::steady_clock::now();
    tiles_on_bare_threads(m.a.data(), m.b.data(), m.c.data(), tile);
    double b = seconds_since(t0);
    direct += d;
    hcr += h;
    threads += b;
    state.SetIterationTime(d + h + b);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["direct_GFLOPs"] = flops * n / direct * 1e-9;
  state.counters["hcr_GFLOPs"] = flops * n / hcr * 1e-9;
  state.counters["hcr_over_direct"] = direct / hcr;
  state.counters["threads_GFLOPs"] = flops * n / threads * 1e-9;
  state.counters["threads_over_direct"] = direct / threads;
  state.SetLabel("n=" + std::to_string(kN) + " tile " + std::to_string(tile) + ", " +
                 std::to_string(all_cores()) + " cores");
}

// Two FMAs per cycle per core need ten or more independent chains to hide the latency. Each chain
// starts from its own value: chains with equal inputs are one computation to the compiler, which
// merged all twelve into one (a latency-bound chain that "measured" more than the peak).
__attribute__((noinline)) float fma_chains(long iters, float seed) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(seed + 0.001f * static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < iters; ++i) {
    a[0] = _mm256_fmadd_ps(a[0], m, c);
    a[1] = _mm256_fmadd_ps(a[1], m, c);
    a[2] = _mm256_fmadd_ps(a[2], m, c);
    a[3] = _mm256_fmadd_ps(a[3], m, c);
    a[4] = _mm256_fmadd_ps(a[4], m, c);
    a[5] = _mm256_fmadd_ps(a[5], m, c);
    a[6] = _mm256_fmadd_ps(a[6], m, c);
    a[7] = _mm256_fmadd_ps(a[7], m, c);
    a[8] = _mm256_fmadd_ps(a[8], m, c);
    a[9] = _mm256_fmadd_ps(a[9], m, c);
    a[10] = _mm256_fmadd_ps(a[10], m, c);
    a[11] = _mm256_fmadd_ps(a[11], m, c);
  }
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

// The same with 512-bit FMAs, compiled for AVX-512F alone and run only where the processor has it:
// a peak measured with AVX2 understates one whose cores run 512-bit FMAs at full rate.
__attribute__((noinline, target("avx512f"))) float fma_chains_512(long iters, float seed) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(seed + 0.001f * static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0];
}

// The cores' FMA peak: state.range(0) = 256 (AVX2) or 512 (AVX-512F; skipped where the processor
// lacks it). Read the larger: the widest FMA the machine runs at full rate.
void BM_FmaPeakAllCores(benchmark::State& state) {
  const bool wide = state.range(0) == 512;
  if (wide && !__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("no AVX-512F on this processor");
    return;
  }
  const long iters = wide ? 25'000'000 : 50'000'000;
  const int n = all_cores();
  std::atomic<float> sink{0};
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        const float seed = 1.0f + static_cast<float>(i);
        sink = sink + (wide ? fma_chains_512(iters, seed) : fma_chains(iters, seed));
      });
    for (auto& t : threads) t.join();
  }
  // 12 FMAs x (8 or 16) lanes x 2 flops
  gflops(state, static_cast<double>(n) * iters * 12 * (wide ? 32 : 16));
  state.SetLabel(std::to_string(n) + " cores, " + (wide ? "AVX-512F" : "AVX2") + " FMA");
}

BENCHMARK(BM_FmaPeakAllCores)->Arg(256)->Arg(512)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SgemmHcrVsDirect)
    ->Arg(1024)
    ->Arg(2048)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(4);

}  // namespace

BENCHMARK_MAIN();
