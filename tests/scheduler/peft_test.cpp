// The peft policy and what it rests on: copies predicted from where the data is, over every link
// they cross, serialised per link direction; a look ahead at the readers of a task's outputs that
// keeps a producer where its readers run when the earliest finish alone would move it away;
// upward ranks from the learned costs as priorities, under the application's; a bounded cold
// start; and "auto", the default policy, chosen by the devices' architectures.
#include "../../scheduler/copy_plan.hpp"
#include "../../scheduler/upward_rank.hpp"
#include "../../scheduler/window_plan.hpp"
#include "../test_support.hpp"

#include <cmath>
#include <set>

namespace hcr {
namespace {

using sched::CopyPlanner;
using sched::InputSite;
using sched::LinkHorizon;
using sched::LinkModel;

// ---- the copy prediction on its own -----------------------------------------------------------

constexpr double kGB = 1e9;

// Memory nodes 0 (host), 1, 2, 3; every link 1 GB/s each way, no latency.
struct Links {
  LinkModel model;
  CopyPlanner plan{model};
  Links() {
    model.resize(4);
    for (uint32_t a = 0; a < 4; ++a)
      for (uint32_t b = 0; b < 4; ++b)
        if (a != b) model.declare(a, b, 0, kGB);
    plan.resize(4);
  }
};

InputSite on(std::initializer_list<uint32_t> nodes, uint64_t bytes) {
  InputSite in;
  in.bytes = bytes;
  for (uint32_t n : nodes) {
    in.valid[n / 64] |= uint64_t{1} << (n % 64);
    in.at[n / 64] |= uint64_t{1} << (n % 64);
  }
  return in;
}
const auto kThroughHost = [](uint32_t, uint32_t) { return false; };
const auto kDirect = [](uint32_t, uint32_t) { return true; };

TEST(CopyPlanner, TwoCopiesOnOneLinkSerialise) {
  Links l;
  const InputSite two[] = {on({0}, 1'000'000'000), on({0}, 1'000'000'000)};
  EXPECT_DOUBLE_EQ(l.plan.arrival(two, 2, 0, 1, 0, 0.0, false, kThroughHost), 2.0)
      << "one task's two inputs share node 1's inbound link";
  // Booked, they keep the link busy: the next task's copy waits behind them.
  l.plan.arrival(two, 2, 0, 1, 0, 0.0, true, kThroughHost);
  const InputSite one[] = {on({0}, 1'000'000'000)};
  EXPECT_DOUBLE_EQ(l.plan.arrival(one, 1, 0, 1, 0, 0.0, false, kThroughHost), 3.0);
  EXPECT_DOUBLE_EQ(l.plan.arrival(one, 1, 0, 1, 0, 0.5, false, kThroughHost), 3.0)
      << "time passing does not free a link still copying";
  EXPECT_DOUBLE_EQ(l.plan.arrival(one, 1, 0, 2, 0, 0.0, false, kThroughHost), 1.0)
      << "another node's link is free";
  // A copy for a more urgent task goes first (the data manager's lanes): it waits for none.
  EXPECT_DOUBLE_EQ(l.plan.arrival(one, 1, 0, 1, 5, 0.0, false, kThroughHost), 1.0);
}

TEST(CopyPlanner, DataOnADeviceComesHomeOverItsOutboundLink) {
  Links l;
  const InputSite on2[] = {on({2}, 2'000'000'000)};
  EXPECT_DOUBLE_EQ(l.plan.arrival(on2, 1, 0, 0, 0, 0.0, true, kThroughHost), 2.0)
      << "a host-memory device reading data only device memory 2 holds waits for the copy";
  EXPECT_DOUBLE_EQ(l.plan.arrival(on2, 1, 0, 0, 0, 0.0, false, kThroughHost), 4.0)
      << "node 2's outbound link is booked";
  const InputSite host[] = {on({0}, 1'000'000'000)};
  EXPECT_DOUBLE_EQ(l.plan.arrival(host, 1, 0, 2, 0, 0.0, false, kThroughHost), 1.0)
      << "its inbound direction is another link";
  EXPECT_DOUBLE_EQ(l.plan.arrival(on2, 1, 0, 2, 0, 0.0, false, kThroughHost), 0.0)
      << "where the data is, nothing moves";
}

TEST(CopyPlanner, BetweenDeviceMemoriesThroughHostOrDirect) {
  Links l;
  const InputSite on2[] = {on({2}, 1'000'000'000)};
  EXPECT_DOUBLE_EQ(l.plan.arrival(on2, 1, 0, 3, 0, 0.0, false, kThroughHost), 2.0)
      << "two hops: node 2 -> host, then host -> node 3";
  EXPECT_DOUBLE_EQ(l.plan.arrival(on2, 1, 0, 3, 0, 0.0, false, kDirect), 1.0)
      << "one plugin's memories copy directly";
  const InputSite both[] = {on({0, 2}, 1'000'000'000)};
  EXPECT_DOUBLE_EQ(l.plan.arrival(both, 1, 0, 3, 0, 0.0, false, kThroughHost), 1.0)
      << "a valid host replica is the source";
  // The second hop waits for the first: a copy booked from host to node 3 ending at 1.5 s
  // does not delay a staged copy whose own first hop ends at 1 s by more than it must.
  const InputSite half[] = {on({0}, 500'000'000)};
  l.plan.arrival(half, 1, 0, 3, 0, 0.0, true, kThroughHost);
  EXPECT_DOUBLE_EQ(l.plan.arrival(on2, 1, 0, 3, 0, 0.0, false, kThroughHost), 2.0);
}

TEST(LinkHorizon, BookingPastTimeForgetsIt) {
  LinkHorizon h;
  h.book(0, 0.0, 0.0, 1.0);
  EXPECT_DOUBLE_EQ(h.free_at(0, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(h.free_at(0, 2.0), 2.0) << "a horizon in the past holds nothing back";
  h.book(0, 3.0, 4.0, 1.0);  // a staged hop that cannot start before 4 s
  EXPECT_DOUBLE_EQ(h.free_at(0, 3.0), 5.0);
}

// ---- the window plan on its own ----------------------------------------------------------------

// Appends a window task: seconds per device, buffers it uses, window tasks that wait for it.
void add_task(sched::PlanInput& in, std::vector<double> exec,
              std::vector<sched::PlanTask::Use> uses, std::vector<uint32_t> successors) {
  sched::PlanTask t;
  t.exec = std::move(exec);
  t.uses = std::move(uses);
  t.successors = std::move(successors);
  in.tasks.push_back(std::move(t));
}

// A fork and a join on two devices with their own memories, 3 s copies between them: R (1 s)
// writes X; C1 and C2 (4 s each) read X; J reads both results (1 s on device 0, 3 s on device
// 1). The earliest finish sends C2 to device 1 (done at 8 s rather than 9 s) and pays for it at
// the join: 11 s, where everything on device 0 takes 10 s.
sched::PlanInput fork_join(const LinkModel& links) {
  sched::PlanInput in;
  in.links = &links;
  in.direct = [](uint32_t, uint32_t) { return true; };
  in.devices = {{1, 1, 0.0}, {2, 1, 0.0}};
  in.link_in = in.link_out = {0, 0, 0};
  auto buffer = [&](uint64_t bytes, uint32_t node) {
    sched::PlanBuffer b;
    b.bytes = bytes;
    b.valid[0] = uint64_t{1} << node;
    in.buffers.push_back(b);
    return static_cast<uint32_t>(in.buffers.size() - 1);
  };
  const uint32_t i = buffer(1, 1), x = buffer(3'000'000'000, 1), y1 = buffer(3'000'000'000, 1),
                 y2 = buffer(3'000'000'000, 1), z = buffer(1, 1);
  add_task(in, {1, 1}, {{i, true, false}, {x, false, true}}, {1, 2});                  // R
  add_task(in, {4, 4}, {{x, true, false}, {y1, false, true}}, {3});                    // C1
  add_task(in, {4, 4}, {{x, true, false}, {y2, false, true}}, {3});                    // C2
  add_task(in, {1, 3}, {{y1, true, false}, {y2, true, false}, {z, false, true}}, {});  // J
  return in;
}

TEST(WindowPlan, OneDeviceWhenSpreadingDoesNotPay) {
  LinkModel links;
  links.resize(3);
  for (uint32_t a = 0; a < 3; ++a)
    for (uint32_t b = 0; b < 3; ++b)
      if (a != b) links.declare(a, b, 0, 1e9);
  const sched::PlanInput in = fork_join(links);
  const sched::Plan heft = sched::plan_window(in, sched::Plan::Rule::heft);
  EXPECT_DOUBLE_EQ(heft.makespan, 11.0);
  EXPECT_EQ(heft.device[2], 1) << "the earliest finish spreads C2";
  const sched::Plan single = sched::plan_window(in, sched::Plan::Rule::single, 0);
  EXPECT_DOUBLE_EQ(single.makespan, 10.0);
  const sched::Plan best = sched::best_plan(in);
  EXPECT_LE(best.makespan, 10.0);
  for (int32_t d : best.device) EXPECT_EQ(d, 0) << best.describe();
  // With copies free, spreading pays: C1 and C2 at once, the join on device 0 at 6 s.
  LinkModel fast;
  fast.resize(3);
  for (uint32_t a = 0; a < 3; ++a)
    for (uint32_t b = 0; b < 3; ++b)
      if (a != b) fast.declare(a, b, 0, 1e18);
  const sched::Plan spread = sched::best_plan(fork_join(fast));
  EXPECT_NEAR(spread.makespan, 6.0, 1e-6) << spread.describe();
  EXPECT_NE(spread.device[1], spread.device[2]);
}

// Insertion (as HEFT and PEFT are defined, and as a device runs whichever of its tasks is ready): a
// short task ranked late fills the time a device waits for an earlier task's inputs. Two devices
// in host memory (no copies). A (2 s on device 0) -> B (2 s on device 1) holds device 1 from 2 s
// to 4 s; C (1 s on device 1, ranked after B) fits before B there, so its reader D starts on
// device 0 at 2 s and everything ends at 4 s. Appending C behind B would end at 6 s.
TEST(WindowPlan, ALateTaskFillsAGapBeforeAnEarlierOne) {
  LinkModel links;
  links.resize(1);
  sched::PlanInput in;
  in.links = &links;
  in.devices = {{0, 1, 0.0}, {0, 1, 0.0}};
  in.link_in = in.link_out = {0};
  for (int b = 0; b < 5; ++b) {
    sched::PlanBuffer buf;
    buf.bytes = 1;
    in.buffers.push_back(buf);
  }
  add_task(in, {2, 100}, {{0, true, false}, {1, false, true}}, {1});  // A
  add_task(in, {100, 2}, {{1, true, false}, {2, false, true}}, {});   // B
  add_task(in, {10, 1}, {{0, true, false}, {3, false, true}}, {3});   // C
  add_task(in, {1, 1}, {{3, true, false}, {4, false, true}}, {});     // D
  const sched::Plan heft = sched::plan_window(in, sched::Plan::Rule::heft);
  EXPECT_EQ(heft.device[0], 0);
  EXPECT_EQ(heft.device[1], 1);
  EXPECT_EQ(heft.device[2], 1) << "C fills device 1's wait for A";
  EXPECT_DOUBLE_EQ(heft.makespan, 4.0) << "C before B, D after A on device 0";
}

// ---- peft on simulated machines ---------------------------------------------------------------

using Options = std::vector<std::pair<std::string, std::string>>;

Config sim(Options o, std::string policy) {
  Config c;
  c.use_environment = false;
  c.policy = std::move(policy);
  c.model_dir = "off";
  o.emplace_back("compute", "false");
  c.backends.push_back({"sim", true, std::move(o), "test"});
  return c;
}

void device(Options& o, int i, const char* name, const char* gflops, bool host_memory,
            const char* kernels = nullptr, const char* bandwidth = "1GB/s") {
  const std::string p = "device." + std::to_string(i) + ".";
  o.push_back({p + "name", name});
  o.push_back({p + "gflops", gflops});
  o.push_back({p + "host_memory", host_memory ? "true" : "false"});
  if (!host_memory) o.push_back({p + "bandwidth", bandwidth});
  if (kernels) o.push_back({p + "kernels", kernels});
}

// A GPU with its own memory behind a 0.5 GB/s link, and a host CPU ten times slower. "produce"
// writes a 64 MiB result that only the GPU can consume. With the GPU busy for 50 ms, the earliest
// finish for produce is the CPU's (10 ms against 51 ms), and its result must then cross the link
// (134 ms) to every reader; looking at the readers already submitted, it stays on the GPU (53 ms
// against 146). The margins are wide because the simulated devices keep wall-clock time: on a
// loaded machine under a sanitizer, a 10 ms task has been measured at over 21 ms.
int producer_device(const std::string& policy) {
  Options o;
  device(o, 0, "gpu", "10000", false, nullptr, "0.5GB/s");
  device(o, 1, "cpu", "1000", true, "produce");
  o.push_back({"kernel.block.flops", "5e11"});    // 50 ms on the GPU
  o.push_back({"kernel.produce.flops", "1e10"});  // 1 ms on the GPU, 10 ms on the CPU
  o.push_back({"kernel.consume.flops", "1e10"});
  o.push_back({"flops_per_byte", "0"});
  Runtime rt(sim(o, policy));
  Kernel block = rt.kernel("block").cpu([](TaskContext&) {});
  Kernel produce = rt.kernel("produce").cpu([](TaskContext&) {});
  Kernel consume = rt.kernel("consume").cpu([](TaskContext&) {});
  auto x = rt.buffer<float>(16, 16);
  // Warm: every kernel measured where it runs (and the link, by the copies of y).
  for (int i = 0; i < 6; ++i) {  // calibrate_samples (3) on each device
    auto y = rt.buffer<float>(4096, 4096);
    rt.submit(Task(block).read(x).on(0));
    rt.submit(Task(produce).read(x).write(y).on(i % 2));
    rt.submit(Task(consume).read(y));
    rt.wait_all();
  }
  auto y = rt.buffer<float>(4096, 4096);
  Event produced;
  {
    // produce becomes ready only once its readers are submitted (what a look ahead can see);
    // block with it, so that the GPU has all of block's 50 ms left however long the submits
    // take (a sanitizer, a loaded machine).
    auto hold = x.acquire(Access::write);
    rt.submit(Task(block).read(x));
    produced = rt.submit(Task(produce).read(x).write(y));
    rt.submit(Task(consume).read(y));
    rt.submit(Task(consume).read(y));
  }
  produced.get();
  rt.wait_all();
  return produced.device();
}

TEST(Peft, LookaheadKeepsAProducerWhereItsReadersRun) {
  EXPECT_EQ(producer_device("dmda"), 1) << "the earliest finish alone moves it to the CPU";
  EXPECT_EQ(producer_device("peft"), 0);
}

// Two host-memory devices (no copies), 10 ms and 20 ms for each task: a chain of three and a
// lone task. Upward ranks from the learned costs: 45, 30 and 15 ms along the chain, 15 for the
// lone one; the application's priority comes first.
TEST(Peft, PrioritiesAreUpwardRanksFromTheModelUnderTheApplications) {
  Options o;
  device(o, 0, "a", "1000", true);
  device(o, 1, "b", "500", true);
  o.push_back({"kernel.w.flops", "1e10"});
  o.push_back({"flops_per_byte", "0"});
  Runtime rt(sim(o, "peft"));
  Kernel w = rt.kernel("w").cpu([](TaskContext&) {});
  auto z = rt.buffer<float>(8, 8), lone = rt.buffer<float>(8, 8), urgent = rt.buffer<float>(8, 8);
  for (int i = 0; i < 6; ++i) rt.submit(Task(w).read_write(z).on(i % 2));  // measured on both
  rt.wait_all();
  rt.start_trace();
  {
    auto hold = z.acquire(Access::write);  // the chain is ready once wholly submitted
    for (int i = 0; i < 3; ++i) rt.submit(Task(w).read_write(z));
  }
  rt.submit(Task(w).read_write(lone));
  rt.submit(Task(w).read_write(urgent).priority(2));
  rt.wait_all();
  std::vector<int> prio;
  for (const TraceEvent& e : rt.trace_events())
    if (e.kind == TraceEvent::Kind::task) prio.push_back(e.priority);
  ASSERT_EQ(prio.size(), 5u);
  // In submission order: the chain runs in order; the lone and urgent tasks may interleave.
  std::vector<TraceEvent> tasks;
  for (const TraceEvent& e : rt.trace_events())
    if (e.kind == TraceEvent::Kind::task) tasks.push_back(e);
  std::sort(tasks.begin(), tasks.end(),
            [](const TraceEvent& a, const TraceEvent& b) { return a.priority > b.priority; });
  const int level45 = sched::UpwardRank::level(0.045), level30 = sched::UpwardRank::level(0.030),
            level15 = sched::UpwardRank::level(0.015);
  ASSERT_LT(level30, level45);
  ASSERT_LT(level15, level30);
  EXPECT_EQ(tasks[0].priority, 2 * 4096 + level15) << "the application's priority wins";
  EXPECT_NEAR(tasks[1].priority, level45, 1) << "the chain's head: 3 x 15 ms mean";
  EXPECT_NEAR(tasks[2].priority, level30, 1);
  EXPECT_NEAR(tasks[3].priority, level15, 1);
  EXPECT_NEAR(tasks[4].priority, level15, 1);
}

// The same fork and join on simulated devices (2 ms, 8 ms, 2 or 6 ms; 6 ms copies): dmda spreads
// the children and pays at the join; peft's plan of the window keeps the graph on one device.
std::set<int> fork_join_devices(const std::string& policy) {
  Options o;
  device(o, 0, "d0", "1000", false);
  device(o, 1, "d1", "1000", false);
  o.push_back({"device.1.factors.join", "0.333333"});
  o.push_back({"kernel.root.flops", "2e9"});
  o.push_back({"kernel.child.flops", "8e9"});
  o.push_back({"kernel.join.flops", "2e9"});
  o.push_back({"flops_per_byte", "0"});
  Runtime rt(sim(o, policy));
  Kernel root = rt.kernel("root").cpu([](TaskContext&) {});
  Kernel child = rt.kernel("child").cpu([](TaskContext&) {});
  Kernel join = rt.kernel("join").cpu([](TaskContext&) {});
  auto graph = [&](std::vector<Event>* events) {
    auto in = rt.buffer<float>(4, 4), x = rt.buffer<float>(1, 1'500'000),
         y1 = rt.buffer<float>(1, 1'500'000), y2 = rt.buffer<float>(1, 1'500'000),
         z = rt.buffer<float>(4, 4);
    std::vector<Event> e;
    {
      // root becomes ready only once the whole graph is submitted: a submitting thread delayed
      // past root's 2 ms (a sanitizer, a loaded machine) must not hide the join from the plan.
      auto hold = in.acquire(Access::write);
      e = {rt.submit(Task(root).read(in).write(x)), rt.submit(Task(child).read(x).write(y1)),
           rt.submit(Task(child).read(x).write(y2)),
           rt.submit(Task(join).read(y1).read(y2).write(z))};
    }
    rt.wait_all();
    if (events) *events = std::move(e);
  };
  for (int i = 0; i < 4; ++i) {  // warm: every kernel measured on both devices, and the links
    auto a = rt.buffer<float>(1, 1'500'000), b = rt.buffer<float>(1, 1'500'000);
    for (const Kernel* k : {&root, &child, &join}) {
      rt.submit(Task(*k).read(a).write(b).on(i % 2));
      rt.submit(Task(*k).read(b).write(a).on((i + 1) % 2));
    }
    rt.wait_all();
  }
  std::vector<Event> events;
  graph(&events);
  std::set<int> used;
  for (const Event& e : events) used.insert(e.device());
  return used;
}

TEST(Peft, AGraphStaysOnOneDeviceWhenSpreadingDoesNotPay) {
  EXPECT_EQ(fork_join_devices("dmda").size(), 2u) << "the earliest finish spreads the children";
  EXPECT_EQ(fork_join_devices("peft").size(), 1u);
}

// Where the window plan spreads, a task goes where the plan put it, not where its own earliest
// finish alone would. Two host-memory devices: "a" runs each task in 20 ms; "b" runs l in 60 ms
// and s in 45 ms. A root r, then a chain l1 -> l2 -> l3 beside a lone s. Placed when ready, s
// finishes first on a (20 ms behind l1, 40 ms against 45 on b) and delays l2 and l3 behind it:
// 80 ms. The plan keeps a for the chain and puts s on b: 60 ms.
int lone_task_device(const std::string& policy) {
  Options o;
  device(o, 0, "a", "1000", true);
  device(o, 1, "b", "1000", true);
  o.push_back({"device.1.factors.l", "0.333333"});
  o.push_back({"device.1.factors.s", "0.444444"});
  o.push_back({"kernel.r.flops", "1e8"});
  o.push_back({"kernel.l.flops", "1e10"});
  o.push_back({"kernel.s.flops", "1e10"});
  o.push_back({"flops_per_byte", "0"});
  Runtime rt(sim(o, policy));
  Kernel r = rt.kernel("r").cpu([](TaskContext&) {});
  Kernel l = rt.kernel("l").cpu([](TaskContext&) {});
  Kernel s = rt.kernel("s").cpu([](TaskContext&) {});
  auto v = [&] { return rt.vector<float>(4); };
  for (int i = 0; i < 6; ++i) {  // warm: each kernel measured on both devices, no graph planned
    for (const Kernel* k : {&r, &l, &s}) rt.submit(Task(*k).read(v()).write(v()).on(i % 2));
    rt.wait_all();
  }
  auto in = v(), x = v(), z = v(), y1 = v(), y2 = v();
  Event lone;
  {
    auto hold = in.acquire(Access::write);  // r is ready once the whole graph is submitted
    rt.submit(Task(r).read(in).write(x).write(z));
    rt.submit(Task(l).read(x).write(y1));
    lone = rt.submit(Task(s).read(z).write(v()));
    rt.submit(Task(l).read(y1).write(y2));
    rt.submit(Task(l).read(y2).write(v()));
  }
  rt.wait_all();
  return lone.device();
}

TEST(Peft, ASpreadingPlansDevicesAreFollowed) {
  EXPECT_EQ(lone_task_device("dmdas"), 0) << "the earliest finish puts s on the fast device";
  EXPECT_EQ(lone_task_device("peft"), 1) << "the plan keeps the fast device for the chain";
}

// A cold start (empty model) of 10 kernels on a machine whose third architecture is 20x slower:
// the slow device is explored for a speed ratio, not for each (kernel, architecture) pair.
TEST(Peft, ColdStartExploresAnArchitectureNotEachKernel) {
  Options o;
  device(o, 0, "fast", "2000", true);
  device(o, 1, "mid", "1000", true);
  device(o, 2, "slow", "100", true);
  for (int k = 0; k < 10; ++k)  // 0.5 ms on the fast device, 10 ms on the slow one
    o.push_back({"kernel.k" + std::to_string(k) + ".flops", "1e9"});
  o.push_back({"flops_per_byte", "0"});
  auto slow_tasks = [&](const std::string& policy) {
    Runtime rt(sim(o, policy));
    std::vector<Kernel> ks;
    for (int k = 0; k < 10; ++k) {
      std::string name = "k";  // (GCC 12 warns falsely, -Wrestrict, of "k" + to_string here)
      name += std::to_string(k);
      ks.push_back(rt.kernel(name).cpu([](TaskContext&) {}));
    }
    // One at a time: no queue ever makes the slow device the earliest finish, so every task it
    // runs was sent there to measure it (with a queue, as under a sanitizer's slower submission,
    // the earliest finish may rightly use it too).
    for (int i = 0; i < 20; ++i)
      for (auto& k : ks) rt.submit(Task(k)).get();
    return rt.stats().devices[2].tasks;
  };
  EXPECT_GE(slow_tasks("dmda"), 10u) << "dmda calibrates every (kernel, architecture) pair";
  EXPECT_LE(slow_tasks("peft"), 3u);
}

// ---- the default ------------------------------------------------------------------------------

TEST(Policies, AutoIsPeftOnDevicesOfSeveralArchitecturesElseEager) {
  Options one, two;
  device(one, 0, "a", "1000", true);
  one.push_back({"device.0.arch", "same"});
  device(one, 1, "b", "1000", true);
  one.push_back({"device.1.arch", "same"});
  device(two, 0, "a", "1000", true);
  device(two, 1, "b", "100", true);
  Config c1 = sim(one, "auto"), c2 = sim(two, "auto");
  EXPECT_EQ(Config().policy, "auto") << "the default";
  EXPECT_EQ(Runtime(c1).policy(), "eager");
  EXPECT_EQ(Runtime(c2).policy(), "peft");
  c2.policy = "dmda";
  EXPECT_EQ(Runtime(c2).policy(), "dmda") << "a named policy is used as named";
}

}  // namespace
}  // namespace hcr
