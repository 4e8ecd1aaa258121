// Energy per device and per task: the power a [[backend]] table declares, modelled over the
// device's busy time; each task's share learned by the cost model and saved with it; the draw as a
// counter track in the trace; the configuration's energy keys; and a plugin built as ABI 1.0 (no
// meter entry, short completions) still loads and runs.
#include "../test_support.hpp"

#include <cstdio>
#include <hcr/sched.hpp>

#include <nlohmann/json.hpp>

#include <fstream>

namespace hcr {
namespace {

// One simulated device (timing only) that declares 10 W idle and 110 W busy; tasks of 10 ms.
Config declared_machine(std::string model_dir = "off") {
  Config c;
  c.use_environment = false;
  c.policy = "dmda";
  c.model_dir = std::move(model_dir);
  BackendConfig b{"sim",
                  true,
                  {{"compute", "false"},
                   {"flops_per_byte", "0"},
                   {"kernel.work.flops", "1e10"},  // 10 ms at 1000 GFLOP/s
                   {"device.0.name", "d0"},
                   {"device.0.gflops", "1000"},
                   {"device.0.host_memory", "true"}},
                  "test"};
  b.idle_watts = 10;
  b.busy_watts = 110;
  c.backends.push_back(b);
  return c;
}

TEST(Energy, DeclaredPowerIsModelledOverTheBusyTime) {
  Runtime rt(declared_machine());
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  for (int i = 0; i < 10; ++i) rt.submit(Task(work));
  rt.wait_all();
  const RuntimeStats s = rt.stats();
  ASSERT_EQ(s.devices.size(), 1u);
  const DeviceCounters& d = s.devices[0];
  EXPECT_EQ(d.energy_source, "declared");
  EXPECT_NEAR(d.busy_seconds, 0.1, 1e-9) << "the sim reports its modelled durations";
  // 10 W over the runtime's life, and 100 W more while busy.
  const double dynamic = 100 * d.busy_seconds;
  EXPECT_GE(d.energy_joules, dynamic + 10 * 0.1 - 1e-6);
  EXPECT_LE(d.energy_joules, dynamic + 10 * (s.wall_seconds + 0.05));
  EXPECT_DOUBLE_EQ(s.energy_joules, d.energy_joules);
}

TEST(Energy, EachTasksShareIsLearnedAndSaved) {
  test::TempDir dir;
  Config c = declared_machine(dir.path().string());
  {
    Runtime rt(c);
    Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
    for (int i = 0; i < 5; ++i) rt.submit(Task(work)).get();
  }
  std::vector<std::string> warnings;
  const auto rows = sched::read_models(sched::model_directory(c), warnings);
  EXPECT_TRUE(warnings.empty());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].joules_samples, 5u);
  EXPECT_NEAR(rows[0].joules, 100 * 0.01, 1e-6) << "100 W above idle for 10 ms";
}

// The simulated device's own power model ([[backend.device]] idle_watts, busy_watts,
// power.<kernel>): a meter of source "modelled" (the plugin's, not a declaration), each task's
// joules reported with its completion — exact: (busy - idle) x the kernel's power factor x its
// modelled duration — and learned per kernel; a mistake in the keys is an error naming them.
TEST(Energy, TheSimulatedDevicesPowerModelIsExact) {
  test::TempDir dir;
  Config c;
  c.use_environment = false;
  c.policy = "dmda";
  c.model_dir = dir.path().string();
  c.backends.push_back({"sim",
                        true,
                        {{"compute", "false"},
                         {"flops_per_byte", "0"},
                         {"kernel.work.flops", "1e10"},  // 10 ms at 1000 GFLOP/s
                         {"kernel.light.flops", "1e10"},
                         {"device.0.name", "d0"},
                         {"device.0.gflops", "1000"},
                         {"device.0.host_memory", "true"},
                         {"device.0.idle_watts", "10"},
                         {"device.0.busy_watts", "110"},
                         {"device.0.power.light", "0.25"}},
                        "test"});
  RuntimeStats s;
  {
    Runtime rt(c);
    Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
    Kernel light = rt.kernel("light").cpu([](TaskContext&) {});
    for (int i = 0; i < 4; ++i) {
      rt.submit(Task(work)).get();
      rt.submit(Task(light)).get();
    }
    s = rt.stats();
  }
  ASSERT_EQ(s.devices.size(), 1u);
  const DeviceCounters& d = s.devices[0];
  EXPECT_EQ(d.energy_source, "modelled");
  const double dynamic = 4 * (100 * 0.01) + 4 * (25 * 0.01);  // 5 J above idle
  EXPECT_GE(d.energy_joules, dynamic + 10 * 0.08 - 1e-6) << "idle draw over at least the busy time";
  EXPECT_LE(d.energy_joules, dynamic + 10 * (s.wall_seconds + 0.05));
  std::vector<std::string> warnings;
  const auto rows = sched::read_models(sched::model_directory(c), warnings);
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows) {
    EXPECT_EQ(r.joules_samples, 4u) << r.kernel;
    EXPECT_NEAR(r.joules, r.kernel == "light" ? 0.25 : 1.0, 1e-9) << r.kernel;
  }
  for (const char* bad : {"device.0.busy_watts=5", "device.0.power.=1"}) {
    Config b = c;
    b.model_dir = "off";
    std::string key = bad;
    const auto eq = key.find('=');
    b.backends[0].options.push_back({key.substr(0, eq), key.substr(eq + 1)});
    Error e = test::expect_error([&] { Runtime rt(b); });
    EXPECT_NE(std::string(e.what()).find(key.substr(0, eq)), std::string::npos) << e.what();
  }
}

TEST(Energy, TheDrawIsACounterTrackInTheTrace) {
  test::TempDir dir;
  Runtime rt(declared_machine());
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  rt.start_trace();
  for (int i = 0; i < 10; ++i) rt.submit(Task(work));
  rt.wait_all();
  (void)rt.stats();  // a reading at the end, too
  rt.stop_trace();
  size_t power = 0;
  for (const TraceEvent& e : rt.trace_events())
    if (e.kind == TraceEvent::Kind::power) {
      ++power;
      EXPECT_GE(e.measured, 10.0 - 1e-9);
      EXPECT_LE(e.measured, 110.0 + 1e-9);
    }
  EXPECT_GE(power, 1u);
  const auto file = dir.path() / "run.json";
  rt.write_trace(file.string());
  const nlohmann::json trace = nlohmann::json::parse(std::ifstream(file));
  size_t counters = 0;
  for (const auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "C") {
      ++counters;
      EXPECT_TRUE(e["args"].contains("watts"));
    }
  EXPECT_EQ(counters, power);
}

TEST(Energy, ConfigurationKeysAndTheirMistakes) {
  const Config c = Config::parse(R"(
[scheduler]
objective = "energy"
max_slowdown = 1.2
[[backend]]
name = "cpu"
idle_watts = 20
busy_watts = 65.5
)",
                                 "energy.toml");
  EXPECT_EQ(c.objective, "energy");
  EXPECT_DOUBLE_EQ(c.max_slowdown, 1.2);
  ASSERT_EQ(c.backends.size(), 1u);
  EXPECT_DOUBLE_EQ(c.backends[0].idle_watts, 20);
  EXPECT_DOUBLE_EQ(c.backends[0].busy_watts, 65.5);
  auto error_of = [](const char* text) {
    try {
      Config::parse(text, "bad.toml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(
      error_of("[scheduler]\nobjective = \"cheap\"\n")
          .find("bad.toml:2: scheduler.objective: 'cheap' is not one of time, energy, weighted"),
      std::string::npos);
  EXPECT_NE(error_of("[scheduler]\nmax_slowdown = 0.5\n").find("scheduler.max_slowdown"),
            std::string::npos);
  EXPECT_NE(error_of("[[backend]]\nname = \"cpu\"\nidle_watts = -3\n").find("backend.idle_watts"),
            std::string::npos);
}

TEST(Energy, APluginBuiltForAbi10LoadsAndRuns) {
  Config c;
  c.use_environment = false;
  c.policy = "dmda";
  c.model_dir = "off";
  c.plugin_paths = {HCR_TEST_ABI10_DIR};
  c.backends.push_back({"abi10", true, {}, "test"});
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 1u) << "the 1.0 table is accepted";
  auto v = rt.vector<float>(4);
  Kernel inc = rt.kernel("inc").cpu([](TaskContext& ctx) {
    auto x = ctx.arg<float>(0);
    for (size_t i = 0; i < x.cols; ++i) x(0, i) += 1;
  });
  for (int i = 0; i < 3; ++i) rt.submit(Task(inc).read_write(v));
  rt.wait_all();
  EXPECT_EQ(v.to_vector(), std::vector<float>(4, 3.0f));
  const RuntimeStats s = rt.stats();
  EXPECT_NEAR(s.devices[0].busy_seconds, 3 * 0.002, 1e-12) << "a 1.0 completion's seconds count";
  EXPECT_EQ(s.devices[0].energy_source, "none") << "no meter entry was read past the table";
}

// A power-hungry device four times faster than a frugal one (250 W above idle against 25 W, idle
// draws small): the
// energy objective sends the frugal one more of a bag of tasks, uses less energy for them, and
// keeps the makespan within max_slowdown of what the time objective reaches.
struct BagResult {
  uint64_t frugal_tasks = 0;
  // Modelled: busy draw above idle, and both idle draws over the makespan
  double joules = 0;
  double makespan = 0;  // modelled: the busiest device's busy time (no copies, no waits)
};
BagResult run_bag(const std::string& objective) {
  Config c;
  c.use_environment = false;
  c.policy = "peft";
  c.model_dir = "off";
  c.objective = objective;
  c.max_slowdown = 1.3;
  auto device = [](const char* name, const char* gflops, double idle, double busy) {
    BackendConfig b{"sim",
                    true,
                    {{"compute", "false"},
                     {"flops_per_byte", "0"},
                     {"kernel.work.flops", "1e10"},
                     {"device.0.name", name},
                     {"device.0.arch", name},
                     {"device.0.gflops", gflops},
                     {"device.0.host_memory", "true"}},
                    "test"};
    b.idle_watts = idle;
    b.busy_watts = busy;
    return b;
  };
  c.backends = {device("hungry", "4000", 5, 255), device("frugal", "1000", 1, 26)};
  Runtime rt(c);
  Kernel work = rt.kernel("work").cpu([](TaskContext&) {});
  for (int i = 0; i < 6; ++i) rt.submit(Task(work).on(i % 2)).get();  // both measured
  const RuntimeStats before = rt.stats();
  rt.pause();  // the bag placed at once, as the queues stand, however slowly it is submitted
  for (int i = 0; i < 100; ++i) rt.submit(Task(work));
  rt.resume();
  rt.wait_all();
  const RuntimeStats after = rt.stats();
  BagResult r;
  for (size_t d = 0; d < 2; ++d) {
    const double busy = after.devices[d].busy_seconds - before.devices[d].busy_seconds;
    r.joules += (d == 0 ? 250 : 25) * busy;
    r.makespan = std::max(r.makespan, busy);
  }
  r.joules += (5 + 1) * r.makespan;
  r.frugal_tasks = after.devices[1].tasks - before.devices[1].tasks;
  return r;
}

TEST(Energy, TheEnergyObjectiveSavesWithinMaxSlowdown) {
  const BagResult time = run_bag("time"), energy = run_bag("energy");
  EXPECT_GT(energy.frugal_tasks, time.frugal_tasks);
  EXPECT_LT(energy.joules, time.joules);
  // The busiest device's modelled busy time bounds the makespan (independent tasks, no copies):
  // within the slowdown allowed, and a task's length of rounding.
  std::printf("time: %llu frugal tasks, %.3f J, %.4f s; energy: %llu, %.3f J, %.4f s\n",
              static_cast<unsigned long long>(time.frugal_tasks), time.joules, time.makespan,
              static_cast<unsigned long long>(energy.frugal_tasks), energy.joules, energy.makespan);
  EXPECT_LE(energy.makespan, 1.3 * time.makespan + 0.010)
      << "time " << time.makespan << " s, energy " << energy.makespan << " s";
}

}  // namespace
}  // namespace hcr
