// The runtime as a whole: many tasks, concurrent submitters, wait_all, statistics, lifetime.
#include "../test_support.hpp"

#include <atomic>
#include <thread>

namespace hcr {
namespace {

TEST(Runtime, HundredThousandEmptyTasksComplete) {
  Runtime rt(test::cpu_config(2));
  std::atomic<int> ran{0};
  Kernel empty = rt.kernel("empty").cpu([&](TaskContext&) {
    ran.fetch_add(1, std::memory_order_relaxed);
  });
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

}  // namespace
}  // namespace hcr
