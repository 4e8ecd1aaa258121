// The CPU backend's device graphs at the plugin ABI (1.2), loaded with dlopen as the runtime loads
// it: every node runs once, after its predecessors, with its own host token; a failed node's
// successors (and theirs) are skipped while the others run, the failure named by *failed_node;
// done comes once per launch, and a graph launches again and again.
#include <hcr/plugin.h>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace {

const hcr_plugin_api_t* cpu_api() {
  static const hcr_plugin_api_t* api = [] {
    void* lib = dlopen(HCR_TEST_PLUGIN_DIR "/libhcr-cpu.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return static_cast<const hcr_plugin_api_t*>(nullptr);
    auto get = reinterpret_cast<hcr_plugin_get_api_fn>(dlsym(lib, HCR_PLUGIN_ENTRY_SYMBOL));
    return get ? get() : nullptr;
  }();
  return api;
}

std::string take(hcr_error_t* e, int* code = nullptr) {
  if (e == nullptr) return {};
  if (code != nullptr) *code = static_cast<int>(cpu_api()->error_code(e));
  std::string m = cpu_api()->error_message(e);
  cpu_api()->error_destroy(e);
  return m;
}

// What the nodes did: the order they ran in (their tokens are indices into `ran`), and which fail.
struct Log {
  std::mutex mutex;
  std::vector<int> order;
  std::vector<int> fails;
};
struct Token {
  Log* log;
  int index;
};

int node_fn(void*, const hcr_exec_context_t* ctx, char* message, size_t size) {
  auto* t = static_cast<Token*>(ctx->host_token);
  std::lock_guard<std::mutex> lock(t->log->mutex);
  t->log->order.push_back(t->index);
  for (int f : t->log->fails)
    if (f == t->index) {
      std::snprintf(message, size, "node %d failed", t->index);
      return 1;
    }
  return 0;
}

struct Done {
  std::mutex mutex;
  std::condition_variable cv;
  int calls = 0;
  int code = 0;
  std::string message;
  double seconds = -1;
  static void fn(void* user, hcr_error_t* error, const hcr_completion_info_t* info) {
    auto* d = static_cast<Done*>(user);
    int code = 0;
    std::string m = take(error, &code);
    std::lock_guard<std::mutex> lock(d->mutex);
    ++d->calls;
    d->code = code;
    d->message = m;
    d->seconds = info != nullptr ? info->device_seconds : -1;
    d->cv.notify_all();
  }
  bool wait() {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return calls > 0; });
  }
};

class CpuGraphAbi : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = cpu_api();
    ASSERT_NE(api_, nullptr) << dlerror();
    ASSERT_GE(api_->struct_size, HCR_PLUGIN_API_STRUCT_SIZE);
    ASSERT_NE(api_->graph_create, nullptr);
    hcr_option_t threads{HCR_OPTION_STRUCT_SIZE, "threads", "2"};
    hcr_plugin_create_args_t a{};
    a.struct_size = HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE;
    a.options = &threads;
    a.num_options = 1;
    a.library_path = "libhcr-cpu.so";
    ASSERT_EQ(take(api_->plugin_create(&a)), "");
    p_ = a.plugin;
    hcr_kernel_desc_t desc{};
    desc.struct_size = HCR_KERNEL_DESC_STRUCT_SIZE;
    desc.name = "node";
    desc.kind = HCR_IMPL_HOST_FUNCTION;
    desc.api = "host";
    desc.fn = &node_fn;
    hcr_kernel_get_args_t k{};
    k.struct_size = HCR_KERNEL_GET_ARGS_STRUCT_SIZE;
    k.desc = &desc;
    ASSERT_EQ(take(api_->kernel_get(p_, &k)), "");
    kernel_ = k.kernel;
  }
  void TearDown() override {
    if (p_ == nullptr) return;
    api_->kernel_release(p_, kernel_);
    api_->plugin_destroy(p_);
  }

  // A graph of `n` nodes with these edges (from, to), each node's token its index.
  hcr_graph_t* create(int n, const std::vector<std::pair<uint32_t, uint32_t>>& edges,
                      int* code = nullptr) {
    tokens_.clear();
    for (int i = 0; i < n; ++i) tokens_.push_back({&log_, i});
    successors_.assign(static_cast<size_t>(n), {});
    for (auto [from, to] : edges) successors_[from].push_back(to);
    std::vector<hcr_graph_node_t> nodes(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      hcr_graph_node_t& node = nodes[static_cast<size_t>(i)];
      node.struct_size = HCR_GRAPH_NODE_STRUCT_SIZE;
      node.kernel = kernel_;
      node.host_token = &tokens_[static_cast<size_t>(i)];
      node.successors = successors_[static_cast<size_t>(i)].data();
      node.num_successors = successors_[static_cast<size_t>(i)].size();
    }
    hcr_graph_create_args_t a{};
    a.struct_size = HCR_GRAPH_CREATE_ARGS_STRUCT_SIZE;
    a.nodes = nodes.data();
    a.num_nodes = nodes.size();
    const std::string error = take(api_->graph_create(p_, &a), code);
    if (code == nullptr) {
      EXPECT_EQ(error, "");
    }
    return a.graph;
  }
  // One launch, waited for: what done said, and the failed node.
  uint64_t launch(hcr_graph_t* g, Done& done) {
    uint64_t failed = UINT64_MAX;
    hcr_graph_launch_args_t a{};
    a.struct_size = HCR_GRAPH_LAUNCH_ARGS_STRUCT_SIZE;
    a.graph = g;
    a.flags = HCR_LAUNCH_MEASURE;
    a.done = &Done::fn;
    a.done_user_data = &done;
    a.failed_node = &failed;
    EXPECT_EQ(take(api_->graph_launch(p_, &a)), "");
    EXPECT_TRUE(done.wait());
    EXPECT_EQ(take(api_->synchronize(p_, 0)), "");
    return failed;
  }
  int position(int node) {
    for (size_t i = 0; i < log_.order.size(); ++i)
      if (log_.order[i] == node) return static_cast<int>(i);
    return -1;
  }

  const hcr_plugin_api_t* api_ = nullptr;
  hcr_plugin_t* p_ = nullptr;
  hcr_kernel_t* kernel_ = nullptr;
  Log log_;
  std::vector<Token> tokens_;
  std::vector<std::vector<uint32_t>> successors_;
};

// Two diamonds in a row and three lone nodes, launched five times: each launch runs every node
// once, after its predecessors, and calls done once, with the graph's time.
TEST_F(CpuGraphAbi, EveryNodeRunsOnceAfterItsPredecessors) {
  const std::vector<std::pair<uint32_t, uint32_t>> edges = {{0, 1}, {0, 2}, {1, 3}, {2, 3},
                                                            {3, 4}, {3, 5}, {4, 6}, {5, 6}};
  hcr_graph_t* g = create(10, edges);
  ASSERT_NE(g, nullptr);
  for (int round = 0; round < 5; ++round) {
    log_.order.clear();
    Done done;
    launch(g, done);
    EXPECT_EQ(done.calls, 1);
    EXPECT_EQ(done.code, 0) << done.message;
    EXPECT_GE(done.seconds, 0);
    ASSERT_EQ(log_.order.size(), 10u);
    for (int i = 0; i < 10; ++i) EXPECT_GE(position(i), 0) << i;
    for (auto [from, to] : edges) EXPECT_LT(position(int(from)), position(int(to)));
  }
  api_->graph_release(p_, g);
}

// Node 1 fails: 3 and 4 after it are skipped, the others (its sibling 2, the lone 5) run; done
// reports the failure, *failed_node names 1. The next launch, without the failure, runs all.
TEST_F(CpuGraphAbi, FailedNodeSkipsWhatFollowsIt) {
  hcr_graph_t* g = create(6, {{0, 1}, {0, 2}, {1, 3}, {2, 3}, {3, 4}});
  ASSERT_NE(g, nullptr);
  log_.fails = {1};
  Done done;
  EXPECT_EQ(launch(g, done), 1u);
  EXPECT_EQ(done.calls, 1);
  EXPECT_EQ(done.code, HCR_ERROR_KERNEL);
  EXPECT_NE(done.message.find("node 1 failed"), std::string::npos) << done.message;
  EXPECT_EQ(position(3), -1);
  EXPECT_EQ(position(4), -1);
  for (int i : {0, 1, 2, 5}) EXPECT_GE(position(i), 0) << i;
  log_.fails.clear();
  log_.order.clear();
  Done again;
  launch(g, again);
  EXPECT_EQ(again.code, 0) << again.message;
  EXPECT_EQ(log_.order.size(), 6u);
  api_->graph_release(p_, g);
}

// Edges must go from a node to a later one (the SDK checks what the ABI promises).
TEST_F(CpuGraphAbi, BackwardEdgeIsRefused) {
  int code = 0;
  EXPECT_EQ(create(3, {{2, 1}}, &code), nullptr);
  EXPECT_EQ(code, HCR_ERROR_INVALID_ARGUMENT);
}

}  // namespace
