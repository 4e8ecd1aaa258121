// Two processes sharing a node's simulated devices through the node arbiter (arbiter/), against a
// fixed equal split of the devices (issue 18's figure across processes):
//
//   build/bin/arbiter_bench [--seconds 3] [--reps 3] [--devices 4] [--task-us 1000]
//                           [--period-ms 200] [--busy 0.25]
//
// Process A saturates (64 tasks in flight, all the time); process B is bursty: every period it
// submits the tasks that would keep its half of the devices busy for `busy` of the period, waits
// for them, and is idle for the rest. (a) fixed split: A has devices 0..n/2-1, B the others, no
// arbiter. (b) through an arbiter (a server thread of this program), equal weights, each process
// with every device: B's devices are lent to A while B is idle and reclaimed when it has work.
// Throughput: tasks each process completed in the measured window (both start at one instant)
// over its length; B's burst time too (first submit to last completion). Medians over --reps.
// Simulated devices in host memory, timing only (no data); each process is this program again.
//
//   build/bin/arbiter_bench --rebalance 8,32,64 [--keys 128] [--flips 101]
//
// The arbiter's state machine alone (no sockets, no processes): that many tenants of `keys`
// devices each, all reporting the same devices (shared) or each its own (distinct: the pool is
// tenants x keys). Every join is timed, then `flips` demand changes (a tenant going busy or idle,
// in turn), each one rebalance; the devices revoked are released between flips, untimed, as
// tenants would. Prints the medians (wall and the thread's CPU time) and the longest, in ms.
#include <hcr/arbiter/arbitration.hpp>
#include <hcr/arbiter/server.hpp>
#include <hcr/hcr.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Opt {
  double seconds = 3, task_us = 1000, busy = 0.25;
  int reps = 3, devices = 4, period_ms = 200;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One tenant process: role 'a' (saturating) or 'b' (bursty), on devices [first, first + count).
int tenant(const Opt& o, char role, const std::string& socket, int first, int count,
           int64_t start_ns) {
  hcr::Config c;
  c.use_environment = false;
  c.policy = "eager";
  c.model_dir = "off";
  std::vector<std::pair<std::string, std::string>> opts;
  for (int i = 0; i < count; ++i) {
    const std::string p = "device." + std::to_string(i) + ".";
    opts.push_back({p + "name", "d" + std::to_string(first + i)});
    opts.push_back({p + "gflops", "1000"});
    opts.push_back({p + "host_memory", "true"});
  }
  opts.push_back({"kernel.work.flops", std::to_string(o.task_us * 1e6)});
  opts.push_back({"flops_per_byte", "0"});
  opts.push_back({"compute", "false"});
  c.backends.push_back({"sim", true, opts, "arbiter_bench"});
  c.arbiter_socket = socket;
  hcr::Runtime rt(c);
  hcr::Kernel work = rt.kernel("work").cpu([](hcr::TaskContext&) {});
  const Clock::time_point t0{std::chrono::nanoseconds(start_ns)};
  const Clock::time_point t1 =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  std::this_thread::sleep_until(t0);
  const uint64_t done0 = rt.stats().completed;
  uint64_t done1 = 0;
  std::vector<double> bursts;
  if (role == 'a') {
    std::deque<hcr::Event> inflight;
    while (Clock::now() < t1) {
      inflight.push_back(rt.submit(hcr::Task(work)));
      if (inflight.size() >= 64) {
        inflight.front().get();
        inflight.pop_front();
      }
    }
    done1 = rt.stats().completed;
    for (auto& e : inflight) e.get();
  } else {
    // Tasks that keep half the devices busy for `busy` of a period.
    const int burst =
        std::max(1, static_cast<int>(o.busy * o.period_ms * 1000 / o.task_us * (o.devices / 2)));
    for (Clock::time_point p = t0; p + std::chrono::milliseconds(o.period_ms) <= t1;
         p += std::chrono::milliseconds(o.period_ms)) {
      std::this_thread::sleep_until(p);
      const auto b0 = Clock::now();
      std::vector<hcr::Event> ev;
      for (int i = 0; i < burst; ++i) ev.push_back(rt.submit(hcr::Task(work)));
      for (auto& e : ev) e.get();
      bursts.push_back(std::chrono::duration<double>(Clock::now() - b0).count());
    }
    std::this_thread::sleep_until(t1);
    done1 = rt.stats().completed;
  }
  const hcr::ArbiterStats a = rt.stats().arbiter;
  std::printf("tenant %c tasks %llu per_s %.1f burst_ms %.2f joined %d revoked %llu released %llu "
              "max_release_ms %.3f\n",
              role, static_cast<unsigned long long>(done1 - done0),
              static_cast<double>(done1 - done0) / o.seconds, median(bursts) * 1e3,
              a.joined ? 1 : 0, static_cast<unsigned long long>(a.revoked),
              static_cast<unsigned long long>(a.released), a.max_release_seconds * 1e3);
  return 0;
}

struct Result {
  double a = 0, b = 0, burst_ms = 0, max_release_ms = 0;
};

// CPU time of the calling thread: the machine may be shared, and a pass is all CPU.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The state machine at scale: joins and demand changes of `tenants` tenants of `keys` devices.
void rebalance_case(int tenants, int keys, int flips, bool shared) {
  using namespace hcr::arbiter;
  Arbitration arb;
  std::map<TenantId, uint64_t> seq;  // each tenant's last grant
  // Releases whatever the tenants were asked to give up (as a tenant does once nothing runs
  // there); a release can grant or revoke more, so until nothing changes.
  auto settle = [&] {
    for (;;) {
      for (const Grant& g : arb.take_changes()) seq[g.tenant] = g.seq;
      bool any = false;
      for (auto& [t, s] : seq)
        for (uint32_t d : arb.releasing(t)) any = arb.released(t, d, s) || any;
      if (!any) return;
    }
  };
  std::vector<double> joins, join_cpu, rebalances, rebalance_cpu;
  std::vector<TenantId> ids;
  for (int t = 0; t < tenants; ++t) {
    std::vector<DeviceReport> devices;
    const std::string prefix = shared ? std::string() : "t" + std::to_string(t) + "/";
    // One CPU device of 16 cores and GPUs of 16 GiB: dominant shares over all three resources.
    devices.push_back({prefix + "cpu/0", Kind::cpu, 0, 16});
    for (int k = 1; k < keys; ++k)
      devices.push_back({prefix + "cuda/" + std::to_string(k), Kind::gpu, uint64_t{16} << 30, 132});
    const double c0 = thread_cpu_seconds();
    const auto t0 = Clock::now();
    ids.push_back(arb.join(1 + t % 3, std::move(devices)));
    joins.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    join_cpu.push_back(thread_cpu_seconds() - c0);
    settle();
  }
  for (int f = 0; f < flips; ++f) {
    const TenantId t = ids[static_cast<size_t>(f) % ids.size()];
    const double c0 = thread_cpu_seconds();
    const auto t0 = Clock::now();
    arb.demand(t, !arb.busy(t));
    rebalances.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    rebalance_cpu.push_back(thread_cpu_seconds() - c0);
    settle();
  }
  std::printf("rebalance: %3d tenants x %d keys %-8s (%5zu devices): demand change median %.3f ms "
              "(CPU %.3f ms), longest %.3f ms; join median %.3f ms (CPU %.3f ms), longest %.3f "
              "ms; %d changes\n",
              tenants, keys, shared ? "shared" : "distinct", arb.devices(),
              median(rebalances) * 1e3, median(rebalance_cpu) * 1e3,
              *std::max_element(rebalances.begin(), rebalances.end()) * 1e3, median(joins) * 1e3,
              median(join_cpu) * 1e3, *std::max_element(joins.begin(), joins.end()) * 1e3, flips);
  std::fflush(stdout);
}

// Runs both tenants (this program again) and reads their lines.
Result run_pair(const Opt& o, const std::string& self, const std::string& socket, bool split) {
  const int64_t start = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            (Clock::now() + std::chrono::milliseconds(1500)).time_since_epoch())
                            .count();
  const int half = o.devices / 2;
  struct Proc {
    pid_t pid;
    int out;
  };
  std::vector<Proc> procs;
  for (char role : {'a', 'b'}) {
    const int first = split ? (role == 'a' ? 0 : half) : 0;
    const int count = split ? half : o.devices;
    std::vector<std::string> args = {self,
                                     "--tenant",
                                     std::string(1, role),
                                     "--socket",
                                     socket.empty() ? "-" : socket,
                                     "--first",
                                     std::to_string(first),
                                     "--count",
                                     std::to_string(count),
                                     "--start",
                                     std::to_string(start),
                                     "--seconds",
                                     std::to_string(o.seconds),
                                     "--task-us",
                                     std::to_string(o.task_us),
                                     "--period-ms",
                                     std::to_string(o.period_ms),
                                     "--busy",
                                     std::to_string(o.busy),
                                     "--devices",
                                     std::to_string(o.devices)};
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    int p[2];
    if (pipe(p) != 0) std::exit(1);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    pid_t pid;
    if (posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), environ) != 0) std::exit(1);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    procs.push_back({pid, p[0]});
  }
  Result r;
  for (size_t i = 0; i < procs.size(); ++i) {
    std::string text;
    char buf[512];
    ssize_t n;
    while ((n = read(procs[i].out, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    close(procs[i].out);
    int st = 0;
    waitpid(procs[i].pid, &st, 0);
    char role = 0;
    unsigned long long tasks = 0, revoked = 0, released = 0;
    double per_s = 0, burst = 0, max_rel = 0;
    int joined = 0;
    if (std::sscanf(text.c_str(),
                    "tenant %c tasks %llu per_s %lf burst_ms %lf joined %d revoked %llu released "
                    "%llu max_release_ms %lf",
                    &role, &tasks, &per_s, &burst, &joined, &revoked, &released, &max_rel) != 8) {
      std::fprintf(stderr, "arbiter_bench: a tenant said: %s\n", text.c_str());
      std::exit(1);
    }
    if (!socket.empty() && !joined) {
      std::fprintf(stderr, "arbiter_bench: tenant %c did not join the arbiter\n", role);
      std::exit(1);
    }
    (role == 'a' ? r.a : r.b) = per_s;
    if (role == 'b') r.burst_ms = burst;
    r.max_release_ms = std::max(r.max_release_ms, max_rel);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Opt o;
  char role = 0;
  std::string socket;
  int first = 0, count = 0;
  int64_t start = 0;
  std::string rebalance;
  int keys = 128, flips = 101;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--seconds") o.seconds = std::atof(v.c_str());
    else if (a == "--reps") o.reps = std::atoi(v.c_str());
    else if (a == "--devices") o.devices = std::atoi(v.c_str());
    else if (a == "--task-us") o.task_us = std::atof(v.c_str());
    else if (a == "--period-ms") o.period_ms = std::atoi(v.c_str());
    else if (a == "--busy") o.busy = std::atof(v.c_str());
    else if (a == "--tenant") role = v[0];
    else if (a == "--socket") socket = v == "-" ? "" : v;
    else if (a == "--first") first = std::atoi(v.c_str());
    else if (a == "--count") count = std::atoi(v.c_str());
    else if (a == "--start") start = std::atoll(v.c_str());
    else if (a == "--rebalance") rebalance = v;
    else if (a == "--keys") keys = std::atoi(v.c_str());
    else if (a == "--flips") flips = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "arbiter_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "arbiter_bench: options come in pairs (--name value)\n");
    return 2;
  }
  if (role != 0) return tenant(o, role, socket, first, count, start);
  if (!rebalance.empty()) {
    if (keys < 1 || keys > 128 || flips < 1) {
      std::fprintf(stderr, "arbiter_bench: 1 <= --keys <= 128, --flips >= 1\n");
      return 2;
    }
    for (bool shared : {true, false})
      for (size_t i = 0; i < rebalance.size();) {
        size_t j = rebalance.find(',', i);
        if (j == std::string::npos) j = rebalance.size();
        const int n = std::atoi(rebalance.substr(i, j - i).c_str());
        if (n < 1) {
          std::fprintf(stderr, "arbiter_bench: --rebalance takes tenant counts: 8,32,64\n");
          return 2;
        }
        rebalance_case(n, keys, flips, shared);
        i = j + 1;
      }
    return 0;
  }
  if (o.seconds < 1 || o.reps < 1 || o.devices < 2 || o.devices % 2 || o.task_us <= 0 ||
      o.busy <= 0 || o.busy >= 1) {
    std::fprintf(stderr, "arbiter_bench: --seconds >= 1, --reps >= 1, --devices even >= 2, "
                         "--task-us > 0, 0 < --busy < 1\n");
    return 2;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hcr-arbiter-bench-" + std::to_string(getpid()));
  std::filesystem::create_directory(dir);
  const std::string path = (dir / "arbiter.sock").string();
  std::printf("arbiter_bench: %d simulated devices, %.0f us tasks, %.0f s windows, %d rep(s); A "
              "saturating, B bursty (busy %.0f%% of each %d ms period on half the devices)\n",
              o.devices, o.task_us, o.seconds, o.reps, o.busy * 100, o.period_ms);
  std::vector<double> fa, fb, ft, aa, ab, at, ratio, fburst, aburst, rel;
  for (int rep = 0; rep < o.reps; ++rep) {
    const Result f = run_pair(o, self, "", true);
    Result a;
    {
      hcr::arbiter::ServerOptions so;
      so.socket = path;
      so.log = [](const std::string&) {};
      hcr::arbiter::Server server(so);
      std::thread t([&] { server.run(); });
      a = run_pair(o, self, path, false);
      server.stop();
      t.join();
    }
    std::printf("rep %d: fixed split A %.0f + B %.0f = %.0f tasks/s (B's burst %.1f ms); arbiter A "
                "%.0f + B %.0f = %.0f tasks/s (B's burst %.1f ms, longest release %.2f ms): "
                "%.2fx\n",
                rep + 1, f.a, f.b, f.a + f.b, f.burst_ms, a.a, a.b, a.a + a.b, a.burst_ms,
                a.max_release_ms, (a.a + a.b) / (f.a + f.b));
    std::fflush(stdout);
    fa.push_back(f.a), fb.push_back(f.b), ft.push_back(f.a + f.b), fburst.push_back(f.burst_ms);
    aa.push_back(a.a), ab.push_back(a.b), at.push_back(a.a + a.b), aburst.push_back(a.burst_ms);
    ratio.push_back((a.a + a.b) / (f.a + f.b));
    rel.push_back(a.max_release_ms);
  }
  std::filesystem::remove_all(dir);
  std::printf("medians: fixed split A %.0f, B %.0f, total %.0f tasks/s; arbiter A %.0f, B %.0f, "
              "total %.0f tasks/s; total ratio %.2fx (target >= 1.20); A %.2fx, B %.2fx of their "
              "fixed split (target >= 1.00); B's burst %.1f ms fixed, %.1f ms arbiter; longest "
              "release %.2f ms\n",
              median(fa), median(fb), median(ft), median(aa), median(ab), median(at), median(ratio),
              median(aa) / median(fa), median(ab) / median(fb), median(fburst), median(aburst),
              median(rel));
  return 0;
}
