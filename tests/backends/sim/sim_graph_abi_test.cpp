// Device graphs (ABI 1.2) on the simulated backend at the plugin ABI: edges followed over device
// memory, a failing node skipping its successors only, arguments checked naming the node, and a
// graph created before its data is on the device.
#include "sim_plugin_support.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace hcr::test {
namespace {

// x = x * mul + add over a 1 x n f32 vector (params: float mul, float add); logs its token.
struct GraphLog {
  std::mutex mutex;
  std::vector<int> order;  // host_token of each node, in the order they ran
  void add(const hcr_exec_context_t* ctx) {
    std::lock_guard<std::mutex> lock(mutex);
    order.push_back(static_cast<int>(reinterpret_cast<intptr_t>(ctx->host_token)));
  }
  size_t position(int node) {
    std::lock_guard<std::mutex> lock(mutex);
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i] == node) return i;
    return order.size();
  }
};

int affine(void* user, const hcr_exec_context_t* ctx, char*, size_t) {
  float p[2];
  std::memcpy(p, ctx->params, sizeof p);
  auto* x = static_cast<float*>(ctx->args[0].host);
  for (uint64_t i = 0; i < ctx->args[0].cols; ++i) x[i] = x[i] * p[0] + p[1];
  static_cast<GraphLog*>(user)->add(ctx);
  return 0;
}

// args[0] += args[1].
int accumulate(void* user, const hcr_exec_context_t* ctx, char*, size_t) {
  auto* x = static_cast<float*>(ctx->args[0].host);
  const auto* y = static_cast<const float*>(ctx->args[1].host);
  for (uint64_t i = 0; i < ctx->args[0].cols; ++i) x[i] += y[i];
  static_cast<GraphLog*>(user)->add(ctx);
  return 0;
}

int graph_fails(void* user, const hcr_exec_context_t* ctx, char* message, size_t size) {
  static_cast<GraphLog*>(user)->add(ctx);
  std::snprintf(message, size, "node failure on purpose");
  return 1;
}

/// A graph under construction: nodes with their own arguments and successors.
struct GraphSpec {
  struct Node {
    hcr_kernel_t* kernel;
    std::vector<hcr_arg_t> args;
    std::vector<float> params;
    std::vector<uint32_t> successors;
  };
  std::vector<Node> nodes;
  std::vector<uint32_t> offsets = {0, 4};

  std::vector<hcr_arg_t> all_args() const {
    std::vector<hcr_arg_t> out;
    for (auto& n : nodes) out.insert(out.end(), n.args.begin(), n.args.end());
    return out;
  }
  std::pair<Status, hcr_graph_t*> create(Sim& sim, size_t device) const {
    std::vector<hcr_graph_node_t> ns;
    for (size_t i = 0; i < nodes.size(); ++i) {
      hcr_graph_node_t n{};
      n.struct_size = HCR_GRAPH_NODE_STRUCT_SIZE;
      n.kernel = nodes[i].kernel;
      n.num_args = nodes[i].args.size();
      n.params = nodes[i].params.empty() ? nullptr : nodes[i].params.data();
      n.params_size = nodes[i].params.size() * sizeof(float);
      n.param_offsets = offsets.data();
      n.num_params = nodes[i].params.size();
      n.host_token = reinterpret_cast<void*>(static_cast<intptr_t>(i));
      n.successors = nodes[i].successors.data();
      n.num_successors = nodes[i].successors.size();
      ns.push_back(n);
    }
    std::vector<hcr_arg_t> args = all_args();
    hcr_graph_create_args_t a{};
    a.struct_size = HCR_GRAPH_CREATE_ARGS_STRUCT_SIZE;
    a.device = device;
    a.nodes = ns.data();
    a.num_nodes = ns.size();
    a.args = args.data();
    a.num_args = args.size();
    Status s = take(sim.api()->graph_create(sim.handle(), &a));
    return {s, a.graph};
  }
};

/// Launches `g` with `args` and waits; the node index the plugin reported failing, if any.
Status launch_graph(Sim& sim, hcr_graph_t* g, const std::vector<hcr_arg_t>& args, Done& done,
                    uint64_t* failed_node = nullptr) {
  hcr_graph_launch_args_t a{};
  a.struct_size = HCR_GRAPH_LAUNCH_ARGS_STRUCT_SIZE;
  a.graph = g;
  a.args = args.data();
  a.num_args = args.size();
  a.flags = HCR_LAUNCH_MEASURE;
  a.done = &Done::fn;
  a.done_user_data = &done;
  a.failed_node = failed_node;
  Status s = take(sim.api()->graph_launch(sim.handle(), &a));
  if (s.code == 0) {
    EXPECT_TRUE(done.wait());
  }
  return s;
}

// A fork/join graph over device memory: the edges order the nodes, the results come out as the
// nodes run one by one in that order, and a second launch on other allocations (a replay's new
// buffers) computes in those. The modelled time is the critical path, not the sum of the nodes.
TEST_F(SimPlugin, DeviceGraphFollowsItsEdgesOnDeviceMemory) {
  Sim sim({{"time_scale", "0.001"},
           {"device.0.name", "discrete"},
           {"device.0.concurrency", "2"},
           {"device.0.launch_overhead", "0.01"},
           {"device.0.noise", "0"}});
  const size_t n = 8;
  GraphLog log;
  auto [s1, aff] = sim.kernel(0, "affine", HCR_IMPL_HOST_FUNCTION, &affine, &log);
  auto [s2, acc] = sim.kernel(0, "accumulate", HCR_IMPL_HOST_FUNCTION, &accumulate, &log);
  ASSERT_EQ(s1.code + s2.code, 0) << s1.message << s2.message;
  hcr_memory_t* mem[4];
  for (auto& m : mem) m = sim.alloc(0, n * 4).second;
  auto upload = [&](hcr_memory_t* m, float base) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
    sim.copy_sync(0, {nullptr, v.data(), 0, 0}, {m, nullptr, 0, 0}, n * 4, 1);
  };
  auto rw = [&](hcr_memory_t* m) {
    return matrix(m, 0, HCR_DTYPE_F32, 1, n, n, HCR_ACCESS_READ_WRITE);
  };
  auto rd = [&](hcr_memory_t* m) { return matrix(m, 0, HCR_DTYPE_F32, 1, n, n, HCR_ACCESS_READ); };
  // 0: a = 2a + 1   1: b = 3b      2: a += b (after 0 and 1)      3: a = a - 5 (after 2)
  GraphSpec g;
  g.nodes = {{aff, {rw(mem[0])}, {2, 1}, {2}},
             {aff, {rw(mem[1])}, {3, 0}, {2}},
             {acc, {rw(mem[0]), rd(mem[1])}, {}, {3}},
             {aff, {rw(mem[0])}, {1, -5}, {}}};
  auto [cs, graph] = g.create(sim, 0);
  ASSERT_EQ(cs.code, 0) << cs.message;
  ASSERT_NE(graph, nullptr);

  auto expect = [&](hcr_memory_t* a, float base_a, float base_b) {
    std::vector<float> out(n);
    sim.copy_sync(0, {a, nullptr, 0, 0}, {nullptr, out.data(), 0, 0}, n * 4, 1);
    for (size_t i = 0; i < n; ++i) {
      const float x = base_a + static_cast<float>(i), y = base_b + static_cast<float>(i);
      EXPECT_EQ(out[i], (2 * x + 1) + 3 * y - 5) << i;
    }
  };
  for (int round = 0; round < 2; ++round) {
    // Round 1 binds the other two allocations: the nodes must compute in those.
    hcr_memory_t* a = mem[2 * round];
    hcr_memory_t* b = mem[2 * round + 1];
    upload(a, 10.0f * round);
    upload(b, 100.0f);
    GraphSpec bound = g;
    bound.nodes[0].args = {rw(a)};
    bound.nodes[1].args = {rw(b)};
    bound.nodes[2].args = {rw(a), rd(b)};
    bound.nodes[3].args = {rw(a)};
    {
      std::lock_guard<std::mutex> lock(log.mutex);
      log.order.clear();
    }
    Done d;
    ASSERT_EQ(launch_graph(sim, graph, bound.all_args(), d).code, 0);
    ASSERT_EQ(d.status().code, 0) << d.status().message;
    EXPECT_EQ(d.calls(), 1);
    ASSERT_EQ(log.order.size(), 4u);
    EXPECT_LT(log.position(0), log.position(2));
    EXPECT_LT(log.position(1), log.position(2));
    EXPECT_LT(log.position(2), log.position(3));
    // Each node models 0.01 s (real seconds: times time_scale): 0 and 1 side by side, then 2,
    // then 3.
    EXPECT_NEAR(d.seconds(), 0.03 * 0.001, 1e-9);
    expect(a, 10.0f * round, 100.0f);
  }
  ASSERT_EQ(sim.synchronize(0).code, 0);
  sim.api()->graph_release(sim.handle(), graph);
  for (auto& m : mem) sim.free(0, m);
}

// A failing node: done once with its error and index; its successors (and theirs) are skipped,
// the independent branch still runs.
TEST_F(SimPlugin, DeviceGraphNodeFailureSkipsItsSuccessorsOnly) {
  Sim sim({{"time_scale", "0.001"}, {"device.0.name", "discrete"}});
  const size_t n = 4;
  GraphLog log;
  auto [s1, aff] = sim.kernel(0, "affine", HCR_IMPL_HOST_FUNCTION, &affine, &log);
  auto [s2, bad] = sim.kernel(0, "fails", HCR_IMPL_HOST_FUNCTION, &graph_fails, &log);
  ASSERT_EQ(s1.code + s2.code, 0);
  hcr_memory_t* a = sim.alloc(0, n * 4).second;
  hcr_memory_t* b = sim.alloc(0, n * 4).second;
  auto rw = [&](hcr_memory_t* m) {
    return matrix(m, 0, HCR_DTYPE_F32, 1, n, n, HCR_ACCESS_READ_WRITE);
  };
  // 0 -> 1 (fails) -> 2 -> 3; 4 independent.
  GraphSpec g;
  g.nodes = {{aff, {rw(a)}, {1, 1}, {1}},
             {bad, {rw(a)}, {}, {2}},
             {aff, {rw(a)}, {1, 1}, {3}},
             {aff, {rw(a)}, {1, 1}, {}},
             {aff, {rw(b)}, {1, 1}, {}}};
  auto [cs, graph] = g.create(sim, 0);
  ASSERT_EQ(cs.code, 0) << cs.message;
  Done d;
  uint64_t failed = 99;
  ASSERT_EQ(launch_graph(sim, graph, g.all_args(), d, &failed).code, 0);
  ASSERT_EQ(sim.synchronize(0).code, 0);
  EXPECT_EQ(d.calls(), 1);
  EXPECT_EQ(d.status().code, HCR_ERROR_KERNEL);
  EXPECT_NE(d.status().message.find("node failure on purpose"), std::string::npos)
      << d.status().message;
  EXPECT_EQ(failed, 1u);
  EXPECT_EQ(log.order.size(), 3u);
  EXPECT_LT(log.position(0), 3u);
  EXPECT_LT(log.position(1), 3u);
  EXPECT_LT(log.position(4), 3u);
  EXPECT_EQ(log.position(2), 3u) << "a successor of the failed node ran";
  EXPECT_EQ(log.position(3), 3u) << "a successor of a skipped node ran";
  sim.api()->graph_release(sim.handle(), graph);
  sim.free(0, a);
  sim.free(0, b);
}

// graph_create checks each node as its launch would, naming the node; so does graph_launch the
// arguments' count.
TEST_F(SimPlugin, DeviceGraphArgumentsAreCheckedNamingTheNode) {
  Sim sim({{"time_scale", "0.001"}, {"device.0.name", "one"}, {"device.1.name", "two"}});
  GraphLog log;
  auto [s1, aff] = sim.kernel(0, "affine", HCR_IMPL_HOST_FUNCTION, &affine, &log);
  ASSERT_EQ(s1.code, 0);
  hcr_memory_t* here = sim.alloc(0, 64).second;
  hcr_memory_t* there = sim.alloc(1, 64).second;
  GraphSpec g;
  g.nodes = {{aff, {matrix(here, 0, HCR_DTYPE_F32, 1, 4, 4, HCR_ACCESS_READ_WRITE)}, {1, 1}, {1}},
             {aff, {matrix(there, 0, HCR_DTYPE_F32, 1, 4, 4, HCR_ACCESS_READ_WRITE)}, {1, 1}, {}}};
  auto [cs, graph] = g.create(sim, 0);
  EXPECT_EQ(cs.code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(cs.message.find("graph node 1: argument 0"), std::string::npos) << cs.message;
  EXPECT_EQ(graph, nullptr);
  g.nodes[1].args[0].memory = here;
  auto [ok, good] = g.create(sim, 0);
  ASSERT_EQ(ok.code, 0) << ok.message;
  Done d;
  std::vector<hcr_arg_t> short_args = g.all_args();
  short_args.pop_back();
  Status ls = launch_graph(sim, good, short_args, d);
  EXPECT_EQ(ls.code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(d.calls(), 0);
  sim.api()->graph_release(sim.handle(), good);
  sim.free(0, here);
  sim.free(1, there);
}

// A graph created before its data is on the device (arguments without memory, as the runtime
// creates them): accepted, and each launch computes in the memory it hands.
TEST_F(SimPlugin, DeviceGraphMayBeCreatedBeforeItsDataIsPlaced) {
  Sim sim({{"time_scale", "0.001"}, {"device.0.name", "discrete"}});
  const size_t n = 4;
  GraphLog log;
  auto [s1, aff] = sim.kernel(0, "affine", HCR_IMPL_HOST_FUNCTION, &affine, &log);
  ASSERT_EQ(s1.code, 0);
  hcr_memory_t* a = sim.alloc(0, n * 4).second;
  std::vector<float> v = {1, 2, 3, 4};
  sim.copy_sync(0, {nullptr, v.data(), 0, 0}, {a, nullptr, 0, 0}, n * 4, 1);
  auto arg = [&](hcr_memory_t* m) {
    return matrix(m, 0, HCR_DTYPE_F32, 1, n, n, HCR_ACCESS_READ_WRITE);
  };
  GraphSpec g;
  g.nodes = {{aff, {arg(nullptr)}, {2, 0}, {1}}, {aff, {arg(nullptr)}, {1, 3}, {}}};
  auto [cs, graph] = g.create(sim, 0);
  ASSERT_EQ(cs.code, 0) << cs.message;
  g.nodes[0].args = {arg(a)};
  g.nodes[1].args = {arg(a)};
  Done d;
  ASSERT_EQ(launch_graph(sim, graph, g.all_args(), d).code, 0);
  ASSERT_EQ(d.status().code, 0) << d.status().message;
  std::vector<float> out(n);
  sim.copy_sync(0, {a, nullptr, 0, 0}, {nullptr, out.data(), 0, 0}, n * 4, 1);
  EXPECT_EQ(out, (std::vector<float>{5, 7, 9, 11}));
  sim.api()->graph_release(sim.handle(), graph);
  sim.free(0, a);
}

}  // namespace
}  // namespace hcr::test
