// Completion of asynchronous operations: OpenCL events in, the ABI's `done` callbacks out.
//
// Each operation ends with an OpenCL event. An event callback (clSetEventCallback) only hands the
// operation to a Completer thread of ours; that thread calls `done`. The split matters: `done`
// calls straight back into the plugin (the next launch, a copy, a kernel lookup), and enqueueing
// from inside an OpenCL callback (it runs on the OpenCL runtime's own thread) is discouraged by
// the specification and deadlocks on some implementations. Our thread holds no lock of the
// plugin while it calls `done`.
#pragma once

#include "cl_handle.hpp"

#include <hcr/sdk/backend.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hcr::opencl {

class Completer;

/// One operation in flight: the event that ends it and whom to tell.
struct Op {
  Event event;           // the command whose completion ends the operation (or stage)
  Event start;           // first command of a multi-command operation (timing); optional
  bool measure = false;  // report device_seconds from event profiling
  hcr_done_fn done = nullptr;
  void* done_user_data = nullptr;
  std::string what;        // "gemm_f32 (64x64x64) on 'dev'", for error messages
  std::vector<Mem> holds;  // objects that must live until the operation ends (sub-buffers)
  std::vector<unsigned char> staging;  // host bounce buffer of a copy between contexts
  /// A further stage, enqueued by the completer when this one ends; returns its event. Throws
  /// sdk::Error when it cannot be started (the operation then fails with that error).
  std::function<Event(Op&)> next;
  std::atomic<uint32_t>* load = nullptr;  // the queue's count of operations in flight, if any

  // Set by the Completer.
  Completer* completer = nullptr;
  cl_int status = CL_COMPLETE;
};

/// The completion thread of one device, and the count of its operations in flight (what
/// synchronize() waits for).
class Completer {
 public:
  Completer(std::string name, sdk::Host host);
  ~Completer();  // drains, then joins the thread
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  /// Counts an operation about to be started. Pair with watch() or abandon().
  void begin();
  /// The operation could not be started: uncount it (no `done` will be called).
  void abandon();
  /// Takes over a started operation whose `event` is set and flushed. Its `done` is called once,
  /// from the completion thread.
  void watch(std::unique_ptr<Op> op);
  /// Blocks until every counted operation has returned from its `done`. Never call it from `done`.
  void drain();

 private:
  static void CL_CALLBACK on_event(cl_event event, cl_int status, void* user);
  void push(Op* op);
  void run();
  void complete(std::unique_ptr<Op> op);

  std::string name_;
  sdk::Host host_;
  std::mutex mutex_;
  std::condition_variable ready_cv_;  // the thread waits for work
  std::condition_variable idle_cv_;   // drain() waits for pending_ == 0
  std::deque<Op*> ready_;
  uint64_t pending_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: started when everything above exists
};

/// Keeps an operation counted while it is being started; uncounts it unless committed.
class Ticket {
 public:
  explicit Ticket(Completer& c) : c_(&c) { c.begin(); }
  ~Ticket() {
    if (c_ != nullptr) c_->abandon();
  }
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;
  /// Hands the started operation to the completer.
  void watch(std::unique_ptr<Op> op) {
    Completer* c = c_;
    c_ = nullptr;
    c->watch(std::move(op));
  }

 private:
  Completer* c_;
};

}  // namespace hcr::opencl
