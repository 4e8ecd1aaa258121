// The OpenCL backend against the CLBlast call it makes, on the same OpenCL device (PoCL on a
// machine without GPU), in one process:
//
//   build/bin/opencl_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only
//
// One iteration = one direct clblast::Gemm<float> (n = 2048, row-major, data resident on the
// device) and the same product as an hcr task pinned to the OpenCL device (its buffers resident
// there after the first round), in alternating order so that the drift of a shared machine
// cancels. Read hcr_over_direct (direct time / hcr time; 1 is parity).
//
// The cold/warm start of the backend is measured in fresh processes:
//
//   build/bin/opencl_bench --first-gemm [--n 512]   # one process: start, first and second gemm
//   bench/opencl_cold_warm.sh build/bin/opencl_bench  # empty caches, then warm ones
#include <hcr/hcr.hpp>

#include <CL/cl.h>
#include <benchmark/benchmark.h>
#include <clblast.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr size_t kN = 2048;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check(cl_int err, const char* what) {
  if (err != CL_SUCCESS)
    throw std::runtime_error(std::string(what) + " failed: " + std::to_string(err));
}

/// A runtime with only the OpenCL backend, every device type (PoCL is a CPU device).
hcr::Config opencl_only() {
  hcr::Config c;
  c.use_environment = false;
  c.backends.push_back({"opencl", true, {{"device_types", "all"}}, "bench"});
  return c;
}

// By value: Runtime::devices() is a snapshot (a pointer into it dangled once it became one).
std::optional<hcr::Device> first_opencl(const hcr::Runtime& rt) {
  for (const hcr::Device& d : rt.devices())
    if (d.backend == "opencl") return d;
  return std::nullopt;
}

/// The direct side: its own context and in-order queue on the device named `name`.
struct Direct {
  cl_context ctx = nullptr;
  cl_command_queue queue = nullptr;
  cl_mem a = nullptr, b = nullptr, c = nullptr;

  Direct(const std::string& name, const std::vector<float>& ha, const std::vector<float>& hb,
         const std::vector<float>& hc) {
    cl_uint np = 0;
    check(clGetPlatformIDs(0, nullptr, &np), "clGetPlatformIDs");
    std::vector<cl_platform_id> ps(np);
    check(clGetPlatformIDs(np, ps.data(), nullptr), "clGetPlatformIDs");
    cl_device_id dev = nullptr;
    for (cl_platform_id p : ps) {
      cl_uint nd = 0;
      if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS) continue;
      std::vector<cl_device_id> ds(nd);
      check(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, ds.data(), nullptr), "clGetDeviceIDs");
      for (cl_device_id d : ds) {
        char buf[512] = {0};
        clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof buf - 1, buf, nullptr);
        if (dev == nullptr && name == buf) dev = d;
      }
    }
    if (dev == nullptr) throw std::runtime_error("no OpenCL device named '" + name + "'");
    cl_int err = CL_SUCCESS;
    ctx = clCreateContext(nullptr, 1, &dev, nullptr, nullptr, &err);
    check(err, "clCreateContext");
    queue = clCreateCommandQueue(ctx, dev, 0, &err);
    check(err, "clCreateCommandQueue");
    const size_t bytes = kN * kN * sizeof(float);
    a = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                       const_cast<float*>(ha.data()), &err);
    check(err, "clCreateBuffer");
    b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                       const_cast<float*>(hb.data()), &err);
    check(err, "clCreateBuffer");
    c = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                       const_cast<float*>(hc.data()), &err);
    check(err, "clCreateBuffer");
  }
  ~Direct() {
    clReleaseMemObject(a);
    clReleaseMemObject(b);
    clReleaseMemObject(c);
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
  }
  void gemm() {
    auto s = clblast::Gemm<float>(clblast::Layout::kRowMajor, clblast::Transpose::kNo,
                                  clblast::Transpose::kNo, kN, kN, kN, 1.0f, a, 0, kN, b, 0, kN,
                                  0.0f, c, 0, kN, &queue, nullptr);
    if (s != clblast::StatusCode::kSuccess)
      throw std::runtime_error("clblast::Gemm: " + std::to_string(static_cast<int>(s)));
    check(clFinish(queue), "clFinish");
  }
};

void BM_SgemmHcrVsDirect(benchmark::State& state) {
  // The host matrices outlive the runtime: it writes C back into them when it ends.
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> a(kN * kN), b(kN * kN), c(kN * kN);
  for (auto& x : a) x = dist(gen);
  for (auto& x : b) x = dist(gen);
  hcr::Runtime rt(opencl_only());
  const std::optional<hcr::Device> dev = first_opencl(rt);
  if (!dev) {
    state.SkipWithError("no OpenCL device");
    return;
  }
  Direct direct(dev->name, a, b, c);
  auto A = rt.wrap(a.data(), kN, kN), B = rt.wrap(b.data(), kN, kN), C = rt.wrap(c.data(), kN, kN);
  hcr::Kernel gemm = rt.kernel("gemm_f32");
  const hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
  auto through_hcr = [&] {
    rt.submit(hcr::Task(gemm).read(A).read(B).read_write(C).param(p).on(dev->id)).get();
  };
  // First rounds outside the timing: kernels built, inputs moved to the device.
  direct.gemm();
  through_hcr();

  double t_direct = 0, t_hcr = 0;
  int64_t round = 0;
  for (auto _ : state) {
    double d = 0, h = 0;
    for (int side = 0; side < 2; ++side) {
      const bool hcr_now = (side == 0) == (round % 2 == 1);
      auto t0 = std::chrono::steady_clock::now();
      if (hcr_now) through_hcr();
      else direct.gemm();
      (hcr_now ? h : d) = seconds_since(t0);
    }
    ++round;
    t_direct += d;
    t_hcr += h;
    state.SetIterationTime(h);
  }
  const double flops = 2.0 * kN * kN * kN * static_cast<double>(state.iterations());
  state.counters["hcr_over_direct"] = t_direct / t_hcr;
  state.counters["hcr_GFLOPs"] = flops / t_hcr * 1e-9;
  state.counters["direct_GFLOPs"] = flops / t_direct * 1e-9;
  state.SetLabel(dev->name);
}
BENCHMARK(BM_SgemmHcrVsDirect)->Iterations(6)->UseManualTime()->Unit(benchmark::kMillisecond);

// One fresh start: runtime creation, then the first and second gemm of n x n on the OpenCL device
// (the first includes building CLBlast's kernels, or loading them from the caches).
int first_gemm(size_t n) {
  auto t0 = std::chrono::steady_clock::now();
  hcr::Runtime rt(opencl_only());
  const double start = seconds_since(t0);
  const std::optional<hcr::Device> dev = first_opencl(rt);
  if (!dev) {
    std::fprintf(stderr, "no OpenCL device\n");
    return 3;
  }
  auto A = rt.buffer<float>(n, n), B = rt.buffer<float>(n, n), C = rt.buffer<float>(n, n);
  const hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
  double times[2];
  for (double& t : times) {
    auto t1 = std::chrono::steady_clock::now();
    rt.submit(hcr::Task(rt.kernel("gemm_f32")).read(A).read(B).read_write(C).param(p).on(dev->id))
        .get();
    t = seconds_since(t1);
  }
  std::printf("device=\"%s\" n=%zu runtime_start_s=%.3f first_gemm_s=%.3f second_gemm_s=%.3f\n",
              dev->name.c_str(), n, start, times[0], times[1]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--first-gemm") == 0) {
      size_t n = 512;
      for (int j = 1; j + 1 < argc; ++j)
        if (std::strcmp(argv[j], "--n") == 0) n = std::strtoul(argv[j + 1], nullptr, 10);
      try {
        return first_gemm(n);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "opencl_bench: %s\n", e.what());
        return 1;
      }
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
