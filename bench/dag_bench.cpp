// Placement quality on task graphs where data movement matters: Topcuoglu's random DAGs, Gaussian
// elimination, FFT, tiled LU and Cholesky and a halo-exchange stencil on three simulated machines,
// under every policy, first run (empty model) and warm (a model saved by earlier runs), against
// offline HEFT and PEFT that pay for copies and link contention, the best single device, and a
// lower bound, all computed with the sim's own figures (bench/dag/).
//
//   build/bin/dag_bench [--quick] [--iterations N] [--train N] [--case PATTERN]... [--policy
//   NAME]...
//                       [--target-ms MS] [--seed S] [--classes K] [--priorities] [--streamed]
//                       [--csv FILE] [--gantt DIR] [--no-check | --check-only] [--list]
//
// The simulated devices compute nothing (timing only) and hold each task and copy for its modelled
// duration times the case's time_scale, chosen so that the best offline reference lasts
// --target-ms of wall time and the runtime's own overhead stays small next to it. A makespan runs
// from the first submission to wait_all(): results stay where they were computed (lazy
// write-back), offline as online. The graph is submitted whole, between Runtime::pause() and
// resume(), as the offline schedules know it whole; --streamed lets each task go as it is
// submitted (the first tasks then take the idle devices before the rest is known). Ratios are
// makespan / best offline reference, where the reference is the least of HEFT, PEFT and the best
// single device (1.00: as good as the best of them; below 1: better).
#include "dag/dag.hpp"

#include <hcr/hcr.hpp>
#include <hcr/sched.hpp>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace dagbench;
namespace fs = std::filesystem;

// ---- machines -------------------------------------------------------------------------------

// The issue's machine: one fast GPU, two mid accelerators (one architecture: one cost model) and
// a 2-slot host CPU ten times slower than the GPU, on PCIe-like links.
Machine issue_machine() {
  return {"issue",
          "one fast GPU, two mid accelerators, a 2-slot host CPU 10x slower than the GPU",
          {{"gpu", "gpu", "sim:gpu", 10000, 1, false, 16e9, 10e-6, {}},
           {"acc0", "accelerator", "sim:acc", 2500, 1, false, 8e9, 20e-6, {}},
           {"acc1", "accelerator", "sim:acc", 2500, 1, false, 8e9, 20e-6, {}},
           {"cpu", "cpu", "sim:cpu", 1000, 2, true, 0, 0, {}}}};
}

// Per-kernel affinities: each accelerator is 4x faster than nominal on every other kernel of a
// graph and 4x slower on the rest, the other way round from its twin.
Machine affinity_machine() {
  return {"affinity",
          "a GPU, two accelerators 4x fast / 4x slow on alternate kernels, a 2-slot CPU",
          {{"gpu", "gpu", "sim:gpu", 5000, 1, false, 12e9, 15e-6, {}},
           {"accA", "accelerator", "sim:accA", 2500, 1, false, 8e9, 20e-6, {4.0, 0.25}},
           {"accB", "accelerator", "sim:accB", 2500, 1, false, 8e9, 20e-6, {0.25, 4.0}},
           {"cpu", "cpu", "sim:cpu", 1000, 2, true, 0, 0, {}}}};
}

// The issue's devices behind links 8x slower with 5x the latency: every graph's effective CCR x8.
Machine slowlink_machine() {
  Machine m = issue_machine();
  m.name = "slowlink";
  m.about = "the issue's devices behind links 8x slower (2 and 1 GB/s) with 5x the latency";
  for (SimDevice& d : m.devices)
    if (!d.host_memory) {
      d.bandwidth /= 8;
      d.latency *= 5;
    }
  return m;
}

// The mean task's cost (over the reference machine's processors), modelled seconds.
constexpr double kTaskSeconds = 200e-6;

// ---- graphs ---------------------------------------------------------------------------------

struct GraphSpec {
  std::string name;
  std::function<Graph(uint64_t seed, int classes)> make;
};

std::vector<GraphSpec> graph_specs() {
  std::vector<GraphSpec> specs;
  for (double ccr : {0.1, 1.0, 5.0})
    for (double beta : {0.5, 1.5}) {
      char name[64];
      std::snprintf(name, sizeof name, "rand-c%g-b%g", ccr, beta);
      specs.push_back({name, [ccr, beta](uint64_t seed, int classes) {
                         return random_dag(100, 1.0, 3, ccr, beta, classes, seed);
                       }});
    }
  specs.push_back(
      {"ge", [](uint64_t seed, int) { return gaussian_elimination(14, 1, 0.5, seed); }});
  specs.push_back({"fft", [](uint64_t seed, int) { return fft(16, 1, 0.5, seed); }});
  specs.push_back({"lu", [](uint64_t seed, int) { return lu(6, 1, 0.5, seed); }});
  specs.push_back({"chol", [](uint64_t seed, int) { return cholesky(7, 1, 0.5, seed); }});
  specs.push_back({"stencil", [](uint64_t seed, int) { return stencil(4, 4, 6, 1, 0.5, seed); }});
  return specs;
}

// The quick set: each graph family and each machine at least once.
const std::set<std::string> kQuickCases = {
    "issue/rand-c1-b0.5", "issue/rand-c5-b1.5",    "issue/lu",
    "issue/chol",         "issue/stencil",         "affinity/rand-c1-b1.5",
    "affinity/ge",        "slowlink/rand-c5-b0.5", "slowlink/fft"};

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t graph_seed(uint64_t base, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return mix(base ^ h);
}

// ---- the runtime side -----------------------------------------------------------------------

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// `policy` empty: the Config's own default.
hcr::Config sim_config(const Machine& m, const Graph& g, double time_scale,
                       const std::string& policy, const std::string& model_dir) {
  hcr::Config c;
  c.use_environment = false;
  if (!policy.empty()) c.policy = policy;
  c.model_dir = model_dir;
  std::vector<std::pair<std::string, std::string>> o = {
      {"compute", "false"}, {"time_scale", num(time_scale)}, {"flops_per_byte", "0"}};
  for (const Kernel& k : g.kernels) o.push_back({"kernel." + k.name + ".flops", num(k.flops)});
  for (size_t i = 0; i < m.devices.size(); ++i) {
    const SimDevice& d = m.devices[i];
    const std::string p = "device." + std::to_string(i) + ".";
    o.push_back({p + "name", d.name});
    o.push_back({p + "kind", d.kind});
    o.push_back({p + "arch", d.arch});
    o.push_back({p + "gflops", num(d.gflops)});
    o.push_back({p + "concurrency", std::to_string(d.slots)});
    o.push_back({p + "host_memory", d.host_memory ? "true" : "false"});
    if (!d.host_memory) {
      o.push_back({p + "bandwidth", num(d.bandwidth)});
      o.push_back({p + "latency", num(d.latency)});
      o.push_back({p + "memory", "64GiB"});  // no eviction: the offline model has none
    }
    for (size_t k = 0; k < g.kernels.size(); ++k)
      if (double f = speed_factor(m, g, int(k), i); f != 1.0)
        o.push_back({p + "factors." + g.kernels[k].name, num(f)});
  }
  c.backends.push_back({"sim", true, o, "dag_bench"});
  return c;
}

// A runtime with the graph's kernels (timing only: the host function never runs) and the ids of
// the machine's devices.
struct Session {
  hcr::Runtime rt;
  std::vector<hcr::Kernel> kernels;
  std::vector<uint32_t> device_id;  // by machine device index

  Session(const Machine& m, const Graph& g, hcr::Config c) : rt(std::move(c)) {
    for (const Kernel& k : g.kernels)
      kernels.push_back(rt.kernel(k.name).cpu([](hcr::TaskContext&) {}));
    const std::vector<hcr::Device> devices = rt.devices();
    for (const SimDevice& d : m.devices) {
      auto it = std::find_if(devices.begin(), devices.end(),
                             [&](const hcr::Device& x) { return x.name == d.name; });
      if (it == devices.end())
        throw std::runtime_error("the runtime has no device '" + d.name +
                                 "': is the sim plugin built (hcr_backend_sim)?");
      device_id.push_back(it->id);
    }
  }
};

struct RunOptions {
  const std::vector<int>* pin = nullptr;       // machine device index per task
  const std::vector<int>* priority = nullptr;  // per task
  bool streamed = false;                       // no pause around the submissions
};

// Submits the whole graph with fresh buffers (data starts in host memory) and waits: wall seconds
// from the first submission to wait_all().
double run_once(Session& s, const Graph& g, const RunOptions& opt = {}) {
  std::vector<hcr::Buffer<float>> buffers;
  buffers.reserve(g.buffer_bytes.size());
  for (uint64_t bytes : g.buffer_bytes) buffers.push_back(s.rt.buffer<float>(1, bytes / 4));
  const auto t0 = std::chrono::steady_clock::now();
  if (!opt.streamed) s.rt.pause();
  for (size_t i = 0; i < g.tasks.size(); ++i) {
    const Task& t = g.tasks[i];
    hcr::Task task(s.kernels[size_t(t.kernel)]);
    for (const Arg& a : t.args) task.arg(buffers[size_t(a.buffer)], a.access);
    if (opt.pin) task.on(s.device_id[size_t((*opt.pin)[i])]);
    if (opt.priority) task.priority((*opt.priority)[i]);
    s.rt.submit(task);
  }
  if (!opt.streamed) s.rt.resume();
  s.rt.wait_all();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

double geomean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::log(x);
  return v.empty() ? NAN : std::exp(s / double(v.size()));
}

double worst(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::max_element(v.begin(), v.end());
}

bool has_files(const fs::path& dir) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec))
    if (it->is_regular_file()) return true;
  return false;
}

// Removes the model directories at exit, whatever happens.
struct TempDir {
  fs::path path;
  TempDir() : path(fs::temp_directory_path() / ("hcr-dag-bench-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// ---- one case -------------------------------------------------------------------------------

struct Offline {
  Problem problem;
  Schedule heft, peft;
  std::vector<Schedule> single;  // per device
  int best_single = 0;
  Bound bound;
  double reference = 0;  // modelled seconds
  std::string reference_name;
};

Offline offline(const Machine& m, const Graph& g) {
  Offline o{make_problem(m, g), {}, {}, {}, 0, {}, 0, {}};
  o.heft = heft(o.problem);
  o.peft = peft(o.problem);
  for (size_t d = 0; d < m.devices.size(); ++d)
    o.single.push_back(single_device(o.problem, int(d)));
  for (size_t d = 1; d < o.single.size(); ++d)
    if (o.single[d].makespan < o.single[size_t(o.best_single)].makespan) o.best_single = int(d);
  o.bound = lower_bound(o.problem);
  std::vector<const Schedule*> all = {&o.heft, &o.peft};
  for (const Schedule& s : o.single) all.push_back(&s);
  for (const Schedule* s : all)
    if (std::string why = check(o.problem, *s); !why.empty())
      throw std::logic_error(m.name + "/" + g.name +
                             ": the offline schedule is not one the "
                             "machine could run: " +
                             why);
  o.reference =
      std::min({o.heft.makespan, o.peft.makespan, o.single[size_t(o.best_single)].makespan});
  o.reference_name = o.reference == o.heft.makespan ? "HEFT"
                     : o.reference == o.peft.makespan
                         ? "PEFT"
                         : "single " + m.devices[size_t(o.best_single)].name;
  if (o.bound.value() > o.reference * (1 + 1e-9))
    throw std::logic_error(m.name + "/" + g.name + ": the lower bound is above a schedule");
  return o;
}

struct Settings {
  int iterations = 3;
  int train = 3;
  double target = 0.1;  // wall seconds of the best offline reference
  bool priorities = false;
  bool streamed = false;
  std::string gantt_dir;
};

struct Measured {
  std::string resolved;  // the policy the runtime named
  std::vector<double> first, warm;
  bool learned = false;  // something was saved in the model directory
};

// First runs, each from an empty model directory; then, when the policy saved a model, `train`
// runs in one runtime and the warm runs, each a new runtime loading what the runs before saved.
Measured measure(const Machine& m, const Graph& g, double time_scale, const std::string& policy,
                 const fs::path& dir, const Settings& set, const std::vector<int>* priority,
                 const std::string& gantt_base) {
  Measured r;
  RunOptions opt;
  opt.priority = priority;
  opt.streamed = set.streamed;
  auto config = [&] { return sim_config(m, g, time_scale, policy, dir.string()); };
  for (int it = 0; it < set.iterations; ++it) {
    fs::remove_all(dir);
    Session s(m, g, config());
    r.resolved = std::string(s.rt.policy());
    r.first.push_back(run_once(s, g, opt));
  }
  r.learned = has_files(dir);
  if (!r.learned) {
    r.warm = r.first;
  } else {
    {
      Session s(m, g, config());
      for (int it = 0; it < set.train; ++it) run_once(s, g, opt);
    }
    for (int it = 0; it < set.iterations; ++it) {
      Session s(m, g, config());
      const bool trace = !gantt_base.empty() && it + 1 == set.iterations;
      if (trace) s.rt.start_trace();
      r.warm.push_back(run_once(s, g, opt));
      if (trace) {
        s.rt.write_gantt(gantt_base + ".svg");
        s.rt.write_trace(gantt_base + ".json");
      }
    }
  }
  if (!gantt_base.empty() && !r.learned) {  // trace one more run of a policy that keeps nothing
    Session s(m, g, config());
    s.rt.start_trace();
    run_once(s, g, opt);
    s.rt.write_gantt(gantt_base + ".svg");
    s.rt.write_trace(gantt_base + ".json");
  }
  fs::remove_all(dir);
  return r;
}

// Hops from each task to the end of the graph: the priority an application could give without
// knowing the machine (StarPU's examples do so), for --priorities.
std::vector<int> hops_to_end(const Problem& p) {
  std::vector<int> h(p.succs.size(), 0);
  for (size_t i = h.size(); i-- > 0;)
    for (int j : p.succs[i]) h[i] = std::max(h[i], h[size_t(j)] + 1);
  return h;
}

struct Row {
  std::string machine, graph, policy, resolved;
  size_t tasks = 0;
  double time_scale = 0;
  double bound = 0, heft = 0, peft = 0, single = 0, reference = 0;  // wall seconds
  std::string single_device, reference_name;
  double first = 0, warm = 0;  // medians, wall seconds
  bool learned = false;
};

// ---- the check: the offline model against the sim ---------------------------------------------

// A run's trace as operations on the graph: tasks by their kernel (the check's graph has a kernel
// per task), copies by their size and destination.
std::vector<RanOp> ran_ops(Session& s, const Machine& m, const Problem& p, const Graph& g) {
  std::map<std::string, int> task_of;  // kernel name -> its one task
  for (size_t i = 0; i < g.tasks.size(); ++i)
    if (!task_of.emplace(g.kernels[size_t(g.tasks[i].kernel)].name, int(i)).second)
      throw std::logic_error("the check's graph must have a kernel per task");
  const std::vector<hcr::Device> devices = s.rt.devices();
  std::map<uint32_t, int> machine_device;  // runtime id -> machine index
  std::map<uint32_t, int> node;            // runtime memory node -> problem node
  node[0] = 0;
  for (size_t d = 0; d < m.devices.size(); ++d) {
    machine_device[s.device_id[d]] = int(d);
    node[devices[s.device_id[d]].memory_node] = p.node[d];
  }
  std::multimap<uint64_t, int> by_size;
  for (size_t b = 0; b < g.buffer_bytes.size(); ++b) by_size.emplace(g.buffer_bytes[b], int(b));
  std::set<std::pair<int, int>> copied;  // buffer, node
  std::vector<RanOp> ops;
  for (const hcr::TraceEvent& e : s.rt.trace_events()) {
    if (e.kind == hcr::TraceEvent::Kind::power) continue;
    RanOp op;
    op.start = e.start;
    if (e.kind == hcr::TraceEvent::Kind::task) {
      op.task = task_of.at(e.kernel);
      op.device = machine_device.at(e.device);
    } else {
      op.copy = true;
      op.from = node.at(e.from);
      op.to = node.at(e.to);
      auto [lo, hi] = by_size.equal_range(e.bytes);
      if (lo == hi)
        throw std::logic_error("a copy of " + std::to_string(e.bytes) + " bytes: no such buffer");
      op.buffer = lo->second;
      for (auto it = lo; it != hi; ++it)
        if (!copied.count({it->second, op.to})) {
          op.buffer = it->second;
          break;
        }
      copied.insert({op.buffer, op.to});
    }
    ops.push_back(op);
  }
  return ops;
}

// The offline model against the sim, on a graph with a kernel per task (so that a trace maps onto
// it): tasks pinned (Task::on) where an offline schedule put them, with priorities in its order
// (dmdas runs each device's queue by priority). First the figures: every duration a device
// reported against the model's. Then the makespans: the offline schedule's; the replay of what
// the runtime did (each task's device, the order on each device and engine) with the model's
// durations and no overhead; and the measured one. measured/replay is the runtime's overhead and
// queueing (a slot that waits for its inputs); replay/offline what the online order cost.
void check_model(const Machine& m, const Graph& g, const Settings& set) {
  const Offline o = offline(m, g);
  std::printf("check %s/%s (a kernel per task): tasks pinned where an offline schedule put "
              "them, median of %d\n",
              m.name.c_str(), g.name.c_str(), set.iterations);
  std::printf("  %-8s %10s %10s %10s %16s %15s\n", "schedule", "offline s", "replay s",
              "measured s", "measured/replay", "replay/offline");
  std::vector<const Schedule*> schedules;
  for (const Schedule& s : o.single) schedules.push_back(&s);
  schedules.push_back(&o.heft);
  size_t figures = 0;
  double deviation = 0;
  for (const Schedule* sched : schedules) {
    const double ts = set.target / sched->makespan;
    std::vector<int> pin(g.tasks.size()), priority(g.tasks.size());
    for (size_t i = 0; i < g.tasks.size(); ++i) pin[i] = sched->tasks[i].device;
    for (size_t k = 0; k < sched->order.size(); ++k)
      priority[size_t(sched->order[k])] = int(sched->order.size() - k);
    Session s(m, g, sim_config(m, g, ts, "dmdas", "off"));
    std::vector<double> measured, replayed;
    for (int it = 0; it < set.iterations; ++it) {
      s.rt.start_trace();
      measured.push_back(run_once(s, g, {&pin, &priority, set.streamed}));
      s.rt.stop_trace();
      const std::vector<hcr::TraceEvent> events = s.rt.trace_events();
      const std::vector<RanOp> ops = ran_ops(s, m, o.problem, g);
      for (size_t k = 0; k < ops.size(); ++k) {
        if (events[k].measured < 0) continue;
        const RanOp& op = ops[k];
        const double model = ts * (op.copy ? copy_seconds(o.problem, op.from, op.to,
                                                          double(g.buffer_bytes[size_t(op.buffer)]))
                                           : o.problem.exec[size_t(op.task)][size_t(op.device)]);
        deviation = std::max(deviation, std::abs(events[k].measured - model) / model);
        ++figures;
      }
      replayed.push_back(replay(o.problem, ops) * ts);
    }
    const double mr = median(measured), rr = median(replayed), off = sched->makespan * ts;
    const bool single = sched != &o.heft;
    std::printf("  %-8s %10.4f %10.4f %10.4f %16.3f %15.3f%s\n", sched->name.c_str(), off, rr, mr,
                mr / rr, rr / off,
                single && mr / rr > 1.05 ? "  <- overhead above 5%: a larger --target-ms" : "");
  }
  std::printf("  figures: %zu task and copy durations reported by the devices, at most %.2g%% from "
              "the model's%s\n",
              figures, deviation * 100,
              deviation > 1e-6 ? "  <- THE OFFLINE MODEL DOES NOT MATCH THE SIM" : "");
  if (deviation > 1e-6)
    throw std::runtime_error("the offline model does not match the simulated devices");
}

// ---- command line ---------------------------------------------------------------------------

void usage(FILE* f) {
  std::fprintf(
      f,
      "usage: dag_bench [options]\n"
      "  --quick            9 cases (each graph family and machine once), 1 iteration, 1 training "
      "run\n"
      "  --iterations N     first and warm runs per case and policy (median; default 3)\n"
      "  --train N          runs between the first and the warm ones, in one runtime (default 3)\n"
      "  --case PATTERN     only cases MACHINE/GRAPH containing PATTERN (repeatable, or a,b)\n"
      "  --policy NAME      only this policy (repeatable, or a,b); 'default': the Config's "
      "default\n"
      "  --target-ms MS     wall time of the best offline reference per case (default 100)\n"
      "  --seed S           graph seeds derive from it (default 1)\n"
      "  --classes K        kernels of a random DAG (default 8; 0: one per task)\n"
      "  --priorities       tasks carry priorities: hops to the end of the graph\n"
      "  --streamed         each task goes as it is submitted (default: the graph whole, between\n"
      "                     Runtime::pause() and resume())\n"
      "  --csv FILE         one row per case and policy\n"
      "  --gantt DIR        a Gantt chart (SVG) and trace (JSON) of the last warm run of each\n"
      "  --no-check         skip the check of the offline model against pinned runs\n"
      "  --check-only       only that check\n"
      "  --list             the cases and policies, then exit\n");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    if (comma > at) out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Settings set;
  bool quick = false, do_check = true, check_only = false, list = false;
  bool iterations_given = false, train_given = false;
  uint64_t seed = 1;
  int classes = 8;
  std::vector<std::string> case_patterns, only_policies;
  std::string csv_file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dag_bench: %s needs a value\n", a.c_str());
        usage(stderr);
        std::exit(2);
      }
      return argv[++i];
    };
    auto integer = [&](int low) {
      const std::string v = value();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < low || n > 1000000) {
        std::fprintf(stderr, "dag_bench: %s %s: want an integer >= %d\n", a.c_str(), v.c_str(),
                     low);
        std::exit(2);
      }
      return int(n);
    };
    if (a == "--quick") quick = true;
    else if (a == "--iterations") {
      set.iterations = integer(1);
      iterations_given = true;
    } else if (a == "--train") {
      set.train = integer(0);
      train_given = true;
    } else if (a == "--case")
      for (auto& p : split(value())) case_patterns.push_back(p);
    else if (a == "--policy")
      for (auto& p : split(value())) only_policies.push_back(p);
    else if (a == "--target-ms") set.target = integer(1) / 1000.0;
    else if (a == "--seed") seed = uint64_t(integer(0));
    else if (a == "--classes") classes = integer(0);
    else if (a == "--priorities") set.priorities = true;
    else if (a == "--streamed") set.streamed = true;
    else if (a == "--csv") csv_file = value();
    else if (a == "--gantt") set.gantt_dir = value();
    else if (a == "--no-check") do_check = false;
    else if (a == "--check-only") check_only = true;
    else if (a == "--list") list = true;
    else if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "dag_bench: unknown option '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (quick) {
    if (!iterations_given) set.iterations = 1;
    if (!train_given) set.train = 1;
  }
  hcr::log::set_level(hcr::LogLevel::error);

  const std::vector<Machine> machines = {issue_machine(), affinity_machine(), slowlink_machine()};
  const Machine& reference = machines[0];
  std::vector<std::string> policies = {"default"};
  for (const std::string& p : hcr::sched::policy_names()) policies.push_back(p);
  if (!only_policies.empty()) {
    for (const std::string& p : only_policies)
      if (std::find(policies.begin(), policies.end(), p) == policies.end()) {
        std::string known;
        for (const std::string& k : policies) known += (known.empty() ? "" : ", ") + k;
        std::fprintf(stderr, "dag_bench: --policy %s: unknown (known: %s)\n", p.c_str(),
                     known.c_str());
        return 2;
      }
    policies = only_policies;
  }
  struct Case {
    const Machine* machine;
    Graph graph;
  };
  std::vector<Case> cases;
  for (const Machine& m : machines)
    for (const GraphSpec& spec : graph_specs()) {
      const std::string id = m.name + "/" + spec.name;
      bool take = case_patterns.empty() ? !quick || kQuickCases.count(id) : false;
      for (const std::string& p : case_patterns) take = take || id.find(p) != std::string::npos;
      if (!take) continue;
      Graph g = spec.make(graph_seed(seed, spec.name), classes);
      realise(g, reference, kTaskSeconds);
      cases.push_back({&m, std::move(g)});
    }
  if (list || cases.empty()) {
    std::printf("cases:");
    for (const Case& c : cases)
      std::printf(" %s/%s", c.machine->name.c_str(), c.graph.name.c_str());
    std::printf("\npolicies:");
    for (const std::string& p : policies) std::printf(" %s", p.c_str());
    std::printf("\n");
    if (cases.empty()) std::fprintf(stderr, "dag_bench: no case matches\n");
    return cases.empty() ? 2 : 0;
  }

  const auto started = std::chrono::steady_clock::now();
  std::vector<Row> rows;
  try {
    TempDir tmp;
    // Made (or refused) now, not when the first chart is written after minutes of runs.
    if (!set.gantt_dir.empty()) std::filesystem::create_directories(set.gantt_dir);
    std::printf("dag_bench: %zu cases, policies:", cases.size());
    for (const std::string& p : policies) std::printf(" %s", p.c_str());
    std::printf("; %d first and %d warm run(s) each after %d training run(s); seed %llu; %s; %s\n",
                set.iterations, set.iterations, set.train, static_cast<unsigned long long>(seed),
                set.priorities ? "priorities: hops to the end" : "no priorities",
                set.streamed ? "streamed (each task goes as submitted)"
                             : "each graph submitted whole (pause, resume)");
    for (const Machine& m : machines) {
      std::printf("  machine %-9s %s:", m.name.c_str(), m.about.c_str());
      for (const SimDevice& d : m.devices) {
        std::printf(" %s %g GF x%d", d.name.c_str(), d.gflops, d.slots);
        if (!d.host_memory) std::printf(" %g GB/s %g us", d.bandwidth / 1e9, d.latency * 1e6);
        std::printf(";");
      }
      std::printf("\n");
    }
    std::printf("\n");

    if (do_check || check_only) {
      std::set<std::string> checked;
      for (const Case& c : cases) {
        if (!checked.insert(c.machine->name).second) continue;
        Graph g = random_dag(100, 1.0, 3, 1.0, 0.5, 0, graph_seed(seed, "check"));
        g.name = "rand-c1-b0.5";
        realise(g, reference, kTaskSeconds);
        check_model(*c.machine, g, set);
      }
      std::printf("\n");
      if (check_only) return 0;
    }

    for (const Case& c : cases) {
      const Machine& m = *c.machine;
      const Graph& g = c.graph;
      const Offline o = offline(m, g);
      const double ts = set.target / o.reference;
      size_t data_edges = 0;
      for (const Edge& e : o.problem.edges) data_edges += e.bytes > 0;
      uint64_t bytes = 0;
      for (uint64_t b : g.buffer_bytes) bytes += b;
      // The CCR on this machine: its mean link and its processors' mean speed.
      double comm = 0, exec = 0;
      for (const Edge& e : o.problem.edges)
        if (e.bytes > 0) comm += o.problem.link.latency + e.bytes * o.problem.link.per_byte;
      for (double x : o.problem.mean_exec) exec += x;
      const double ccr_here =
          data_edges ? comm / double(data_edges) / (exec / double(g.tasks.size())) : 0;
      std::printf("%s/%s: %s\n", m.name.c_str(), g.name.c_str(), g.about.c_str());
      std::printf("  %zu tasks, %zu kernel(s), %zu edges (%zu carry data), %.1f MB of buffers, CCR "
                  "%.2f realised on '%s' (%.2f on '%s'); seed %016llx; time_scale %.4g\n",
                  g.tasks.size(), g.kernels.size(), o.problem.edges.size(), data_edges,
                  double(bytes) / 1e6, g.ccr_realised, reference.name.c_str(), ccr_here,
                  m.name.c_str(), static_cast<unsigned long long>(g.seed), ts);
      std::printf("  offline, wall s: bound %.4f (path %.4f, work %.4f)  HEFT %.4f  PEFT %.4f  "
                  "single %.4f (%s)  -> reference %.4f (%s)\n",
                  o.bound.value() * ts, o.bound.critical_path * ts, o.bound.work * ts,
                  o.heft.makespan * ts, o.peft.makespan * ts,
                  o.single[size_t(o.best_single)].makespan * ts,
                  m.devices[size_t(o.best_single)].name.c_str(), o.reference * ts,
                  o.reference_name.c_str());
      std::printf("  %-20s %9s %6s %7s   %9s %6s %7s\n", "policy", "first s", "/ref", "/single",
                  "warm s", "/ref", "/single");
      const std::vector<int> prio = hops_to_end(o.problem);
      for (const std::string& policy : policies) {
        const std::string gantt =
            set.gantt_dir.empty() ? "" : set.gantt_dir + "/" + m.name + "-" + g.name + "-" + policy;
        const Measured r = measure(m, g, ts, policy == "default" ? "" : policy,
                                   tmp.path / (m.name + "-" + g.name + "-" + policy), set,
                                   set.priorities ? &prio : nullptr, gantt);
        Row row{m.name,
                g.name,
                policy,
                r.resolved,
                g.tasks.size(),
                ts,
                o.bound.value() * ts,
                o.heft.makespan * ts,
                o.peft.makespan * ts,
                o.single[size_t(o.best_single)].makespan * ts,
                o.reference * ts,
                m.devices[size_t(o.best_single)].name,
                o.reference_name,
                median(r.first),
                median(r.warm),
                r.learned};
        const std::string label = policy == "default" ? "default (" + r.resolved + ")" : policy;
        std::printf("  %-20s %9.4f %6.2f %7.2f   %9.4f %6.2f %7.2f%s\n", label.c_str(), row.first,
                    row.first / row.reference, row.first / row.single, row.warm,
                    row.warm / row.reference, row.warm / row.single,
                    r.learned ? "" : "  (saves no model: warm = first)");
        std::fflush(stdout);
        rows.push_back(std::move(row));
      }
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dag_bench: %s\n", e.what());
    return 1;
  }

  // ---- overall ----
  std::set<std::string> machine_names;
  for (const Row& r : rows) machine_names.insert(r.machine);
  auto table = [&](const std::string& title, const std::function<bool(const Row&)>& in) {
    std::printf("%s\n", title.c_str());
    std::printf("  %-20s %5s | %-22s | %-22s | %-23s\n", "", "", "first run / reference",
                "warm / reference", "warm / best single");
    std::printf("  %-20s %5s | %6s %7s %7s | %6s %7s %7s | %6s %7s %8s\n", "policy", "cases",
                "median", "geomean", "worst", "median", "geomean", "worst", "median", "worst",
                ">1.1x");
    for (const std::string& policy : policies) {
      std::vector<double> first, warm, single;
      std::string resolved;
      for (const Row& r : rows)
        if (r.policy == policy && in(r)) {
          first.push_back(r.first / r.reference);
          warm.push_back(r.warm / r.reference);
          single.push_back(r.warm / r.single);
          if (resolved.find(r.resolved) == std::string::npos)
            resolved += (resolved.empty() ? "" : "/") + r.resolved;
        }
      if (first.empty()) continue;
      const std::string label = policy == "default" ? "default (" + resolved + ")" : policy;
      std::printf(
          "  %-20s %5zu | %6.2f %7.2f %7.2f | %6.2f %7.2f %7.2f | %6.2f %7.2f %8zu\n",
          label.c_str(), first.size(), median(first), geomean(first), worst(first), median(warm),
          geomean(warm), worst(warm), median(single), worst(single),
          size_t(std::count_if(single.begin(), single.end(), [](double x) { return x > 1.1; })));
    }
  };
  table("overall: makespan / best offline reference (min of HEFT, PEFT, best single device)",
        [](const Row&) { return true; });
  if (machine_names.size() > 1)
    for (const std::string& mn : machine_names)
      table("machine " + mn + ":", [&](const Row& r) { return r.machine == mn; });

  // The issue's targets, for the default policy.
  {
    std::vector<double> first, warm, single;
    std::string resolved;
    for (const Row& r : rows)
      if (r.policy == "default") {
        first.push_back(r.first / r.reference);
        warm.push_back(r.warm / r.reference);
        single.push_back(r.warm / r.single);
        if (resolved.find(r.resolved) == std::string::npos)
          resolved += (resolved.empty() ? "" : "/") + r.resolved;
      }
    if (!warm.empty()) {
      auto mark = [](bool ok) { return ok ? "met" : "NOT met"; };
      std::printf("\nissue 20 targets, default policy (%s), %zu cases:\n", resolved.c_str(),
                  warm.size());
      std::printf("  warm, median / reference   %5.2f  (<= 1.10: %s)\n", median(warm),
                  mark(median(warm) <= 1.10));
      std::printf("  warm, worst / reference    %5.2f  (<= 1.50: %s)\n", worst(warm),
                  mark(worst(warm) <= 1.5));
      std::printf("  warm, worst / best single  %5.2f  (<= 1.10: %s)\n", worst(single),
                  mark(worst(single) <= 1.1));
      std::printf("  first run, median / ref    %5.2f  (<= 1.50: %s)\n", median(first),
                  mark(median(first) <= 1.5));
    }
  }

  // One line per policy for scripts.
  std::printf("\n");
  for (const std::string& policy : policies) {
    std::vector<double> first, warm, single;
    std::string resolved;
    for (const Row& r : rows)
      if (r.policy == policy) {
        first.push_back(r.first / r.reference);
        warm.push_back(r.warm / r.reference);
        single.push_back(r.warm / r.single);
        resolved = r.resolved;
      }
    if (first.empty()) continue;
    std::printf("summary policy=%s resolved=%s cases=%zu first_median=%.3f first_geomean=%.3f "
                "first_worst=%.3f warm_median=%.3f warm_geomean=%.3f warm_worst=%.3f "
                "warm_over_single_median=%.3f warm_over_single_worst=%.3f\n",
                policy.c_str(), resolved.c_str(), first.size(), median(first), geomean(first),
                worst(first), median(warm), geomean(warm), worst(warm), median(single),
                worst(single));
  }

  if (!csv_file.empty()) {
    FILE* f = std::fopen(csv_file.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "dag_bench: cannot write %s: %s\n", csv_file.c_str(),
                   std::strerror(errno));
      return 1;
    }
    std::fprintf(f, "machine,graph,tasks,policy,resolved,time_scale,bound_s,heft_s,peft_s,single_s,"
                    "single_device,reference_s,reference,first_s,warm_s,first_over_ref,"
                    "warm_over_ref,warm_over_single,learned\n");
    for (const Row& r : rows)
      std::fprintf(
          f, "%s,%s,%zu,%s,%s,%.6g,%.6g,%.6g,%.6g,%.6g,%s,%.6g,%s,%.6g,%.6g,%.4f,%.4f,%.4f,%d\n",
          r.machine.c_str(), r.graph.c_str(), r.tasks, r.policy.c_str(), r.resolved.c_str(),
          r.time_scale, r.bound, r.heft, r.peft, r.single, r.single_device.c_str(), r.reference,
          r.reference_name.c_str(), r.first, r.warm, r.first / r.reference, r.warm / r.reference,
          r.warm / r.single, r.learned ? 1 : 0);
    std::fclose(f);
  }
  std::printf("\n%.0f s in all\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return 0;
}
