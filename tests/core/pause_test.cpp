// Runtime::pause and resume: tasks submitted while paused start only on the last resume, the ready
// ones placed together (the policy told first, ready_together), highest priority first; work
// submitted before goes on; waiting for a held task while paused is refused rather than hanging;
// the runtime's end runs what a pause still holds.
#include "../test_support.hpp"

#include <hcr/sched.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>

namespace hcr {
namespace {

using namespace std::chrono_literals;

// One simulated device running one task at a time (1 ms each), nothing copied.
Config one_device(std::string policy = "eager") {
  Config c;
  c.use_environment = false;
  c.policy = std::move(policy);
  c.model_dir = "off";
  c.lookahead = 0;
  c.backends.push_back({"sim",
                        true,
                        {{"compute", "false"},
                         {"flops_per_byte", "0"},
                         {"kernel.work.flops", "1e9"},
                         {"device.0.name", "d0"},
                         {"device.0.gflops", "1000"},
                         {"device.0.host_memory", "true"}},
                        "test"});
  return c;
}

TEST(Pause, TasksSubmittedWhilePausedStartOnlyOnResume) {
  Runtime rt(one_device());
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  auto x = rt.buffer<float>(4, 4), y = rt.buffer<float>(4, 4);
  Event before = rt.submit(Task(work).write(y));
  rt.pause();
  Event a = rt.submit(Task(work).write(x));
  Event b = rt.submit(Task(work).read_write(x));
  before.wait();  // work submitted before the pause goes on
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(a.ready()) << "a task submitted while paused ran before resume()";
  EXPECT_FALSE(b.ready());
  rt.resume();
  rt.wait_all();
  EXPECT_TRUE(a.ready());
  EXPECT_TRUE(b.ready());
  EXPECT_NO_THROW(b.get());
}

TEST(Pause, OnResumeTheMostUrgentStartsFirst) {
  for (const bool paused : {false, true}) {
    Runtime rt(one_device());
    Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
    std::vector<Buffer<float>> bufs;
    for (int i = 0; i < 4; ++i) bufs.push_back(rt.buffer<float>(4, 4));
    rt.start_trace();
    if (paused) rt.pause();
    for (int i = 0; i < 3; ++i) rt.submit(Task(work).write(bufs[size_t(i)]));
    rt.submit(Task(work).write(bufs[3]).priority(5));
    if (paused) rt.resume();
    rt.wait_all();
    std::vector<TraceEvent> tasks;
    for (const TraceEvent& e : rt.trace_events())
      if (e.kind == TraceEvent::Kind::task) tasks.push_back(e);
    ASSERT_EQ(tasks.size(), 4u);
    std::sort(tasks.begin(), tasks.end(),
              [](const TraceEvent& a, const TraceEvent& b) { return a.start < b.start; });
    if (paused) EXPECT_EQ(tasks[0].priority, 5) << "the urgent task, submitted last, starts first";
    else EXPECT_EQ(tasks[0].priority, 0) << "(unpaused, the first submitted takes the idle device)";
  }
}

TEST(Pause, WaitingForAHeldTaskIsRefusedNotAHang) {
  Runtime rt(one_device());
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  auto x = rt.buffer<float>(4, 4), other = rt.buffer<float>(4, 4);
  rt.pause();
  Event e = rt.submit(Task(work).write(x));
  try {
    rt.wait_all();
    ADD_FAILURE() << "wait_all waited for a held task";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(err.what()).find("1 task(s) submitted since Runtime::pause()"),
              std::string::npos)
        << err.what();
  }
  try {
    e.wait();
    ADD_FAILURE() << "Event::wait waited for a held task";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("kernel 'work'"), std::string::npos) << err.what();
  }
  try {
    auto view = x.acquire(Access::read);
    ADD_FAILURE() << "acquire waited for a held writer";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("Runtime::resume()"), std::string::npos) << err.what();
  }
  {
    auto view = other.acquire(Access::read_write);  // no held task uses it: granted
    view(0, 0) = 1;
  }
  rt.resume();
  EXPECT_NO_THROW(e.wait());
  EXPECT_NO_THROW(rt.wait_all());
}

// A join (a replay's event, an unpartition's) or a host access is never held itself, but waits for
// what it depends on: waiting for one that depends on a held task is refused too, naming the held
// task's kernel, and waits once resumed. One that depends on none is waited for. (Device graphs
// off: a replay run as one is a task itself, held as any; see the next test.)
TEST(Pause, WaitingForAJoinOnAHeldTaskIsRefusedNotAHang) {
  Config c = one_device();
  c.device_graphs = false;
  Runtime rt(c);
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  auto x = rt.buffer<float>(4, 4), other = rt.buffer<float>(4, 4);
  Tiles<float> tiles = x.partition(2, 2), untouched = other.partition(2, 2);
  rt.begin_recording();
  rt.submit(Task(work).write(tiles(0, 0)));
  Graph g = rt.end_recording();
  rt.wait_all();
  rt.pause();
  rt.submit(Task(work).write(tiles(0, 1)));
  EXPECT_NO_THROW(other.unpartition().wait());  // no held task uses its tiles
  const std::string why =
      "Event::wait would wait forever: the operation (a replay, an unpartition) waits for a task "
      "of kernel 'work' that was submitted since Runtime::pause() and waits for Runtime::resume()";
  Event replayed = g.replay();
  try {
    replayed.wait();
    ADD_FAILURE() << "Event::wait waited for a replay of held tasks";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(std::string(err.what()), why);
  }
  rt.submit(Task(work).write(tiles(1, 1)));
  Event joined = x.unpartition();
  try {
    joined.wait();
    ADD_FAILURE() << "Event::wait waited for an unpartition after held tasks";
  } catch (const Error& err) {
    EXPECT_EQ(std::string(err.what()), why);
  }
  rt.resume();
  EXPECT_NO_THROW(replayed.wait());
  EXPECT_NO_THROW(joined.wait());
}

// A replay run as a device graph (every task ran on the one device before) is one task: submitted
// while paused, it is held, and waiting for it is refused naming it, until resume() lets it run.
TEST(Pause, AReplayRunAsADeviceGraphIsHeldAsATask) {
  Runtime rt(test::cpu_config(1));
  std::atomic<int> ran{0};
  Kernel work = rt.kernel("work").cpu([&](TaskContext&) { ran.fetch_add(1); });
  auto x = rt.buffer<float>(4, 4);
  rt.begin_recording();
  rt.submit(Task(work).write(x));
  rt.submit(Task(work).read_write(x));
  Graph g = rt.end_recording();
  rt.wait_all();
  ASSERT_EQ(ran.load(), 2);
  const uint64_t launches = rt.stats().graph_launches;
  rt.pause();
  Event replayed = g.replay();
  EXPECT_EQ(rt.stats().graph_launches, launches + 1);
  try {
    replayed.wait();
    ADD_FAILURE() << "Event::wait waited for a held device graph";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(std::string(err.what()),
              "Event::wait would wait forever: the task of kernel 'graph (2 tasks)' was "
              "submitted since Runtime::pause() and waits for Runtime::resume()");
  }
  EXPECT_EQ(ran.load(), 2);
  rt.resume();
  EXPECT_NO_THROW(replayed.wait());
  EXPECT_EQ(ran.load(), 4);
}

// Back-pressure while paused: the submit past the window would wait for held tasks, which only a
// resume() lets go; it is refused, like any other wait for held work, and the refusal costs the
// window nothing.
TEST(Pause, ASubmitPastTheWindowWhilePausedIsRefusedNotAHang) {
  Config c = test::cpu_config(1);
  c.max_tasks_in_flight = 100;
  Runtime rt(c);
  std::atomic<int> ran{0};
  Kernel work = rt.kernel("work").cpu([&](TaskContext&) { ran.fetch_add(1); });
  auto x = rt.buffer<float>(4, 4);
  rt.pause();
  for (int i = 0; i < 100; ++i) rt.submit(Task(work).read_write(x));
  try {
    rt.submit(Task(work).read_write(x));
    ADD_FAILURE() << "the 101st submit returned while 100 held tasks fill the window";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::invalid_argument);
    const std::string what = err.what();
    EXPECT_NE(what.find("100 task(s) submitted since Runtime::pause()"), std::string::npos) << what;
    EXPECT_NE(what.find("max_tasks_in_flight = 100"), std::string::npos) << what;
  }
  rt.resume();
  rt.wait_all();
  EXPECT_EQ(ran.load(), 100);
  RuntimeStats s = rt.stats();
  EXPECT_EQ(s.submitted, 100u) << "the refused submit is not counted";
  EXPECT_EQ(s.completed, 100u);
  // The refused ticket holds no room: another full window (and more) goes through.
  for (int i = 0; i < 250; ++i) rt.submit(Task(work).read_write(x));
  rt.wait_all();
  EXPECT_EQ(ran.load(), 350);
}

// ... but a submit past the window that tasks from before the pause can make room for waits for
// them, as back-pressure does unpaused.
TEST(Pause, ASubmitPastTheWindowWaitsForTasksFromBeforeThePause) {
  Config c = test::cpu_config(1);
  c.max_tasks_in_flight = 16;
  Runtime rt(c);
  std::atomic<bool> open{false};
  std::atomic<int> ran{0};
  Kernel gate = rt.kernel("gate").cpu([&](TaskContext&) {
    while (!open.load()) std::this_thread::sleep_for(1ms);
    ran.fetch_add(1);
  });
  Kernel work = rt.kernel("work").cpu([&](TaskContext&) { ran.fetch_add(1); });
  auto x = rt.buffer<float>(4, 4), y = rt.buffer<float>(4, 4);
  for (int i = 0; i < 8; ++i) rt.submit(Task(gate).read_write(x));
  rt.pause();
  for (int i = 0; i < 8; ++i) rt.submit(Task(work).read_write(y));
  std::thread opener([&] {
    while (rt.stats().throttled == 0) std::this_thread::sleep_for(1ms);
    open.store(true);
  });
  EXPECT_NO_THROW(rt.submit(Task(work).read_write(y)))  // waits for the gates, then is held
      << "refused although the 8 tasks from before the pause make room";
  opener.join();
  rt.resume();
  rt.wait_all();
  EXPECT_EQ(ran.load(), 17);
}

TEST(Pause, PausesNestAndAResumeWithoutOneIsRefused) {
  Runtime rt(one_device());
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  auto x = rt.buffer<float>(4, 4);
  EXPECT_THROW(rt.resume(), Error);
  rt.pause();
  rt.pause();
  Event e = rt.submit(Task(work).write(x));
  rt.resume();
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(e.ready()) << "the inner resume let it go";
  rt.resume();
  rt.wait_all();
  EXPECT_TRUE(e.ready());
  EXPECT_THROW(rt.resume(), Error);
}

TEST(Pause, TheRuntimesEndRunsWhatAPauseHolds) {
  std::atomic<int> ran{0};
  {
    Runtime rt(test::cpu_config(1));
    Kernel k = rt.kernel("count").cpu([&](TaskContext&) { ran.fetch_add(1); });
    auto x = rt.buffer<float>(4, 4);
    rt.pause();
    rt.submit(Task(k).write(x));
    rt.submit(Task(k).read_write(x));
  }
  EXPECT_EQ(ran.load(), 2);
}

// A policy that records what the core tells it: the tasks ready together on resume (only those:
// not the ones waiting for them), and the order it is then given them in, which follows the
// priorities it set (here: the last submitted first).
class Recorder final : public sched::Policy {
 public:
  static inline std::mutex m;
  static inline std::vector<size_t> together;  // sizes of ready_together calls
  static inline std::vector<int> pushed;       // priorities, in push order

  std::string_view name() const noexcept override { return "pause-recorder"; }
  void attach(sched::Context&) override {}
  sched::DeviceId push(sched::TaskRef t) override {
    std::lock_guard<std::mutex> g(m);
    pushed.push_back(t.priority());
    queue_.push_back(t);
    return sched::kAnyDevice;
  }
  sched::TaskRef pop(sched::DeviceId) override {
    std::lock_guard<std::mutex> g(m);
    if (queue_.empty()) return {};
    sched::TaskRef t = queue_.front();
    queue_.pop_front();
    return t;
  }
  void ready_together(std::span<const sched::TaskRef> tasks) override {
    std::lock_guard<std::mutex> g(m);
    together.push_back(tasks.size());
    int p = 0;
    for (sched::TaskRef t : tasks) t.set_priority(++p);
  }

 private:
  std::deque<sched::TaskRef> queue_;
};

TEST(Pause, ThePolicyHearsOfTheReadyTasksTogetherAndItsPrioritiesOrderThem) {
  sched::register_policy("pause-recorder",
                         [](const Config&) { return std::make_unique<Recorder>(); });
  Recorder::together.clear();
  Recorder::pushed.clear();
  Runtime rt(one_device("pause-recorder"));
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  auto a = rt.buffer<float>(4, 4), b = rt.buffer<float>(4, 4), c = rt.buffer<float>(4, 4);
  rt.pause();
  rt.submit(Task(work).write(a));
  rt.submit(Task(work).write(b));
  rt.submit(Task(work).write(c));
  rt.submit(Task(work).read(a).read(b).read(c));  // waits for the three: not ready together
  rt.resume();
  rt.wait_all();
  std::lock_guard<std::mutex> g(Recorder::m);
  ASSERT_EQ(Recorder::together.size(), 1u);
  EXPECT_EQ(Recorder::together[0], 3u);
  ASSERT_EQ(Recorder::pushed.size(), 4u);
  EXPECT_EQ(Recorder::pushed[0], 3);
  EXPECT_EQ(Recorder::pushed[1], 2);
  EXPECT_EQ(Recorder::pushed[2], 1);
}

}  // namespace
}  // namespace hcr
