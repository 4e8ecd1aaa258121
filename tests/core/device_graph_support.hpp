// Helpers of the device graph tests (device_graph_test on the CPU backend, device_graph_sim_test on
// a simulated device with its own memory): their runtimes, with device graphs on or off to compare
// against, and the kernel and buffers their recorded shapes use.
#pragma once

#include "../test_support.hpp"

#include <cstdint>
#include <functional>
#include <vector>

namespace hcr::test::device_graph {

/// `threads` CPU workers; device graphs on, or off for the same replays run task by task.
inline Config cpu(int threads, bool device_graphs = true) {
  Config c = test::cpu_config(threads);
  c.model_dir = "off";
  c.device_graphs = device_graphs;
  return c;
}

/// One simulated device with its own memory, computing for real, its modelled time scaled down.
inline Config sim_device(bool device_graphs) {
  Config c;
  c.use_environment = false;
  c.policy = "eager";
  c.model_dir = "off";
  c.device_graphs = device_graphs;
  c.backends.push_back({"sim",
                        true,
                        {{"time_scale", "0.001"},
                         {"device.0.launch_overhead", "0.05"},  // 50 us a launch, real time
                         {"device.0.latency", "0.05"},          // and a copy
                         {"device.0.name", "discrete"},
                         {"device.0.concurrency", "2"}},
                        "test"});
  return c;
}

inline void fill(Buffer<int64_t>& b, int64_t v) {
  auto h = b.acquire(Access::write);
  for (size_t i = 0; i < b.cols(); ++i) h(0, i) = v + static_cast<int64_t>(i);
}

/// out = 3 * (sum of the inputs) + p, element by element (mod a prime, to stay finite): the last
/// argument is written, every other one read.
inline Kernel mix_kernel(Runtime& rt) {
  return rt.kernel("mix").cpu([](TaskContext& ctx) {
    const size_t n = ctx.num_args();
    auto out = ctx.arg<int64_t>(n - 1);
    for (size_t c = 0; c < out.cols; ++c) {
      int64_t s = 0;
      for (size_t a = 0; a + 1 < n; ++a) s += ctx.arg<int64_t>(a)(0, c);
      out(0, c) = (3 * s + ctx.param<int64_t>(0)) % 1000003;
    }
  });
}

/// A graph shape over `bufs`: the tasks it submits, recorded.
using Shape = std::function<void(Runtime&, Kernel&, std::vector<Buffer<int64_t>>&)>;

}  // namespace hcr::test::device_graph
