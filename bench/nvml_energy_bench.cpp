// The CUDA backend's energy meter against NVML's power samples, on GPU 0:
//
//   build/bin/nvml_energy_bench [--seconds S] [--n N] [--warmup S]
//
// Runs f32 gemm tasks (n x n, default 8192) back to back on the GPU through hcr::Runtime (the CUDA
// backend alone) for a warm-up (default 2 s) and then a measured window (default 10 s), the load
// going on through the window's end. Over the window it compares three figures of the GPU's energy:
//   hcr      rt.stats().devices[gpu].energy_joules at the window's end less at its start — what the
//            plugin's NVML meter (backends/cuda/nvml_meter.cpp) reports to the runtime;
//   counter  nvmlDeviceGetTotalEnergyConsumption read here directly, end less start;
//   sampled  nvmlDeviceGetPowerUsage sampled here every 10 ms and integrated (trapezoids).
// and prints hcr/sampled and hcr/counter. Power samples on recent GPUs are averages over the last
// second or so, so the window starts after the warm-up, once the draw is steady. NVML is opened
// here with dlopen, as the plugin does (the toolkit has no nvml.h). Without a GPU or NVML the
// program says so and exits 0. The plugin comes from the build tree or $HCR_CUDA_BENCH_PLUGIN_DIR.
#include <hcr/hcr.hpp>
#include <hcr/plugin.h>

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Nvml {
  using Device = void*;
  int (*init)() = nullptr;
  int (*by_bus_id)(const char*, Device*) = nullptr;
  int (*energy)(Device, unsigned long long*) = nullptr;  // mJ
  int (*power)(Device, unsigned int*) = nullptr;         // mW
  void* lib = nullptr;
  Device dev = nullptr;

  bool open(const char* bus_id, std::string& why) {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      why = dlerror();
      return false;
    }
    init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    by_bus_id = reinterpret_cast<int (*)(const char*, Device*)>(
        dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    energy = reinterpret_cast<int (*)(Device, unsigned long long*)>(
        dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption"));
    power = reinterpret_cast<int (*)(Device, unsigned int*)>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
    if (!init || !by_bus_id || !energy || !power) {
      why = "an NVML entry is missing";
      return false;
    }
    if (int r = init(); r != 0) {
      why = "nvmlInit_v2 returned " + std::to_string(r);
      return false;
    }
    if (int r = by_bus_id(bus_id, &dev); r != 0) {
      why = std::string("no NVML device for PCI bus id ") + bus_id + " (" + std::to_string(r) + ")";
      return false;
    }
    return true;
  }
};

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10, warmup = 2;
  size_t n = 8192;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (a == "--warmup") warmup = std::atof(argv[i + 1]);
    else if (a == "--n") n = static_cast<size_t>(std::atol(argv[i + 1]));
    else {
      std::fprintf(stderr, "nvml_energy_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("nvml_energy_bench: no GPU, nothing measured\n");
    return 0;
  }
  char bus_id[64] = {};
  cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, 0);
  Nvml nvml;
  std::string why;
  if (!nvml.open(bus_id, why)) {
    std::printf("nvml_energy_bench: no NVML (%s), nothing measured\n", why.c_str());
    return 0;
  }

  hcr::Config c;
  c.use_environment = false;
  const char* dir = std::getenv("HCR_CUDA_BENCH_PLUGIN_DIR");
  c.plugin_paths = {dir && *dir ? dir : HCR_BENCH_PLUGIN_DIR};
  c.policy = "eager";
  c.backends.push_back({"cuda", true, {}, "nvml_energy_bench"});
  hcr::Runtime rt(c);
  uint32_t gpu = UINT32_MAX;
  for (const auto& d : rt.devices())
    if (d.backend == "cuda" && gpu == UINT32_MAX) gpu = d.id;
  if (gpu == UINT32_MAX) {
    std::printf("nvml_energy_bench: the CUDA backend found no device\n");
    return 1;
  }

  auto A = rt.buffer<float>(n, n), B = rt.buffer<float>(n, n);
  std::vector<hcr::Buffer<float>> C;
  for (int i = 0; i < 3; ++i) C.push_back(rt.buffer<float>(n, n));
  for (auto* b : {&A, &B}) {
    auto v = b->acquire(hcr::Access::write);
    for (size_t i = 0; i < n * n; ++i) v.data()[i] = static_cast<float>(i % 7) * 0.125f;
  }
  hcr::Kernel kernel = rt.kernel("gemm_f32");
  hcr_gemm_params_t params{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};

  // The load: a gemm on each C in turn, at most three in flight, until `stop`.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> done{0};
  std::thread load([&] {
    std::deque<hcr::Event> inflight;
    for (size_t i = 0; !stop.load(); ++i) {
      inflight.push_back(rt.submit(
          hcr::Task(kernel).read(A).read(B).write(C[i % C.size()]).param(params).on(gpu)));
      if (inflight.size() >= C.size()) {
        inflight.front().get();
        inflight.pop_front();
        done.fetch_add(1);
      }
    }
    for (auto& e : inflight) e.get();
  });

  std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
  // The window: hcr's figure and the raw counter at both ends, power sampled in between.
  auto hcr_joules = [&] {
    hcr::RuntimeStats s = rt.stats();
    return std::pair{s.devices[gpu].energy_joules, s.devices[gpu].energy_source};
  };
  unsigned long long mj0 = 0, mj1 = 0;
  const auto [h0, source] = hcr_joules();
  nvml.energy(nvml.dev, &mj0);
  const uint64_t gemms0 = done.load();
  const auto t0 = Clock::now();
  double sampled = 0, watts_sum = 0, last_w = -1;
  size_t samples = 0;
  auto last_t = t0;
  const auto end = t0 + std::chrono::duration<double>(seconds);
  for (;;) {
    const auto t = Clock::now();
    unsigned int mw = 0;
    if (nvml.power(nvml.dev, &mw) == 0) {
      const double w = mw * 1e-3;
      if (last_w >= 0)
        sampled += 0.5 * (w + last_w) * std::chrono::duration<double>(t - last_t).count();
      else sampled += w * std::chrono::duration<double>(t - last_t).count();
      last_w = w;
      last_t = t;
      watts_sum += w;
      ++samples;
    }
    if (t >= end) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double window = std::chrono::duration<double>(Clock::now() - t0).count();
  nvml.energy(nvml.dev, &mj1);
  const auto [h1, source1] = hcr_joules();
  const uint64_t gemms = done.load() - gemms0;
  stop = true;
  load.join();

  const double hcr_j = h1 - h0, counter_j = static_cast<double>(mj1 - mj0) * 1e-3;
  std::printf("nvml_energy_bench: GPU %s, f32 gemm n=%zu, %.2f s window after %.1f s warm-up\n",
              bus_id, n, window, warmup);
  std::printf("load: %llu gemms in the window, %.1f TFLOP/s\n",
              static_cast<unsigned long long>(gemms), 2.0 * n * n * n * gemms / window * 1e-12);
  std::printf("hcr (%s): %.1f J   counter: %.1f J   sampled power integrated: %.1f J "
              "(%zu samples, mean %.1f W)\n",
              source.c_str(), hcr_j, counter_j, sampled, samples,
              samples ? watts_sum / samples : 0);
  std::printf("hcr/sampled = %.4f   hcr/counter = %.4f   (within 5%%: %s)\n", hcr_j / sampled,
              hcr_j / counter_j, std::abs(hcr_j / sampled - 1) <= 0.05 ? "yes" : "NO");
  return 0;
}
