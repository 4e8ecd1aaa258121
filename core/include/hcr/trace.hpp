/// \file trace.hpp
/// What a run did, for the people tuning it: every task execution (device, kernel, footprint,
/// start, end, the scheduler's prediction) and every copy (memory nodes, bytes, start, end), and
/// counters per device. Recording is off by default and costs one flag test per task then.
///
/// \code
/// rt.start_trace();
/// ...                                    // submit work
/// rt.wait_all();
/// rt.write_trace("run.json");            // Chrome / Perfetto trace: one track per device and link
/// rt.write_gantt("run.svg");             // a Gantt chart any browser opens
/// \endcode
///
/// Or from configuration: `[trace] file = "run.json"` (and `gantt = "run.svg"`), written when the
/// runtime ends; or `HCR_TRACE=run.json`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hcr {

struct TraceEvent {
  /// power: a device's draw (`measured`, watts) at `start`, where its energy is known (a counter
  /// track per device in the trace).
  enum class Kind : uint8_t { task, transfer, power };
  Kind kind = Kind::task;
  uint32_t device = 0;        ///< task: the device that ran it
  uint32_t from = 0, to = 0;  ///< transfer: memory nodes (0 = host)
  std::string kernel;         ///< task: kernel name
  uint64_t footprint = 0;     ///< task: shape hash the cost model keys on
  uint64_t bytes = 0;         ///< transfer: bytes copied; task: bytes of its buffers
  double start = 0;           ///< seconds since the runtime started
  double end = 0;
  double predicted = -1;  ///< task: the policy's predicted seconds, -1 when it made none
  double measured = -1;   ///< task: seconds the device reported, -1 when it did not
  /// task: the priority it was ordered by — the application's (Task::priority), or, under a
  /// policy that derives them (peft), the application's times 4096 plus its upward rank's level
  int priority = 0;
  bool failed = false;
  /// task: the scheduling context it ran in (context.hpp); empty for the default context
  std::string context;
};

/// How well the policy's predictions matched measurements, for one kernel on one device.
struct ModelAccuracy {
  std::string kernel;
  uint32_t device = 0;
  double median_abs_pct_error = 0;  ///< median of |predicted - measured| / measured, in percent
  uint32_t samples = 0;
};

}  // namespace hcr
