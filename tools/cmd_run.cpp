// hcr run: the main job — a tiled matmul across every device the runtime found, checked against
// a reference (Freivalds), with tasks per device and GFLOP/s.
#include "cli.hpp"
#include "matrix_check.hpp"
#include "progress.hpp"

#include <chrono>
#include <cstdio>

namespace hcr::cli {

namespace {

struct RunOptions {
  size_t n, tile;
  uint64_t repeat;
  bool check, progress;
  std::string trace, gantt;
};

template <class T>
int run_gemm(Runtime& rt, const RunOptions& o) {
  const size_t n = o.n, tile = o.tile;
  const uint64_t repeat = o.repeat;
  const bool check = o.check;
  auto a = rt.buffer<T>(n, n), b = rt.buffer<T>(n, n), c = rt.buffer<T>(n, n);
  {
    auto va = a.acquire(Access::write), vb = b.acquire(Access::write);
    fill_random(va.data(), n, n, n, 1);
    fill_random(vb.data(), n, n, n, 2);
  }
  const size_t grid = (n + tile - 1) / tile;
  std::printf("job: %sgemm n=%zu tile=%zu: %zu tasks per product, %llu product(s)\n",
              sizeof(T) == 4 ? "s" : "d", n, tile, grid * grid * grid,
              static_cast<unsigned long long>(repeat));

  if (!o.trace.empty() || !o.gantt.empty()) rt.start_trace();
  RuntimeStats before = rt.stats();
  double best = 1e300, total = 0;
  {
    Progress progress(rt, grid * grid * grid * repeat, o.progress);
    for (uint64_t r = 0; r < repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      blas::gemm<T>(rt, a, b, c, tile).get();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      total += s;
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
    uint64_t t = a.tasks - b.tasks, f = a.failed - b.failed;
    double busy = a.busy_seconds - b.busy_seconds;
    std::string name = "#";  // (piecewise: GCC 12 warns falsely, -Wrestrict, of "#" + ...)
    name += std::to_string(d.id) + " " + d.name;
    std::printf("  %-36s %8llu %10.3f %7.0f%% %11s %11s%s\n", name.c_str(),
                static_cast<unsigned long long>(t), busy,
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
  const DataCounters& dc = after.data;
  if (dc.nodes.size() > 1) {
    std::printf("\ndata: %llu replica hits, %llu misses, %llu evictions (%llu written back)\n",
                static_cast<unsigned long long>(dc.hits), static_cast<unsigned long long>(dc.misses),
                static_cast<unsigned long long>(dc.evictions),
                static_cast<unsigned long long>(dc.writebacks));
    for (const LinkCounters& l : dc.links)
      std::printf("  %-20s -> %-20s %10s in %llu copies\n", dc.nodes[l.from].name.c_str(),
                  dc.nodes[l.to].name.c_str(), human_bytes(l.bytes).c_str(),
                  static_cast<unsigned long long>(l.transfers));
  }
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  std::printf("\ntime: best %.4f s, mean %.4f s   rate: %.1f GFLOP/s (best), %.1f GFLOP/s (mean)\n",
              best, total / repeat, flops / best / 1e9, flops / (total / repeat) / 1e9);

  if (!o.trace.empty()) {
    rt.write_trace(o.trace);
    std::printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n",
                o.trace.c_str());
  }
  if (!o.gantt.empty()) {
    rt.write_gantt(o.gantt);
    std::printf("gantt: %s\n", o.gantt.c_str());
  }
  if (!check) return 0;
  auto va = a.acquire(Access::read), vb = b.acquire(Access::read), vc = c.acquire(Access::read);
  double err = freivalds(va.data(), vb.data(), vc.data(), n, n, n, n, n, n);
  bool ok = err <= 1.0;
  std::printf("check: Freivalds against A(Bx), 2 random vectors: error %.3g of the rounding bound "
              "-> %s\n",
              err, ok ? "OK" : "WRONG");
  return ok ? 0 : 3;
}

}  // namespace

int cmd_run(Args& args) {
  size_t n = args.number("size", 2048);
  size_t tile = args.number("tile", 512);
  uint64_t repeat = args.number("repeat", 1);
  std::string dtype = args.value("dtype").value_or("f32");
  bool check = !args.flag("no-check");
  bool progress = !args.flag("no-progress");
  std::string trace = args.value("trace").value_or("");
  std::string gantt = args.value("gantt").value_or("");
  Config config = config_from(args);
  config.counters = true;  // busy and idle time per device, printed at the end
  args.check_all_used();
  if (n == 0 || tile == 0 || repeat == 0)
    throw Error(ErrorCode::invalid_argument, "--size, --tile and --repeat must be at least 1");
  if (dtype != "f32" && dtype != "f64")
    throw Error(ErrorCode::invalid_argument, "--dtype '" + dtype + "' is not f32 or f64");

  Runtime rt(config);
  std::printf("hcr run: policy %s, %zu device(s)\n", std::string(rt.policy()).c_str(),
              rt.devices().size());
  for (const Device& d : rt.devices())
    std::printf("  #%-2u %-11s %s  [%s]\n", d.id, std::string(kind_name(d.kind)).c_str(),
                d.name.c_str(), d.backend.c_str());
  if (rt.devices().empty())
    throw Error(ErrorCode::no_device, "no devices: `hcr devices` shows what was searched and why");
  RunOptions o{n, tile, repeat, check, progress, trace, gantt};
  return dtype == "f32" ? run_gemm<float>(rt, o) : run_gemm<double>(rt, o);
}

}  // namespace hcr::cli
