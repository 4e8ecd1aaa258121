// The completion thread: OpenCL event callbacks queue operations here; this thread reads their
// status and timing, starts further stages, and calls `done` with no lock held.
#include "completion.hpp"

#include "cl_error.hpp"

#include <pthread.h>

namespace hcr::opencl {

Completer::Completer(std::string name, sdk::Host host)
    : name_(std::move(name)), host_(host), thread_([this] { run(); }) {
  // Shows up in top and debuggers; the kernel truncates names to 15 characters.
  pthread_setname_np(thread_.native_handle(), "hcr-opencl-done");
}

Completer::~Completer() {
  drain();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_cv_.notify_all();
  thread_.join();
}

void Completer::begin() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++pending_;
}

void Completer::abandon() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--pending_ == 0) idle_cv_.notify_all();
}

void Completer::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_cv_.wait(lock, [&] { return pending_ == 0; });
}

void Completer::watch(std::unique_ptr<Op> op) {
  op->completer = this;
  Op* raw = op.release();
  // The callback may run at once, on this thread, if the command has already finished.
  cl_int err = clSetEventCallback(raw->event.get(), CL_COMPLETE, &Completer::on_event, raw);
  if (err != CL_SUCCESS) {
    // Without a callback, wait here: the operation still completes exactly once.
    host_.warn("opencl: " + cl_error_text("clSetEventCallback", err) + "; waiting for " +
               raw->what + " on the calling thread");
    cl_event e = raw->event.get();
    cl_int wait = clWaitForEvents(1, &e);
    cl_int status = CL_COMPLETE;
    if (wait != CL_SUCCESS || clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status,
                                             &status, nullptr) != CL_SUCCESS)
      status = wait != CL_SUCCESS ? wait : CL_INVALID_EVENT;
    raw->status = status;
    push(raw);
  }
}

void CL_CALLBACK Completer::on_event(cl_event, cl_int status, void* user) {
  auto* op = static_cast<Op*>(user);
  op->status = status;
  op->completer->push(op);
}

void Completer::push(Op* op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.push_back(op);
  }
  ready_cv_.notify_one();
}

void Completer::run() {
  for (;;) {
    Op* op = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      if (ready_.empty()) return;  // stopping, and drained
      op = ready_.front();
      ready_.pop_front();
    }
    complete(std::unique_ptr<Op>(op));
  }
}

namespace {
// Seconds from the start of `first` to the end of `last`; < 0 when the driver does not say.
double profiled_seconds(cl_event first, cl_event last) {
  cl_ulong t0 = 0, t1 = 0;
  if (clGetEventProfilingInfo(first, CL_PROFILING_COMMAND_START, sizeof t0, &t0, nullptr) !=
          CL_SUCCESS ||
      clGetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof t1, &t1, nullptr) !=
          CL_SUCCESS ||
      t1 < t0)
    return -1;
  return static_cast<double>(t1 - t0) * 1e-9;
}
}  // namespace

void Completer::complete(std::unique_ptr<Op> op) {
  hcr_error_t* error = nullptr;
  if (op->status < 0) {
    error = sdk::make_error(hcr_code_of(op->status), op->what +
                                                         " failed: " + cl_error_name(op->status) +
                                                         " (" + std::to_string(op->status) + ")");
  } else if (op->next) {
    auto next = std::move(op->next);
    op->next = nullptr;
    error = sdk::guard([&] { op->event = next(*op); });
    if (error == nullptr) {
      watch(std::move(op));  // still counted: the next stage ends it
      return;
    }
  }
  double seconds = -1;
  if (error == nullptr && op->measure)
    seconds = profiled_seconds(op->start ? op->start.get() : op->event.get(), op->event.get());
  const hcr_done_fn done = op->done;
  void* user = op->done_user_data;
  if (op->load != nullptr) op->load->fetch_sub(1, std::memory_order_relaxed);
  op.reset();  // events and held objects go before the host may free what they refer to
  sdk::complete(done, user, error, seconds);
  abandon();  // the operation is over: synchronize() may return
}

}  // namespace hcr::opencl
