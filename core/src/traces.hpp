// Traces: recording (the recorder, the observer that adds each attempt's bar, each copy's bar)
// and reading what was recorded (events with names resolved, Chrome JSON, an SVG Gantt chart).
//
// Thread safety: every member may be called from any thread.
#pragma once

#include "data/data_events.hpp"
#include "observers/task_trace.hpp"
#include "trace_recorder.hpp"

#include <hcr/trace.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hcr::detail {

class AttemptObservers;
class DataManager;
class DeviceTable;
class EnergyAccount;
class KernelRegistry;

class Traces {
 public:
  struct Sources {
    AttemptObservers& observers;
    EnergyAccount& energy;  // power points while Runtime::start_trace records
    const KernelRegistry& kernels;
    const DeviceTable& devices;
    const DataManager& data;
    std::function<std::vector<std::string>()> context_names;  // by index; the default's empty
    int64_t origin_ns;  // TraceRecorder::now_ns() when the runtime started
  };
  explicit Traces(Sources s) : s_(std::move(s)) {}
  Traces(const Traces&) = delete;
  Traces& operator=(const Traces&) = delete;

  /// Starts recording, each attempt's bar included ([trace] file or gantt: from the start).
  void begin();
  /// Runtime::start_trace: begin(), and the devices' power as well.
  void start();
  void stop();
  /// A copy landed: its bar, while recording.
  void transferred(const DataEvents::Transferred& copy) noexcept;
  /// What was recorded, times in seconds since the runtime started, ordered by start.
  std::vector<TraceEvent> events() const;
  /// Chrome/Perfetto JSON, an SVG Gantt chart; Error(invalid_argument) naming a file that cannot
  /// be written (the old one intact then).
  void write_json(const std::string& path) const;
  void write_gantt(const std::string& path) const;

 private:
  template <class Render>
  std::string render(Render render) const;
  Sources s_;
  TraceRecorder recorder_;
  TaskTrace task_trace_{recorder_};
};

}  // namespace hcr::detail
