// hcr run: the main jobs across every device the runtime found — a tiled matmul checked against
// a reference (Freivalds), or a tiled Cholesky checked by its residual — with tasks per device and
// GFLOP/s.
#include "cli.hpp"
#include "matrix_check.hpp"
#include "progress.hpp"

#include <hcr/linalg.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

namespace hcr::cli {

namespace {

struct RunOptions {
  size_t n, tile;
  uint64_t repeat;
  bool check, progress;
  std::string trace, gantt;
};

struct Timing {
  double best = 1e300, total = 0;
};

// Runs `job` (one repetition, which ends when its work has) `o.repeat` times, `prepare` before
// each outside the timing, with the progress display, the trace, and the report of what each
// device did: the part the jobs share.
template <class Prepare, class Job>
Timing measure(Runtime& rt, const RunOptions& o, uint64_t tasks, Prepare prepare, Job job) {
  if (!o.trace.empty() || !o.gantt.empty()) rt.start_trace();
  RuntimeStats before = rt.stats();
  Timing t;
  {
    Progress progress(rt, tasks * o.repeat, o.progress);
    for (uint64_t r = 0; r < o.repeat; ++r) {
      prepare();
      auto t0 = std::chrono::steady_clock::now();
      job();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      t.best = std::min(t.best, s);
      t.total += s;
    }
  }
  rt.stop_trace();
  RuntimeStats after = rt.stats();

  const double wall = after.wall_seconds - before.wall_seconds;
  std::printf("\nper device (this job: %.3f s):\n", wall);
  std::printf("  %-36s %8s %10s %8s %11s %11s\n", "device", "tasks", "busy (s)", "busy %",
              "bytes in", "bytes out");
  for (const Device& d : rt.devices()) {
    const DeviceCounters &a = after.devices[d.id], &b = before.devices[d.id];
    uint64_t n = a.tasks - b.tasks, f = a.failed - b.failed;
    double busy = a.busy_seconds - b.busy_seconds;
    std::string name = "#";  // (piecewise: GCC 12 warns falsely, -Wrestrict, of "#" + ...)
    name += std::to_string(d.id) + " " + d.name;
    std::printf("  %-36s %8llu %10.3f %7.0f%% %11s %11s%s\n", name.c_str(),
                static_cast<unsigned long long>(n), busy,
                wall > 0 ? 100.0 * busy / (wall * std::max<uint32_t>(1, d.concurrency)) : 0.0,
                human_bytes(a.bytes_in - b.bytes_in).c_str(),
                human_bytes(a.bytes_out - b.bytes_out).c_str(),
                f ? (" (" + std::to_string(f) + " failed)").c_str() : "");
  }
  if (!after.accuracy.empty()) {
    std::printf("\ncost model accuracy (median absolute error of predictions):\n");
    for (const ModelAccuracy& m : after.accuracy)
      std::printf("  %-16s on #%-2u %-28s %7.1f%%  (%u tasks)\n", m.kernel.c_str(), m.device,
                  rt.devices()[m.device].name.c_str(), m.median_abs_pct_error, m.samples);
  }
  // Energy, where a device has figures (a meter, a power model, or a declared draw): each says
  // which, since measured and modelled joules are not the same kind of figure.
  bool energy = false;
  for (const DeviceCounters& d : after.devices) energy = energy || d.energy_source != "none";
  if (energy) {
    std::printf("\nenergy (this job):\n");
    double total = 0;
    for (const Device& d : rt.devices()) {
      const DeviceCounters &a = after.devices[d.id], &b = before.devices[d.id];
      if (a.energy_source == "none") continue;
      const double j = a.energy_joules - b.energy_joules;
      total += j;
      std::printf("  #%-2u %-32s %10.2f J  %8.1f W average  (%s)\n", d.id, d.name.c_str(), j,
                  wall > 0 ? j / wall : 0.0, a.energy_source.c_str());
    }
    std::printf("  total %45.2f J  %8.1f W average\n", total, wall > 0 ? total / wall : 0.0);
  }
  const DataCounters& dc = after.data;
  if (dc.nodes.size() > 1) {
    std::printf("\ndata: %llu replica hits, %llu misses, %llu evictions (%llu written back)\n",
                static_cast<unsigned long long>(dc.hits),
                static_cast<unsigned long long>(dc.misses),
                static_cast<unsigned long long>(dc.evictions),
                static_cast<unsigned long long>(dc.writebacks));
    for (const LinkCounters& l : dc.links)
      std::printf("  %-20s -> %-20s %10s in %llu copies\n", dc.nodes[l.from].name.c_str(),
                  dc.nodes[l.to].name.c_str(), human_bytes(l.bytes).c_str(),
                  static_cast<unsigned long long>(l.transfers));
  }
  return t;
}

void print_rate(const RunOptions& o, const Timing& t, double flops) {
  std::printf("\ntime: best %.4f s, mean %.4f s   rate: %.1f GFLOP/s (best), %.1f GFLOP/s (mean)\n",
              t.best, t.total / o.repeat, flops / t.best / 1e9, flops / (t.total / o.repeat) / 1e9);
}

void write_trace(Runtime& rt, const RunOptions& o) {
  if (!o.trace.empty()) {
    rt.write_trace(o.trace);
    std::printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n",
                o.trace.c_str());
  }
  if (!o.gantt.empty()) {
    rt.write_gantt(o.gantt);
    std::printf("gantt: %s\n", o.gantt.c_str());
  }
}

const char* blas_prefix(size_t element_size) { return element_size == 4 ? "s" : "d"; }

template <class T>
int run_gemm(Runtime& rt, const RunOptions& o) {
  const size_t n = o.n, tile = o.tile;
  auto a = rt.buffer<T>(n, n), b = rt.buffer<T>(n, n), c = rt.buffer<T>(n, n);
  {
    auto va = a.acquire(Access::write), vb = b.acquire(Access::write);
    fill_random(va.data(), n, n, n, 1);
    fill_random(vb.data(), n, n, n, 2);
  }
  const size_t grid = (n + tile - 1) / tile;
  std::printf("job: %sgemm n=%zu tile=%zu: %zu tasks per product, %llu product(s)\n",
              blas_prefix(sizeof(T)), n, tile, grid * grid * grid,
              static_cast<unsigned long long>(o.repeat));
  Timing t = measure(
      rt, o, grid * grid * grid, [] {},
      [&] {
        linalg::gemm<T>(rt, linalg::Op::no_trans, linalg::Op::no_trans, 1, a, b, 0, c, tile).get();
      });
  print_rate(o, t, 2.0 * static_cast<double>(n) * n * n);
  write_trace(rt, o);
  if (!o.check) return 0;
  auto va = a.acquire(Access::read), vb = b.acquire(Access::read), vc = c.acquire(Access::read);
  double err = freivalds(va.data(), vb.data(), vc.data(), n, n, n, n, n, n);
  bool ok = err <= 1.0;
  std::printf("check: Freivalds against A(Bx), 2 random vectors: error %.3g of the rounding bound "
              "-> %s\n",
              err, ok ? "OK" : "WRONG");
  return ok ? 0 : 3;
}

// Tiled Cholesky of a random SPD matrix, factored again from the same matrix at each repetition,
// the factor checked by its residual.
template <class T>
int run_potrf(Runtime& rt, const RunOptions& o) {
  const size_t n = o.n, tile = o.tile;
  std::vector<T> spd(n * n);
  fill_spd(spd.data(), n, 3);
  auto a = rt.buffer<T>(n, n, uninitialized);
  const uint64_t grid = (n + tile - 1) / tile;
  // potrf and trsm per step, syrk and gemm on the trailing lower triangle.
  const uint64_t tasks = grid + grid * (grid - 1) + grid * (grid - 1) * (grid - 2) / 6;
  std::printf("job: %spotrf (tiled Cholesky, lower) n=%zu tile=%zu: %llu tasks per "
              "factorisation, %llu factorisation(s)\n",
              blas_prefix(sizeof(T)), n, tile, static_cast<unsigned long long>(tasks),
              static_cast<unsigned long long>(o.repeat));
  Timing t = measure(
      rt, o, tasks,
      [&] {
        auto v = a.acquire(Access::write);
        std::copy(spd.begin(), spd.end(), v.data());
      },
      [&] { linalg::potrf<T>(rt, linalg::Uplo::lower, a, tile).get(); });
  print_rate(o, t, static_cast<double>(n) * n * n / 3.0);
  write_trace(rt, o);
  if (!o.check) return 0;
  auto va = a.acquire(Access::read);
  const int probes = 4;
  const double residual = cholesky_residual(spd.data(), va.data(), n, probes);
  // LAPACK's tests pass a factorisation whose residual is below 30 n eps.
  const double bound = 30.0 * static_cast<double>(n) * std::numeric_limits<T>::epsilon();
  const bool ok = residual <= bound;
  std::printf("check: ||A - L L^T||_F / ||A||_F = %.3g (from %d random probes): %.3g of the "
              "bound 30 n eps -> %s\n",
              residual, probes, residual / bound, ok ? "OK" : "WRONG");
  return ok ? 0 : 3;
}

}  // namespace

int cmd_run(Args& args) {
  std::string op = args.value("op").value_or("gemm");
  size_t n = args.number("size", 2048);
  // Cholesky's DAG narrows as it goes: smaller tiles keep the devices busy.
  size_t tile = args.number("tile", op == "potrf" ? 256 : 512);
  uint64_t repeat = args.number("repeat", 1);
  std::string dtype = args.value("dtype").value_or("f32");
  bool check = !args.flag("no-check");
  bool progress = !args.flag("no-progress");
  std::string trace = args.value("trace").value_or("");
  std::string gantt = args.value("gantt").value_or("");
  Config config = config_from(args);
  config.counters = true;  // busy and idle time per device, printed at the end
  // The scheduler's objective ([scheduler] objective, max_slowdown), for comparing runs.
  if (auto objective = args.value("objective")) {
    if (*objective != "time" && *objective != "energy" && *objective != "weighted")
      throw Error(ErrorCode::invalid_argument,
                  "--objective '" + *objective + "' is not time, energy or weighted");
    config.objective = *objective;
  }
  if (auto slowdown = args.value("max-slowdown")) {
    char* end = nullptr;
    const double x = std::strtod(slowdown->c_str(), &end);
    if (end == slowdown->c_str() || *end != '\0' || !(x >= 1 && x <= 100))
      throw Error(ErrorCode::invalid_argument,
                  "--max-slowdown '" + *slowdown + "': expected a factor from 1 to 100");
    config.max_slowdown = x;
  }
  args.check_all_used();
  if (n == 0 || tile == 0 || repeat == 0)
    throw Error(ErrorCode::invalid_argument, "--size, --tile and --repeat must be at least 1");
  if (op != "gemm" && op != "potrf")
    throw Error(ErrorCode::invalid_argument, "--op '" + op + "' is not gemm or potrf");
  if (dtype != "f32" && dtype != "f64")
    throw Error(ErrorCode::invalid_argument, "--dtype '" + dtype + "' is not f32 or f64");

  Runtime rt(config);
  std::printf("hcr run: policy %s, %zu device(s)%s\n", std::string(rt.policy()).c_str(),
              rt.devices().size(),
              config.objective == "time" ? "" : (", objective " + config.objective).c_str());
  for (const Device& d : rt.devices())
    std::printf("  #%-2u %-11s %s  [%s]\n", d.id, std::string(kind_name(d.kind)).c_str(),
                d.name.c_str(), d.backend.c_str());
  if (rt.devices().empty())
    throw Error(ErrorCode::no_device, "no devices: `hcr devices` shows what was searched and why");
  RunOptions o{n, tile, repeat, check, progress, trace, gantt};
  if (op == "potrf") return dtype == "f32" ? run_potrf<float>(rt, o) : run_potrf<double>(rt, o);
  return dtype == "f32" ? run_gemm<float>(rt, o) : run_gemm<double>(rt, o);
}

}  // namespace hcr::cli
