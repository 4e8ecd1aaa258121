// The peft policy and what it rests on: copies predicted from where the data is, over every link
// they cross, serialised per link direction; a look ahead at the readers of a task's outputs that
// keeps a producer where its readers run when the earliest finish alone would move it away;
// upward ranks from the learned costs as priorities, under the application's; a bounded cold
// start; and "auto", the default policy, chosen by the devices' architectures.
#include "../../scheduler/copy_plan.hpp"
#include "../../scheduler/upward_rank.hpp"
#include "../test_support.hpp"

#include <cmath>

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
            const char* kernels = nullptr) {
  const std::string p = "device." + std::to_string(i) + ".";
  o.push_back({p + "name", name});
  o.push_back({p + "gflops", gflops});
  o.push_back({p + "host_memory", host_memory ? "true" : "false"});
  if (!host_memory) o.push_back({p + "bandwidth", "1GB/s"});
  if (kernels) o.push_back({p + "kernels", kernels});
}

// A GPU with its own memory behind a 1 GB/s link, and a host CPU ten times slower. "produce"
// writes a 64 MiB result that only the GPU can consume. With the GPU busy for 20 ms, the earliest
// finish for produce is the CPU's (10 ms against 21 ms), and its result must then cross the link
// (67 ms) to every reader; looking at the readers already submitted, it stays on the GPU.
int producer_device(const std::string& policy) {
  std::fprintf(stderr, "producer_device %s\n", policy.c_str());  // DEBUG
  Options o;
  device(o, 0, "gpu", "10000", false);
  device(o, 1, "cpu", "1000", true, "produce");
  o.push_back({"kernel.block.flops", "2e11"});    // 20 ms on the GPU
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
    rt.submit(Task(block).on(0));
    rt.submit(Task(produce).read(x).write(y).on(i % 2));
    rt.submit(Task(consume).read(y));
    rt.wait_all();
  }
  auto y = rt.buffer<float>(4096, 4096);
  rt.submit(Task(block));
  Event produced;
  {
    // produce becomes ready only once its readers are submitted (what a look ahead can see).
    auto hold = x.acquire(Access::write);
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
    for (int i = 0; i < 20; ++i)
      for (auto& k : ks) rt.submit(Task(k));
    rt.wait_all();
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
