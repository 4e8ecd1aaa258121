// Implicit dependencies from access order (read-after-write, write-after-read, write-after-write)
// over thousands of random tasks, checked against running the same tasks one by one. Every task
// also records what it read, so a reader that saw a newer or older version is caught even when
// the final state would hide it.
#include "../test_support.hpp"

#include <random>

namespace hcr {
namespace {

constexpr size_t kElems = 4;

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

struct ArgSpec {
  size_t buffer;
  Access mode;
};
struct TaskSpec {
  std::vector<ArgSpec> args;
};

// The operation every task performs: hash everything it reads (with its id), then overwrite
// (write) or fold into (read_write) every buffer it writes.
uint64_t run_op(uint64_t id, const std::vector<std::pair<int64_t*, Access>>& args) {
  uint64_t h = mix(0x1234, id);
  for (auto& [p, mode] : args)
    if (reads(mode))
      for (size_t j = 0; j < kElems; ++j) h = mix(h, static_cast<uint64_t>(p[j]));
  for (auto& [p, mode] : args)
    if (writes(mode))
      for (size_t j = 0; j < kElems; ++j)
        p[j] = static_cast<int64_t>(mix(h, j + (reads(mode) ? static_cast<uint64_t>(p[j]) : 0)));
  return h;
}

std::vector<TaskSpec> random_tasks(size_t count, size_t buffers, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<TaskSpec> tasks(count);
  for (auto& t : tasks) {
    size_t n = 1 + gen() % 3;
    std::vector<size_t> picked;
    while (picked.size() < n) {
      size_t b = gen() % buffers;
      if (std::find(picked.begin(), picked.end(), b) == picked.end()) picked.push_back(b);
    }
    for (size_t b : picked) {
      static const Access modes[] = {Access::read, Access::read, Access::write, Access::read_write};
      t.args.push_back({b, modes[gen() % 4]});
    }
  }
  return tasks;
}

struct Param {
  const char* name;
  Config config;
};

class Dependencies : public ::testing::TestWithParam<Param> {};

TEST_P(Dependencies, RandomGraphMatchesSequentialExecution) {
  constexpr size_t kBuffers = 12, kTasks = 4000;
  auto specs = random_tasks(kTasks, kBuffers, 20261121);

  // Sequential reference.
  std::vector<std::vector<int64_t>> ref(kBuffers, std::vector<int64_t>(kElems));
  for (size_t b = 0; b < kBuffers; ++b)
    for (size_t j = 0; j < kElems; ++j) ref[b][j] = static_cast<int64_t>(b * 100 + j);
  std::vector<uint64_t> ref_seen(kTasks);
  for (size_t i = 0; i < kTasks; ++i) {
    std::vector<std::pair<int64_t*, Access>> args;
    for (auto& a : specs[i].args) args.emplace_back(ref[a.buffer].data(), a.mode);
    ref_seen[i] = run_op(i, args);
  }

  // The same through the runtime.
  Runtime rt(GetParam().config);
  std::vector<uint64_t> seen(kTasks, 0);
  Kernel op = rt.kernel("op").cpu([&](TaskContext& ctx) {
    uint64_t id = ctx.param<uint64_t>(0);
    std::vector<std::pair<int64_t*, Access>> args;
    for (size_t i = 0; i < ctx.num_args(); ++i)
      args.emplace_back(ctx.arg<int64_t>(i).data, static_cast<Access>(ctx.raw().args[i].access));
    seen[id] = run_op(id, args);
  });
  std::vector<Buffer<int64_t>> bufs;
  for (size_t b = 0; b < kBuffers; ++b) {
    bufs.push_back(rt.vector<int64_t>(kElems));
    auto v = bufs.back().acquire(Access::write);
    for (size_t j = 0; j < kElems; ++j) v(0, j) = static_cast<int64_t>(b * 100 + j);
  }
  for (size_t i = 0; i < kTasks; ++i) {
    Task t(op);
    for (auto& a : specs[i].args) t.arg(bufs[a.buffer], a.mode);
    rt.submit(t.param(static_cast<uint64_t>(i)));
  }
  for (size_t b = 0; b < kBuffers; ++b) EXPECT_EQ(bufs[b].to_vector(), ref[b]) << "buffer " << b;
  rt.wait_all();
  size_t wrong = 0;
  for (size_t i = 0; i < kTasks; ++i) wrong += seen[i] != ref_seen[i];
  EXPECT_EQ(wrong, 0u) << "tasks that read a version other than sequential order gives";
}

std::vector<Param> params() {
  Config inline_stub = test::stub_config({{"devices", "3"}});
  return {{"cpu1", test::cpu_config(1)},
          {"cpu2", test::cpu_config(2)},
          {"cpu4", test::cpu_config(4)},
          {"stub_inline_3dev", inline_stub}};
}

INSTANTIATE_TEST_SUITE_P(Runtime, Dependencies, ::testing::ValuesIn(params()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ExplicitDependencies, ChainWithoutBuffersRunsInOrder) {
  Runtime rt(test::cpu_config(4));
  std::vector<int> order;
  std::mutex m;
  Kernel step = rt.kernel("step").cpu([&](TaskContext& ctx) {
    std::lock_guard<std::mutex> lock(m);
    order.push_back(ctx.param<int>(0));
  });
  Event prev;
  for (int i = 0; i < 500; ++i) prev = rt.submit(Task(step).param(i).after(prev));
  prev.get();
  ASSERT_EQ(order.size(), 500u);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(order[i], i);
}

TEST(ExplicitDependencies, FanInWaitsForAll) {
  Runtime rt(test::cpu_config(2));
  std::atomic<int> done{0};
  int seen_at_join = -1;
  Kernel leaf = rt.kernel("leaf").cpu([&](TaskContext&) { done.fetch_add(1); });
  Kernel join = rt.kernel("join").cpu([&](TaskContext&) { seen_at_join = done.load(); });
  Task j(join);
  for (int i = 0; i < 64; ++i) j.after(rt.submit(Task(leaf)));
  rt.submit(j).get();
  EXPECT_EQ(seen_at_join, 64);
}

}  // namespace
}  // namespace hcr
