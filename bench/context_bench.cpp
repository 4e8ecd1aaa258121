// Scheduling contexts sharing devices (issue 18's in-process figures), on simulated devices in host
// memory (timing only):
//
//   build/bin/context_bench [--seconds 3] [--task-us 500] [--devices 2]
//
// Two contexts on the same devices, "heavy" (weight 3) and "light" (weight 1), each fed by a
// thread of its own that keeps 64 tasks in flight. Every second (a window), the device time each
// context got in that window is read from rt.stats().contexts; the program prints each window's
// heavy:light ratio (target 3:1, within 5%). Then light stops submitting: once its last task is
// done, the program samples heavy's share of all the devices' time over the next 10 ms windows
// (target: >= 95% within the first one). Medians over the windows. Device time is what the
// runtime measures per task, so a window's figure is quantised by one task per device. Last, a
// latency context (priority class 1, one task every 2 ms) measures its tasks' wait (submit to
// completion, less the task's duration), median and p99, alone and beside the saturating "heavy",
// and heavy's throughput meanwhile: first sharing every device, then with `reserve = 1` (one
// device held back for it while it is active).
#include <hcr/hcr.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

const hcr::ContextStats* find(const hcr::RuntimeStats& s, const char* name) {
  for (const auto& c : s.contexts)
    if (c.name == name) return &c;
  return nullptr;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3, task_us = 500;
  int devices = 2, lookahead = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (a == "--task-us") task_us = std::atof(argv[i + 1]);
    else if (a == "--devices") devices = std::atoi(argv[i + 1]);
    else if (a == "--lookahead") lookahead = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "context_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (seconds < 1 || task_us <= 0 || devices < 1) {
    std::fprintf(stderr, "context_bench: --seconds >= 1, --task-us > 0, --devices >= 1\n");
    return 2;
  }
  hcr::Config c;
  c.use_environment = false;
  c.policy = "eager";
  c.model_dir = "off";
  c.lookahead = lookahead;  // [data] lookahead: tasks handed to a device beyond those it runs
  std::vector<std::pair<std::string, std::string>> o;
  for (int d = 0; d < devices; ++d) {
    const std::string p = "device." + std::to_string(d) + ".";
    o.push_back({p + "name", "d" + std::to_string(d)});
    o.push_back({p + "gflops", "1000"});
    o.push_back({p + "host_memory", "true"});
  }
  o.push_back({"kernel.work.flops", std::to_string(task_us * 1e6)});  // at 1000 GFLOP/s
  o.push_back({"flops_per_byte", "0"});
  o.push_back({"compute", "false"});
  c.backends.push_back({"sim", true, o, "context_bench"});
  hcr::Runtime rt(c);
  hcr::Kernel work = rt.kernel("work").cpu([](hcr::TaskContext&) {});
  hcr::Context heavy = rt.context({.name = "heavy", .weight = 3});
  hcr::Context light = rt.context({.name = "light", .weight = 1});

  std::atomic<bool> stop_light{false}, stop_heavy{false};
  auto feeder = [&](hcr::Context ctx, std::atomic<bool>& stop) {
    std::deque<hcr::Event> inflight;
    while (!stop.load()) {
      inflight.push_back(rt.submit(hcr::Task(work).in(ctx)));
      if (inflight.size() >= 64) {
        inflight.front().get();
        inflight.pop_front();
      }
    }
    for (auto& e : inflight) e.get();
  };
  std::thread th(feeder, heavy, std::ref(stop_heavy)), tl(feeder, light, std::ref(stop_light));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both backlogged

  std::printf("context_bench: %d simulated devices, %.0f us tasks; heavy (weight 3) and light "
              "(weight 1) both saturating\n",
              devices, task_us);
  std::vector<double> ratios;
  hcr::RuntimeStats prev = rt.stats();
  for (int w = 0; w < static_cast<int>(seconds); ++w) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    hcr::RuntimeStats now = rt.stats();
    const double h = find(now, "heavy")->busy_seconds - find(prev, "heavy")->busy_seconds;
    const double l = find(now, "light")->busy_seconds - find(prev, "light")->busy_seconds;
    const double ratio = l > 0 ? h / l : 0;
    ratios.push_back(ratio);
    std::printf("window %d: heavy %.3f s, light %.3f s of device time: %.3f : 1 (%+.1f%% of 3:1); "
                "devices %.1f%% busy\n",
                w + 1, h, l, ratio, (ratio / 3 - 1) * 100,
                100 * (h + l) / (devices * (now.wall_seconds - prev.wall_seconds)));
    prev = now;
  }
  const double worst = *std::max_element(ratios.begin(), ratios.end(), [](double a, double b) {
    return std::abs(a / 3 - 1) < std::abs(b / 3 - 1);
  });
  std::printf("shares: median %.3f : 1, worst window %.3f : 1 (%+.1f%% of 3:1)\n", median(ratios),
              worst, (worst / 3 - 1) * 100);

  // Light goes idle: how soon does heavy have every device?
  stop_light = true;
  tl.join();  // light's last tasks done
  std::vector<double> shares;
  prev = rt.stats();
  const auto t0 = Clock::now();
  for (int w = 0; w < 10; ++w) {
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(10 * (w + 1)));
    hcr::RuntimeStats now = rt.stats();
    const double h = find(now, "heavy")->busy_seconds - find(prev, "heavy")->busy_seconds;
    const double wall = now.wall_seconds - prev.wall_seconds;
    shares.push_back(h / (devices * wall));
    prev = now;
  }
  std::printf("light idle: heavy's share of the devices in the 10 ms windows after:");
  for (double s : shares) std::printf(" %.0f%%", 100 * s);
  std::printf("\nfirst 10 ms window: %.1f%%; median of the ten: %.1f%%\n", 100 * shares[0],
              100 * median(shares));
  stop_heavy = true;
  th.join();
  rt.wait_all();

  // A latency context (priority class 1) with one task every 2 ms: its wait (completion less the
  // task's own duration, from submit), alone and then beside a saturating batch context; and the
  // batch's throughput meanwhile. Twice: sharing every device, then with a reserve of one device
  // held back for it while it is active (ContextSpec::reserve).
  auto pct = [](const std::vector<double>& v, double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  for (const uint32_t reserve : {0u, 1u}) {
    hcr::Context live = rt.context({.name = reserve ? "live-reserve" : "live",
                                    .weight = 1,
                                    .priority = 1,
                                    .reserve = reserve});
    auto live_waits = [&](int n) {
      std::vector<double> waits;
      for (int i = 0; i < n; ++i) {
        const auto t0 = Clock::now();
        rt.submit(hcr::Task(work).in(live)).get();
        waits.push_back(std::chrono::duration<double>(Clock::now() - t0).count() - task_us * 1e-6);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      std::sort(waits.begin(), waits.end());
      return waits;
    };
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // an earlier reserve lapsed
    const std::vector<double> alone = live_waits(300);
    stop_heavy = false;
    std::thread batch(feeder, heavy, std::ref(stop_heavy));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const hcr::RuntimeStats before = rt.stats();
    const std::vector<double> loaded = live_waits(300);
    const hcr::RuntimeStats after = rt.stats();
    stop_heavy = true;
    batch.join();
    rt.wait_all();
    const double batch_rate =
        static_cast<double>(find(after, "heavy")->tasks - find(before, "heavy")->tasks) /
        (after.wall_seconds - before.wall_seconds);
    std::printf("latency context (priority 1, reserve %u), 300 tasks each: wait median / p99 alone "
                "%.0f / %.0f us, beside a saturating batch %.0f / %.0f us: p99 ratio %.2f; batch "
                "meanwhile %.0f tasks/s (%.0f%% of the devices)\n",
                reserve, pct(alone, 0.5) * 1e6, pct(alone, 0.99) * 1e6, pct(loaded, 0.5) * 1e6,
                pct(loaded, 0.99) * 1e6, pct(loaded, 0.99) / pct(alone, 0.99), batch_rate,
                100 * batch_rate * task_us * 1e-6 / devices);
  }
  return 0;
}
