// Data movement of a tiled gemm on simulated devices with their own memories, against the least
// its placement needs: every input tile once on each device memory that read it, a C tile once
// each time consecutive k-steps of it ran in different memories, and each C tile home at the end
// (where its last step did not run in host memory). The placement is what the policy chose; the
// bytes are what the data manager counted on its links.
//
//   data_bench [--size N] [--runs R]
#include <hcr/hcr.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace {

// One GPU-like device, two slower accelerators (each with its own memory) and a host CPU.
hcr::Config machine(const std::string& policy) {
  hcr::Config c;
  c.use_environment = false;
  c.model_dir = "off";
  c.policy = policy;
  c.backends.push_back({"sim",
                        true,
                        {{"compute", "false"},  // timing only; the links still count every byte
                         {"time_scale", "5"},
                         {"device.0.name", "gpu"},
                         {"device.0.gflops", "10000"},
                         {"device.0.bandwidth", "20GB/s"},
                         {"device.1.name", "acc0"},
                         {"device.1.gflops", "1000"},
                         {"device.1.bandwidth", "10GB/s"},
                         {"device.2.name", "acc1"},
                         {"device.2.gflops", "1000"},
                         {"device.2.bandwidth", "10GB/s"},
                         {"device.3.name", "cpu"},
                         {"device.3.gflops", "400"},
                         {"device.3.host_memory", "true"},
                         {"device.3.concurrency", "2"}},
                        "data_bench"});
  return c;
}

struct Result {
  uint64_t moved = 0, minimum = 0;
  uint64_t hits = 0, misses = 0;
};

// C = A B in t x t tiles: one task per (i, j, k), the k-steps of a C tile a chain.
Result run(hcr::Runtime& rt, size_t n, size_t t) {
  const hcr::DataCounters before = rt.stats().data;
  auto A = rt.buffer<float>(n, n), B = rt.buffer<float>(n, n), C = rt.buffer<float>(n, n);
  auto ta = A.partition(t, t), tb = B.partition(t, t), tc = C.partition(t, t);
  const size_t g = n / t;
  hcr::Kernel gemm = rt.kernel("gemm_f32");
  std::map<std::tuple<size_t, size_t, size_t>, hcr::Event> ran;
  for (size_t i = 0; i < g; ++i)
    for (size_t j = 0; j < g; ++j)
      for (size_t k = 0; k < g; ++k) {
        hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, k == 0 ? 0.0 : 1.0};
        ran[{i, j, k}] =
            rt.submit(hcr::Task(gemm)
                          .read(ta(i, k))
                          .read(tb(k, j))
                          .arg(tc(i, j), k == 0 ? hcr::Access::write : hcr::Access::read_write)
                          .param(p));
      }
  A.unpartition();
  B.unpartition();
  C.unpartition().get();
  { auto home = C.acquire(hcr::Access::read); }  // the product in host memory

  const uint64_t tile = t * t * sizeof(float);
  const auto devices = rt.devices();
  auto node_of = [&](const hcr::Event& e) {
    return devices[static_cast<size_t>(e.device())].memory_node;
  };
  std::set<std::tuple<char, size_t, size_t, uint32_t>> inputs;
  Result r;
  for (size_t i = 0; i < g; ++i)
    for (size_t j = 0; j < g; ++j) {
      uint32_t prev = 0;
      for (size_t k = 0; k < g; ++k) {
        const uint32_t node = node_of(ran[{i, j, k}]);
        if (node != 0) {
          inputs.insert({'a', i, k, node});
          inputs.insert({'b', k, j, node});
        }
        if (k > 0 && node != prev) r.minimum += tile;
        prev = node;
      }
      if (prev != 0) r.minimum += tile;
    }
  r.minimum += inputs.size() * tile;
  const hcr::DataCounters after = rt.stats().data;
  r.moved = after.bytes_moved() - before.bytes_moved();
  r.hits = after.hits - before.hits;
  r.misses = after.misses - before.misses;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 2048;
  int runs = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--size") && i + 1 < argc) n = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::atoi(argv[++i]);
  }
  hcr::log::set_level(hcr::LogLevel::error);
  std::printf("tiled sgemm n=%zu on gpu + 2 accelerators (own memories) + host cpu; bytes moved "
              "against the least the placement needs\n\n",
              n);
  std::printf("%-6s %6s %4s %14s %14s %8s %8s %8s\n", "policy", "tile", "run", "moved (MiB)",
              "minimum (MiB)", "ratio", "hits", "misses");
  for (const char* policy : {"dmda", "eager"})
    for (size_t t : {size_t{512}, size_t{256}}) {
      hcr::Runtime rt(machine(policy));
      for (int r = 1; r <= runs; ++r) {
        Result res = run(rt, n, t);
        std::printf("%-6s %6zu %4d %14.1f %14.1f %8.4f %8llu %8llu\n", policy, t, r,
                    double(res.moved) / (1 << 20), double(res.minimum) / (1 << 20),
                    res.minimum ? double(res.moved) / double(res.minimum) : 1.0,
                    static_cast<unsigned long long>(res.hits),
                    static_cast<unsigned long long>(res.misses));
      }
    }
  return 0;
}
