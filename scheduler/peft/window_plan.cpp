// The window plan: list scheduling of a task graph with copies and link contention (see the
// header).
#include "window_plan.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <queue>

namespace hcr::sched {

namespace {

struct Replica {
  uint32_t node;
  double at;  // seconds from now the data is there
};

class Sim {
 public:
  explicit Sim(const PlanInput& in) : in_(in) {
    const size_t nd = in.devices.size();
    slot_free_.resize(nd);
    for (size_t d = 0; d < nd; ++d) {
      slot_free_[d].resize(std::max<uint32_t>(1, std::min<uint32_t>(in.devices[d].slots, 64)));
      if (const double ready = in.devices[d].ready; ready > 0)
        for (auto& busy : slot_free_[d]) busy.push_back({0.0, ready});
    }
    link_in_ = in.link_in;
    link_out_ = in.link_out;
    buffers_.resize(in.buffers.size());
    for (size_t b = 0; b < in.buffers.size(); ++b) {
      const PlanBuffer& pb = in.buffers[b];
      if (pb.written) {
        buffers_[b].push_back({pb.writer_node, std::max(0.0, pb.ready)});
        continue;
      }
      for (uint32_t n = 0; n < 128; ++n)
        if ((pb.valid[n / 64] >> (n % 64)) & 1u) buffers_[b].push_back({n, 0.0});
      if (buffers_[b].empty()) buffers_[b].push_back({0, 0.0});  // never written: host memory
    }
  }

  // When task t's inputs would all be in memory `node` (book: the copies are made).
  double data_ready(const PlanTask& t, uint32_t node, bool book) {
    struct Use {
      bool out;
      uint32_t node;
      double free;
    };
    std::array<Use, 32> used;
    size_t n_used = 0;
    auto hop = [&](bool out, uint32_t at, double earliest, double seconds) {
      Use* u = nullptr;
      for (size_t i = 0; i < n_used && u == nullptr; ++i)
        if (used[i].out == out && used[i].node == at) u = &used[i];
      if (u == nullptr) {
        const std::vector<double>& links = out ? link_out_ : link_in_;
        const double free = at < links.size() ? links[at] : 0.0;
        if (n_used == used.size()) return std::max(earliest, free) + seconds;  // (not tracked)
        u = &used[n_used++];
        *u = {out, at, free};
      }
      u->free = std::max(earliest, u->free) + seconds;
      return u->free;
    };
    double ready = 0;
    for (const PlanTask::Use& use : t.uses) {
      if (!use.reads) continue;
      std::vector<Replica>& reps = buffers_[use.buffer];
      const uint64_t bytes = in_.buffers[use.buffer].bytes;
      const Replica* here = nullptr;
      const Replica* host = nullptr;
      const Replica* device = nullptr;
      for (const Replica& r : reps) {
        if (r.node == node && (here == nullptr || r.at < here->at)) here = &r;
        if (r.node == 0 && host == nullptr) host = &r;
        if (r.node != 0 && r.node != node && device == nullptr) device = &r;
      }
      if (here != nullptr) {
        ready = std::max(ready, here->at);
        continue;
      }
      double end, home = -1;
      if (node == 0) {
        if (device == nullptr) continue;  // (nowhere: nothing to wait for)
        end = hop(true, device->node, device->at, in_.links->predict(device->node, 0, bytes));
      } else if (host != nullptr) {
        end = hop(false, node, host->at, in_.links->predict(0, node, bytes));
      } else if (device == nullptr) {
        continue;
      } else if (in_.direct && in_.direct(device->node, node)) {
        end = hop(false, node, device->at, in_.links->predict(device->node, node, bytes));
      } else {
        home = hop(true, device->node, device->at, in_.links->predict(device->node, 0, bytes));
        end = hop(false, node, home, in_.links->predict(0, node, bytes));
      }
      ready = std::max(ready, end);
      if (book) {
        if (home >= 0) reps.push_back({0, home});
        reps.push_back({node, end});
      }
    }
    if (book)
      for (size_t i = 0; i < n_used; ++i) {
        std::vector<double>& links = used[i].out ? link_out_ : link_in_;
        if (used[i].node >= links.size()) links.resize(used[i].node + 1, 0.0);
        links[used[i].node] = used[i].free;
      }
    return ready;
  }

  // The earliest start, at `earliest` or later, of `seconds` of work on a slot of device d: in
  // the first gap between the work planned there that is long enough (insertion-based, as HEFT
  // and PEFT are: a device runs whichever of its tasks is ready, so a short task fills the time
  // one planned earlier waits for its inputs). `slot`: which one.
  double fit(uint32_t d, double earliest, double seconds, size_t* slot = nullptr) const {
    double best = INFINITY;
    for (size_t s = 0; s < slot_free_[d].size(); ++s) {
      double at = earliest;
      for (const Busy& b : slot_free_[d][s]) {
        if (b.end <= at) continue;
        if (b.start >= at + seconds) break;
        at = b.end;
      }
      if (at < best) {
        best = at;
        if (slot != nullptr) *slot = s;
      }
    }
    return best;
  }
  void take_slot(uint32_t d, double start, double seconds) {
    size_t s = 0;
    fit(d, start, seconds, &s);
    std::vector<Busy>& busy = slot_free_[d][s];
    const Busy b{start, start + seconds};
    busy.insert(std::upper_bound(busy.begin(), busy.end(), b,
                                 [](const Busy& x, const Busy& y) { return x.start < y.start; }),
                b);
  }
  void wrote(const PlanTask& t, uint32_t node, double at) {
    for (const PlanTask::Use& use : t.uses)
      if (use.writes) buffers_[use.buffer].assign(1, {node, at});
  }

 private:
  struct Busy {
    double start, end;
  };
  const PlanInput& in_;
  std::vector<std::vector<std::vector<Busy>>> slot_free_;  // per device, per slot, by start
  std::vector<double> link_in_, link_out_;
  std::vector<std::vector<Replica>> buffers_;
};

// Mean seconds to copy `bytes` between two memories: over the device memories' links to and from
// host memory (0 when every device works in host memory).
double mean_copy(const PlanInput& in, uint64_t bytes) {
  if (bytes == 0) return 0;
  double sum = 0;
  size_t n = 0;
  uint32_t last = 0;
  for (const PlanDevice& d : in.devices) {
    if (d.node == 0 || d.node == last) continue;
    last = d.node;
    sum += in.links->predict(0, d.node, bytes);
    ++n;
  }
  return n ? sum / static_cast<double>(n) : 0;
}

uint64_t passed(const PlanTask& from, const PlanTask& to, const PlanInput& in) {
  uint64_t bytes = 0;
  for (const PlanTask::Use& w : from.uses) {
    if (!w.writes) continue;
    for (const PlanTask::Use& r : to.uses)
      if (r.reads && r.buffer == w.buffer) {
        bytes += in.buffers[w.buffer].bytes;
        break;
      }
  }
  return bytes;
}

}  // namespace

std::string Plan::describe() const {
  switch (rule) {
    case Rule::heft: return "heft";
    case Rule::peft: return "peft";
    case Rule::single: return "single device " + std::to_string(single);
  }
  return {};
}

Plan plan_window(const PlanInput& in, Plan::Rule rule, uint32_t single) {
  const size_t nt = in.tasks.size(), nd = in.devices.size();
  Plan plan;
  plan.rule = rule;
  plan.single = single;
  plan.device.assign(nt, -1);
  if (nt == 0 || nd == 0) return plan;

  // Upward ranks (the order) and, for PEFT, the optimistic cost table, from the last task back.
  std::vector<uint32_t> preds(nt, 0);
  for (const PlanTask& t : in.tasks)
    for (uint32_t s : t.successors) ++preds[s];
  std::vector<double> mean(nt, 0);
  for (size_t i = 0; i < nt; ++i) {
    double sum = 0;
    size_t n = 0;
    for (double e : in.tasks[i].exec)
      if (e >= 0) sum += e, ++n;
    mean[i] = n ? sum / static_cast<double>(n) : 0;
  }
  // A topological order (Kahn's), walked backwards for the ranks and the table.
  std::vector<uint32_t> topo;
  topo.reserve(nt);
  {
    std::vector<uint32_t> left = preds;
    for (uint32_t i = 0; i < nt; ++i)
      if (left[i] == 0) topo.push_back(i);
    for (size_t k = 0; k < topo.size(); ++k)
      for (uint32_t s : in.tasks[topo[k]].successors)
        if (--left[s] == 0) topo.push_back(s);
  }
  std::vector<double> rank(nt, 0);
  std::vector<std::vector<double>> oct;
  if (rule == Plan::Rule::peft) oct.assign(nt, std::vector<double>(nd, 0.0));
  uint32_t max_node = 0;
  for (const PlanDevice& d : in.devices) max_node = std::max(max_node, d.node);
  std::vector<double> node_min(max_node + 1);
  for (size_t k = topo.size(); k-- > 0;) {
    const uint32_t i = topo[k];
    const PlanTask& t = in.tasks[i];
    double longest = 0;
    for (uint32_t s : t.successors) {
      const double c = mean_copy(in, passed(t, in.tasks[s], in));
      longest = std::max(longest, c + rank[s]);
      if (rule != Plan::Rule::peft) continue;
      // min over the successor's devices of OCT + execution, per memory node and anywhere.
      std::fill(node_min.begin(), node_min.end(), INFINITY);
      double any = INFINITY;
      for (size_t d = 0; d < nd; ++d) {
        const double e = in.tasks[s].exec[d];
        if (e < 0) continue;
        const double v = oct[s][d] + e;
        node_min[in.devices[d].node] = std::min(node_min[in.devices[d].node], v);
        any = std::min(any, v);
      }
      if (!std::isfinite(any)) continue;
      for (size_t d = 0; d < nd; ++d)
        oct[i][d] = std::max(oct[i][d], std::min(node_min[in.devices[d].node], any + c));
    }
    rank[i] = mean[i] + longest;
  }

  Sim sim(in);
  std::vector<double> finish(nt, 0), after(nt, 0);  // after: predecessors' latest finish
  auto lower = [&](uint32_t a, uint32_t b) {  // the ready queue's order: rank, then submission
    return rank[a] != rank[b] ? rank[a] < rank[b] : a > b;
  };
  std::priority_queue<uint32_t, std::vector<uint32_t>, decltype(lower)> ready(lower);
  for (uint32_t i = 0; i < nt; ++i)
    if (preds[i] == 0) ready.push(i);
  while (!ready.empty()) {
    const uint32_t i = ready.top();
    ready.pop();
    const PlanTask& t = in.tasks[i];
    int32_t best = -1;
    double best_score = INFINITY, best_finish = 0;
    auto consider = [&](uint32_t d) {
      const double e = t.exec[d];
      if (e < 0) return;
      const double start =
          sim.fit(d, std::max(sim.data_ready(t, in.devices[d].node, false), after[i]), e);
      const double f = start + e;
      const double score = f + (rule == Plan::Rule::peft ? oct[i][d] : 0.0);
      if (score < best_score) {
        best_score = score;
        best = static_cast<int32_t>(d);
        best_finish = f;
      }
    };
    if (t.fixed >= 0 && static_cast<size_t>(t.fixed) < nd) {
      consider(static_cast<uint32_t>(t.fixed));
    } else if (rule == Plan::Rule::single && single < nd && t.exec[single] >= 0) {
      consider(single);
    } else {
      for (uint32_t d = 0; d < nd; ++d) consider(d);
    }
    if (best >= 0) {
      const uint32_t d = static_cast<uint32_t>(best);
      const uint32_t node = in.devices[d].node;
      const double start = sim.fit(d, std::max(sim.data_ready(t, node, true), after[i]), t.exec[d]);
      best_finish = start + t.exec[d];
      sim.take_slot(d, start, t.exec[d]);
      sim.wrote(t, node, best_finish);
      plan.device[i] = best;
    }
    finish[i] = best_finish;
    plan.makespan = std::max(plan.makespan, best_finish);
    for (uint32_t s : t.successors) {
      after[s] = std::max(after[s], finish[i]);
      if (--preds[s] == 0) ready.push(s);
    }
  }
  return plan;
}

Plan best_plan(const PlanInput& in, double spread_gain) {
  Plan spread = plan_window(in, Plan::Rule::heft);
  Plan peft = plan_window(in, Plan::Rule::peft);
  if (peft.makespan < spread.makespan) spread = std::move(peft);
  // One device of each kind: devices alike in memory (host or own), slots and costs give the same
  // single-device plan; the one free soonest stands for them.
  Plan single;
  single.makespan = INFINITY;
  std::vector<uint64_t> seen;
  const size_t nd = in.devices.size();
  std::vector<uint32_t> order(nd);
  for (uint32_t d = 0; d < nd; ++d) order[d] = d;
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return in.devices[a].ready < in.devices[b].ready; });
  for (uint32_t d : order) {
    uint64_t h = 1469598103934665603ull ^ (in.devices[d].node == 0) ^ (in.devices[d].slots << 1);
    for (const PlanTask& t : in.tasks) {
      uint64_t bits;
      const double e = t.exec[d];
      std::memcpy(&bits, &e, sizeof bits);
      h = (h ^ bits) * 1099511628211ull;
    }
    if (std::find(seen.begin(), seen.end(), h) != seen.end()) continue;
    seen.push_back(h);
    Plan p = plan_window(in, Plan::Rule::single, d);
    if (p.makespan < single.makespan) single = std::move(p);
  }
  return spread.makespan < single.makespan * (1 - spread_gain) ? spread : single;
}

}  // namespace hcr::sched
