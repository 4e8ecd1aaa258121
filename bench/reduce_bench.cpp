// A dot product through Access::reduce against one direct OpenBLAS cblas_sdot, in one process:
// x . y of 2^26 f32 (512 MiB of operands in host memory), split in 64 tasks on every core of the
// CPU backend, each reducing its tile's partial sum into one f32 scalar declared
// Reduction::sum; the value is read back (so the 64 combine tasks are in the time). The two sides
// alternate, each timed run after a pause that lets the other side's threads go to sleep; prints
// every run, the medians and sdot / hcr (above 1: hcr is faster). A third side, the same 64 tasks
// each writing its partial sum to a slot of its own (summed on the host), is what the reduction
// itself costs: reduce / partials.
//
//   build/bin/reduce_bench [--n-log2 26] [--tasks 64] [--runs 9] [--settle-ms 100]
#include <hcr/hcr.hpp>

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One tile's partial sum in f32 with 16 independent accumulators (vectorised without
// reassociating a single sum; as accurate as a blocked BLAS kernel).
float tile_dot(const float* x, const float* y, size_t n) {
  constexpr size_t kLanes = 16;
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) acc[j] += x[i + j] * y[i + j];
  float s = 0;
  for (; i < n; ++i) s += x[i] * y[i];
  for (float a : acc) s += a;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int n_log2 = 26, tasks = 64, runs = 9, settle_ms = 100;
  std::string policy;
  const auto usage = [&] {
    std::fprintf(stderr,
                 "usage: %s [--n-log2 26] [--tasks 64] [--runs 9] [--settle-ms 100] [--policy P]\n",
                 argv[0]);
    return 2;
  };
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();  // --help, or an option without its value
    const char* text = argv[i + 1];
    if (a == "--policy") {
      policy = text;
      continue;
    }
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || v < 0 || v > 1'000'000) {
      std::fprintf(stderr, "%s: '%s' is not a count\n", a.c_str(), text);
      return 2;
    }
    if (a == "--n-log2") n_log2 = static_cast<int>(v);
    else if (a == "--tasks") tasks = static_cast<int>(v);
    else if (a == "--runs") runs = static_cast<int>(v);
    else if (a == "--settle-ms") settle_ms = static_cast<int>(v);
    else return usage();
  }
  if (n_log2 < 1 || n_log2 > 34) {
    std::fprintf(stderr, "--n-log2 must be 1 to 34, not %d\n", n_log2);
    return 2;
  }
  const size_t n = size_t{1} << n_log2;
  if (tasks < 1 || n % static_cast<size_t>(tasks) != 0 || runs < 1) {
    std::fprintf(stderr, "--tasks must divide 2^%d and --runs be at least 1\n", n_log2);
    return 2;
  }
  std::vector<float> xs(n), ys(n);
  {
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> d(-1, 1);
    for (size_t i = 0; i < n; ++i) {
      xs[i] = d(gen);
      ys[i] = d(gen);
    }
  }
  double reference = 0;
  for (size_t i = 0; i < n; ++i) reference += double(xs[i]) * double(ys[i]);

  hcr::Config c;
  c.use_environment = false;
  c.model_dir = "off";
  if (!policy.empty()) c.policy = policy;
  c.backends.push_back({"cpu", true, {{"threads", "0"}}, "bench"});
  hcr::Runtime rt(c);
  const size_t workers = rt.devices().empty() ? 0 : rt.devices()[0].concurrency;
  hcr::Kernel dot = rt.kernel("tile_dot").cpu([](hcr::TaskContext& ctx) {
    auto x = ctx.arg<float>(0), y = ctx.arg<float>(1);
    ctx.arg<float>(2)(0, 0) += tile_dot(x.data, y.data, x.cols);
  });
  auto x = rt.wrap(xs.data(), 1, n), y = rt.wrap(ys.data(), 1, n);
  const size_t tile = n / static_cast<size_t>(tasks);
  auto xt = x.partition(1, tile), yt = y.partition(1, tile);
  auto result = rt.buffer<float>(1, 1);
  result.set_reduction(hcr::Reduction::sum);
  auto partials = rt.buffer<float>(1, static_cast<size_t>(tasks));
  auto slots = partials.partition(1, 1);
  hcr::Kernel dot_to = rt.kernel("tile_dot_to_slot").cpu([](hcr::TaskContext& ctx) {
    auto x = ctx.arg<float>(0), y = ctx.arg<float>(1);
    ctx.arg<float>(2)(0, 0) = tile_dot(x.data, y.data, x.cols);
  });

  auto hcr_dot = [&] {
    {
      auto v = result.acquire(hcr::Access::write);
      v(0, 0) = 0;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < tasks; ++i)
      rt.submit(hcr::Task(dot).read(xt(0, i)).read(yt(0, i)).reduce(result));
    const float value = result.to_vector()[0];
    return std::pair{seconds_since(t0), value};
  };
  auto partials_dot = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<hcr::Event> done;
    done.reserve(static_cast<size_t>(tasks));
    for (int i = 0; i < tasks; ++i)
      done.push_back(rt.submit(hcr::Task(dot_to).read(xt(0, i)).read(yt(0, i)).write(slots(0, i))));
    float value = 0;
    for (int i = 0; i < tasks; ++i) {
      done[static_cast<size_t>(i)].wait();
      value += slots(0, i).to_vector()[0];
    }
    return std::pair{seconds_since(t0), value};
  };
  auto blas_dot = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    const float value = cblas_sdot(static_cast<int>(n), xs.data(), 1, ys.data(), 1);
    return std::pair{seconds_since(t0), value};
  };

  std::printf("dot product of 2^%d f32 (%zu MiB of operands): hcr %d tasks with reduce on %zu CPU "
              "workers vs one cblas_sdot (%s)\n",
              n_log2, 2 * n * sizeof(float) >> 20, tasks, workers,
              std::getenv("OPENBLAS_NUM_THREADS") ? std::getenv("OPENBLAS_NUM_THREADS")
                                                  : "OpenBLAS's default threads");
  hcr_dot();  // warm-up: pages touched, workers awake
  partials_dot();
  blas_dot();
  std::vector<double> t_hcr, t_blas, t_partials;
  float v_hcr = 0, v_blas = 0;
  for (int r = 0; r < runs; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    auto [tb, vb] = blas_dot();
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    auto [th, vh] = hcr_dot();
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    auto [tp, vp] = partials_dot();
    t_blas.push_back(tb);
    t_hcr.push_back(th);
    t_partials.push_back(tp);
    v_blas = vb;
    v_hcr = vh;
    (void)vp;
    std::printf("run %d: sdot %.2f ms, hcr reduce %.2f ms, hcr partials %.2f ms\n", r, tb * 1e3,
                th * 1e3, tp * 1e3);
  }
  const double mb = median(t_blas), mh = median(t_hcr), mp = median(t_partials);
  std::printf("values: hcr %.6g, sdot %.6g, double reference %.6g (relative errors %.2g, %.2g)\n",
              v_hcr, v_blas, reference, std::abs(v_hcr - reference) / std::abs(reference),
              std::abs(v_blas - reference) / std::abs(reference));
  std::printf("median of %d: sdot %.2f ms (%.1f GB/s), hcr %.2f ms (%.1f GB/s); sdot/hcr = %.3f\n",
              runs, mb * 1e3, 2 * n * sizeof(float) / mb * 1e-9, mh * 1e3,
              2 * n * sizeof(float) / mh * 1e-9, mb / mh);
  std::printf("hcr partials %.2f ms; reduce/partials = %.3f\n", mp * 1e3, mh / mp);
  const bool close = std::abs(v_hcr - reference) <= 1e-3 * std::max(1.0, std::abs(reference));
  if (!close) std::fprintf(stderr, "hcr's value is off the reference\n");
  return close ? 0 : 1;
}
