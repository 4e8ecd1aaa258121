// One GPU of the CUDA backend: its streams ("lanes"), the threads that report completions, the
// staging pipeline for pageable host memory, and the bookkeeping synchronize() waits on.
//
// Completion: the ABI's done callback may launch more work into the plugin, and CUDA forbids CUDA
// calls inside stream callbacks (cudaLaunchHostFunc), so done is never called from one. Each lane
// has a thread that waits on the events recorded after each operation (blocking-sync events: the
// thread sleeps in the driver, it does not spin) and then calls done. One thread per lane rather
// than per device: events complete in stream order only within a stream, so a single waiter would
// hold a finished copy's done behind a long gemm on another stream.
#pragma once

#include "cuda_check.hpp"

#include <hcr/sdk/backend.hpp>

#include <cusolverDn.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hcr::cuda {

/// Makes `ordinal` the calling thread's device for the guard's life, then restores the thread's
/// previous device: host threads calling into the plugin (an application's own) keep theirs. A
/// previous device without a context is not restored: that would create a context on it.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

/// What the device reports; fixed at plugin creation.
struct GpuInfo {
  int ordinal = 0;   ///< CUDA device index
  std::string name;  ///< "NVIDIA H200"
  std::string arch;  ///< "sm_90 NVIDIA H200"
  int cc_major = 0, cc_minor = 0;
  uint64_t memory_bytes = 0;
  uint32_t multiprocessors = 0;
  uint32_t max_threads_per_block = 1024;
  uint32_t max_grid[3] = {0x7fffffff, 65535, 65535};
  double peak_gflops = 0;  ///< FP32 FMA peak, from SMs x cores per SM x clock
};

/// Reads device `ordinal`'s properties (no context is created).
GpuInfo query_gpu(int ordinal);

/// A status word a factorization leaves on the device (cuSOLVER's devInfo), copied on the stream
/// into a pinned host slot of its own and read once the operation's event has passed: a non-zero
/// value fails the operation. The slot is per operation, not per stream: the stream may run the
/// next factorization before the lane's thread gets to read this one's.
struct InfoCheck {
  int* host = nullptr;  ///< from Gpu::take_info; given back when the operation completes
  /// The operation's error for a non-zero status (ownership passes to the caller).
  std::function<hcr_error_t*(int)> to_error;
};

/// One asynchronous operation waiting for its event.
struct Pending {
  cudaEvent_t start = nullptr;  ///< timing event before the work (HCR_LAUNCH_MEASURE), or null
  cudaEvent_t end = nullptr;    ///< recorded after the work
  bool timing = false;          ///< `end` came from the timing pool
  hcr_done_fn done = nullptr;
  void* user = nullptr;
  hcr_error_t* error = nullptr;      ///< a failure found while enqueueing, reported at completion
  std::shared_ptr<const void> keep;  ///< what must live until done (a source kernel's module)
  InfoCheck info;                    ///< a factorization's status to read at completion
};

class Gpu;

/// A CUDA stream and the thread that reports, in stream order, the operations enqueued on it.
class Lane {
 public:
  Lane(Gpu& gpu, uint32_t index);
  ~Lane();
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  cudaStream_t stream() const noexcept { return stream_; }
  uint32_t index() const noexcept { return index_; }
  /// Held from enqueueing an operation's work to queueing its Pending, so that the queue's order
  /// is the order of the events on the stream. Also guards the library handles and the scratch
  /// memory below.
  std::mutex& enqueue_mutex() noexcept { return enqueue_mutex_; }
  /// Queues `p` (its `end` already recorded on this stream). Call with enqueue_mutex() held.
  void push(Pending p);
  /// Operations queued and not yet reported: picks the least busy compute lane.
  size_t load() const noexcept { return load_.load(std::memory_order_relaxed); }
  /// Stops the thread once its queue is empty and joins it.
  void stop() noexcept;

  // Library state of this stream, created on first use. One cuBLAS and one cuSOLVER handle per
  // stream, bound to it for good: their workspaces are then never shared between streams, which is
  // what both libraries ask for concurrent use. Call with enqueue_mutex() held.
  cublasHandle_t blas();
  cusolverDnHandle_t solver();
  /// Device memory of at least `bytes` for this stream's operations (cuSOLVER's workspace, a
  /// transposed tile): reused by each operation in stream order, grown when one needs more (the
  /// old block is freed in stream order too). Invalidated by the next call.
  void* scratch(size_t bytes);
  /// cuSOLVER's status word (devInfo) for this stream, in device memory.
  int* device_info();

 private:
  void run() noexcept;

  Gpu& gpu_;
  uint32_t index_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cusolverDnHandle_t solver_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  int* device_info_ = nullptr;
  std::mutex enqueue_mutex_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool stop_ = false;
  std::atomic<size_t> load_{0};
  std::thread thread_;
};

/// A copy between pageable host memory and device memory, through pinned staging buffers.
struct StagedCopy {
  char* host = nullptr;  ///< pageable side (source for H2D, destination for D2H)
  uint64_t host_pitch = 0;
  char* device = nullptr;  ///< device side (any address the GPU can DMA to or from)
  uint64_t device_pitch = 0;
  uint64_t width = 0, rows = 0;
  hcr_done_fn done = nullptr;
  void* user = nullptr;
};

/// Moves pageable data in chunks through two pinned buffers on its own thread: while the DMA
/// engine moves one chunk, the thread copies the next one on the host (double buffering). One
/// core's memcpy falls short of a PCIe 5 link, so a few helper threads share each chunk's host
/// copy. One per direction per device, created on first use; idle threads sleep.
class Stager {
 public:
  /// `threads`: how many threads share the host copies (this stager's own included).
  Stager(Gpu& gpu, Lane& lane, bool to_device, size_t chunk_bytes, size_t threads);
  ~Stager();
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;
  void submit(StagedCopy job);
  void stop() noexcept;

 private:
  struct Piece {
    uint64_t row, col, rows, width;
  };
  /// One host copy split over the stager's thread and its helpers.
  struct Job {
    std::function<void(size_t)> fn;
    size_t parts = 0;
    std::atomic<size_t> next{0};
    size_t finished = 0;  // guarded by pool_mutex_
  };
  void run() noexcept;
  void helper() noexcept;
  void parallel(size_t parts, std::function<void(size_t)> fn);
  void host_copy(const StagedCopy& c, const Piece& p, char* buf, bool into_buffer);
  std::vector<Piece> pieces(const StagedCopy& c) const;
  cudaError_t to_device(const StagedCopy& c, bool& queued_done);
  cudaError_t to_host(const StagedCopy& c);
  cudaError_t enqueue_dma(const StagedCopy& c, const Piece& p, int buf);
  void drain() noexcept;

  Gpu& gpu_;
  Lane& lane_;
  const bool to_device_;
  const size_t chunk_;
  void* buf_[2] = {nullptr, nullptr};
  cudaEvent_t ev_[2] = {nullptr, nullptr};
  bool busy_[2] = {false, false};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<StagedCopy> queue_;
  bool stop_ = false;
  std::thread thread_;

  std::mutex pool_mutex_;
  std::condition_variable pool_cv_, done_cv_;
  std::shared_ptr<Job> job_;  // the current job; helpers take a reference
  uint64_t generation_ = 0;
  bool pool_stop_ = false;
  std::vector<std::thread> helpers_;
};

/// One device. Created for every selected GPU; its context, streams and threads start on first use
/// (ensure_started), so listing devices creates no context.
class Gpu {
 public:
  /// `copy_threads`: threads per staging direction (0: about a quarter of the cores, at most 4).
  Gpu(GpuInfo info, size_t index, uint32_t compute_streams, uint32_t copy_threads,
      const sdk::Host& host);
  ~Gpu();  // waits for outstanding operations, then stops its threads and frees its resources
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  const GpuInfo& info() const noexcept { return info_; }
  int ordinal() const noexcept { return info_.ordinal; }
  /// Pointer handed to native functions as hcr_exec_context_t::native_device (an int: the ordinal).
  const int* ordinal_ptr() const noexcept { return &info_.ordinal; }
  size_t index() const noexcept { return index_; }
  const sdk::Host& host() const noexcept { return host_; }

  /// Creates the context, streams and completion threads on first call. Thread-safe; throws
  /// sdk::Error when the device cannot be used, and throws DEVICE_LOST once it has failed.
  void ensure_started();
  bool started() const noexcept { return started_.load(std::memory_order_acquire); }
  void mark_lost(const std::string& why) noexcept;

  Lane& compute_lane() noexcept;  ///< the compute lane with the fewest operations in flight
  Lane& h2d() noexcept { return *h2d_; }
  Lane& d2h() noexcept { return *d2h_; }
  Lane& d2d() noexcept { return *d2d_; }
  Stager& stager(bool to_device);

  cudaEvent_t take_event(bool timing);
  void give_event(cudaEvent_t e, bool timing) noexcept;

  /// Device memory from the device's stream-ordered pool (cudaMallocAsync), or cudaMalloc where
  /// pools are not supported. Throws OUT_OF_MEMORY naming the size.
  void* allocate(uint64_t bytes);
  /// Frees memory from allocate() without waiting for the device: cudaFree would synchronize the
  /// whole device, and the runtime frees (evicts) while other work runs. The caller guarantees
  /// that nothing uses the memory any more (every operation on it has reported done).
  void release(void* p) noexcept;
  /// Frees memory from allocate() once `stream` has passed the work enqueued on it so far: in
  /// stream order on a pool, else with cudaFree (which waits for the whole device).
  void release_after(void* p, cudaStream_t stream) noexcept;

  /// A pinned host int for InfoCheck, zeroed; give it back with give_info.
  int* take_info();
  void give_info(int* slot) noexcept;
  /// Whether allocate() uses the stream-ordered pool (whose memory peers reach only after
  /// cudaMemPoolSetAccess).
  bool pools() const noexcept { return pools_; }

  /// Counts an operation from acceptance to the return of its done; synchronize() waits for zero.
  void begin_op() noexcept { outstanding_.fetch_add(1, std::memory_order_acq_rel); }
  void end_op() noexcept;
  void wait_idle() noexcept;

  /// Runs one operation on `lane`: `enqueue(lane)` puts its work on the stream and returns NULL,
  /// or an error that is reported through done once the stream is past whatever it enqueued. If
  /// enqueue throws, nothing was enqueued: the exception propagates and done is never called.
  /// `info`: a status word that `enqueue` copies into info.host; run_on owns the slot from the
  /// call on (given back at completion, or at once if enqueue throws).
  void run_on(Lane& lane, hcr_done_fn done, void* user, bool measure,
              const std::function<hcr_error_t*(Lane&)>& enqueue,
              std::shared_ptr<const void> keep = nullptr, InfoCheck info = {});

  /// Reports a finished operation: times it, recycles its events, calls done, ends the op.
  void complete(Pending& p, cudaError_t status) noexcept;
  /// Reports an operation that needs no event (done on a host thread of ours).
  void complete_now(hcr_done_fn done, void* user, hcr_error_t* error) noexcept;

 private:
  void start();
  void check_not_lost() const;

  GpuInfo info_;
  size_t index_;
  uint32_t compute_streams_;
  uint32_t copy_threads_;
  const sdk::Host& host_;

  std::mutex start_mutex_;
  std::atomic<bool> started_{false};
  std::atomic<bool> lost_{false};
  std::string lost_reason_;  // written once, before lost_ is set

  std::vector<std::unique_ptr<Lane>> compute_;
  std::unique_ptr<Lane> h2d_, d2h_, d2d_;
  cudaStream_t alloc_stream_ = nullptr;  // orders cudaMallocAsync/cudaFreeAsync; nothing else
  bool pools_ = false;
  std::atomic<uint32_t> round_robin_{0};

  std::mutex stager_mutex_;
  std::unique_ptr<Stager> stage_in_, stage_out_;

  std::mutex event_mutex_;
  std::vector<cudaEvent_t> events_[2];  // [0] plain, [1] timing
  std::vector<int*> info_free_;         // pinned InfoCheck slots not in use (event_mutex_)
  std::vector<void*> info_blocks_;      // the pinned blocks they come from (event_mutex_)

  std::atomic<int64_t> outstanding_{0};
  std::mutex idle_mutex_;
  std::condition_variable idle_cv_;
};

}  // namespace hcr::cuda
