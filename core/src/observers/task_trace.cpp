// TaskTrace (task_trace.hpp).
#include "task_trace.hpp"

#include "../contexts/context_state.hpp"
#include "../kernel_state.hpp"
#include "../trace_recorder.hpp"

#include <algorithm>

namespace hcr::detail {

void TaskTrace::attempt_ended(const AttemptRecord& r) noexcept {
  if (!trace_.on()) return;  // stopped while this attempt was being told
  TaskNode* t = r.task;
  RawEvent ev{};
  ev.kind = static_cast<uint8_t>(TraceEvent::Kind::task);
  ev.failed = r.failed;
  ev.a = r.device.info.id;
  ev.kernel = t->kernel->id;
  if (!t->footprint_valid) compute_footprint(t);
  ev.footprint = t->footprint;
  ev.bytes = t->bytes;
  ev.end_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(r.end.time_since_epoch()).count();
  ev.start_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t->start.time_since_epoch()).count();
  // The bar starts when the device began it, if it said how long it took (a launch may wait in
  // the plugin behind earlier ones).
  if (r.measured >= 0)
    ev.start_ns = std::max(ev.start_ns, ev.end_ns - static_cast<int64_t>(r.measured * 1e9));
  ev.predicted = static_cast<float>(r.predicted);
  ev.b = static_cast<uint32_t>(t->priority);  // the priority it was ordered by
  ev.context = t->context != nullptr ? static_cast<uint16_t>(t->context->index) : 0;
  ev.measured = static_cast<float>(r.measured);
  trace_.add(ev);
}

}  // namespace hcr::detail
