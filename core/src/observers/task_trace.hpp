// The trace's bar for each attempt: attached to Completion's observers while a trace records.
#pragma once

#include "../engine/attempt_observers.hpp"

namespace hcr::detail {

class TraceRecorder;

class TaskTrace final : public AttemptObserver {
 public:
  explicit TaskTrace(TraceRecorder& trace) : trace_(trace) {}
  void attempt_ended(const AttemptRecord& r) noexcept override;

 private:
  TraceRecorder& trace_;
};

}  // namespace hcr::detail
