// What the fake CUDA runtime's two files share (fake_cudart.cpp: memory, streams, events, kernels;
// fake_graphs.cpp: stream capture and graphs): the stream and event objects, the error state, and
// the hooks through which a capturing stream records work instead of running it.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

struct Capture;  // a stream capture in progress (fake_graphs.cpp)

struct CUstream_st {
  int device = 0;
  Capture* capture = nullptr;  // the capture this stream records into (fake_graphs.cpp's mutex)
  std::vector<size_t> tail;    // the captured nodes the stream's next work depends on
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool busy = false;
  bool stop = false;
  std::thread worker;
};

struct CUevent_st {
  unsigned flags = 0;
  int device = 0;
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;
  std::chrono::steady_clock::time_point when;
  Capture* capture = nullptr;  // recorded in a capture: the nodes it stands for (as `capture`)
  std::vector<size_t> captured;
};

namespace fake {

using Clock = std::chrono::steady_clock;

/// Streams, events, libraries, graphs and cuBLAS handles not yet destroyed.
extern std::atomic<long> g_live;
/// The calling thread's device (cudaSetDevice). Static TLS: see fake_cudart.cpp.
extern __attribute__((tls_model("initial-exec"))) thread_local int t_device;

/// Makes `e` the thread's last error (cudaGetLastError) unless it is cudaSuccess; returns it.
cudaError_t fail(cudaError_t e);
/// The error that broke the context for good (cudaSuccess while it is healthy).
cudaError_t sticky();
/// Runs `op` on stream `s` after its earlier work (on the legacy stream: now, in the caller); a
/// capturing stream records it instead.
void enqueue(cudaStream_t s, std::function<void()> op);

// ---- stream capture (fake_graphs.cpp) ---------------------------------------------------------

/// Records `op` as a node of the capture `s` belongs to and returns true; false when `s` does not
/// capture (`op` is left to run).
bool captured(CUstream_st* s, std::function<void()>& op);
/// A call the capture on this thread forbids (global or thread-local mode): invalidates the capture
/// and returns true, and the call fails as CUDA fails it.
bool forbidden_in_capture();
/// Synchronizing a capturing stream: invalidates its capture and returns true (the call fails).
bool capturing_refuses_sync(CUstream_st* s);
/// Synchronizing an event recorded in a capture: invalidates the capture and returns true.
bool captured_refuses_sync(CUevent_st* e);
/// Records `e` on `s` as far as captures go; true when `s` captures: the event then stands for
/// what the stream captured so far, with no node of its own, and nothing is enqueued.
bool record_in_capture(CUevent_st* e, CUstream_st* s);
/// A wait of `s` for `e` where either is in a capture (a fork into it, a join, or an isolation
/// error): true, with the call's result in `result`; false for an ordinary wait.
bool wait_in_capture(CUstream_st* s, CUevent_st* e, cudaError_t& result);

}  // namespace fake
