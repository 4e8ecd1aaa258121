// Traces (traces.hpp).
#include "traces.hpp"

#include "data/data_manager.hpp"
#include "energy/energy_account.hpp"
#include "engine/attempt_observers.hpp"
#include "engine/device_table.hpp"
#include "kernel_registry.hpp"
#include "safe_file.hpp"

#include <hcr/error.hpp>

#include <algorithm>
#include <map>

namespace hcr::detail {

void Traces::transferred(const DataEvents::Transferred& copy) noexcept {
  if (!recorder_.on()) return;
  RawEvent ev{};
  ev.kind = static_cast<uint8_t>(TraceEvent::Kind::transfer);
  ev.a = copy.from;
  ev.b = copy.to;
  ev.bytes = copy.bytes;
  ev.end_ns = TraceRecorder::now_ns();
  ev.start_ns = std::max(copy.earliest_start, ev.end_ns - static_cast<int64_t>(copy.seconds * 1e9));
  ev.predicted = ev.measured = static_cast<float>(copy.seconds);
  recorder_.add(ev);
}

void Traces::begin() {
  recorder_.start();
  s_.observers.attach(&task_trace_, AttemptObservers::kTimes);
}

void Traces::start() {
  begin();
  s_.energy.record_power(true);
}

void Traces::stop() {
  s_.observers.detach(&task_trace_);
  recorder_.stop();
  s_.energy.record_power(false);
}

std::vector<TraceEvent> Traces::events() const {
  std::map<uint32_t, std::string> names = s_.kernels.names();
  const std::vector<std::string> contexts = s_.context_names();
  std::vector<TraceEvent> out;
  for (const RawEvent& r : recorder_.snapshot()) {
    TraceEvent e;
    e.kind = static_cast<TraceEvent::Kind>(r.kind);
    e.failed = r.failed;
    if (e.kind == TraceEvent::Kind::task) {
      e.device = r.a;
      e.priority = static_cast<int32_t>(r.b);
      e.kernel = names[r.kernel];
      e.footprint = r.footprint;
      if (r.context != 0 && r.context < contexts.size()) e.context = contexts[r.context];
    } else {
      e.from = r.a;
      e.to = r.b;
    }
    e.bytes = r.bytes;
    e.start = static_cast<double>(r.start_ns - s_.origin_ns) * 1e-9;
    e.end = static_cast<double>(r.end_ns - s_.origin_ns) * 1e-9;
    e.predicted = r.predicted;
    e.measured = r.measured;
    out.push_back(std::move(e));
  }
  const double origin = static_cast<double>(s_.origin_ns) * 1e-9;
  for (const EnergyAccount::PowerPoint& p : s_.energy.power()) {
    if (!(p.watts >= 0)) continue;
    TraceEvent e;
    e.kind = TraceEvent::Kind::power;
    e.device = p.device;
    e.start = e.end = p.time - origin;
    e.measured = p.watts;
    out.push_back(std::move(e));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TraceEvent& a, const TraceEvent& b) { return a.start < b.start; });
  return out;
}

namespace {
// Replaced whole through a unique temporary (a link planted there is never followed), every
// write error (a full disk) reported naming the file, the old file intact then.
void write_file(const std::string& path, const std::string& text) {
  try {
    files::write_file(path, text);
  } catch (const files::FileError& e) {
    throw Error(ErrorCode::invalid_argument, std::string("cannot write the file: ") + e.what());
  }
}
}  // namespace

// The trace's events with the devices' names and slots and the memory nodes' names, rendered.
template <class Render>
std::string Traces::render(Render render) const {
  std::vector<std::string> names, nodes;
  std::vector<uint32_t> slots;
  for (const Device& d : s_.devices.infos()) {
    names.push_back(d.name);
    slots.push_back(d.concurrency);
  }
  for (const MemoryNode& n : s_.data.counters().nodes) nodes.push_back(n.name);
  return render(events(), names, slots, nodes);
}

void Traces::write_json(const std::string& path) const {
  write_file(path, render([](auto&&... a) { return trace_json(a...); }));
}

void Traces::write_gantt(const std::string& path) const {
  write_file(path, render([](auto&&... a) { return gantt_svg(a...); }));
}

}  // namespace hcr::detail
