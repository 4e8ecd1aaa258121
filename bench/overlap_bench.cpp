// Transfers overlapping computation: a stream of independent tasks on a simulated device with its
// own memory, each reading a fresh input whose copy takes as long as the kernel. With prefetch and
// lookahead (the defaults) the copy of the next task's input runs while the current one computes;
// with both off every copy waits for the device, then the kernel for the copy: back to back.
// A bench program: medians of interleaved runs in one process, and their ratio.
//
//   overlap_bench [--tasks N] [--runs R]
#include <hcr/hcr.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// 4 MiB inputs over a 2 GB/s link: 2.1 ms per copy; 2.1e6 flops at 1 GFLOP/s: 2.1 ms per kernel.
constexpr size_t kInputFloats = size_t{1} << 20;
const char* kLinkBandwidth = "2GB/s";
const char* kKernelFlops = "2.097e6";

hcr::Config machine(bool overlap) {
  hcr::Config c;
  c.use_environment = false;
  c.model_dir = "off";
  c.policy = "eager";
  c.prefetch = overlap;
  c.lookahead = overlap ? -1 : 0;
  c.backends.push_back({"sim",
                        true,
                        {{"compute", "false"},  // timing only: no host memcpy in the way
                         {"kernel.consume.flops", kKernelFlops},
                         {"kernel.consume.flops_per_byte", "0"},
                         {"device.0.name", "accel"},
                         {"device.0.gflops", "1"},
                         {"device.0.bandwidth", kLinkBandwidth},
                         {"device.0.latency", "0"}},
                        "overlap_bench"});
  return c;
}

// Seconds from the first submit to the last task's end, and the copy and kernel time summed.
struct Result {
  double makespan, copy_seconds, kernel_seconds;
};

Result run(bool overlap, int tasks) {
  hcr::Runtime rt(machine(overlap));
  hcr::Kernel k = rt.kernel("consume").cpu([](hcr::TaskContext&) {});
  std::vector<hcr::Buffer<float>> inputs, outputs;
  for (int i = 0; i < tasks; ++i) {
    inputs.push_back(rt.vector<float>(kInputFloats));
    outputs.push_back(rt.vector<float>(1));
  }
  rt.start_trace();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < tasks; ++i) rt.submit(hcr::Task(k).read(inputs[i]).write(outputs[i]));
  rt.wait_all();
  const double makespan =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Result r{makespan, 0, 0};
  for (const hcr::TraceEvent& e : rt.trace_events()) {
    if (e.kind == hcr::TraceEvent::Kind::transfer) r.copy_seconds += e.end - e.start;
    if (e.kind == hcr::TraceEvent::Kind::task) r.kernel_seconds += e.end - e.start;
  }
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int tasks = 100, runs = 5;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--tasks") == 0) tasks = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::max(1, std::atoi(argv[i + 1]));
  }
  std::vector<double> on, off, copies, kernels;
  for (int r = 0; r < runs; ++r) {  // interleaved: drift on a shared machine hits both alike
    Result a = run(true, tasks), b = run(false, tasks);
    on.push_back(a.makespan);
    off.push_back(b.makespan);
    copies.push_back(a.copy_seconds / tasks);
    kernels.push_back(a.kernel_seconds / tasks);
  }
  std::printf(
      "%d tasks, each a %.1f MiB input copy (%.2f ms) and a kernel (%.2f ms); median of %d\n",
      tasks, kInputFloats * 4.0 / (1 << 20), median(copies) * 1e3, median(kernels) * 1e3, runs);
  std::printf("%-44s %10.1f ms\n", "back to back (prefetch off, lookahead 0)", median(off) * 1e3);
  std::printf("%-44s %10.1f ms\n", "overlapped (prefetch on, lookahead = slots)", median(on) * 1e3);
  std::printf("%-44s %10.2f\n", "ratio overlapped / back to back", median(on) / median(off));
  return 0;
}
