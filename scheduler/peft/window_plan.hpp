// A plan for the submitted window of a task graph, computed online from the learned costs: the
// tasks ready or waiting for others, their data and where it is, list-scheduled three ways — HEFT
// (upward-rank order, earliest finish), PEFT (earliest finish plus the optimistic cost table of
// what a placement leaves the tasks after it), and every task on one device, each insertion-based —
// with each copy planned from where its data is over the links it crosses, each link direction one
// copy at a time. The peft policy follows the plan with the shortest predicted makespan, and keeps
// to one device unless spreading is predicted to pay: on communication-heavy graphs a greedy rule
// spreads work whose copies cost more than it saves, which no look ahead one step deep sees.
//
// Plain data in, device per task out: the policy gathers the window (window_input.hpp); this file
// knows nothing of the runtime.
#pragma once

#include "../cost_model.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hcr::sched {

struct PlanDevice {
  uint32_t node = 0;   ///< memory node
  uint32_t slots = 1;  ///< tasks at once
  double ready = 0;    ///< seconds from now until the work it runs now is done
};

struct PlanBuffer {
  uint64_t bytes = 0;
  uint64_t valid[2] = {1, 0};  ///< memory nodes holding it now (Context::locate)
  /// A task running now writes it: from `ready` seconds on it is valid in `writer_node` only.
  bool written = false;
  uint32_t writer_node = 0;
  double ready = 0;
};

struct PlanTask {
  std::vector<double> exec;  ///< seconds per device; < 0: cannot run there
  struct Use {
    uint32_t buffer;  ///< index into PlanInput::buffers
    bool reads, writes;
  };
  std::vector<Use> uses;
  std::vector<uint32_t> successors;  ///< indices of window tasks that wait for this one
  int32_t fixed = -1;                ///< placed on this device already (queued there)
};

struct PlanInput {
  std::vector<PlanDevice> devices;
  std::vector<PlanBuffer> buffers;
  std::vector<PlanTask> tasks;            ///< in submission order
  std::vector<double> link_in, link_out;  ///< per memory node: seconds until its links are free
  const LinkModel* links = nullptr;
  std::function<bool(uint32_t, uint32_t)> direct;  ///< Context::direct_copy
};

struct Plan {
  enum class Rule { heft, peft, single };
  Rule rule = Rule::heft;
  uint32_t single = 0;          ///< Rule::single: the device
  double makespan = 0;          ///< predicted, seconds from now
  std::vector<int32_t> device;  ///< per window task
  std::string describe() const;
};

/// One schedule of the window by `rule` (`single`: the device of Rule::single).
Plan plan_window(const PlanInput& in, Plan::Rule rule, uint32_t single = 0);

/// The plan the peft policy follows: the shortest of HEFT, PEFT and every single device — a single
/// device unless spreading is predicted to finish at least `spread_gain` (a fraction) sooner (the
/// policy asks for 5%, peft.hpp's kSpreadGain).
Plan best_plan(const PlanInput& in, double spread_gain = 0.05);

}  // namespace hcr::sched
