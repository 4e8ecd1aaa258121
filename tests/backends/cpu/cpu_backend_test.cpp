// The CPU backend plugin: options, its device, concurrency of its workers, and that idle workers
// sleep rather than spin.
#include "../../test_support.hpp"

#include <sched.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

namespace hcr {
namespace {

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

TEST(CpuBackend, ThreadsOptionSetsTheDeviceSlots) {
  Runtime rt(test::cpu_config(3));
  ASSERT_EQ(rt.devices().size(), 1u);
  const Device d = rt.devices()[0];
  EXPECT_EQ(d.kind, DeviceKind::cpu);
  EXPECT_EQ(d.concurrency, 3u);
  EXPECT_EQ(d.compute_units, 3u);
  EXPECT_NE(d.name.find("(3 threads)"), std::string::npos) << d.name;
  EXPECT_FALSE(d.arch.empty());
  EXPECT_GT(d.memory_bytes, 0u);
  EXPECT_EQ(d.memory_node, 0u);
}

// CPU devices whose workers outnumber the cores this process may use (here: several cpu tables
// that differ only in their threads) are told of, once, naming both counts.
TEST(CpuBackend, WorkersBeyondTheCoresAreToldOfOnce) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  const int cores = CPU_COUNT(&set);
  {
    test::LogCapture log(LogLevel::warn);
    Runtime rt(test::cpu_config(cores));
    EXPECT_FALSE(log.contains("worker(s) on the")) << "as many workers as cores is no warning";
  }
  test::LogCapture log(LogLevel::warn);
  Config c = test::cpu_config(1);
  c.backends.push_back({"cpu", true, {{"threads", std::to_string(cores)}}, "test"});
  c.backends.push_back({"cpu", true, {{"threads", std::to_string(cores + 1)}}, "test"});
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 3u);
  const std::string said = "3 CPU device(s) run " + std::to_string(2 * cores + 2) +
                           " worker(s) on the " + std::to_string(cores) + " core(s)";
  size_t times = 0;
  for (const std::string& l : log.lines()) times += l.find(said) != std::string::npos;
  EXPECT_EQ(times, 1u) << "said once: " << said;
}

TEST(CpuBackend, DefaultUsesAllCores) {
  Config c = test::cpu_config(0);
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 1u);
  EXPECT_EQ(rt.devices()[0].concurrency, std::max(1u, std::thread::hardware_concurrency()));
}

TEST(CpuBackend, BadOptionsAreConfigErrorsNamingTheOption) {
  for (auto [key, value, why] :
       {std::tuple{"threads", "-1", "option 'threads' = -1"},
        std::tuple{"threads", "many", "option 'threads' = 'many' is not an integer"},
        std::tuple{"thread", "2", "unknown option 'thread'"},
        std::tuple{"partitions", "0", "option 'partitions' = 0: must be 1 to the"},
        std::tuple{"partitions", "5000", "option 'partitions' = 5000: must be 1 to the"}}) {
    Config c;
    c.use_environment = false;
    c.backends.push_back({"cpu", true, {{key, value}}, "t.toml:4"});
    Error e = test::expect_error([&] { Runtime rt(c); });
    EXPECT_EQ(e.code(), ErrorCode::config) << why;
    const std::string what = e.what();
    EXPECT_NE(what.find(why), std::string::npos) << what;
    EXPECT_EQ(what.rfind(std::string("t.toml:4: backend.") + key + ": ", 0), 0u) << what;
  }
}

TEST(CpuBackend, WorkersRunTasksSideBySide) {
  Runtime rt(test::cpu_config(2));
  std::atomic<int> arrived{0};
  std::atomic<bool> both{false};
  std::set<uint32_t> workers;
  std::mutex m;
  // Each task waits (bounded) for the other to arrive: only true concurrency lets both see 2.
  Kernel meet = rt.kernel("meet").cpu([&](TaskContext& ctx) {
    {
      std::lock_guard<std::mutex> lock(m);
      workers.insert(ctx.worker());
    }
    arrived.fetch_add(1);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    if (arrived.load() >= 2) both = true;
  });
  Event a = rt.submit(Task(meet)), b = rt.submit(Task(meet));
  a.get();
  b.get();
  EXPECT_TRUE(both.load());
  for (uint32_t w : workers) EXPECT_LT(w, 2u);
}

// Partitions share the workers out as devices of their own (the first ones one more where the
// count does not divide), all on host memory, all of one architecture.
TEST(CpuBackend, PartitionsAreDevicesSharingTheWorkers) {
  Config c = test::cpu_config(3);
  c.backends[0].options.push_back({"partitions", "2"});
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 2u);
  const Device a = rt.devices()[0], b = rt.devices()[1];
  EXPECT_EQ(a.concurrency, 2u);
  EXPECT_EQ(b.concurrency, 1u);
  EXPECT_NE(a.name.find("(2 threads) [partition 0 of 2]"), std::string::npos) << a.name;
  EXPECT_NE(b.name.find("(1 threads) [partition 1 of 2]"), std::string::npos) << b.name;
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.memory_node, 0u);
  EXPECT_EQ(b.memory_node, 0u);
}

// Each partition has workers of its own: tasks pinned to two partitions of one worker each run
// side by side, and a partition runs its own tasks (the other's staying pinned there).
TEST(CpuBackend, EachPartitionRunsItsOwnTasksOnItsOwnWorkers) {
  Config c = test::cpu_config(2);
  c.backends[0].options.push_back({"partitions", "2"});
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 2u);
  std::atomic<int> arrived{0};
  std::atomic<int> met{0};
  Kernel meet = rt.kernel("meet").cpu([&](TaskContext& ctx) {
    EXPECT_EQ(ctx.worker(), 0u) << "one worker per partition";
    arrived.fetch_add(1);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    if (arrived.load() >= 2) met.fetch_add(1);
  });
  Event x = rt.submit(Task(meet).on(rt.devices()[0].id));
  Event y = rt.submit(Task(meet).on(rt.devices()[1].id));
  x.get();
  y.get();
  EXPECT_EQ(met.load(), 2) << "the two partitions' tasks ran side by side";
  EXPECT_EQ(x.device(), static_cast<int>(rt.devices()[0].id));
  EXPECT_EQ(y.device(), static_cast<int>(rt.devices()[1].id));
}

// A partition's workers keep to its run of the process's cores while they work there; the
// application's threads are left as they were.
TEST(CpuBackend, PartitionsWorkOnTheirOwnCores) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  Config c = test::cpu_config(2);
  c.backends[0].options.push_back({"partitions", "2"});
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 2u);
  std::vector<int> seen[2];
  Kernel where = rt.kernel("where").cpu([&](TaskContext& ctx) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    ASSERT_EQ(::sched_getaffinity(0, sizeof(mine), &mine), 0);
    for (int core = 0; core < CPU_SETSIZE; ++core)
      if (CPU_ISSET(core, &mine)) seen[ctx.param<int>(0)].push_back(core);
  });
  for (int p = 0; p < 2; ++p) rt.submit(Task(where).param(p).on(rt.devices()[p].id)).get();
  const size_t m = cores.size();
  for (size_t p = 0; p < 2; ++p) {
    std::vector<int> want;  // the run of cores of partition p, or one core each in turn
    if (m < 2) want = {cores[p % m]};
    else
      for (size_t i = p * m / 2; i < (p + 1) * m / 2; ++i) want.push_back(cores[i]);
    EXPECT_EQ(seen[p], want) << "partition " << p;
  }
  cpu_set_t after;
  CPU_ZERO(&after);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(after), &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&after, &allowed)) << "the application's thread is not pinned";
}

TEST(CpuBackend, IdleWorkersSleep) {
  Runtime rt(test::cpu_config(2));
  Kernel k = rt.kernel("k").cpu([](TaskContext&) {});
  for (int i = 0; i < 10000; ++i) rt.submit(Task(k));
  rt.wait_all();
  // Let the workers wind down, then watch the process while nothing is submitted: spinning
  // workers would burn ~2 CPU-seconds per second; sleeping ones almost nothing.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  double cpu0 = process_cpu_seconds();
  auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double used = process_cpu_seconds() - cpu0;
  EXPECT_LT(used, 0.2 * wall) << "idle workers used " << used << " CPU-s in " << wall << " s";
}

TEST(CpuBackend, RefusesCodeForOtherBackends) {
  Runtime rt(test::cpu_config(1));
  Kernel k = rt.kernel("cl_only").source("opencl", "__kernel void cl_only() {}");
  Error e = test::expect_error([&] { rt.submit(Task(k)).get(); });
  EXPECT_EQ(e.code(), ErrorCode::no_device);
  EXPECT_NE(std::string(e.what()).find("not opencl code"), std::string::npos) << e.what();
}

TEST(CpuBackend, GemmWithWrongArgumentsFailsNamingThem) {
  Runtime rt(test::cpu_config(1));
  auto a = rt.buffer<float>(2, 3), b = rt.buffer<float>(4, 2), c = rt.buffer<float>(2, 2);
  hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0};
  Kernel g = rt.kernel("gemm_f32");
  Error e =
      test::expect_error([&] { rt.submit(Task(g).read(a).read(b).read_write(c).param(p)).get(); });
  EXPECT_NE(std::string(e.what()).find("A is 2x3, B is 4x2, C is 2x2"), std::string::npos)
      << e.what();
  // Fresh outputs below: C now holds what a failed task wrote, and reading it would fail.
  auto c2 = rt.buffer<float>(2, 2), c3 = rt.buffer<float>(2, 2);
  e = test::expect_error([&] { rt.submit(Task(g).read(a).read_write(c2).param(p)).get(); });
  EXPECT_NE(std::string(e.what()).find("takes 3 buffers"), std::string::npos) << e.what();
  auto d = rt.buffer<double>(2, 2);
  e = test::expect_error([&] { rt.submit(Task(g).read(d).read(d).read_write(c3).param(p)).get(); });
  EXPECT_NE(std::string(e.what()).find("gemm_f32: A (argument 0, a 2x2 f64 buffer) is not an f32 "
                                       "matrix"),
            std::string::npos)
      << e.what();
}

}  // namespace
}  // namespace hcr
