// Offline schedules of a graph on a simulated machine, with the sim's figures: HEFT and PEFT that
// plan every copy on the link engine that will carry it, the best single device, a lower bound,
// and a checker that replays a schedule against the machine's rules.
#include "dag.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

namespace dagbench {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// The busy intervals of one slot or one copy engine, sorted and disjoint.
struct Timeline {
  std::vector<std::pair<double, double>> busy;

  // The earliest start at or after `ready` for `duration`: in the first idle gap that holds it
  // (insertion), or after everything placed so far.
  double fit(double ready, double duration, bool insertion) const {
    if (!insertion) return std::max(ready, busy.empty() ? 0.0 : busy.back().second);
    double t = ready;
    for (const auto& [s, e] : busy) {
      if (e <= t) continue;
      if (t + duration <= s) return t;
      t = std::max(t, e);
    }
    return t;
  }
  void add(double s, double e) {
    busy.insert(std::upper_bound(busy.begin(), busy.end(), std::make_pair(s, e)), {s, e});
  }
};

// What a list scheduler knows of the machine so far.
struct State {
  std::vector<std::vector<Timeline>> slot;  // [device][slot]
  std::vector<Timeline> in, out;            // [device]: its copy engines
  std::vector<std::vector<double>> valid;   // [buffer][node]: current version there since
  std::vector<int> version;                 // [buffer]: the task that wrote it, -1: initial

  explicit State(const Problem& p) {
    const Machine& m = *p.machine;
    for (const SimDevice& d : m.devices) slot.emplace_back(size_t(d.slots));
    in.resize(m.devices.size());
    out.resize(m.devices.size());
    valid.assign(p.graph->buffer_bytes.size(),
                 std::vector<double>(p.device_of_node.size(), kNever));
    for (auto& v : valid) v[0] = 0;  // data starts in host memory
    version.assign(p.graph->buffer_bytes.size(), -1);
  }
};

struct Option {
  int device = -1, slot = -1;
  double start = 0, finish = kNever;
  std::vector<Copy> copies;
};

// Task i on device d: its copies planned on the engines as they stand, then its slot.
Option plan(const Problem& p, const State& st, int i, int d, double dep_ready, bool insertion) {
  const int n = p.node[size_t(d)];
  std::map<std::pair<int, bool>, Timeline> engines;  // tentative copies of the touched engines
  auto engine = [&](int dev, bool inbound) -> Timeline& {
    auto [it, fresh] = engines.try_emplace({dev, inbound});
    if (fresh) it->second = inbound ? st.in[size_t(dev)] : st.out[size_t(dev)];
    return it->second;
  };
  Option o;
  o.device = d;
  double ready = dep_ready;
  std::set<int> seen;
  for (const Arg& a : p.graph->tasks[size_t(i)].args) {
    if (!hcr::reads(a.access) || !seen.insert(a.buffer).second) continue;
    const std::vector<double>& v = st.valid[size_t(a.buffer)];
    if (v[size_t(n)] < kNever) {
      ready = std::max(ready, v[size_t(n)]);
      continue;
    }
    const double bytes = double(p.graph->buffer_bytes[size_t(a.buffer)]);
    Copy best;
    best.end = kNever;
    for (int s = 0; s < int(v.size()); ++s) {
      if (s == n || v[size_t(s)] == kNever) continue;
      // Into a device: its in-engine (from the host or, in one plugin, straight from a peer);
      // into host memory: the source device's out-engine.
      const int dev = n != 0 ? d : p.device_of_node[size_t(s)];
      const bool inbound = n != 0;
      const double duration = copy_seconds(p, s, n, bytes);
      const double start = engine(dev, inbound).fit(v[size_t(s)], duration, insertion);
      if (start + duration < best.end)
        best = {i,     a.buffer,        st.version[size_t(a.buffer)], s, n, dev, inbound,
                start, start + duration};
    }
    if (best.end == kNever) throw std::logic_error("a buffer with no valid replica");
    engine(best.engine_device, best.inbound).add(best.start, best.end);
    o.copies.push_back(best);
    ready = std::max(ready, best.end);
  }
  const double exec = p.exec[size_t(i)][size_t(d)];
  for (int s = 0; s < int(st.slot[size_t(d)].size()); ++s) {
    const double start = st.slot[size_t(d)][size_t(s)].fit(ready, exec, insertion);
    if (start + exec < o.finish) {
      o.slot = s;
      o.start = start;
      o.finish = start + exec;
    }
  }
  return o;
}

void commit(const Problem& p, State& st, Schedule& s, int i, const Option& o) {
  for (const Copy& c : o.copies) {
    (c.inbound ? st.in : st.out)[size_t(c.engine_device)].add(c.start, c.end);
    st.valid[size_t(c.buffer)][size_t(c.to)] = c.end;
    s.copies.push_back(c);
  }
  st.slot[size_t(o.device)][size_t(o.slot)].add(o.start, o.finish);
  const int n = p.node[size_t(o.device)];
  for (const Arg& a : p.graph->tasks[size_t(i)].args)
    if (hcr::writes(a.access)) {
      std::vector<double>& v = st.valid[size_t(a.buffer)];
      std::fill(v.begin(), v.end(), kNever);
      v[size_t(n)] = o.finish;
      st.version[size_t(a.buffer)] = i;
    }
  s.tasks[size_t(i)] = {o.device, o.slot, o.start, o.finish};
  s.makespan = std::max(s.makespan, o.finish);
  s.order.push_back(i);
}

// Ready tasks by rank, highest first (ties: submission order); each on the allowed device whose
// finish (+ `lookahead[task][device]`, PEFT's OCT) is least.
Schedule list_schedule(const Problem& p, std::string name, const std::vector<double>& rank,
                       const std::vector<int>& devices,
                       const std::vector<std::vector<double>>* lookahead, bool insertion) {
  const size_t n = p.graph->tasks.size();
  State st(p);
  Schedule s;
  s.name = std::move(name);
  s.tasks.resize(n);
  std::vector<size_t> waiting(n);
  std::vector<int> ready;
  for (size_t i = 0; i < n; ++i)
    if ((waiting[i] = p.preds[i].size()) == 0) ready.push_back(int(i));
  while (!ready.empty()) {
    auto pick = std::min_element(ready.begin(), ready.end(), [&](int a, int b) {
      return rank[size_t(a)] != rank[size_t(b)] ? rank[size_t(a)] > rank[size_t(b)] : a < b;
    });
    const int i = *pick;
    ready.erase(pick);
    double dep_ready = 0;
    for (int q : p.preds[size_t(i)]) dep_ready = std::max(dep_ready, s.tasks[size_t(q)].finish);
    Option best;
    double best_score = kNever;
    for (int d : devices) {
      Option o = plan(p, st, i, d, dep_ready, insertion);
      const double score = o.finish + (lookahead ? (*lookahead)[size_t(i)][size_t(d)] : 0.0);
      if (score < best_score) {
        best_score = score;
        best = std::move(o);
      }
    }
    commit(p, st, s, i, best);
    for (int j : p.succs[size_t(i)])
      if (--waiting[size_t(j)] == 0) ready.push_back(j);
  }
  if (s.order.size() != n) throw std::logic_error("the dependency graph has a cycle");
  return s;
}

double mean_edge(const Problem& p, double bytes) {
  return bytes > 0 ? p.link.latency + bytes * p.link.per_byte : 0.0;
}

std::vector<int> all_devices(const Problem& p) {
  std::vector<int> d(p.machine->devices.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = int(i);
  return d;
}

}  // namespace

double speed_factor(const Machine& m, const Graph& g, int kernel, size_t device) {
  const SimDevice& d = m.devices[device];
  const double affinity = d.affinity.empty() ? 1.0 : d.affinity[size_t(kernel) % d.affinity.size()];
  // Devices of one architecture are alike (the runtime keys what it learns by architecture): the
  // heterogeneity factor drawn for the first of them is theirs.
  size_t first = device;
  for (size_t e = 0; e < device; ++e)
    if (m.devices[e].arch == d.arch) {
      first = e;
      break;
    }
  return affinity / g.kernels[size_t(kernel)].cost[first];
}

Link mean_link(const Machine& m) {
  // Processors (slots) and their memory nodes.
  std::vector<size_t> device_of;
  for (size_t d = 0; d < m.devices.size(); ++d)
    for (int s = 0; s < m.devices[d].slots; ++s) device_of.push_back(d);
  Link l;
  double pairs = 0;
  for (size_t a : device_of)
    for (size_t b : device_of) {
      const SimDevice &from = m.devices[a], &to = m.devices[b];
      if (a == b || (from.host_memory && to.host_memory)) continue;  // same memory node
      const SimDevice& carrier = to.host_memory ? from : to;
      l.latency += carrier.latency;
      l.per_byte += 1 / carrier.bandwidth;
      ++pairs;
    }
  if (pairs > 0) {
    l.latency /= pairs;
    l.per_byte /= pairs;
  }
  return l;
}

Problem make_problem(const Machine& m, const Graph& g) {
  if (m.devices.size() > kMaxDevices)
    throw std::invalid_argument("machine '" + m.name + "' has " + std::to_string(m.devices.size()) +
                                " devices; graphs draw costs for " + std::to_string(kMaxDevices));
  Problem p;
  p.machine = &m;
  p.graph = &g;
  p.device_of_node.push_back(-1);
  for (size_t d = 0; d < m.devices.size(); ++d) {
    if (m.devices[d].host_memory) {
      p.node.push_back(0);
    } else {
      p.node.push_back(int(p.device_of_node.size()));
      p.device_of_node.push_back(int(d));
    }
  }
  double slots = 0;
  for (const SimDevice& d : m.devices) slots += d.slots;
  for (const Task& t : g.tasks) {
    std::vector<double> e;
    double mean = 0;
    for (size_t d = 0; d < m.devices.size(); ++d) {
      e.push_back(g.kernels[size_t(t.kernel)].flops /
                  (m.devices[d].gflops * 1e9 * speed_factor(m, g, t.kernel, d)));
      mean += m.devices[d].slots * e.back();
    }
    p.exec.push_back(std::move(e));
    p.mean_exec.push_back(mean / slots);
  }
  p.preds.resize(g.tasks.size());
  p.succs.resize(g.tasks.size());
  p.edges = dependencies(g);
  for (const Edge& e : p.edges) {
    p.preds[size_t(e.to)].push_back(e.from);
    p.succs[size_t(e.from)].push_back(e.to);
  }
  p.link = mean_link(m);
  return p;
}

double copy_seconds(const Problem& p, int from_node, int to_node, double bytes) {
  const int dev = p.device_of_node[size_t(to_node != 0 ? to_node : from_node)];
  const SimDevice& d = p.machine->devices[size_t(dev)];
  return d.latency + bytes / d.bandwidth;
}

Schedule heft(const Problem& p, bool insertion) {
  const size_t n = p.graph->tasks.size();
  std::vector<std::vector<std::pair<int, double>>> out(n);  // successor, bytes
  for (const Edge& e : p.edges) out[size_t(e.from)].push_back({e.to, e.bytes});
  std::vector<double> rank(n, 0);
  for (size_t i = n; i-- > 0;) {  // submission order is topological
    double tail = 0;
    for (const auto& [j, bytes] : out[i])
      tail = std::max(tail, mean_edge(p, bytes) + rank[size_t(j)]);
    rank[i] = p.mean_exec[i] + tail;
  }
  return list_schedule(p, "HEFT", rank, all_devices(p), nullptr, insertion);
}

Schedule peft(const Problem& p, bool insertion) {
  const size_t n = p.graph->tasks.size();
  const size_t devices = p.machine->devices.size();
  std::vector<std::vector<std::pair<int, double>>> out(n);
  for (const Edge& e : p.edges) out[size_t(e.from)].push_back({e.to, e.bytes});
  // OCT(i, d): the longest of the shortest paths from i's successors to an exit, i on d.
  std::vector<std::vector<double>> oct(n, std::vector<double>(devices, 0));
  std::vector<double> rank(n, 0);
  double slots = 0;
  for (const SimDevice& d : p.machine->devices) slots += d.slots;
  for (size_t i = n; i-- > 0;) {
    for (size_t pk = 0; pk < devices; ++pk) {
      double worst = 0;
      for (const auto& [j, bytes] : out[i]) {
        double best = kNever;
        for (size_t pw = 0; pw < devices; ++pw) {
          const double c = p.node[pw] == p.node[pk] ? 0.0 : mean_edge(p, bytes);
          best = std::min(best, oct[size_t(j)][pw] + p.exec[size_t(j)][pw] + c);
        }
        worst = std::max(worst, best);
      }
      oct[i][pk] = worst;
      rank[i] += p.machine->devices[pk].slots * worst;
    }
    rank[i] /= slots;
  }
  return list_schedule(p, "PEFT", rank, all_devices(p), &oct, insertion);
}

Schedule single_device(const Problem& p, int device) {
  const size_t n = p.graph->tasks.size();
  std::vector<double> rank(n, 0);  // bottom levels on that device
  for (size_t i = n; i-- > 0;) {
    double tail = 0;
    for (int j : p.succs[i]) tail = std::max(tail, rank[size_t(j)]);
    rank[i] = p.exec[i][size_t(device)] + tail;
  }
  return list_schedule(p, p.machine->devices[size_t(device)].name, rank, {device}, nullptr, true);
}

Bound lower_bound(const Problem& p) {
  const size_t n = p.graph->tasks.size();
  const size_t devices = p.machine->devices.size();
  Bound b;
  std::vector<double> path(n, 0);
  for (size_t i = n; i-- > 0;) {
    double tail = 0;
    for (int j : p.succs[i]) tail = std::max(tail, path[size_t(j)]);
    path[i] = *std::min_element(p.exec[i].begin(), p.exec[i].end()) + tail;
    b.critical_path = std::max(b.critical_path, path[i]);
  }
  // Any schedule of length T keeps device d busy at most slots_d * T, so for weights lambda >= 0
  // with sum(lambda_d * slots_d) = 1: T >= sum_i min_d lambda_d * exec[i][d] (the Lagrangian of
  // the fractional assignment). Every lambda gives a valid bound; multiplicative steps toward
  // equal per-slot loads find a tight one.
  std::vector<double> lambda(devices);
  auto normalise = [&] {
    double sum = 0;
    for (size_t d = 0; d < devices; ++d) sum += lambda[d] * p.machine->devices[d].slots;
    for (double& l : lambda) l /= sum;
  };
  for (size_t d = 0; d < devices; ++d) {  // start from the devices' mean speeds
    double time = 0;
    for (size_t i = 0; i < n; ++i) time += p.exec[i][d];
    lambda[d] = double(n) / time;
  }
  normalise();
  for (int it = 0; it < 3000; ++it) {
    std::vector<double> load(devices, 0);
    double f = 0;
    for (size_t i = 0; i < n; ++i) {
      size_t best = 0;
      for (size_t d = 1; d < devices; ++d)
        if (lambda[d] * p.exec[i][d] < lambda[best] * p.exec[i][best]) best = d;
      f += lambda[best] * p.exec[i][best];
      load[best] += p.exec[i][best];
    }
    b.work = std::max(b.work, f);
    if (!(f > 0)) break;
    const double step = 0.5 / std::sqrt(it + 1.0);
    for (size_t d = 0; d < devices; ++d)
      lambda[d] *=
          std::exp(step * std::clamp(load[d] / p.machine->devices[d].slots / f - 1, -1.0, 1.0));
    normalise();
  }
  return b;
}

double replay(const Problem& p, std::vector<RanOp> ops) {
  std::stable_sort(ops.begin(), ops.end(),
                   [](const RanOp& a, const RanOp& b) { return a.start < b.start; });
  const Graph& g = *p.graph;
  State st(p);
  std::vector<std::vector<double>> slot_free(p.machine->devices.size());
  for (size_t d = 0; d < slot_free.size(); ++d)
    slot_free[d].assign(size_t(p.machine->devices[d].slots), 0.0);
  std::vector<double> in_free(p.machine->devices.size(), 0), out_free(in_free);
  std::vector<double> finish(g.tasks.size(), kNever);
  double makespan = 0;
  for (const RanOp& op : ops) {
    if (op.copy) {
      const double since = st.valid[size_t(op.buffer)][size_t(op.from)];
      if (since == kNever)
        throw std::runtime_error("replay: buffer " + std::to_string(op.buffer) +
                                 " copied from memory node " + std::to_string(op.from) +
                                 " where it was not");
      const bool inbound = op.to != 0;
      double& engine =
          (inbound ? in_free
                   : out_free)[size_t(p.device_of_node[size_t(inbound ? op.to : op.from)])];
      const double start = std::max(since, engine);
      engine = start + copy_seconds(p, op.from, op.to, double(g.buffer_bytes[size_t(op.buffer)]));
      st.valid[size_t(op.buffer)][size_t(op.to)] = engine;
      continue;
    }
    const int n = p.node[size_t(op.device)];
    double ready = 0;
    for (int q : p.preds[size_t(op.task)]) ready = std::max(ready, finish[size_t(q)]);
    for (const Arg& a : g.tasks[size_t(op.task)].args)
      if (hcr::reads(a.access)) {
        const double at = st.valid[size_t(a.buffer)][size_t(n)];
        if (at == kNever)
          throw std::runtime_error("replay: task " + std::to_string(op.task) + " ran on device " +
                                   std::to_string(op.device) + " without buffer " +
                                   std::to_string(a.buffer) + " there");
        ready = std::max(ready, at);
      }
    auto& slots = slot_free[size_t(op.device)];
    double& slot = *std::min_element(slots.begin(), slots.end());
    const double start = std::max(ready, slot);
    slot = finish[size_t(op.task)] = start + p.exec[size_t(op.task)][size_t(op.device)];
    makespan = std::max(makespan, slot);
    for (const Arg& a : g.tasks[size_t(op.task)].args)
      if (hcr::writes(a.access)) {
        std::vector<double>& v = st.valid[size_t(a.buffer)];
        std::fill(v.begin(), v.end(), kNever);
        v[size_t(n)] = finish[size_t(op.task)];
      }
  }
  for (double f : finish)
    if (f == kNever) throw std::runtime_error("replay: a task never ran");
  return makespan;
}

std::string check(const Problem& p, const Schedule& s) {
  const Graph& g = *p.graph;
  const size_t n = g.tasks.size();
  const double tol = 1e-9 * std::max(1e-12, s.makespan);
  auto name = [&](size_t i) { return s.name + ": task " + std::to_string(i); };
  if (s.tasks.size() != n)
    return s.name + ": " + std::to_string(s.tasks.size()) + " of " + std::to_string(n) +
           " tasks placed";
  // Which version of each buffer each task reads: its last writer before it.
  std::vector<std::vector<std::pair<int, int>>> reads(n);  // buffer, version
  {
    std::vector<int> last(g.buffer_bytes.size(), -1);
    for (size_t i = 0; i < n; ++i) {
      for (const Arg& a : g.tasks[i].args)
        if (hcr::reads(a.access)) reads[i].push_back({a.buffer, last[size_t(a.buffer)]});
      for (const Arg& a : g.tasks[i].args)
        if (hcr::writes(a.access)) last[size_t(a.buffer)] = int(i);
    }
  }
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> busy;  // resource
  for (size_t i = 0; i < n; ++i) {
    const Placement& t = s.tasks[i];
    if (t.device < 0 || t.device >= int(p.machine->devices.size()) || t.slot < 0 ||
        t.slot >= p.machine->devices[size_t(t.device)].slots)
      return name(i) + " is on no slot";
    if (std::abs(t.finish - t.start - p.exec[i][size_t(t.device)]) > tol)
      return name(i) + " does not take its execution time";
    for (int q : p.preds[i])
      if (t.start < s.tasks[size_t(q)].finish - tol)
        return name(i) + " starts before its predecessor " + std::to_string(q) + " finished";
    busy[{t.device, t.slot}].push_back({t.start, t.finish});
  }
  // Where a version of a buffer is by `when`: where it was written, or copied to.
  auto holds = [&](int buffer, int version, int node, double when, const Copy* self) {
    if (version < 0 ? node == 0
                    : p.node[size_t(s.tasks[size_t(version)].device)] == node &&
                          s.tasks[size_t(version)].finish <= when + tol)
      return true;
    for (const Copy& c : s.copies)
      if (&c != self && c.buffer == buffer && c.version == version && c.to == node &&
          c.end <= when + tol)
        return true;
    return false;
  };
  const int engines = int(p.machine->devices.size());
  for (const Copy& c : s.copies) {
    const std::string what = s.name + ": copy of buffer " + std::to_string(c.buffer) +
                             " for task " + std::to_string(c.task);
    if (c.from == c.to) return what + " goes nowhere";
    const int carrier = p.device_of_node[size_t(c.to != 0 ? c.to : c.from)];
    if (c.engine_device != carrier || c.inbound != (c.to != 0))
      return what + " is on the wrong engine";
    if (std::abs(c.end - c.start -
                 copy_seconds(p, c.from, c.to, double(g.buffer_bytes[size_t(c.buffer)]))) > tol)
      return what + " does not take its copy time";
    if (!holds(c.buffer, c.version, c.from, c.start, &c))
      return what + " reads a replica that does not hold version " + std::to_string(c.version);
    busy[{engines + c.engine_device, c.inbound ? 0 : 1}].push_back({c.start, c.end});
  }
  for (size_t i = 0; i < n; ++i)
    for (const auto& [buffer, version] : reads[i])
      if (!holds(buffer, version, p.node[size_t(s.tasks[i].device)], s.tasks[i].start, nullptr))
        return name(i) + " starts without buffer " + std::to_string(buffer) + " (version " +
               std::to_string(version) + ") in its memory";
  for (auto& [resource, intervals] : busy) {
    std::sort(intervals.begin(), intervals.end());
    for (size_t k = 1; k < intervals.size(); ++k)
      if (intervals[k].first < intervals[k - 1].second - tol)
        return s.name + ": two operations overlap on " +
               (resource.first < engines
                    ? "slot " + std::to_string(resource.second) + " of device " +
                          std::to_string(resource.first)
                    : std::string(resource.second == 0 ? "the in" : "the out") +
                          "-engine of device " + std::to_string(resource.first - engines));
  }
  double last = 0;
  for (const Placement& t : s.tasks) last = std::max(last, t.finish);
  if (std::abs(last - s.makespan) > tol) return s.name + ": the makespan is not the last finish";
  return "";
}

}  // namespace dagbench
