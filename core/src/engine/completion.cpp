// Completion (completion.hpp): an attempt's end recorded, then the task finished, written home
// or placed again.
#include "completion.hpp"

#include "device_graphs.hpp"
#include "device_health.hpp"
#include "host_access.hpp"
#include "placement.hpp"
#include "task_graph.hpp"
#include "../buffer_state.hpp"
#include "../data/data_manager.hpp"
#include "../kernel_state.hpp"
#include "../log_internal.hpp"
#include "../plugins/plugin_loader.hpp"

#include <algorithm>
#include <chrono>
#include <string>

namespace hcr::detail {

namespace {

// Failures of the device or its driver, which another device may not share. A kernel's own
// exception, bad arguments or a missing kernel would fail anywhere.
bool device_side(ErrorCode c) {
  switch (c) {
    case ErrorCode::device_lost:
    case ErrorCode::backend:
    case ErrorCode::timeout:
    case ErrorCode::out_of_memory:
    case ErrorCode::internal:
    case ErrorCode::unknown: return true;
    default: return false;
  }
}
ErrorCode code_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& x) {
    return x.code();
  } catch (...) {
    return ErrorCode::unknown;
  }
}

}  // namespace

void Completion::host_task_ready(TaskNode* t) noexcept {
  if (t->transfer_error) {
    if (!fetch_home_again(t)) finish(t, t->transfer_error);
  } else if (t->kind == TaskKind::join) {
    finish(t, nullptr);
  } else if (t->grant_fn != nullptr) {  // async host access: its callback is called now
    p_.host.grant_async(t);
  } else {  // host access: granted until Buffer's HostView releases it
    t->granted.store(1, std::memory_order_release);
    t->granted.notify_all();
  }
}

bool Completion::fetch_home_again(TaskNode* t) noexcept {
  uint32_t culprit = 0;
  bool lost = false;
  try {
    std::rethrow_exception(t->transfer_error);
  } catch (const CopyError& c) {
    culprit = c.device;
    lost = c.lost;
  } catch (...) {
    return false;  // not a copy (no memory, data lost): no retry helps
  }
  if (t->foreign_faults >= kHostCopyRetries) return false;
  ++t->foreign_faults;
  const std::string why = what(t->transfer_error);
  if (!lost && culprit < p_.devices.count()) {  // a lost device was retired by the copy already
    DeviceState& x = p_.devices[culprit];
    x.failed.fetch_add(1, std::memory_order_relaxed);
    p_.health.note_fault(x, ErrorCode::backend, why);
  }
  HCR_LOG(info, "copying data home failed (" << why << "): fetching it again");
  t->transfer_error = nullptr;
  if (t->data_node >= 0) p_.data.commit(t, false);  // unpins; what is valid elsewhere stays so
  retries_.fetch_add(1, std::memory_order_relaxed);
  // Acquires again: a fresh copy from wherever the data is valid (or: lost, said so)
  p_.placement.place(t);
  return true;
}

void Completion::failed_before_launch(TaskNode* t, DeviceState& d, std::exception_ptr e) noexcept {
  Launches::disarm(t);  // the launch never reached the plugin: no answer will come for it
  // Ends the policy's bookkeeping
  p_.placement.policy()->completed(sched::TaskRef(t), d.info.id, -1.0);
  // A copy another device failed (the source's end of a fetch) is that device's fault: it is
  // charged, and the task is placed again with d still allowed. Bounded, in case that device
  // keeps failing without leaving scheduling.
  uint32_t culprit = d.info.id;
  bool culprit_lost = false;
  try {
    if (e) std::rethrow_exception(e);
  } catch (const CopyError& c) {
    culprit = c.device;
    culprit_lost = c.lost;
  } catch (...) {
  }
  if (culprit != d.info.id && culprit < p_.devices.count() && t->foreign_faults < 4) {
    ++t->foreign_faults;
    d.in_flight.fetch_sub(1, std::memory_order_acq_rel);
    p_.driver.pump(d);
    DeviceState& x = p_.devices[culprit];
    const std::string why = what(e);
    if (!culprit_lost) {
      x.failed.fetch_add(1, std::memory_order_relaxed);
      p_.health.note_fault(x, ErrorCode::backend, why);
    }
    HCR_LOG(info, "task of kernel '" << t->kernel->name << "' lost an input copy on '"
                                     << x.info.name << "' (" << why << "): placing it again");
    place_again(t);
    return;
  }
  d.tasks.fetch_add(1, std::memory_order_relaxed);
  d.failed.fetch_add(1, std::memory_order_relaxed);
  d.in_flight.fetch_sub(1, std::memory_order_acq_rel);
  p_.driver.pump(d);
  if (place_elsewhere(t, d, code_of(e), what(e))) return;
  finish(t, std::move(e));
}

void Completion::launch_done(TaskNode* t, hcr_error_t* error, const hcr_completion_info_t* info,
                             const char* timed_out) noexcept {
  DeviceState& d = p_.devices[static_cast<size_t>(t->device.load(std::memory_order_relaxed))];
  double measured = -1, seconds = -1;
  if (info != nullptr && info->struct_size >= HCR_COMPLETION_INFO_STRUCT_SIZE_1_0 &&
      info->device_seconds >= 0)
    seconds = measured = info->device_seconds;
  const uint32_t wants = p_.observers.wants();
  std::chrono::steady_clock::time_point end;
  const bool timing = p_.timing.load(std::memory_order_relaxed);
  if (timing || (wants & AttemptObservers::kTimes) != 0) end = std::chrono::steady_clock::now();
  // (A start left unset: timing came on, with the first context, while this launch ran.)
  if (seconds < 0 && timing && t->start.time_since_epoch().count() != 0)
    seconds = std::chrono::duration<double>(end - t->start).count();
  if (measured > 0)
    d.busy_ns.fetch_add(static_cast<uint64_t>(measured * 1e9), std::memory_order_relaxed);

  std::exception_ptr e;
  ErrorCode code = ErrorCode::unknown;
  std::string msg;
  DeviceGraph* graph = t->device_graph;
  if (error != nullptr) {
    const hcr_plugin_api_t* api = d.plugin->api;
    if (graph != nullptr) {  // a node's failure, named by its recorded task
      code = static_cast<ErrorCode>(api->error_code(error));
      e = graph->launch_error(code, take_error(api, error));
    } else if (t->kernel_threw) {
      e = t->error;  // the kernel's own exception, unchanged
      api->error_destroy(error);
    } else {
      code = static_cast<ErrorCode>(api->error_code(error));
      msg = take_error(api, error);
      e = std::make_exception_ptr(
          Error(code, "kernel '" + t->kernel->name + "' on device '" + d.info.name + "': " + msg));
    }
    d.failed.fetch_add(1, std::memory_order_relaxed);
  } else if (timed_out != nullptr) {  // the watchdog gave up on it
    code = ErrorCode::timeout;
    msg = timed_out;
    e = std::make_exception_ptr(
        Error(code, "kernel '" + t->kernel->name + "' on device '" + d.info.name + "': " + msg));
    d.failed.fetch_add(1, std::memory_order_relaxed);
    // The plugin may still be running it: never launched (nor released) again.
    if (graph != nullptr) graph->abandoned.store(true, std::memory_order_release);
  }
  // A device graph's time is no kernel's: the policy learns nothing from it.
  if (graph != nullptr) seconds = -1;
  // The prediction is read before completed() ends the policy's bookkeeping of `t`.
  const double predicted = (wants & AttemptObservers::kPrediction) != 0
                               ? p_.placement.policy()->predicted(sched::TaskRef(t))
                               : -1;
  p_.placement.policy()->completed(sched::TaskRef(t), d.info.id, e ? -1.0 : seconds);
  if (wants != 0)
    p_.observers.notify({t, d, info, measured, seconds, predicted, end, static_cast<bool>(e)});
  d.tasks.fetch_add(1, std::memory_order_relaxed);
  // A failure counts against the device before it is given more work (it may be quarantined):
  // its slot stays taken until then, or another thread's pump could fill it in between.
  // (A device graph runs where it was created, or fails: its tasks run where they may next time.)
  if (e && !t->kernel_threw && graph == nullptr && place_elsewhere(t, d, code, msg)) {
    d.in_flight.fetch_sub(1, std::memory_order_acq_rel);
    p_.driver.pump(d);
    return;
  }
  d.in_flight.fetch_sub(1, std::memory_order_acq_rel);
  p_.driver.pump(d);
  // Eager write-back: the results go home before the task counts as done (the device's slot is
  // free already: the copy engine does this).
  if (!e && p_.data.active() && p_.data.write_through(t)) return;
  finish(t, std::move(e));
}

void Completion::written_through(TaskNode* t, std::exception_ptr error) noexcept {
  if (!error) {
    finish(t, nullptr);
    return;
  }
  DeviceState& d = p_.devices[static_cast<size_t>(t->device.load(std::memory_order_relaxed))];
  if (place_elsewhere(t, d, code_of(error), what(error))) return;
  finish(t, std::move(error));
}

bool Completion::place_elsewhere(TaskNode* t, DeviceState& d, ErrorCode code,
                                 const std::string& why) noexcept {
  if (!device_side(code) || t->data_lost) return false;
  p_.health.note_fault(d, code, why);
  try {
    t->device_errors += (t->device_errors.empty() ? "" : "; ") + d.info.name + ": " + why;
    t->excluded.push_back(d.info.id);
  } catch (...) {
    return false;
  }
  HCR_LOG(info, "task of kernel '" << t->kernel->name << "' failed on '" << d.info.name << "' ("
                                   << why << "): placing it again");
  place_again(t);  // another device, or no_device_error with every device's reason
  return true;
}

void Completion::place_again(TaskNode* t) noexcept {
  t->transfer_error = nullptr;
  t->error = nullptr;
  t->device.store(-1, std::memory_order_relaxed);
  // Its inputs stay valid where they were; its scratch goes back to the pool.
  if (t->data_node >= 0 || t->scratch_node >= 0) p_.data.commit(t, false);
  retries_.fetch_add(1, std::memory_order_relaxed);
  p_.placement.place(t);
}

void Completion::give_back(TaskNode* t, DeviceState& d) noexcept {
  Launches::disarm(t);  // never launched
  p_.placement.policy()->completed(sched::TaskRef(t), d.info.id, -1.0);
  d.in_flight.fetch_sub(1, std::memory_order_acq_rel);
  place_again(t);
}

void Completion::finish(TaskNode* t, std::exception_ptr e) noexcept {
  // Its replay's device graph may be launched again (before the replay's Event settles: a replay
  // made once it has ends up on the device too).
  if (t->device_graph != nullptr)
    t->device_graph->in_flight.store(false, std::memory_order_release);
  if (t->data_node >= 0 || t->scratch_node >= 0) p_.data.commit(t, !e);
  // Its writes committed (or dropped): the next task of a commute run may fetch the buffer.
  p_.placement.release_commute(t);
  p_.graph.settle(t, e);
  if (t->kind == TaskKind::host_access && t->granted.load(std::memory_order_relaxed) == 0) {
    if (t->grant_fn != nullptr) {  // async: failed before it was granted; the callback is told
      t->granted.store(2, std::memory_order_relaxed);
      try {
        t->grant_fn(t->grant_user, nullptr, nullptr, e);
      } catch (...) {
        HCR_LOG(error, "an acquire_async callback threw; the callback must not throw");
      }
      if (BufferState* b = std::exchange(t->view, nullptr)) release(b);
    } else {
      t->granted.store(1, std::memory_order_release);  // wakes an acquire that will now throw
      t->granted.notify_all();
    }
  }
  p_.graph.close(t);
}

}  // namespace hcr::detail
