// Scratch space (Task::scratch): a workspace per task attempt, never copied, taken from the pool of
// the node where the task runs and counted against its memory limit. On CPU slots in host memory,
// on simulated devices with memories of their own, and on a device whose launches sometimes fail
// (placed again).
#include "../test_support.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace hcr {
namespace {

// A few microseconds inside the kernel, so that two tasks sharing a block would overlap.
void linger() {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
  while (std::chrono::steady_clock::now() < until) {
  }
}

// The scratch blocks in use by running kernels: one seen twice at once is shared.
struct InUse {
  std::mutex m;
  std::set<const void*> blocks;
  int shared = 0;
  void enter(const void* p) {
    std::lock_guard<std::mutex> g(m);
    if (!blocks.insert(p).second) ++shared;
  }
  void leave(const void* p) {
    std::lock_guard<std::mutex> g(m);
    blocks.erase(p);
  }
};

// Simulated devices with their own memories; the kernels really run. `memory`: each device's.
Config own_memories(int devices, int concurrency, const char* fail_probability = nullptr,
                    const char* memory = nullptr) {
  Config c;
  c.use_environment = false;
  c.policy = "eager";
  c.model_dir = "off";
  std::vector<std::pair<std::string, std::string>> options = {{"flops_per_byte", "0"},
                                                              {"kernel.work.flops", "1e6"}};
  for (int d = 0; d < devices; ++d) {
    const std::string p = "device." + std::to_string(d) + ".";
    options.push_back({p + "name", std::string(1, static_cast<char>('a' + d))});
    options.push_back({p + "gflops", "1000"});
    options.push_back({p + "concurrency", std::to_string(concurrency)});
    if (memory != nullptr) options.push_back({p + "memory", memory});
  }
  if (fail_probability != nullptr)
    options.push_back(
        {"device." + std::to_string(devices - 1) + ".fail_probability", fail_probability});
  c.backends.push_back({"sim", true, {options.begin(), options.end()}, "test", "100%"});
  return c;
}

constexpr size_t kWords = 1024;  // int64 words of scratch per task
constexpr size_t kIn = 16;

// out = sum over i of (in[i % kIn] * p + i), computed through the task's scratch.
int64_t expected(const std::vector<int64_t>& in, int64_t p) {
  int64_t sum = 0;
  for (size_t i = 0; i < kWords; ++i) sum += in[i % kIn] * p + static_cast<int64_t>(i);
  return sum;
}

Kernel work_kernel(Runtime& rt, InUse& in_use, std::atomic<int>& bad_args) {
  return rt.kernel("work").cpu([&](TaskContext& ctx) {
    const hcr_exec_context_t& raw = ctx.raw();
    if (raw.num_args != 3 || raw.args[1].access != HCR_ACCESS_READ_WRITE) bad_args.fetch_add(1);
    auto in = ctx.arg<int64_t>(0);
    auto s = ctx.arg<int64_t>(1);
    if (s.rows != 1 || s.cols != kWords) bad_args.fetch_add(1);
    const int64_t p = ctx.param<int64_t>(0);
    in_use.enter(s.data);
    for (size_t i = 0; i < kWords; ++i) s(0, i) = in(0, i % kIn) * p + static_cast<int64_t>(i);
    linger();
    int64_t sum = 0;
    for (size_t i = 0; i < kWords; ++i) sum += s(0, i);
    in_use.leave(s.data);
    ctx.arg<int64_t>(2)(0, 0) = sum;
  });
}

struct Param {
  const char* name;
  Config config;
};

void PrintTo(const Param& p, std::ostream* os) { *os << p.name; }

class Scratch : public ::testing::TestWithParam<Param> {};

// Many concurrent tasks compute through their scratch: every result right, no block used by two
// running tasks at once, kernels told read_write, and every block back in its pool at the end.
TEST_P(Scratch, ConcurrentTasksEachHaveTheirOwn) {
  Runtime rt(GetParam().config);
  InUse in_use;
  std::atomic<int> bad_args{0};
  Kernel work = work_kernel(rt, in_use, bad_args);
  std::vector<int64_t> values(kIn);
  for (size_t i = 0; i < kIn; ++i) values[i] = static_cast<int64_t>(i * 3 + 1);
  auto in = rt.vector<int64_t>(kIn);
  {
    auto view = in.acquire(Access::write);
    for (size_t i = 0; i < kIn; ++i) view.span()[i] = values[i];
  }
  constexpr int kTasks = 300;
  std::vector<Buffer<int64_t>> outs;
  for (int i = 0; i < kTasks; ++i) outs.push_back(rt.vector<int64_t>(1));
  std::vector<Event> events;
  for (int i = 0; i < kTasks; ++i)
    events.push_back(rt.submit(
        Task(work).read(in).scratch<int64_t>(1, kWords).write(outs[i]).param(int64_t{i})));
  for (Event& e : events) e.get();
  for (int i = 0; i < kTasks; ++i) ASSERT_EQ(outs[i].to_vector()[0], expected(values, i)) << i;
  EXPECT_EQ(in_use.shared, 0) << "two running tasks shared a scratch block";
  EXPECT_EQ(bad_args.load(), 0);
  const DataCounters dc = rt.stats().data;
  EXPECT_GT(dc.scratch_allocations, 0u);
  // One block per attempt (attempts placed again took one more each).
  if (std::string(GetParam().name) == "sim_failing_device")
    EXPECT_GE(dc.scratch_allocations + dc.scratch_reuses, static_cast<uint64_t>(kTasks));
  else EXPECT_EQ(dc.scratch_allocations + dc.scratch_reuses, static_cast<uint64_t>(kTasks));
  for (const MemoryNode& n : dc.nodes)
    EXPECT_EQ(n.scratch, n.scratch_pooled) << n.name << ": a block was never given back";
  if (std::string(GetParam().name) == "sim_failing_device") {  // some were placed again
    uint64_t failed_launches = 0;
    for (const DeviceCounters& d : rt.stats().devices) failed_launches += d.failed;
    EXPECT_GT(failed_launches, 0u);
  }
}

std::vector<Param> params() {
  return {{"cpu4", test::cpu_config(4)},
          {"sim_own_memories", own_memories(2, 2)},
          // A launch in three on "b" fails: the task is placed again, its scratch given back.
          {"sim_failing_device", own_memories(2, 2, "0.3")}};
}

INSTANTIATE_TEST_SUITE_P(Runtime, Scratch, ::testing::ValuesIn(params()),
                         [](const auto& info) { return std::string(info.param.name); });

// On devices with their own memory, scratch is never copied: tasks that only write a result
// through their scratch move nothing in, and only their results home.
TEST(ScratchData, NothingIsCopiedForScratch) {
  Runtime rt(own_memories(2, 2));
  Kernel fill = rt.kernel("work").cpu([](TaskContext& ctx) {
    auto s = ctx.arg<std::byte>(0);
    for (size_t i = 0; i < s.cols; ++i) s(0, i) = static_cast<std::byte>(i);
    int64_t sum = 0;
    for (size_t i = 0; i < s.cols; ++i) sum += static_cast<int64_t>(s(0, i));
    ctx.arg<int64_t>(1)(0, 0) = sum;
  });
  constexpr int kTasks = 50;
  constexpr size_t kBytes = 4096;
  std::vector<Buffer<int64_t>> outs;
  for (int i = 0; i < kTasks; ++i) outs.push_back(rt.vector<int64_t>(1));
  for (int i = 0; i < kTasks; ++i) rt.submit(Task(fill).scratch(kBytes).write(outs[i]));
  rt.wait_all();
  DataCounters dc = rt.stats().data;
  EXPECT_EQ(dc.bytes_moved(), 0u) << "nothing to copy in, nothing read home yet";
  int64_t want = 0;
  for (size_t i = 0; i < kBytes; ++i) want += static_cast<int64_t>(i % 256);
  for (auto& o : outs) EXPECT_EQ(o.to_vector()[0], want);
  dc = rt.stats().data;
  EXPECT_EQ(dc.bytes_moved(), kTasks * sizeof(int64_t)) << "only the results come home";
  for (const LinkCounters& l : dc.links) EXPECT_EQ(l.to, 0u) << "a copy to node " << l.to;
}

// One task after another: the pool gives each the block the previous one gave back.
TEST(ScratchPool, ALaterTaskGetsTheBlockBack) {
  for (const bool own : {false, true}) {
    SCOPED_TRACE(own ? "simulated device with its own memory" : "CPU in host memory");
    Runtime rt(own ? own_memories(1, 1) : test::cpu_config(1));
    std::mutex m;
    std::set<const void*> seen;
    Kernel use = rt.kernel("work").cpu([&](TaskContext& ctx) {
      auto s = ctx.arg<float>(0);
      s(0, 0) = 1;
      std::lock_guard<std::mutex> g(m);
      seen.insert(s.data);
    });
    constexpr int kTasks = 20;
    for (int i = 0; i < kTasks; ++i) rt.submit(Task(use).scratch<float>(1, 4096)).get();
    EXPECT_EQ(seen.size(), 1u) << "every task had the same block";
    const DataCounters dc = rt.stats().data;
    EXPECT_EQ(dc.scratch_allocations, 1u);
    EXPECT_EQ(dc.scratch_reuses, static_cast<uint64_t>(kTasks - 1));
    const MemoryNode& node = dc.nodes[own ? 1 : 0];
    EXPECT_EQ(node.scratch, 4096 * sizeof(float));
    EXPECT_EQ(node.scratch_pooled, 4096 * sizeof(float));
    if (own) {
      EXPECT_EQ(node.used, 4096 * sizeof(float)) << "a pooled block counts as used";
    }
  }
}

// A launch the task timeout gives up on may still be running in its plugin, writing its scratch:
// its blocks stay out of the pool (still counted) until it returns, then go back.
TEST(ScratchHung, ALaunchGivenUpOnKeepsItsScratchUntilItReturns) {
  constexpr size_t kBytes = 64 * 1024;
  static std::atomic<bool> release{false};  // outlive the runtime if it comes to that
  static std::atomic<bool> returned{false};
  static std::atomic<const void*> hung_block{nullptr};
  Config c = test::cpu_config(2);
  c.task_timeout = 0.25;  // "quick" stays far below it, however delayed
  Runtime rt(c);
  Kernel stuck = rt.kernel("stuck").cpu([](TaskContext& ctx) {
    auto s = ctx.arg<uint8_t>(0);
    hung_block.store(s.data);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!release.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::memset(s.data, 0xab, kBytes);  // still its own
    returned.store(true);
  });
  std::mutex m;
  std::vector<const void*> quick_blocks;
  Kernel quick = rt.kernel("quick").cpu([&](TaskContext& ctx) {
    auto s = ctx.arg<uint8_t>(0);
    std::memset(s.data, 0, kBytes);
    std::lock_guard<std::mutex> g(m);
    quick_blocks.push_back(s.data);
  });
  Event e = rt.submit(Task(stuck).scratch<uint8_t>(1, kBytes));
  Error err = test::expect_error([&] { e.get(); });
  EXPECT_NE(std::string(err.what()).find("task timeout"), std::string::npos) << err.what();
  ASSERT_NE(hung_block.load(), nullptr);
  for (int i = 0; i < 3; ++i) rt.submit(Task(quick).scratch<uint8_t>(1, kBytes)).get();
  ASSERT_EQ(quick_blocks.size(), 3u);
  for (const void* b : quick_blocks)
    EXPECT_NE(b, hung_block.load()) << "a running launch's scratch was handed to another task";
  MemoryNode host = rt.stats().data.nodes[0];
  EXPECT_EQ(host.scratch, 2 * kBytes) << "the hung launch's block counts until it returns";
  EXPECT_EQ(host.scratch_pooled, kBytes);
  EXPECT_FALSE(returned.load());

  release.store(true);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until &&
         rt.stats().data.nodes[0].scratch_pooled != 2 * kBytes)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(returned.load());
  host = rt.stats().data.nodes[0];
  EXPECT_EQ(host.scratch_pooled, 2 * kBytes) << "the block did not come back once it returned";
  EXPECT_EQ(host.scratch, 2 * kBytes);
}

// A scratch no device's memory can hold fails the task, saying which kernel and how much.
TEST(ScratchLimit, ScratchTooBigForTheDeviceFailsTheTask) {
  Runtime rt(own_memories(1, 1, nullptr, "64KiB"));
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  Error err = test::expect_error([&] { rt.submit(Task(work).scratch(128 * 1024)).get(); });
  EXPECT_EQ(err.code(), ErrorCode::no_device) << err.what();
  const std::string what = err.what();
  EXPECT_NE(what.find("kernel 'work'"), std::string::npos) << what;
  EXPECT_NE(what.find("131072 bytes of scratch"), std::string::npos) << what;
  // One that fits runs.
  EXPECT_NO_THROW(rt.submit(Task(work).scratch(32 * 1024)).get());
}

// The limit counts scratch: on a device whose memory holds one task's output and scratch, not two,
// tasks run one at a time (waiting for room, their outputs written home to make it), never beyond.
TEST(ScratchLimit, ANodeAtItsLimitMakesTasksWait) {
  constexpr size_t kOut = 2048;  // int64: 16 KiB
  Runtime rt(own_memories(1, 4, nullptr, "64KiB"));
  std::atomic<int> inside{0}, most{0};
  Kernel work = rt.kernel("work").cpu([&](TaskContext& ctx) {
    const int now = inside.fetch_add(1) + 1;
    int m = most.load();
    while (now > m && !most.compare_exchange_weak(m, now)) {
    }
    auto out = ctx.arg<int64_t>(0);
    auto s = ctx.arg<int64_t>(1);
    for (size_t i = 0; i < s.cols; ++i) s(0, i) = static_cast<int64_t>(i);
    linger();
    for (size_t i = 0; i < out.cols; ++i) out(0, i) = s(0, i) + ctx.param<int64_t>(0);
    inside.fetch_sub(1);
  });
  constexpr int kTasks = 24;
  std::vector<Buffer<int64_t>> outs;
  for (int i = 0; i < kTasks; ++i) outs.push_back(rt.vector<int64_t>(kOut));
  std::vector<Event> events;
  for (int i = 0; i < kTasks; ++i)  // 16 KiB out + 32 KiB scratch: one task's worth of 64 KiB
    events.push_back(
        rt.submit(Task(work).write(outs[i]).scratch<int64_t>(1, 2 * kOut).param(int64_t{i})));
  for (Event& e : events) e.get();
  EXPECT_EQ(most.load(), 1) << "two tasks ran at once beyond the memory limit";
  for (int i = 0; i < kTasks; ++i) {
    const std::vector<int64_t> v = outs[i].to_vector();
    EXPECT_EQ(v[0], i);
    EXPECT_EQ(v[kOut - 1], static_cast<int64_t>(kOut - 1) + i);
  }
  const DataCounters dc = rt.stats().data;
  EXPECT_LE(dc.nodes[1].used, 64u * 1024);
  EXPECT_GT(dc.writebacks, 0u) << "outputs were written home to make room";
}

TEST(ScratchApi, AnEmptyWorkspaceIsRefused) {
  Runtime rt(test::cpu_config(1));
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  Error err = test::expect_error([&] { Task(work).scratch(0); });
  EXPECT_EQ(err.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(err.what()).find("Task::scratch: argument 0"), std::string::npos)
      << err.what();
}

}  // namespace
}  // namespace hcr
