// Scheduling quality: makespans of three workloads on simulated machines under each policy,
// against an offline HEFT that knows the true costs; warm-start runs from a saved model; and the
// cost of one placement decision with 64 devices.
//
//   build/bin/sched_bench [--iterations N] [--quick] [--gantt DIR] [--case MACHINE/WORKLOAD]
//                         [--policy NAME] [--decisions]
//
// The simulated devices compute nothing (timing only) and hold each task for its modelled
// duration, stretched by the machine's time_scale so that runtime overhead stays small next to
// it. HEFT schedules the same task graph offline with the same cost model: execution from FLOP
// counts and device speeds, copies from link latency and bandwidth with each device's inbound
// link busy one copy at a time, replicas reused until overwritten, all data starting in host
// memory. Makespans are in real seconds; ratios are policy / HEFT (1.00 = as good as HEFT).
#include <hcr/hcr.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using Options = std::vector<std::pair<std::string, std::string>>;

// ---- machines -------------------------------------------------------------------------------

struct SimDevice {
  std::string name;
  double gflops;
  bool host_memory;
  double bandwidth;  // bytes/s
  double latency;    // s
  int slots;
  std::map<std::string, double> factors;  // per-kernel speed factors
};

struct Machine {
  std::string name;
  double time_scale;
  std::vector<SimDevice> devices;
};

Machine hetero() {  // one fast GPU, two slower accelerators, a CPU: speeds differ by 10x and more
  return {"hetero",
          getenv("TS") ? atof(getenv("TS")) : 20,
          {{"gpu", 10000, false, 20e9, 10e-6, 1, {}},
           {"acc0", 1000, false, 10e9, 20e-6, 1, {}},
           {"acc1", 1000, false, 10e9, 20e-6, 1, {}},
           {"cpu", 400, true, 0, 0, 2, {}}}};
}

Machine affinity() {  // each accelerator is fast for one kind of kernel and slow for the other
  return {"affinity",
          getenv("TS") ? atof(getenv("TS")) : 20,
          {{"accA", 2000, false, 10e9, 20e-6, 1, {{"k1", 4.0}, {"k2", 0.25}, {"gemm_tile", 2.0}}},
           {"accB", 2000, false, 10e9, 20e-6, 1, {{"k1", 0.25}, {"k2", 4.0}, {"potrf", 2.0}}},
           {"cpu", 400, true, 0, 0, 2, {}}}};
}

// ---- workloads ------------------------------------------------------------------------------

struct WTask {
  std::string kernel;
  std::vector<std::pair<int, hcr::Access>> args;  // buffer index, access
  double flops;                                   // modelled work
  int priority = 0;                               // what the application says
};
struct Workload {
  std::string name;
  std::vector<std::pair<size_t, size_t>> buffers;  // rows, cols (f32)
  std::vector<WTask> tasks;
  std::map<std::string, double> kernel_flops;  // fixed-cost kernels for the sim
};

// Two tiled gemms of different sizes over separate tile buffers (what partitioning gives).
Workload gemm_mixed() {
  Workload w{"gemm-mixed", {}, {}, {}};
  auto tiled = [&](size_t n, size_t t) {
    size_t g = n / t, base = w.buffers.size();
    for (size_t i = 0; i < 3 * g * g; ++i) w.buffers.push_back({t, t});
    auto A = [&](size_t i, size_t k) { return int(base + i * g + k); };
    auto B = [&](size_t k, size_t j) { return int(base + g * g + k * g + j); };
    auto C = [&](size_t i, size_t j) { return int(base + 2 * g * g + i * g + j); };
    for (size_t i = 0; i < g; ++i)
      for (size_t j = 0; j < g; ++j)
        for (size_t k = 0; k < g; ++k)
          w.tasks.push_back({"gemm_f32",
                             {{A(i, k), hcr::Access::read},
                              {B(k, j), hcr::Access::read},
                              {C(i, j), k == 0 ? hcr::Access::write : hcr::Access::read_write}},
                             2.0 * double(t) * t * t});
  };
  tiled(2048, 512);
  tiled(1024, 256);
  return w;
}

// Independent tasks of three kernels, each with its own input and output.
Workload bag() {
  Workload w{"bag", {}, {}, {{"k1", 4e8}, {"k2", 4e8}, {"k3", 1e8}}};
  std::mt19937 gen(7);
  const char* kernels[] = {"k1", "k2", "k3"};
  for (int i = 0; i < 240; ++i) {
    int in = int(w.buffers.size());
    w.buffers.push_back({256, 256});
    w.buffers.push_back({256, 256});
    const char* k = kernels[gen() % 3];
    w.tasks.push_back(
        {k, {{in, hcr::Access::read}, {in + 1, hcr::Access::write}}, w.kernel_flops[k]});
  }
  return w;
}

// Tiled Cholesky of an 8 x 8 grid of 512-tiles: potrf, trsm, syrk, gemm, the classic DAG.
Workload cholesky() {
  const int g = 8;
  const double t = 512;
  Workload w{"cholesky", {}, {}, {}};
  w.kernel_flops = {{"potrf", t * t * t / 3},
                    {"trsm", t * t * t},
                    {"syrk", t * t * t},
                    {"gemm_tile", 2 * t * t * t}};
  for (int i = 0; i < g * g; ++i) w.buffers.push_back({512, 512});
  auto T = [&](int i, int j) { return i * g + j; };
  using hcr::Access;
  // Priorities as StarPU's Cholesky example sets them (its unbound priorities): the distance to
  // the end of the factorisation, so that the critical path (potrf, the panel's trsm, the next
  // diagonal update) goes first: potrf 2g - 2k, trsm 2g - 2k - i, syrk and gemm 2g - 2k - i - j.
  for (int k = 0; k < g; ++k) {
    w.tasks.push_back(
        {"potrf", {{T(k, k), Access::read_write}}, w.kernel_flops["potrf"], 2 * g - 2 * k});
    for (int i = k + 1; i < g; ++i)
      w.tasks.push_back({"trsm",
                         {{T(k, k), Access::read}, {T(i, k), Access::read_write}},
                         w.kernel_flops["trsm"],
                         2 * g - 2 * k - i});
    for (int i = k + 1; i < g; ++i) {
      w.tasks.push_back({"syrk",
                         {{T(i, k), Access::read}, {T(i, i), Access::read_write}},
                         w.kernel_flops["syrk"],
                         2 * g - 2 * k - 2 * i});
      for (int j = k + 1; j < i; ++j)
        w.tasks.push_back(
            {"gemm_tile",
             {{T(i, k), Access::read}, {T(j, k), Access::read}, {T(i, j), Access::read_write}},
             w.kernel_flops["gemm_tile"],
             2 * g - 2 * k - i - j});
    }
  }
  return w;
}

// ---- the runtime side -----------------------------------------------------------------------

hcr::Config sim_config(const Machine& m, const Workload& w, const std::string& policy,
                       const std::string& model_dir) {
  hcr::Config c;
  c.use_environment = false;
  c.policy = policy;
  c.model_dir = model_dir;
  Options o = {{"compute", "false"}, {"time_scale", std::to_string(m.time_scale)}};
  for (auto& [k, f] : w.kernel_flops) o.push_back({"kernel." + k + ".flops", std::to_string(f)});
  for (size_t i = 0; i < m.devices.size(); ++i) {
    const SimDevice& d = m.devices[i];
    std::string p = "device." + std::to_string(i) + ".";
    o.push_back({p + "name", d.name});
    o.push_back({p + "gflops", std::to_string(d.gflops)});
    o.push_back({p + "concurrency", std::to_string(d.slots)});
    o.push_back({p + "host_memory", d.host_memory ? "true" : "false"});
    if (!d.host_memory) {
      o.push_back({p + "bandwidth", std::to_string(d.bandwidth)});
      o.push_back({p + "latency", std::to_string(d.latency)});
    }
    for (auto& [k, f] : d.factors) o.push_back({p + "factors." + k, std::to_string(f)});
  }
  c.backends.push_back({"sim", true, o, "sched_bench"});
  return c;
}

// Submits the whole graph with fresh buffers (data starts on the host) and waits.
double run_once(hcr::Runtime& rt, const Workload& w) {
  std::vector<hcr::Buffer<float>> bufs;
  for (auto& [r, c] : w.buffers) bufs.push_back(rt.buffer<float>(r, c));
  std::map<std::string, hcr::Kernel> kernels;
  for (auto& t : w.tasks)
    if (!kernels.count(t.kernel)) {
      hcr::Kernel k = rt.kernel(t.kernel);
      if (t.kernel != "gemm_f32") k.cpu([](hcr::TaskContext&) {});  // timing only
      kernels[t.kernel] = k;
    }
  // The first k step writes C (beta 0), the others accumulate into it (beta 1): a beta that reads
  // C needs C passed read_write, which the runtime checks at submit.
  const hcr_gemm_params_t first{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0};
  const hcr_gemm_params_t rest{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 1};
  auto t0 = std::chrono::steady_clock::now();
  for (auto& t : w.tasks) {
    hcr::Task task(kernels[t.kernel]);
    task.priority(t.priority);
    for (auto& [b, mode] : t.args) task.arg(bufs[size_t(b)], mode);
    if (t.kernel == "gemm_f32") task.param(t.args[2].second == hcr::Access::write ? first : rest);
    rt.submit(task);
  }
  rt.wait_all();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- offline HEFT with the true costs -------------------------------------------------------

double exec_time(const Machine& m, const SimDevice& d, const WTask& t) {
  auto f = d.factors.find(t.kernel);
  return t.flops / (d.gflops * 1e9 * (f == d.factors.end() ? 1.0 : f->second)) * m.time_scale;
}

// `online`: instead of HEFT's order (highest upward rank first, copies planned as early as the
// link allows), place each task at the moment it becomes ready, by the same earliest-finish rule,
// with its copies starting then: what dmda does without priorities, with exact costs and no
// runtime overhead.
double heft(const Machine& m, const Workload& w, bool online = false) {
  const size_t n = w.tasks.size();
  // Predecessors through data (sequential consistency), for ranks.
  std::vector<std::vector<int>> succ(n);
  {
    std::map<int, int> last_writer;
    std::map<int, std::vector<int>> readers;
    for (size_t i = 0; i < n; ++i)
      for (auto& [b, mode] : w.tasks[i].args) {
        if (hcr::reads(mode) && last_writer.count(b))
          succ[size_t(last_writer[b])].push_back(int(i));
        if (hcr::writes(mode)) {
          if (last_writer.count(b)) succ[size_t(last_writer[b])].push_back(int(i));
          for (int r : readers[b]) succ[size_t(r)].push_back(int(i));
          readers[b].clear();
          last_writer[b] = int(i);
        } else {
          readers[b].push_back(int(i));
        }
      }
  }
  // Processors: every slot of every device; memory nodes: host (0) and each own-memory device.
  struct Proc {
    size_t device;
    int node;
    double free = 0;
  };
  std::vector<Proc> procs;
  std::vector<int> node_of(m.devices.size());
  int nodes = 1;
  for (size_t d = 0; d < m.devices.size(); ++d) {
    node_of[d] = m.devices[d].host_memory ? 0 : nodes++;
    for (int s = 0; s < m.devices[d].slots; ++s) procs.push_back({d, node_of[d]});
  }
  auto link_device = [&](int node) -> const SimDevice* {
    for (size_t d = 0; d < m.devices.size(); ++d)
      if (node_of[d] == node && node != 0) return &m.devices[d];
    return nullptr;
  };
  auto copy_time = [&](int from, int to, double bytes) {
    const SimDevice* d = link_device(to != 0 ? to : from);  // the engine of the device end
    return d ? (d->latency + bytes / d->bandwidth) * m.time_scale : 0.0;
  };
  // Upward ranks with mean execution and mean copy cost.
  std::vector<double> rank(n, -1);
  double mean_latency = 0, mean_seconds_per_byte = 0;
  int links = 0;
  for (auto& d : m.devices)
    if (!d.host_memory) {
      mean_latency += d.latency;
      mean_seconds_per_byte += 1.0 / d.bandwidth;
      ++links;
    }
  if (links) {
    mean_latency /= links;
    mean_seconds_per_byte /= links;
  }
  // The mean cost of an edge: a copy over a mean link, paid when the two ends land on
  // different memory nodes (about half the time on these machines).
  auto mean_edge = [&](double bytes) {
    return links ? 0.5 * (mean_latency + bytes * mean_seconds_per_byte) * m.time_scale : 0.0;
  };
  for (size_t ii = n; ii-- > 0;) {
    double avg = 0;
    for (auto& d : m.devices) avg += exec_time(m, d, w.tasks[ii]);
    avg /= double(m.devices.size());
    double written = 0;  // what a successor reads from this task
    for (auto& [b, mode] : w.tasks[ii].args)
      if (hcr::writes(mode))
        written += double(w.buffers[size_t(b)].first * w.buffers[size_t(b)].second * 4);
    double tail = 0;
    for (int s : succ[ii]) tail = std::max(tail, mean_edge(written) + rank[size_t(s)]);
    rank[ii] = avg + tail;
  }
  std::vector<int> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = int(i);
  // Highest rank first; ties keep submission order, which is a topological order. (Online:
  // submission order among tasks ready at the same time.)
  if (!online)
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return rank[size_t(a)] > rank[size_t(b)]; });
  // Respect dependencies: a task is scheduled only once its predecessors are.
  std::vector<int> preds(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (int s : succ[i]) ++preds[size_t(s)];
  std::vector<double> finish(n, 0);
  // Where each buffer's current version is valid, and since when.
  std::vector<std::map<int, double>> valid(w.buffers.size());
  for (auto& v : valid) v[0] = 0;
  std::vector<double> inbound(size_t(nodes), 0);  // each device's inbound link: one copy at a time
  std::vector<double> ready_at(n, 0);             // max finish of predecessors
  std::vector<bool> done(n, false);
  double makespan = 0;
  for (size_t scheduled = 0; scheduled < n; ++scheduled) {
    int pick = -1;
    for (int t : order)
      if (!done[size_t(t)] && preds[size_t(t)] == 0 &&
          (pick < 0 || (online && ready_at[size_t(t)] < ready_at[size_t(pick)]))) {
        pick = t;
        if (!online) break;
      }
    const WTask& t = w.tasks[size_t(pick)];
    double best_eft = INFINITY;
    size_t best_p = 0;
    std::vector<std::pair<int, double>> best_copies;  // buffer, arrival
    for (size_t pi = 0; pi < procs.size(); ++pi) {
      const Proc& p = procs[pi];
      double data_ready = ready_at[size_t(pick)];
      std::vector<double> in = inbound;
      std::vector<std::pair<int, double>> copies;
      for (auto& [b, mode] : t.args) {
        if (!hcr::reads(mode)) continue;
        auto& v = valid[size_t(b)];
        if (v.count(p.node)) {
          data_ready = std::max(data_ready, v[p.node]);
          continue;
        }
        double bytes = double(w.buffers[size_t(b)].first * w.buffers[size_t(b)].second * 4);
        double best_arrival = INFINITY;
        for (auto& [src, since] : v) {
          // One plugin: device to device is one copy, on the destination's engine.
          double start =
              std::max({since, in[size_t(p.node)], online ? ready_at[size_t(pick)] : 0.0});
          double arrival = start + copy_time(src, p.node, bytes);
          best_arrival = std::min(best_arrival, arrival);
        }
        in[size_t(p.node)] = best_arrival;
        copies.push_back({b, best_arrival});
        data_ready = std::max(data_ready, best_arrival);
      }
      double est = std::max(p.free, data_ready);
      double eft = est + exec_time(m, m.devices[p.device], t);
      if (eft < best_eft) {
        best_eft = eft;
        best_p = pi;
        best_copies = copies;
      }
    }
    Proc& p = procs[best_p];
    for (auto& [b, arrival] : best_copies) {
      valid[size_t(b)][p.node] = arrival;
      inbound[size_t(p.node)] = std::max(inbound[size_t(p.node)], arrival);
    }
    for (auto& [b, mode] : t.args)
      if (hcr::writes(mode)) valid[size_t(b)] = {{p.node, best_eft}};
    p.free = best_eft;
    finish[size_t(pick)] = best_eft;
    done[size_t(pick)] = true;
    for (int s : succ[size_t(pick)]) {
      --preds[size_t(s)];
      ready_at[size_t(s)] = std::max(ready_at[size_t(s)], best_eft);
    }
    makespan = std::max(makespan, best_eft);
  }
  // The data the graph wrote ends where it was computed; copying results home is not counted
  // (hcr's makespan above stops at wait_all, before anyone reads them back).
  return makespan;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 5;
  bool quick = false;
  std::string gantt_dir;  // --gantt DIR: a chart and a trace of one more dmda iteration per case
  std::string only_case, only_policy;  // --case hetero/cholesky, --policy dmda: just those
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc) iterations = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--gantt") && i + 1 < argc) gantt_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--case") && i + 1 < argc) only_case = argv[++i];
    else if (!std::strcmp(argv[i], "--policy") && i + 1 < argc) only_policy = argv[++i];
    else if (!std::strcmp(argv[i], "--decisions")) only_case = "decisions";
  }
  if (quick) iterations = 3;
  hcr::log::set_level(hcr::LogLevel::error);
  std::vector<std::string> policies = {"eager", "random", "ws", "dmda", "dmdas", "peft"};
  if (!only_policy.empty()) policies = {only_policy};
  const std::vector<std::pair<Machine, Workload>> cases = {{hetero(), gemm_mixed()},
                                                           {hetero(), bag()},
                                                           {hetero(), cholesky()},
                                                           {affinity(), bag()},
                                                           {affinity(), cholesky()}};

  std::printf(
      "makespans in seconds (median of iterations %d..%d, after warm-up), ratio to HEFT\n\n",
      std::min(3, iterations), iterations);
  std::printf("%-10s %-11s %8s %6s", "machine", "workload", "HEFT", "EFT");
  for (auto& p : policies) std::printf(" %15s", p.c_str());
  std::printf(" %15s %15s\n", "dmda 1st*", "dmdas 1st*");
  for (auto& [machine, work] : cases) {
    if (!only_case.empty() && only_case != machine.name + "/" + work.name) continue;
    double ref = heft(machine, work);
    std::printf("%-10s %-11s %8.3f %6.2f", machine.name.c_str(), work.name.c_str(), ref,
                heft(machine, work, /*online=*/true) / ref);
    for (auto& policy : policies) {
      hcr::Runtime rt(sim_config(machine, work, policy, "off"));
      std::vector<double> warm;
      for (int it = 1; it <= iterations; ++it) {
        double s = run_once(rt, work);
        if (it >= std::min(3, iterations)) warm.push_back(s);
      }
      double med = median(warm);
      if (!gantt_dir.empty() && (policy == "dmda" || !only_policy.empty())) {
        rt.start_trace();
        run_once(rt, work);
        const std::string base = gantt_dir + "/" + machine.name + "-" + work.name + "-" + policy;
        rt.write_gantt(base + ".svg");
        rt.write_trace(base + ".json");
        rt.stop_trace();
      }
      std::printf(" %7.3f (%4.2f)", med, med / ref);
      std::fflush(stdout);
    }
    // Warm start: an earlier run saved its model; a new runtime's first iteration.
    for (const char* policy : {"dmda", "dmdas", "peft"}) {
      auto dir = std::filesystem::temp_directory_path() /
                 ("hcr-sched-bench-" + std::to_string(::getpid()));
      std::filesystem::remove_all(dir);
      {
        hcr::Runtime rt(sim_config(machine, work, policy, dir.string()));
        for (int it = 0; it < 3; ++it) run_once(rt, work);
      }
      std::vector<double> first;
      for (int rep = 0; rep < 3; ++rep) {
        hcr::Runtime rt(sim_config(machine, work, policy, dir.string()));
        first.push_back(run_once(rt, work));
      }
      std::filesystem::remove_all(dir);
      double f = median(first);
      std::printf(" %7.3f (%4.2f)", f, f / ref);
    }
    std::printf("\n");
  }
  std::printf("\n* first iteration of a new runtime that loaded the model an earlier run saved "
              "(median of 3 runs)\n");
  std::printf(
      "  EFT: the earliest-finish rule offline (exact costs, no runtime overhead, each task placed "
      "when it becomes ready, FIFO devices: no priorities)\n");

  if (!only_case.empty() && only_case != "decisions") return 0;
  // Decision cost: 64 devices of 4 architectures, a warm model, tasks submitted as fast as the
  // submitting thread can. Two figures per policy: the placement decision itself (the time the
  // runtime measures around the policy's push, with the counters on) and the whole submission
  // (submit + decision + everything the submitting thread does for the task), dmda against
  // eager on the same machine.
  Machine wide{"wide64", 1, {}};
  for (int i = 0; i < 64; ++i)
    wide.devices.push_back(
        {"d" + std::to_string(i), 100.0 * (1 + i % 4), false, 10e9, 1e-5, 1, {}});
  Workload tiny{"tiny", {{16, 16}}, {}, {{"k1", 1e3}}};
  std::printf(
      "\nplacement with 64 simulated devices (own memory), per task, median of 5 x 20000:\n");
  std::printf("  %-6s %12s %12s\n", "policy", "decision", "submission");
  std::vector<std::string> decision_policies = {"eager", "dmda", "dmdas", "peft"};
  if (!only_policy.empty()) decision_policies = {only_policy};
  for (const std::string& policy : decision_policies) {
    hcr::Config c = sim_config(wide, tiny, policy, "off");
    c.counters = true;
    for (int i = 0; i < 64; ++i)  // four architectures of sixteen identical devices each
      c.backends[0].options.push_back(
          {"device." + std::to_string(i) + ".arch", "arch" + std::to_string(i % 4)});
    hcr::Runtime rt(c);
    hcr::Kernel k = rt.kernel("k1").cpu([](hcr::TaskContext&) {});
    auto in = rt.vector<float>(16);
    for (int i = 0; i < 2000; ++i) rt.submit(hcr::Task(k).read(in));  // warm the model
    rt.wait_all();
    std::vector<double> per_task, per_decision;
    for (int rep = 0; rep < 5; ++rep) {
      const int n = 20000;
      const hcr::RuntimeStats before = rt.stats();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) rt.submit(hcr::Task(k).read(in));
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rt.wait_all();
      const hcr::RuntimeStats after = rt.stats();
      per_task.push_back(s / n * 1e6);
      per_decision.push_back((after.decision_seconds - before.decision_seconds) /
                             double(std::max<uint64_t>(1, after.decisions - before.decisions)) *
                             1e6);
    }
    std::printf("  %-6s %9.2f us %9.2f us\n", policy.c_str(), median(per_decision),
                median(per_task));
  }
  return 0;
}
