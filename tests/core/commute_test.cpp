// Commute accesses (Access::commute, Task::commute): the tasks of a run update a buffer one at a
// time, in whichever order they become ready; what comes after the run waits for all of it. On
// CPU slots in host memory, on simulated devices with memories of their own (the buffer moves
// between them as the run goes on) and on a device whose launches sometimes fail (placed again).
#include "../test_support.hpp"

#include <atomic>
#include <chrono>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

namespace hcr {
namespace {

// Who is inside a kernel updating a buffer: more than one at a time is an overlap.
struct Inside {
  std::atomic<int> now{0};
  std::atomic<int> overlaps{0};
  void enter() {
    if (now.fetch_add(1) != 0) overlaps.fetch_add(1);
  }
  void leave() { now.fetch_sub(1); }
};

// A few microseconds inside the kernel, so that an overlap, were there one, would be seen.
void linger() {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Two simulated devices with their own memories and two slots each; the kernels really run.
Config own_memories(const char* fail_probability = nullptr) {
  Config c;
  c.use_environment = false;
  c.policy = "eager";
  c.model_dir = "off";
  c.backends.push_back({"sim",
                        true,
                        {{"flops_per_byte", "0"},
                         {"kernel.add.flops", "1e6"},
                         {"kernel.add2.flops", "1e6"},
                         {"device.0.name", "a"},
                         {"device.0.gflops", "1000"},
                         {"device.0.concurrency", "2"},
                         {"device.1.name", "b"},
                         {"device.1.gflops", "1000"},
                         {"device.1.concurrency", "2"}},
                        "test"});
  if (fail_probability != nullptr)
    c.backends.back().options.push_back({"device.1.fail_probability", fail_probability});
  return c;
}

struct Param {
  const char* name;
  Config config;
};

void PrintTo(const Param& p, std::ostream* os) { *os << p.name; }

class Commute : public ::testing::TestWithParam<Param> {};

// Many tasks add to one accumulator: the exact sum, never two of them at once, and kernels are
// told read_write (the plugin ABI has no commute).
TEST_P(Commute, UpdatesAreExclusiveAndAllCount) {
  Runtime rt(GetParam().config);
  Inside inside;
  std::atomic<int> not_read_write{0};
  Kernel add = rt.kernel("add").cpu([&](TaskContext& ctx) {
    inside.enter();
    if (ctx.raw().args[0].access != HCR_ACCESS_READ_WRITE) not_read_write.fetch_add(1);
    auto acc = ctx.arg<int64_t>(0);
    const int64_t v = acc(0, 0);
    linger();
    acc(0, 0) = v + ctx.param<int64_t>(0);
    inside.leave();
  });
  auto acc = rt.vector<int64_t>(1);
  constexpr int64_t kTasks = 200;
  std::vector<Event> events;
  for (int64_t i = 1; i <= kTasks; ++i)
    events.push_back(rt.submit(Task(add).commute(acc).param(i)));
  for (Event& e : events) e.get();
  EXPECT_EQ(acc.to_vector()[0], kTasks * (kTasks + 1) / 2);
  EXPECT_EQ(inside.overlaps.load(), 0) << "commute tasks on one buffer ran at the same time";
  EXPECT_EQ(not_read_write.load(), 0);
  if (std::string(GetParam().name) == "sim_failing_device") {  // some were placed again
    uint64_t failed_launches = 0;
    for (const DeviceCounters& d : rt.stats().devices) failed_launches += d.failed;
    EXPECT_GT(failed_launches, 0u);
  }
}

// A read after the run sees every update of it; a new run after that read starts from there, and
// what comes after it (a write that reads nothing, a read_write) waits for it too.
TEST_P(Commute, AccessesAfterTheRunWaitForAllOfIt) {
  Runtime rt(GetParam().config);
  Inside inside;
  Kernel add = rt.kernel("add").cpu([&](TaskContext& ctx) {
    inside.enter();
    auto acc = ctx.arg<int64_t>(0);
    const int64_t v = acc(0, 0);
    linger();
    acc(0, 0) = v + 1;
    inside.leave();
  });
  Kernel copy = rt.kernel("copy").cpu(
      [](TaskContext& ctx) { ctx.arg<int64_t>(1)(0, 0) = ctx.arg<int64_t>(0)(0, 0); });
  Kernel twice = rt.kernel("twice").cpu([](TaskContext& ctx) { ctx.arg<int64_t>(0)(0, 0) *= 2; });
  auto acc = rt.vector<int64_t>(1);
  auto seen1 = rt.vector<int64_t>(1), seen2 = rt.vector<int64_t>(1), seen3 = rt.vector<int64_t>(1);
  for (int i = 0; i < 50; ++i) rt.submit(Task(add).commute(acc));
  rt.submit(Task(copy).read(acc).write(seen1));
  rt.submit(Task(copy).read(acc).write(seen2));  // a second reader of the same run
  for (int i = 0; i < 30; ++i) rt.submit(Task(add).arg(acc, Access::commute));
  rt.submit(Task(twice).read_write(acc));
  rt.submit(Task(copy).read(acc).write(seen3));
  for (int i = 0; i < 20; ++i) rt.submit(Task(add).commute(acc));
  EXPECT_EQ(seen1.to_vector()[0], 50);
  EXPECT_EQ(seen2.to_vector()[0], 50);
  EXPECT_EQ(seen3.to_vector()[0], 160);
  EXPECT_EQ(acc.to_vector()[0], 180);
  EXPECT_EQ(inside.overlaps.load(), 0);
}

// Tasks commuting on two buffers, some naming them in one order and some in the other, with tasks
// on either alone between them: all or none of a task's buffers are taken, so none deadlocks.
TEST_P(Commute, TwoBuffersInOppositeOrdersDoNotDeadlock) {
  Runtime rt(GetParam().config);
  Inside in_x, in_y;
  Kernel add2 = rt.kernel("add2").cpu([&](TaskContext& ctx) {
    // Argument 0 is x or y as the task named them; the parameter says which comes first.
    const bool x_first = ctx.param<int32_t>(0) != 0;
    Inside& first = x_first ? in_x : in_y;
    Inside& second = x_first ? in_y : in_x;
    first.enter();
    second.enter();
    linger();
    ctx.arg<int64_t>(0)(0, 0) += 1;
    ctx.arg<int64_t>(1)(0, 0) += 1;
    second.leave();
    first.leave();
  });
  Kernel add = rt.kernel("add").cpu([&](TaskContext& ctx) {
    Inside& in = ctx.param<int32_t>(0) != 0 ? in_x : in_y;
    in.enter();
    linger();
    ctx.arg<int64_t>(0)(0, 0) += 1;
    in.leave();
  });
  auto x = rt.vector<int64_t>(1), y = rt.vector<int64_t>(1);
  constexpr int kRounds = 60;
  for (int i = 0; i < kRounds; ++i) {
    rt.submit(Task(add2).commute(x).commute(y).param(int32_t{1}));
    rt.submit(Task(add2).commute(y).commute(x).param(int32_t{0}));
    rt.submit(Task(add).commute(i % 2 == 0 ? x : y).param(int32_t{i % 2 == 0}));
  }
  rt.wait_all();
  EXPECT_EQ(x.to_vector()[0], 2 * kRounds + kRounds / 2);
  EXPECT_EQ(y.to_vector()[0], 2 * kRounds + kRounds / 2);
  EXPECT_EQ(in_x.overlaps.load(), 0);
  EXPECT_EQ(in_y.overlaps.load(), 0);
}

std::vector<Param> params() {
  return {{"cpu4", test::cpu_config(4)},
          {"sim_own_memories", own_memories()},
          // A launch in three on "b" fails: the task is placed again on another device.
          {"sim_failing_device", own_memories("0.3")}};
}

INSTANTIATE_TEST_SUITE_P(Runtime, Commute, ::testing::ValuesIn(params()),
                         [](const auto& info) { return std::string(info.param.name); });

// Order freedom: a task submitted later runs first when an earlier one of the same run still
// waits for its other input (a buffer the host holds). Submission order would make it wait for
// the earlier one, and so for the host (Event::wait would then throw rather than wait forever).
TEST(CommuteOrder, ALaterReadyTaskRunsBeforeAnEarlierWaitingOne) {
  Runtime rt(test::cpu_config(2));
  std::mutex m;
  std::vector<int32_t> order;
  Kernel add = rt.kernel("add").cpu([&](TaskContext& ctx) {
    ctx.arg<int64_t>(0)(0, 0) += 1;
    std::lock_guard<std::mutex> g(m);
    order.push_back(ctx.param<int32_t>(0));
  });
  auto acc = rt.vector<int64_t>(1);
  auto gate = rt.vector<int64_t>(1);
  Event earlier, later;
  {
    auto view = gate.acquire(Access::write);
    earlier = rt.submit(Task(add).commute(acc).read(gate).param(int32_t{0}));
    later = rt.submit(Task(add).commute(acc).param(int32_t{1}));
    later.get();
    EXPECT_FALSE(earlier.ready());
  }  // the host lets go of the gate
  earlier.get();
  EXPECT_EQ(order, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(acc.to_vector()[0], 2);
}

// A commute task that fails lets go of the buffer: the rest of the run goes on. What reads the
// buffer after the run inherits the failure, as after any failed writer.
TEST(CommuteFailure, AFailedTaskReleasesTheBuffer) {
  Runtime rt(test::cpu_config(2));
  std::atomic<int64_t> applied{0};
  Kernel add = rt.kernel("add").cpu([&](TaskContext& ctx) {
    const int32_t i = ctx.param<int32_t>(0);
    if (i == 3 || i == 7) throw std::runtime_error("task " + std::to_string(i) + " fails");
    ctx.arg<int64_t>(0)(0, 0) += 1;
    applied.fetch_add(1);
  });
  Kernel copy = rt.kernel("copy").cpu(
      [](TaskContext& ctx) { ctx.arg<int64_t>(1)(0, 0) = ctx.arg<int64_t>(0)(0, 0); });
  auto acc = rt.vector<int64_t>(1), out = rt.vector<int64_t>(1);
  std::vector<Event> events;
  for (int32_t i = 0; i < 12; ++i) events.push_back(rt.submit(Task(add).commute(acc).param(i)));
  Event reader = rt.submit(Task(copy).read(acc).write(out));
  for (int32_t i = 0; i < 12; ++i) {
    if (i == 3 || i == 7) {
      EXPECT_THROW(events[i].get(), std::runtime_error) << "task " << i;
    } else {
      EXPECT_NO_THROW(events[i].get()) << "task " << i;
    }
  }
  EXPECT_EQ(applied.load(), 10);
  EXPECT_EQ(test::expect_error([&] { reader.get(); }).code(), ErrorCode::dependency);
  // A write that reads nothing starts afresh, and a new run after it works as before.
  Kernel zero = rt.kernel("zero").cpu([](TaskContext& ctx) { ctx.arg<int64_t>(0)(0, 0) = 0; });
  rt.submit(Task(zero).write(acc));
  for (int32_t i = 20; i < 25; ++i) rt.submit(Task(add).commute(acc).param(i));
  EXPECT_EQ(acc.to_vector()[0], 5);
}

// Tasks held by a pause are placed together on resume: those of one run still take turns.
TEST(CommutePause, TasksLetGoTogetherStillTakeTurns) {
  Runtime rt(test::cpu_config(4));
  Inside inside;
  Kernel add = rt.kernel("add").cpu([&](TaskContext& ctx) {
    inside.enter();
    linger();
    ctx.arg<int64_t>(0)(0, 0) += 1;
    inside.leave();
  });
  auto acc = rt.vector<int64_t>(1);
  rt.pause();
  for (int i = 0; i < 40; ++i) rt.submit(Task(add).commute(acc));
  rt.resume();
  EXPECT_EQ(acc.to_vector()[0], 40);
  EXPECT_EQ(inside.overlaps.load(), 0);
}

// A host view is no commute access.
TEST(CommuteMisuse, HostViewsRefuseCommute) {
  Runtime rt(test::cpu_config(1));
  auto acc = rt.vector<int64_t>(1);
  EXPECT_EQ(test::expect_error([&] { acc.acquire(Access::commute); }).code(),
            ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace hcr
