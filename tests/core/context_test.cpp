// Scheduling contexts (context.hpp): tasks stay on their context's devices; contexts sharing
// devices get device time by weight, work-conserving and without banked credit; a higher
// priority class goes first; devices move between contexts while tasks run; [[context]] tables.
// Simulated devices in host memory, timing only unless a test checks results: 1 ms per task.
#include "../test_support.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>

namespace hcr {
namespace {

using Options = std::vector<std::pair<std::string, std::string>>;

// `n` simulated devices d0, d1, ... of 1000 GFLOP/s; kernel "work" costs 1e9 flops (1 ms).
Config sim(int n, std::string policy = "eager", bool compute = false, Options extra = {}) {
  Config c;
  c.use_environment = false;
  c.policy = std::move(policy);
  c.model_dir = "off";
  Options o;
  for (int i = 0; i < n; ++i) {
    const std::string p = "device." + std::to_string(i) + ".";
    o.push_back({p + "name", "d" + std::to_string(i)});
    o.push_back({p + "gflops", "1000"});
    o.push_back({p + "host_memory", "true"});
  }
  o.push_back({"kernel.work.flops", "1e9"});
  o.push_back({"flops_per_byte", "0"});
  o.push_back({"compute", compute ? "true" : "false"});
  for (auto& kv : extra) o.push_back(kv);
  c.backends.push_back({"sim", true, std::move(o), "test"});
  return c;
}

const ContextStats& of(const RuntimeStats& s, const std::string& name) {
  for (const ContextStats& c : s.contexts)
    if (c.name == name) return c;
  ADD_FAILURE() << "no context '" << name << "' in stats";
  static ContextStats none;
  return none;
}

// Polls the stats until `done` says enough, at most 20 s (a loaded machine is slow, never this
// slow); the figures asserted are shares, not times.
template <class F>
RuntimeStats wait_until(Runtime& rt, F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    RuntimeStats s = rt.stats();
    if (done(s) || std::chrono::steady_clock::now() > deadline) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

TEST(Contexts, DefaultContextUnchangedWhileNoneExists) {
  Runtime rt(sim(2));
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  for (int i = 0; i < 20; ++i) rt.submit(Task(work));
  rt.wait_all();
  RuntimeStats s = rt.stats();
  EXPECT_TRUE(s.contexts.empty()) << "no context was made: nothing is counted per context";
  EXPECT_EQ(s.completed, 20u);
  EXPECT_EQ(rt.policy(), "eager");
}

TEST(Contexts, TasksRunOnlyOnTheirContextsDevices) {
  Runtime rt(sim(3));
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  Context c = rt.context({.name = "edges", .devices = {0, 2}});
  EXPECT_EQ(c.devices(), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(rt.policy(), "eager") << "the configured policy still names the runtime's policy";
  std::vector<Event> events;
  for (int i = 0; i < 60; ++i) events.push_back(rt.submit(Task(work).in(c)));
  // Default-context tasks still use every device, the middle one included.
  std::vector<Event> plain;
  for (int i = 0; i < 60; ++i) plain.push_back(rt.submit(Task(work)));
  rt.wait_all();
  std::set<int> used;
  for (Event& e : events) {
    e.get();
    EXPECT_TRUE(e.device() == 0 || e.device() == 2) << "ran on device " << e.device();
    used.insert(e.device());
  }
  EXPECT_EQ(used.size(), 2u) << "both of its devices take its work";
  bool middle = false;
  for (Event& e : plain) middle = middle || e.device() == 1;
  EXPECT_TRUE(middle) << "the default context keeps every device";
  RuntimeStats s = rt.stats();
  ASSERT_EQ(s.contexts.size(), 2u);
  EXPECT_EQ(s.contexts[0].name, "default");
  const ContextStats& e = of(s, "edges");
  EXPECT_EQ(e.tasks, 60u);
  EXPECT_EQ(e.device_seconds[1], 0.0);
  EXPECT_GT(e.device_seconds[0] + e.device_seconds[2], 0.05) << "60 tasks of 1 ms, measured";
  EXPECT_EQ(s.contexts[0].tasks, 60u);
}

TEST(Contexts, AContextMadeWhileTasksRunLosesNoneOfTheDefaultContexts) {
  // The policy in use goes behind the context policy while it holds queued tasks (which no count
  // of the new policy includes), and timing comes on while launches run without it.
  Runtime rt(sim(2));
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  std::vector<Event> before;
  for (int i = 0; i < 200; ++i) before.push_back(rt.submit(Task(work)));
  Context c = rt.context({.name = "late", .weight = 2});
  std::vector<Event> after;
  for (int i = 0; i < 100; ++i) {
    after.push_back(rt.submit(Task(work).in(c)));
    after.push_back(rt.submit(Task(work)));
  }
  rt.wait_all();
  for (Event& e : before) e.get();
  for (Event& e : after) e.get();
  RuntimeStats s = rt.stats();
  EXPECT_EQ(s.completed, 400u);
  EXPECT_EQ(of(s, "late").tasks, 100u);
  EXPECT_EQ(of(s, "late").queued, 0u);
  EXPECT_EQ(of(s, "default").queued, 0u) << "tasks from before the switch are not counted twice";
  for (const ContextStats& x : s.contexts)
    for (double sec : x.device_seconds) EXPECT_LT(sec, 1.0) << x.name << ": no bogus durations";
}

TEST(Contexts, TraceEventsNameTheirContext) {
  Runtime rt(sim(2));
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  Context c = rt.context({.name = "traced"});
  rt.start_trace();
  rt.submit(Task(work).in(c));
  rt.submit(Task(work));
  rt.wait_all();
  rt.stop_trace();
  int in_context = 0, plain = 0;
  for (const TraceEvent& e : rt.trace_events()) {
    if (e.kind != TraceEvent::Kind::task) continue;
    if (e.context == "traced") ++in_context;
    else if (e.context.empty()) ++plain;
    else ADD_FAILURE() << "context '" << e.context << "'";
  }
  EXPECT_EQ(in_context, 1);
  EXPECT_EQ(plain, 1) << "the default context's tasks carry no name";
}

TEST(Contexts, ATaskWithNoCapableDeviceInItsContextFailsNamingIt) {
  // Only d1 runs "special"; the context holds d0 and d2.
  Runtime rt(sim(3, "eager", false, {{"device.0.kernels", "work"}, {"device.2.kernels", "work"}}));
  Kernel special = rt.kernel("special").cpu([](TaskContext&) {});
  Context c = rt.context({.name = "no-special", .devices = {0, 2}});
  Event e = rt.submit(Task(special).in(c));
  try {
    e.get();
    FAIL() << "the task ran although no device of its context runs the kernel";
  } catch (const Error& x) {
    EXPECT_EQ(x.code(), ErrorCode::no_device);
    const std::string m = x.what();
    EXPECT_NE(m.find("context 'no-special'"), std::string::npos) << m;
    EXPECT_NE(m.find("d0"), std::string::npos) << m;
    EXPECT_EQ(m.find("d1"), std::string::npos) << "only the context's devices are listed: " << m;
  }
  // The same kernel outside the context runs (on d1).
  Event ok = rt.submit(Task(special));
  ok.get();
  EXPECT_EQ(ok.device(), 1);
  // Pinned outside its context: the message says so.
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  Event pinned = rt.submit(Task(work).on(1).in(c));
  try {
    pinned.get();
    FAIL() << "a task pinned outside its context ran";
  } catch (const Error& x) {
    EXPECT_NE(std::string(x.what()).find("not in the context"), std::string::npos) << x.what();
  }
}

TEST(Contexts, WeightedSharesOfDeviceTime) {
  Runtime rt(sim(2));
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  Context heavy = rt.context({.name = "heavy", .weight = 3});
  Context light = rt.context({.name = "light", .weight = 1});
  constexpr int kTasks = 900;  // each; both stay backlogged past the sample below
  for (int i = 0; i < kTasks; ++i) {
    rt.submit(Task(work).in(heavy));
    rt.submit(Task(work).in(light));
  }
  RuntimeStats s = wait_until(
      rt, [](const RuntimeStats& x) { return of(x, "heavy").tasks + of(x, "light").tasks >= 700; });
  const double h = of(s, "heavy").busy_seconds, l = of(s, "light").busy_seconds;
  ASSERT_GT(l, 0.0);
  EXPECT_NEAR(h / l, 3.0, 0.3) << "heavy " << h << " s, light " << l << " s of device time";
  EXPECT_GT(of(s, "light").queued, 0u) << "light was still backlogged when sampled";
  rt.wait_all();
  s = rt.stats();
  EXPECT_EQ(of(s, "heavy").tasks, static_cast<uint64_t>(kTasks));
  EXPECT_EQ(of(s, "light").tasks, static_cast<uint64_t>(kTasks));
}

TEST(Contexts, AnIdleContextsShareGoesToTheOthersAndIsNotBanked) {
  Runtime rt(sim(2));
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  Context heavy = rt.context({.name = "heavy", .weight = 3});
  Context light = rt.context({.name = "light", .weight = 1});
  // Heavy idle: light alone has both devices, however small its weight.
  for (int i = 0; i < 300; ++i) rt.submit(Task(work).in(light));
  rt.wait_all();
  RuntimeStats s = rt.stats();
  const ContextStats& l1 = of(s, "light");
  EXPECT_EQ(l1.tasks, 300u);
  for (uint32_t d = 0; d < 2; ++d) {
    EXPECT_GT(l1.device_seconds[d], 0.3 * l1.busy_seconds)
        << "device " << d << " idled while light had work";
    EXPECT_NEAR(l1.device_seconds[d], s.devices[d].busy_seconds, 0.01)
        << "all of device " << d << "'s time went to light";
  }
  // Heavy wakes: it is owed nothing for its idle time (banked credit would give it every device
  // until its 3x-weighted virtual time caught up with light's 0.15 s per device: 450 tasks).
  const double light_before = l1.busy_seconds, heavy_before = of(s, "heavy").busy_seconds;
  for (int i = 0; i < 500; ++i) {
    rt.submit(Task(work).in(heavy));
    rt.submit(Task(work).in(light));
  }
  s = wait_until(rt, [&](const RuntimeStats& x) {
    return of(x, "heavy").busy_seconds - heavy_before + of(x, "light").busy_seconds -
               light_before >=
           0.3;
  });
  const double h = of(s, "heavy").busy_seconds - heavy_before;
  const double l = of(s, "light").busy_seconds - light_before;
  EXPECT_NEAR(l / (h + l), 0.25, 0.07) << "light's share once heavy is back: 1 of 4";
  rt.wait_all();
}

TEST(Contexts, AHigherPriorityClassGoesFirst) {
  Runtime rt(sim(1));
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  Context lo = rt.context({.name = "batch"});
  // A tiny weight: by fair sharing alone, "live" would wait for nearly all of batch.
  Context hi = rt.context({.name = "live", .weight = 0.01, .priority = 1});
  rt.start_trace();
  for (int i = 0; i < 300; ++i) rt.submit(Task(work).in(lo));
  std::vector<Event> live;
  for (int i = 0; i < 20; ++i) live.push_back(rt.submit(Task(work).in(hi)));
  const double submitted = rt.stats().wall_seconds;  // (however long the submits took)
  for (Event& e : live) e.get();
  EXPECT_EQ(of(rt.stats(), "live").tasks, 20u);
  rt.wait_all();
  EXPECT_EQ(of(rt.stats(), "batch").tasks, 300u);
  double last_live_start = -1;
  for (const TraceEvent& e : rt.trace_events())
    if (e.kind == TraceEvent::Kind::task && e.context == "live")
      last_live_start = std::max(last_live_start, e.start);
  ASSERT_GT(last_live_start, 0);
  // Once every live task was queued, batch ran only what the device had already been handed.
  int batch_between = 0;
  for (const TraceEvent& e : rt.trace_events())
    if (e.kind == TraceEvent::Kind::task && e.context == "batch" && e.start > submitted &&
        e.start < last_live_start)
      ++batch_between;
  EXPECT_LE(batch_between, 2) << "live's 20 tasks waited behind batch's";
}

// Devices do not preempt: without a reserve, a latency class's task waits for the batch task
// running on the device it gets (and those handed to it behind that one). With `reserve = 1`, the
// first of its devices runs no batch task while it is active, and goes back to batch once it has
// been idle 50 ms. Two devices of 1 ms tasks, batch keeping both busy; live submits a task every
// 3 ms.
TEST(Contexts, AReserveKeepsADeviceForAnActiveLatencyClass) {
  Runtime rt(sim(2));
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  Context batch = rt.context({.name = "batch"});
  Context live = rt.context({.name = "live", .priority = 1, .reserve = 1});
  EXPECT_EQ(of(rt.stats(), "live").reserve, 1u);
  rt.start_trace();
  for (int i = 0; i < 400; ++i) rt.submit(Task(work).in(batch));
  std::vector<Event> mine;
  // Each live task is pushed between `before` and `after` of its submit: the reserve holds from
  // `after` to `before` + 50 ms at least, however late this thread runs (a sanitizer, a loaded
  // machine), and from `after` of the last one it lapses within 50 ms.
  std::vector<std::pair<double, double>> held;
  for (int i = 0; i < 30; ++i) {
    const double before = rt.stats().wall_seconds;
    mine.push_back(rt.submit(Task(work).in(live)));
    held.emplace_back(rt.stats().wall_seconds, before + 0.05);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  for (Event& e : mine) e.get();
  std::this_thread::sleep_for(std::chrono::milliseconds(120));  // live idle: the reserve lapses
  rt.wait_all();
  double first_live_end = -1;
  for (const TraceEvent& e : rt.trace_events())
    if (e.kind == TraceEvent::Kind::task && e.context == "live" &&
        (first_live_end < 0 || e.end < first_live_end))
      first_live_end = e.end;
  ASSERT_GT(first_live_end, 0);
  const double lapsed = held.back().first + 0.05 + 0.005;
  int batch_on_reserved = 0, batch_after[2] = {0, 0};
  for (const TraceEvent& e : rt.trace_events()) {
    if (e.kind != TraceEvent::Kind::task || e.context != "batch") continue;
    if (e.start > lapsed) ++batch_after[e.device];
    if (e.device != 0 || e.start <= first_live_end) continue;
    // Handed to device 0 before the first live task came: at most a window's worth (2) after.
    for (const auto& [from, to] : held)
      if (e.start > from && e.start < to) {
        ++batch_on_reserved;
        break;
      }
  }
  EXPECT_LE(batch_on_reserved, 2) << "batch ran on the reserved device while live was active";
  if (batch_after[1] > 2) {  // batch still had work once the reserve lapsed
    EXPECT_GT(batch_after[0], 0) << "the reserve held the device after live went idle";
  }
  EXPECT_EQ(of(rt.stats(), "batch").tasks, 400u);
}

// Nothing else runs to notice that a reserve lapsed: the device it held is pumped again anyway.
TEST(Contexts, WorkHeldBackByAReserveRunsWhenItLapses) {
  Runtime rt(sim(1));
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  Context batch = rt.context({.name = "batch"});
  Context live = rt.context({.name = "live", .priority = 1, .reserve = 1});
  rt.start_trace();
  const double before = rt.stats().wall_seconds;
  rt.submit(Task(work).in(live)).get();  // live active: device 0 is held for it 50 ms from its push
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Event> held;
  for (int i = 0; i < 5; ++i) held.push_back(rt.submit(Task(work).in(batch)));
  for (Event& e : held) e.get();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 5.0);
  int batch_tasks = 0;
  for (const TraceEvent& e : rt.trace_events())
    if (e.kind == TraceEvent::Kind::task && e.context == "batch") {
      ++batch_tasks;
      EXPECT_GE(e.start, before + 0.05 - 0.001)
          << "batch ran on the held device while live was active";
    }
  EXPECT_EQ(batch_tasks, 5);
}

TEST(Contexts, DevicesMoveBetweenContextsWhileTasksRun) {
  // random queues per device and never steals: what "a" queued for d1 must come back when it
  // loses d1, and what "b" queued for d2 must spread to d1 when it gains it.
  Config cfg = sim(3, "random", true);
  Runtime rt(cfg);
  Kernel put =
      rt.kernel("work").cpu([](TaskContext& c) { c.arg<int32_t>(0)(0, 0) = c.param<int32_t>(0); });
  Context a = rt.context({.name = "a", .devices = {0, 1}});
  Context b = rt.context({.name = "b", .devices = {2}});
  constexpr int kTasks = 300;
  std::vector<Buffer<int32_t>> out;
  std::vector<Event> events;
  for (int i = 0; i < 2 * kTasks; ++i) {
    out.push_back(rt.buffer<int32_t>(1, 1));
    events.push_back(
        rt.submit(Task(put).write(out.back()).param(int32_t{i + 1}).in(i % 2 ? b : a)));
  }
  a.set_devices({0});
  // (b's 300 ms of work on d2 outlasts the submits unless they were slow indeed: a sanitizer)
  const bool b_had_work = of(rt.stats(), "b").tasks + 50 < kTasks;
  b.set_devices({1, 2});
  EXPECT_EQ(a.devices(), (std::vector<uint32_t>{0}));
  EXPECT_EQ(b.devices(), (std::vector<uint32_t>{1, 2}));
  RuntimeStats s = wait_until(rt, [&](const RuntimeStats& x) { return x.completed >= 2 * kTasks; });
  if (s.completed < 2 * kTasks) {
    ADD_FAILURE() << "tasks were lost in the move: " << s.completed << " of " << 2 * kTasks
                  << " finished";
    std::_Exit(1);  // the runtime's end would wait for them forever
  }
  for (int i = 0; i < 2 * kTasks; ++i) {
    events[i].get();
    auto v = out[i].acquire(Access::read);
    EXPECT_EQ(v(0, 0), i + 1) << "task " << i;
    if (i % 2 == 0) {
      EXPECT_NE(events[i].device(), 2) << "a never had device 2";
    }
  }
  s = rt.stats();
  if (b_had_work) {  // b still had work to spread when it gained d1
    EXPECT_GT(of(s, "b").device_seconds[1], 0.0) << "b used the device it gained";
  }
  EXPECT_EQ(of(s, "a").tasks + of(s, "b").tasks, 2u * kTasks);
}

TEST(Contexts, AContextOverItsMemoryQuotaEvictsItsOwnDataOnly) {
  Config cfg;
  cfg.use_environment = false;
  cfg.policy = "eager";
  cfg.model_dir = "off";
  cfg.backends.push_back({"sim",
                          true,
                          {{"device.0.name", "g"},
                           {"device.0.memory", "1GiB"},
                           {"device.0.bandwidth", "100GB/s"},
                           {"kernel.touch.flops", "1e6"},
                           {"flops_per_byte", "0"},
                           {"compute", "false"}},
                          "test"});
  Runtime rt(cfg);
  Kernel touch = rt.kernel("touch").cpu([](TaskContext&) {});
  constexpr uint64_t kMiB = 1 << 20;
  Context quota = rt.context({.name = "quota", .memory_quota = 3 * kMiB});
  Context other = rt.context({.name = "other"});
  std::vector<Buffer<float>> keep;  // alive: a freed buffer gives its replicas up anyway
  for (int i = 0; i < 4; ++i) {
    keep.push_back(rt.buffer<float>(512, 512));  // 1 MiB each
    rt.submit(Task(touch).read(keep.back()).in(other));
  }
  rt.wait_all();
  EXPECT_EQ(of(rt.stats(), "other").memory_bytes[0], 4 * kMiB);
  std::vector<Event> events;
  for (int i = 0; i < 12; ++i) {
    keep.push_back(rt.buffer<float>(512, 512));
    events.push_back(rt.submit(Task(touch).read(keep.back()).in(quota)));
  }
  rt.wait_all();
  for (Event& e : events) e.get();
  RuntimeStats s = rt.stats();
  EXPECT_LE(of(s, "quota").memory_bytes[0], 3 * kMiB) << "12 MiB read, at most 3 MiB kept";
  EXPECT_GT(of(s, "quota").memory_bytes[0], 0u);
  EXPECT_EQ(of(s, "other").memory_bytes[0], 4 * kMiB)
      << "the device had room: another context's data stays";
  EXPECT_EQ(of(s, "quota").memory_quota, 3 * kMiB);
  // A task whose buffers alone exceed the quota can never run in it.
  auto big = rt.buffer<float>(1024, 1024);  // 4 MiB
  Event e = rt.submit(Task(touch).read(big).in(quota));
  try {
    e.get();
    FAIL() << "a 4 MiB task ran within a 3 MiB quota";
  } catch (const Error& x) {
    EXPECT_EQ(x.code(), ErrorCode::no_device);
    EXPECT_NE(std::string(x.what()).find("context 'quota'"), std::string::npos) << x.what();
    EXPECT_NE(std::string(x.what()).find("memory_quota of 3145728 bytes"), std::string::npos)
        << x.what();
  }
}

TEST(Contexts, MisuseIsRefusedNamingTheValue) {
  Runtime rt(sim(2));
  auto message = [](auto f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message([&] { rt.context({.name = ""}); }).find("needs a name"), std::string::npos);
  EXPECT_NE(message([&] { rt.context({.name = "x", .weight = 0}); }).find("weight 0"),
            std::string::npos);
  EXPECT_NE(message([&] { rt.context({.name = "x", .devices = {5}}); }).find("device 5"),
            std::string::npos);
  EXPECT_NE(message([&] { rt.context({.name = "default"}); }).find("'default'"), std::string::npos);
  EXPECT_NE(message([&] {
              rt.context({.name = "x", .devices = {1}, .reserve = 2});
            }).find("reserve 2 is more than its 1 device(s)"),
            std::string::npos);
  Context x = rt.context({.name = "x"});
  EXPECT_NE(message([&] { rt.context({.name = "x"}); }).find("exists already"), std::string::npos);
  EXPECT_NE(message([&] { x.set_devices({0, 7}); }).find("device 7"), std::string::npos);
  EXPECT_NE(message([&] { rt.find_context("y"); }).find("the contexts: x"), std::string::npos);
  Runtime other(sim(1));
  Kernel k = other.kernel("work").cpu([](TaskContext&) {});
  EXPECT_NE(message([&] { Task(k).in(x); }).find("another runtime"), std::string::npos);
  EXPECT_NE(message([&] { Task(k).in(Context{}); }).find("empty Context"), std::string::npos);
}

TEST(Contexts, TomlTablesMakeContextsAtTheStart) {
  Config c = Config::parse(R"(
[[context]]
name = "batch"
devices = [0, "d1"]
weight = 3

[[context]]
name = "live"
devices = ["d1"]
priority = 2
memory_quota = "1GiB"
reserve = 1
)",
                           "ctx.toml");
  ASSERT_EQ(c.contexts.size(), 2u);
  EXPECT_EQ(c.contexts[0].devices, (std::vector<std::string>{"0", "d1"}));
  EXPECT_EQ(c.contexts[0].weight, 3.0);
  EXPECT_EQ(c.contexts[1].priority, 2);
  EXPECT_EQ(c.contexts[1].memory_quota, uint64_t{1} << 30);
  EXPECT_EQ(c.contexts[1].reserve, 1u);
  EXPECT_EQ(c.contexts[1].origin, "ctx.toml:7");
  Config run = sim(2);
  run.contexts = c.contexts;
  Runtime rt(run);
  Context batch = rt.find_context("batch"), live = rt.find_context("live");
  EXPECT_EQ(batch.devices(), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(batch.weight(), 3.0);
  EXPECT_EQ(live.devices(), (std::vector<uint32_t>{1}));
  EXPECT_EQ(live.priority(), 2);
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  Event e = rt.submit(Task(work).in(live));
  e.get();
  EXPECT_EQ(e.device(), 1);
}

TEST(Contexts, TomlMistakesAreNamedByFileLineAndKey) {
  auto message = [](const std::string& toml) -> std::string {
    try {
      Config::parse(toml, "bad.toml");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::config);
      return e.what();
    }
    return "(no error)";
  };
  const std::string m = message(R"([[context]]
name = "a"
weight = -1
colour = "red"
reserve = -1
[[context]]
devices = [1.5]
[[context]]
name = "a"
)");
  EXPECT_NE(m.find("bad.toml:3: context.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("bad.toml:4: context.colour: unknown key"), std::string::npos) << m;
  EXPECT_NE(m.find("bad.toml:5: context.reserve: -1 is not a number of devices"), std::string::npos)
      << m;
  EXPECT_NE(m.find("bad.toml:7: context.devices"), std::string::npos) << m;
  EXPECT_NE(m.find("context.name: every [[context]] needs a name"), std::string::npos) << m;
  // A device named in a table that the runtime does not have: its start fails naming the table.
  Config run = sim(2);
  run.contexts =
      Config::parse("[[context]]\nname = \"x\"\ndevices = [\"gpu9\"]\n", "c.toml").contexts;
  try {
    Runtime rt(run);
    FAIL() << "a context naming a device that does not exist was made";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::config);
    EXPECT_NE(std::string(e.what()).find("c.toml:1: context 'x': devices: no device 'gpu9'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hcr
