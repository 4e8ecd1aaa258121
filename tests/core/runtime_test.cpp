// The runtime as a whole: many tasks, concurrent submitters, wait_all, statistics, lifetime,
// back-pressure and the memory a burst of tasks leaves behind.
#include "../test_support.hpp"

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <thread>

#include <unistd.h>

namespace hcr {
namespace {

TEST(Runtime, HundredThousandEmptyTasksComplete) {
  Runtime rt(test::cpu_config(2));
  std::atomic<int> ran{0};
  Kernel empty =
      rt.kernel("empty").cpu([&](TaskContext&) { ran.fetch_add(1, std::memory_order_relaxed); });
  constexpr int kTasks = 100000;
  for (int i = 0; i < kTasks; ++i) rt.submit(Task(empty));
  rt.wait_all();
  EXPECT_EQ(ran.load(), kTasks);
  RuntimeStats s = rt.stats();
  EXPECT_EQ(s.submitted, static_cast<uint64_t>(kTasks));
  EXPECT_EQ(s.completed, static_cast<uint64_t>(kTasks));
  EXPECT_EQ(s.failed, 0u);
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].tasks, static_cast<uint64_t>(kTasks));
}

TEST(Runtime, ConcurrentSubmittersAndWaiters) {
  Runtime rt(test::cpu_config(2));
  std::atomic<int> ran{0};
  Kernel k = rt.kernel("count").cpu([&](TaskContext&) { ran.fetch_add(1); });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 5000; ++i) rt.submit(Task(k));
      rt.wait_all();
    });
  for (auto& t : threads) t.join();
  rt.wait_all();
  EXPECT_EQ(ran.load(), 20000);
}

// Threads waiting on events, each on its own task, some of which end while the waiter still spins
// and some once it sleeps: every wait returns (a task's end wakes exactly the threads waiting for
// it, TaskNode::state_waiters).
TEST(Runtime, EventWaitsAreWokenByTheirTasksEnd) {
  Runtime rt(test::cpu_config(2));
  Kernel k = rt.kernel("busy").cpu([](TaskContext& ctx) {
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::microseconds(ctx.param<int64_t>(0));
    while (std::chrono::steady_clock::now() < until) {
    }
  });
  std::atomic<int> waited{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 400; ++i) {
        rt.submit(Task(k).param(int64_t{(i + t) % 4 == 0 ? 200 : 0})).wait();
        waited.fetch_add(1);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(waited.load(), 1200);
}

TEST(Runtime, DestructionWaitsForOutstandingTasks) {
  std::atomic<int> ran{0};
  {
    Runtime rt(test::cpu_config(2));
    Kernel k = rt.kernel("slowish").cpu([&](TaskContext&) {
      volatile double x = 0;
      for (int i = 0; i < 20000; ++i) x = x + i;
      ran.fetch_add(1);
    });
    for (int i = 0; i < 200; ++i) rt.submit(Task(k));
  }
  EXPECT_EQ(ran.load(), 200);
}

TEST(Runtime, EventsReportTheDevice) {
  Runtime rt(test::cpu_config(1));
  Event e = rt.submit(Task(rt.kernel("nothing").cpu([](TaskContext&) {})));
  e.get();
  EXPECT_EQ(e.device(), 0);
}

TEST(Runtime, UseAfterEndThrowsShutdown) {
  Kernel k;
  Buffer<double> b;
  {
    Runtime rt(test::cpu_config(1));
    k = rt.kernel("k").cpu([](TaskContext&) {});
    b = rt.vector<double>(8);
  }
  EXPECT_EQ(test::expect_error([&] { k.cpu([](TaskContext&) {}); }).code(), ErrorCode::shutdown);
  EXPECT_EQ(test::expect_error([&] { b.partition(2, 2); }).code(), ErrorCode::shutdown);
}

TEST(Runtime, MisuseThrowsNamingTheValue) {
  Runtime rt(test::cpu_config(1));
  Runtime other(test::cpu_config(1));
  auto mine = rt.buffer<float>(2, 2);
  Kernel theirs = other.kernel("k").cpu([](TaskContext&) {});
  Error e = test::expect_error([&] { rt.submit(Task(theirs)); });
  EXPECT_NE(std::string(e.what()).find("another runtime"), std::string::npos);
  e = test::expect_error([&] { Task(theirs).read(mine); });
  EXPECT_NE(std::string(e.what()).find("another runtime"), std::string::npos);
  e = test::expect_error([&] { rt.kernel(""); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  Task t(rt.kernel("k2").cpu([](TaskContext&) {}));
  rt.submit(t);
  e = test::expect_error([&] { rt.submit(t); });
  EXPECT_NE(std::string(e.what()).find("already submitted"), std::string::npos);
  e = test::expect_error([&] { Task t{Kernel{}}; });
  EXPECT_NE(std::string(e.what()).find("valid kernel"), std::string::npos);
}

TEST(Runtime, NoDevicesStillConstructsAndFailsTasksClearly) {
  Config c;
  c.use_environment = false;
  c.backends.push_back({"cpu", false, {}, "test"});  // a table that loads nothing
  Runtime rt(c);
  EXPECT_TRUE(rt.devices().empty());
  Event e = rt.submit(Task(rt.kernel("anything").cpu([](TaskContext&) {})));
  Error err = test::expect_error([&] { e.get(); });
  EXPECT_EQ(err.code(), ErrorCode::no_device);
  EXPECT_NE(std::string(err.what()).find("no devices"), std::string::npos) << err.what();
}

TEST(Runtime, WaitAllReturnsWhileAnotherThreadKeepsSubmitting) {
  // A thread submits a chain of tasks without end, each waiting until the next one is submitted:
  // there is always an unfinished task. wait_all must still return, once the tasks submitted
  // before it began (the batch below, and the chain's tasks so far) have finished.
  Runtime rt(test::cpu_config(2));
  std::atomic<uint64_t> chain_submitted{0};
  std::atomic<bool> stop{false};
  Kernel link = rt.kernel("link").cpu([&](TaskContext& ctx) {
    const auto i = ctx.param<uint64_t>(0);
    while (chain_submitted.load() <= i + 1 && !stop.load()) std::this_thread::yield();
  });
  auto chain = rt.vector<int>(1);
  std::thread streamer([&] {
    for (uint64_t i = 0; !stop.load(); ++i) {
      rt.submit(Task(link).read_write(chain).param(i));
      chain_submitted.store(i + 1);
    }
  });
  while (chain_submitted.load() < 10) std::this_thread::yield();
  constexpr int kBatch = 200;
  std::vector<std::atomic<bool>> done(kBatch);
  Kernel mark = rt.kernel("mark").cpu([&](TaskContext& ctx) { done[ctx.param<int>(0)] = true; });
  for (int i = 0; i < kBatch; ++i) rt.submit(Task(mark).param(i));
  const uint64_t chain_before = chain_submitted.load();
  // A hang guard, not a timing assertion: before the fix wait_all never returned.
  auto waited = std::async(std::launch::async, [&] { rt.wait_all(); });
  const bool returned = waited.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  const uint64_t completed = rt.stats().completed;
  stop = true;
  streamer.join();
  waited.wait();
  EXPECT_TRUE(returned) << "wait_all did not return while another thread kept submitting";
  for (int i = 0; i < kBatch; ++i) EXPECT_TRUE(done[i].load()) << "task " << i;
  // Every chain task submitted before the call had finished too (the chain runs in order).
  if (returned) {
    EXPECT_GE(completed, chain_before + kBatch);
  }
}

TEST(Runtime, WaitAllWaitsForWhatItsTasksSubmit) {
  // A task submits children from inside its kernel once wait_all is (about to be) waiting: they
  // count with their parent, so wait_all waits for them too (fork-join), at any depth.
  Runtime rt(test::cpu_config(2));
  std::atomic<bool> go{false};
  std::atomic<int> ran{0};
  Kernel child = rt.kernel("child").cpu([&](TaskContext& ctx) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    while (std::chrono::steady_clock::now() < until) {
    }  // work, so that they outlast the parent
    ran.fetch_add(1);
    if (ctx.param<int>(0) > 0) rt.submit(Task(child).param(ctx.param<int>(0) - 1));
  });
  Kernel parent = rt.kernel("parent").cpu([&](TaskContext&) {
    while (!go.load()) std::this_thread::yield();
    for (int i = 0; i < 10; ++i) rt.submit(Task(child).param(1));
  });
  rt.submit(Task(parent));
  go = true;
  rt.wait_all();
  EXPECT_EQ(ran.load(), 20);
}

TEST(Runtime, SubmitWaitsWhileMaxTasksInFlightAreUnfinished) {
  // One worker held by the first task: nothing finishes. A thread submitting 3x the bound must be
  // held at the bound until the gate opens; then everything runs.
  Config c = test::cpu_config(1);
  c.max_tasks_in_flight = 64;
  Runtime rt(c);
  std::atomic<bool> open{false}, holding{false};
  std::atomic<int> ran{0};
  Kernel gate = rt.kernel("gate").cpu([&](TaskContext&) {
    holding = true;
    holding.notify_all();
    open.wait(false);
  });
  Kernel count = rt.kernel("count").cpu([&](TaskContext&) { ran.fetch_add(1); });
  std::atomic<int> returned{0};
  std::thread submitter([&] {
    rt.submit(Task(gate));
    returned = 1;
    // The gate holds the worker before the others come: none of them can finish ahead of it
    // (a worker that took a later task first would let the bound count one completion).
    holding.wait(false);
    for (int i = 1; i < 3 * 64; ++i) {
      rt.submit(Task(count));
      returned = i + 1;
    }
  });
  // A hang guard only: the submitter blocks (throttled) or finishes (the bound is not applied).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (rt.stats().throttled == 0 && returned.load() < 3 * 64 &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::yield();
  RuntimeStats s = rt.stats();
  EXPECT_LE(returned.load(), 64) << "submit returned with more than the bound unfinished";
  EXPECT_LE(s.submitted - s.completed, 64u);
  EXPECT_EQ(s.throttled, 1u);
  open = true;
  open.notify_all();
  submitter.join();
  rt.wait_all();
  EXPECT_EQ(ran.load(), 3 * 64 - 1);
}

TEST(Runtime, ASubmitInsideAKernelIsNeverHeldByTheBound) {
  // Waiting there could deadlock (the tasks in flight may need this worker): it goes over.
  Config c = test::cpu_config(1);
  c.max_tasks_in_flight = 4;
  Runtime rt(c);
  std::atomic<int> ran{0};
  Kernel leaf = rt.kernel("leaf").cpu([&](TaskContext&) { ran.fetch_add(1); });
  Kernel spawner = rt.kernel("spawner").cpu([&](TaskContext&) {
    for (int i = 0; i < 100; ++i) rt.submit(Task(leaf));
  });
  rt.submit(Task(spawner)).get();
  rt.wait_all();
  EXPECT_EQ(ran.load(), 100);
  // Nor a thread that holds a host view (the tasks may be waiting for its release).
  auto b = rt.vector<int>(1);
  Kernel inc = rt.kernel("inc").cpu([](TaskContext& ctx) { ctx.arg<int>(0)(0, 0) += 1; });
  {
    auto v = b.acquire(Access::read_write);
    for (int i = 0; i < 100; ++i) rt.submit(Task(inc).read_write(b));
  }
  EXPECT_EQ(b.to_vector()[0], 100);
}

TEST(Runtime, MaxTasksInFlightIsConfigurable) {
  Config c = Config::parse("[runtime]\nmax_tasks_in_flight = 0\n", "t.toml");
  EXPECT_EQ(c.max_tasks_in_flight, 0u);
  EXPECT_EQ(Config{}.max_tasks_in_flight, 1000000u);
  Error e =
      test::expect_error([] { Config::parse("[runtime]\nmax_tasks_in_flight = -1\n", "t.toml"); });
  EXPECT_NE(std::string(e.what()).find("t.toml:2: runtime.max_tasks_in_flight"), std::string::npos)
      << e.what();
  Config big = test::cpu_config(1);
  big.max_tasks_in_flight = ~uint64_t{0};
  e = test::expect_error([&] { Runtime rt(big); });
  EXPECT_NE(std::string(e.what()).find("runtime.max_tasks_in_flight"), std::string::npos)
      << e.what();
}

size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(Runtime, MemoryOfABurstOfTasksIsGivenBack) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers' allocators keep freed memory (quarantine)";
#endif
  // 300,000 tasks submitted while the only worker is held: their nodes pile up (some 250 MB).
  // Once they have run and wait_all has returned, the process must be near where it started.
  Config c = test::cpu_config(1);
  c.max_tasks_in_flight = 0;
  Runtime rt(c);
  Kernel empty = rt.kernel("empty").cpu([](TaskContext&) {});
  for (int round = 0; round < 3; ++round) {  // the steady state: pools and queues warmed up
    for (int i = 0; i < 20000; ++i) rt.submit(Task(empty));
    rt.wait_all();
  }
  const size_t before = resident_bytes();
  std::atomic<bool> open{false};
  Kernel gate = rt.kernel("gate").cpu([&](TaskContext&) { open.wait(false); });
  rt.submit(Task(gate));
  constexpr int kTasks = 300000;
  for (int i = 0; i < kTasks; ++i) rt.submit(Task(empty));
  const size_t peak = resident_bytes();
  open = true;
  open.notify_all();
  rt.wait_all();
  const size_t after = resident_bytes();
  ASSERT_GT(peak, before + kTasks * 200) << "the burst did not take memory: nothing to measure";
  EXPECT_LT(after, before + (peak - before) / 4)
      << "before " << before / 1024 << " KiB, peak " << peak / 1024 << " KiB, after wait_all "
      << after / 1024 << " KiB";
}

}  // namespace
}  // namespace hcr
