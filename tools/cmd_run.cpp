// hcr run: the main job — a tiled matmul across every device the runtime found, checked against
// a reference (Freivalds), with tasks per device and GFLOP/s.
#include "cli.hpp"
#include "matrix_check.hpp"

#include <chrono>
#include <cstdio>

namespace hcr::cli {

namespace {

template <class T>
int run_gemm(Runtime& rt, size_t n, size_t tile, uint64_t repeat, bool check) {
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

  RuntimeStats before = rt.stats();
  double best = 1e300, total = 0;
  for (uint64_t r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    blas::gemm<T>(rt, a, b, c, tile).get();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  RuntimeStats after = rt.stats();

  std::printf("\ntasks per device:\n");
  for (const Device& d : rt.devices()) {
    uint64_t t = after.devices[d.id].tasks - before.devices[d.id].tasks;
    uint64_t f = after.devices[d.id].failed - before.devices[d.id].failed;
    std::printf("  #%-2u %-32s %8llu tasks%s\n", d.id, d.name.c_str(),
                static_cast<unsigned long long>(t),
                f ? (" (" + std::to_string(f) + " failed)").c_str() : "");
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
  Config config = config_from(args);
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
  return dtype == "f32" ? run_gemm<float>(rt, n, tile, repeat, check)
                        : run_gemm<double>(rt, n, tile, repeat, check);
}

}  // namespace hcr::cli
