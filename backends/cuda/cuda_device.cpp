// Per-GPU machinery of the CUDA backend: lanes (a stream plus the thread reporting its
// completions), the pinned staging pipeline for pageable copies, event pools and the count of
// operations in flight that synchronize() waits on.
#include "cuda_device.hpp"

#include "cuda_libs.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <optional>

namespace hcr::cuda {

// ---- DeviceGuard -------------------------------------------------------------------------------

DeviceGuard::DeviceGuard(int ordinal) {
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess) {
    (void)cudaGetLastError();
    cur = -1;
  }
  if (cur != ordinal) {
    HCR_CUDA_CHECK(cudaSetDevice(ordinal));
    prev_ = cur;
  }
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0 && primary_context_active(prev_) && cudaSetDevice(prev_) != cudaSuccess)
    (void)cudaGetLastError();
}

// ---- device properties -------------------------------------------------------------------------

namespace {

// FP32 lanes per multiprocessor, from NVIDIA's CUDA C++ Programming Guide (arithmetic
// instructions throughput table). Unknown future architectures: assume 128, as on every one since
// sm_86.
int fp32_cores_per_sm(int major, int minor) {
  if (major >= 9) return 128;
  if (major == 8) return minor == 0 ? 64 : 128;
  if (major == 7) return 64;
  if (major == 6) return minor == 0 ? 64 : 128;
  return 128;
}

constexpr size_t kStagingChunk = size_t{8} << 20;   // per buffer; two per direction per device
constexpr size_t kMinCopyPart = size_t{256} << 10;  // smaller host copies are not worth splitting

// Threads sharing one stager's host copies by default (the stager's own included): about a
// quarter of the cores, at most 4 — enough for a PCIe 5 x16 link without crowding the application.
size_t default_copy_threads() {
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  return std::clamp<size_t>(hw / 4, 1, 4);
}

}  // namespace

GpuInfo query_gpu(int ordinal) {
  cudaDeviceProp p{};
  HCR_CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal));
  GpuInfo g;
  g.ordinal = ordinal;
  g.name = p.name;
  g.cc_major = p.major;
  g.cc_minor = p.minor;
  g.memory_bytes = p.totalGlobalMem;
  g.multiprocessors = static_cast<uint32_t>(std::max(p.multiProcessorCount, 1));
  g.max_threads_per_block = static_cast<uint32_t>(std::max(p.maxThreadsPerBlock, 1));
  for (int i = 0; i < 3; ++i)
    if (p.maxGridSize[i] > 0) g.max_grid[i] = static_cast<uint32_t>(p.maxGridSize[i]);
  g.arch = "sm_" + std::to_string(p.major) + std::to_string(p.minor) + " " + g.name;
  // cudaDeviceProp::clockRate is gone in CUDA 13; the attribute remains (kHz, the boost clock).
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    khz = 0;
  }
  g.peak_gflops = 2.0 * g.multiprocessors * fp32_cores_per_sm(p.major, p.minor) * khz * 1e-6;
  return g;
}

// ---- Lane --------------------------------------------------------------------------------------

Lane::Lane(Gpu& gpu, uint32_t index) : gpu_(gpu), index_(index) {
  // Non-blocking: work here never waits for, nor holds up, the legacy default stream that
  // application code may use.
  HCR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    cudaStreamDestroy(stream_);
    throw;
  }
}

Lane::~Lane() {
  stop();
  // Nothing of ours is in flight any more (the device waited for every operation): the scratch
  // memory is free to go.
  if (solver_ != nullptr && cusolver().ok) cusolver().destroy(solver_);
  if (blas_ != nullptr && cublas().ok) cublas().destroy(blas_);
  gpu_.release(scratch_);
  gpu_.release(device_info_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

cublasHandle_t Lane::blas() {
  if (blas_ == nullptr) {
    const CublasLib& lib = cublas();
    cublasHandle_t h = nullptr;
    HCR_CUBLAS_CHECK(lib.create(&h));
    if (cublasStatus_t s = lib.set_stream(h, stream_); s != CUBLAS_STATUS_SUCCESS) {
      lib.destroy(h);
      throw_cublas(s, "cublasSetStream");
    }
    blas_ = h;
  }
  return blas_;
}

cusolverDnHandle_t Lane::solver() {
  if (solver_ == nullptr) {
    const CusolverLib& lib = cusolver();
    cusolverDnHandle_t h = nullptr;
    HCR_CUSOLVER_CHECK(lib.create(&h));
    if (cusolverStatus_t s = lib.set_stream(h, stream_); s != CUSOLVER_STATUS_SUCCESS) {
      lib.destroy(h);
      throw_cusolver(s, "cusolverDnSetStream");
    }
    solver_ = h;
  }
  return solver_;
}

void* Lane::scratch(size_t bytes) {
  if (bytes <= scratch_bytes_ && scratch_ != nullptr) return scratch_;
  // At least double: a run of growing tiles reallocates a few times, not once per tile.
  const size_t want = std::max({bytes, 2 * scratch_bytes_, size_t{4096}});
  void* p = gpu_.allocate(want);
  if (scratch_ != nullptr) gpu_.release_after(scratch_, stream_);  // earlier work may still use it
  scratch_ = p;
  scratch_bytes_ = want;
  return scratch_;
}

int* Lane::device_info() {
  if (device_info_ == nullptr) device_info_ = static_cast<int*>(gpu_.allocate(sizeof(int)));
  return device_info_;
}

void Lane::push(Pending p) {
  load_.fetch_add(1, std::memory_order_relaxed);  // before the thread can take it and count down
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(p));
  }
  cv_.notify_one();
}

void Lane::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Lane::run() noexcept {
  if (cudaSetDevice(gpu_.ordinal()) != cudaSuccess) (void)cudaGetLastError();
  for (;;) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      p = std::move(queue_.front());
      queue_.pop_front();
    }
    cudaError_t e = cudaEventSynchronize(p.end);
    load_.fetch_sub(1, std::memory_order_relaxed);
    gpu_.complete(p, e);
  }
}

// ---- Stager ------------------------------------------------------------------------------------

Stager::Stager(Gpu& gpu, Lane& lane, bool to_device, size_t chunk_bytes, size_t threads)
    : gpu_(gpu), lane_(lane), to_device_(to_device), chunk_(chunk_bytes) {
  DeviceGuard guard(gpu.ordinal());
  try {
    for (int b = 0; b < 2; ++b) {
      HCR_CUDA_CHECK(cudaHostAlloc(&buf_[b], chunk_, cudaHostAllocPortable));
      HCR_CUDA_CHECK(
          cudaEventCreateWithFlags(&ev_[b], cudaEventBlockingSync | cudaEventDisableTiming));
    }
    for (size_t i = 1; i < threads; ++i) helpers_.emplace_back([this] { helper(); });
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    stop();
    for (int b = 0; b < 2; ++b) {
      if (buf_[b] != nullptr) cudaFreeHost(buf_[b]);
      if (ev_[b] != nullptr) cudaEventDestroy(ev_[b]);
    }
    throw;
  }
}

Stager::~Stager() {
  stop();
  for (int b = 0; b < 2; ++b) {
    if (buf_[b] != nullptr) cudaFreeHost(buf_[b]);
    if (ev_[b] != nullptr) cudaEventDestroy(ev_[b]);
  }
}

void Stager::submit(StagedCopy job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(job);
  }
  cv_.notify_one();
}

void Stager::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    pool_stop_ = true;
  }
  pool_cv_.notify_all();
  for (auto& t : helpers_)
    if (t.joinable()) t.join();
  helpers_.clear();
}

void Stager::helper() noexcept {
  uint64_t seen = 0;
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(pool_mutex_);
      pool_cv_.wait(lock, [&] { return pool_stop_ || generation_ != seen; });
      if (pool_stop_) return;
      seen = generation_;
      job = job_;
    }
    if (!job) continue;
    // A job that is already finished has no parts left: a late helper takes none.
    size_t mine = 0;
    for (size_t i; (i = job->next.fetch_add(1)) < job->parts; ++mine) job->fn(i);
    if (mine == 0) continue;
    std::lock_guard<std::mutex> lock(pool_mutex_);
    job->finished += mine;
    if (job->finished == job->parts) done_cv_.notify_all();
  }
}

void Stager::parallel(size_t parts, std::function<void(size_t)> fn) {
  if (helpers_.empty() || parts <= 1) {
    for (size_t i = 0; i < parts; ++i) fn(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = std::move(fn);
  job->parts = parts;
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    job_ = job;
    ++generation_;
  }
  pool_cv_.notify_all();
  size_t mine = 0;
  for (size_t i; (i = job->next.fetch_add(1)) < parts; ++mine) job->fn(i);
  std::unique_lock<std::mutex> lock(pool_mutex_);
  job->finished += mine;
  done_cv_.wait(lock, [&] { return job->finished == parts; });
  job_.reset();
}

void Stager::host_copy(const StagedCopy& c, const Piece& p, char* buf, bool into_buffer) {
  // Between the user's rows (pitch host_pitch, from column p.col) and the packed buffer (pitch
  // p.width). Split by rows, or by bytes when the piece is a single row.
  const uint64_t bytes = p.rows * p.width;
  const size_t parts =
      std::min<size_t>(helpers_.size() + 1, std::max<uint64_t>(1, bytes / kMinCopyPart));
  auto rows = [&, into_buffer](uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1) {
    for (uint64_t r = r0; r < r1; ++r) {
      char* packed = buf + r * p.width + b0;
      char* user = c.host + (p.row + r) * c.host_pitch + p.col + b0;
      if (into_buffer) std::memcpy(packed, user, b1 - b0);
      else std::memcpy(user, packed, b1 - b0);
    }
  };
  if (parts <= 1) {
    rows(0, p.rows, 0, p.width);
  } else if (p.rows >= parts) {
    parallel(parts,
             [&](size_t i) { rows(p.rows * i / parts, p.rows * (i + 1) / parts, 0, p.width); });
  } else {
    parallel(parts,
             [&](size_t i) { rows(0, p.rows, p.width * i / parts, p.width * (i + 1) / parts); });
  }
}

std::vector<Stager::Piece> Stager::pieces(const StagedCopy& c) const {
  std::vector<Piece> out;
  if (c.width == 0 || c.rows == 0) return out;
  if (c.width <= chunk_) {
    const uint64_t per = chunk_ / c.width;  // whole rows per chunk
    for (uint64_t r = 0; r < c.rows; r += per)
      out.push_back({r, 0, std::min(per, c.rows - r), c.width});
  } else {  // rows wider than a chunk: each row in chunk-sized pieces
    for (uint64_t r = 0; r < c.rows; ++r)
      for (uint64_t col = 0; col < c.width; col += chunk_)
        out.push_back({r, col, 1, std::min<uint64_t>(chunk_, c.width - col)});
  }
  return out;
}

namespace {

// A 2-D copy, as a 1-D one when both sides are contiguous (cheaper for the copy engine).
cudaError_t copy_rect(void* dst, uint64_t dpitch, const void* src, uint64_t spitch, uint64_t width,
                      uint64_t rows, cudaStream_t stream) {
  if (rows <= 1 || (dpitch == width && spitch == width))
    return cudaMemcpyAsync(dst, src, width * rows, cudaMemcpyDefault, stream);
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDefault, stream);
}

}  // namespace

cudaError_t Stager::enqueue_dma(const StagedCopy& c, const Piece& p, int b) {
  std::lock_guard<std::mutex> lock(lane_.enqueue_mutex());
  char* dev = c.device + p.row * c.device_pitch + p.col;
  cudaError_t e =
      to_device_
          ? copy_rect(dev, c.device_pitch, buf_[b], p.width, p.width, p.rows, lane_.stream())
          : copy_rect(buf_[b], p.width, dev, c.device_pitch, p.width, p.rows, lane_.stream());
  if (e != cudaSuccess) return e;
  e = cudaEventRecord(ev_[b], lane_.stream());
  if (e == cudaSuccess) busy_[b] = true;
  return e;
}

cudaError_t Stager::to_device(const StagedCopy& c, bool& queued_done) {
  const std::vector<Piece> ps = pieces(c);
  for (size_t i = 0; i < ps.size(); ++i) {
    const Piece& p = ps[i];
    const int b = static_cast<int>(i & 1);
    if (busy_[b]) {  // the DMA that last read this buffer must be done before we overwrite it
      busy_[b] = false;
      if (cudaError_t e = cudaEventSynchronize(ev_[b]); e != cudaSuccess) return e;
    }
    host_copy(c, p, static_cast<char*>(buf_[b]), true);
    if (cudaError_t e = enqueue_dma(c, p, b); e != cudaSuccess) return e;
  }
  // The source is consumed; the copy is done when the lane's stream passes its last DMA.
  Pending pd;
  pd.end = gpu_.take_event(false);
  pd.done = c.done;
  pd.user = c.user;
  std::lock_guard<std::mutex> lock(lane_.enqueue_mutex());
  cudaError_t e = cudaEventRecord(pd.end, lane_.stream());
  if (e != cudaSuccess) {
    gpu_.give_event(pd.end, false);
    return e;
  }
  lane_.push(std::move(pd));
  queued_done = true;
  return cudaSuccess;
}

cudaError_t Stager::to_host(const StagedCopy& c) {
  const std::vector<Piece> ps = pieces(c);
  for (size_t i = 0; i < std::min<size_t>(2, ps.size()); ++i)
    if (cudaError_t e = enqueue_dma(c, ps[i], static_cast<int>(i)); e != cudaSuccess) return e;
  for (size_t i = 0; i < ps.size(); ++i) {
    const Piece& p = ps[i];
    const int b = static_cast<int>(i & 1);
    busy_[b] = false;
    if (cudaError_t e = cudaEventSynchronize(ev_[b]); e != cudaSuccess) return e;
    host_copy(c, p, static_cast<char*>(buf_[b]), false);
    if (i + 2 < ps.size())
      if (cudaError_t e = enqueue_dma(c, ps[i + 2], b); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

void Stager::drain() noexcept {
  for (int b = 0; b < 2; ++b)
    if (busy_[b]) {
      busy_[b] = false;
      if (cudaEventSynchronize(ev_[b]) != cudaSuccess) (void)cudaGetLastError();
    }
}

void Stager::run() noexcept {
  if (cudaSetDevice(gpu_.ordinal()) != cudaSuccess) (void)cudaGetLastError();
  for (;;) {
    StagedCopy job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = queue_.front();
      queue_.pop_front();
    }
    bool queued_done = false;
    hcr_error_t* err = sdk::guard([&] {
      cudaError_t e = to_device_ ? to_device(job, queued_done) : to_host(job);
      if (e != cudaSuccess) {
        if (is_sticky(e)) gpu_.mark_lost(error_text(e));
        throw_cuda(e, to_device_ ? "staged copy to the device" : "staged copy to the host");
      }
    });
    if (queued_done) continue;  // the lane reports it
    // Failed, or a copy to the host that is complete: nothing of ours touches its memory any more
    // once in-flight DMAs (after a failure) are waited for.
    if (err != nullptr) drain();
    gpu_.complete_now(job.done, job.user, err);
  }
}

// ---- Gpu ---------------------------------------------------------------------------------------

Gpu::Gpu(GpuInfo info, size_t index, uint32_t compute_streams, uint32_t copy_threads,
         const sdk::Host& host)
    : info_(std::move(info)),
      index_(index),
      compute_streams_(compute_streams),
      copy_threads_(copy_threads == 0 ? static_cast<uint32_t>(default_copy_threads())
                                      : copy_threads),
      host_(host) {}

Gpu::~Gpu() {
  if (!started()) return;
  wait_idle();
  // Tear down with the device current (cublasDestroy synchronizes the current device), then give
  // the calling thread its device back.
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  if (cudaSetDevice(info_.ordinal) != cudaSuccess) (void)cudaGetLastError();
  stage_in_.reset();
  stage_out_.reset();
  compute_.clear();
  h2d_.reset();
  d2h_.reset();
  d2d_.reset();
  if (alloc_stream_ != nullptr) {
    cudaStreamSynchronize(alloc_stream_);
    cudaStreamDestroy(alloc_stream_);
  }
  for (auto& pool : events_) {
    for (cudaEvent_t e : pool) cudaEventDestroy(e);
    pool.clear();
  }
  for (void* b : info_blocks_) cudaFreeHost(b);
  info_blocks_.clear();
  info_free_.clear();
  if (prev >= 0 && prev != info_.ordinal && primary_context_active(prev)) cudaSetDevice(prev);
  (void)cudaGetLastError();
}

void Gpu::check_not_lost() const {
  if (lost_.load(std::memory_order_acquire))
    throw sdk::Error(HCR_ERROR_DEVICE_LOST, "device " + std::to_string(index_) + " (" + info_.name +
                                                ") failed earlier: " + lost_reason_);
}

void Gpu::mark_lost(const std::string& why) noexcept {
  std::lock_guard<std::mutex> lock(start_mutex_);
  if (lost_.load(std::memory_order_relaxed)) return;
  try {
    lost_reason_ = why;
  } catch (...) {
  }
  lost_.store(true, std::memory_order_release);
  host_.warn("device " + std::to_string(index_) + " (" + info_.name +
             ") is unusable for the rest of this process: " + why);
}

void Gpu::ensure_started() {
  if (!started_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(start_mutex_);
    if (!started_.load(std::memory_order_relaxed)) start();
  }
  check_not_lost();
}

void Gpu::start() {
  DeviceGuard guard(info_.ordinal);
  HCR_CUDA_CHECK(cudaFree(nullptr));  // creates the primary context now: its failure is clear here
  // Built aside and moved in at the end: a failure half-way leaves nothing running.
  std::vector<std::unique_ptr<Lane>> compute;
  for (uint32_t i = 0; i < compute_streams_; ++i)
    compute.push_back(std::make_unique<Lane>(*this, i));
  auto h2d = std::make_unique<Lane>(*this, compute_streams_);
  auto d2h = std::make_unique<Lane>(*this, compute_streams_ + 1);
  auto d2d = std::make_unique<Lane>(*this, compute_streams_ + 2);
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, info_.ordinal) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    pools = 0;
  }
  cudaStream_t alloc_stream = nullptr;
  if (pools) HCR_CUDA_CHECK(cudaStreamCreateWithFlags(&alloc_stream, cudaStreamNonBlocking));
  alloc_stream_ = alloc_stream;
  pools_ = pools != 0;
  compute_ = std::move(compute);
  h2d_ = std::move(h2d);
  d2h_ = std::move(d2h);
  d2d_ = std::move(d2d);
  started_.store(true, std::memory_order_release);
  host_.debug("device " + std::to_string(index_) + " (" + info_.name + ", CUDA device " +
              std::to_string(info_.ordinal) + ") started with " + std::to_string(compute_streams_) +
              " compute stream(s)");
}

Lane& Gpu::compute_lane() noexcept {
  const size_t n = compute_.size();
  const size_t first = round_robin_.fetch_add(1, std::memory_order_relaxed) % n;
  Lane* best = compute_[first].get();
  for (size_t i = 1; i < n; ++i) {
    Lane* l = compute_[(first + i) % n].get();
    if (l->load() < best->load()) best = l;
  }
  return *best;
}

Stager& Gpu::stager(bool to_device) {
  std::lock_guard<std::mutex> lock(stager_mutex_);
  auto& s = to_device ? stage_in_ : stage_out_;
  if (!s)
    s = std::make_unique<Stager>(*this, to_device ? *h2d_ : *d2h_, to_device, kStagingChunk,
                                 copy_threads_);
  return *s;
}

cudaEvent_t Gpu::take_event(bool timing) {
  {
    std::lock_guard<std::mutex> lock(event_mutex_);
    auto& pool = events_[timing ? 1 : 0];
    if (!pool.empty()) {
      cudaEvent_t e = pool.back();
      pool.pop_back();
      return e;
    }
  }
  DeviceGuard guard(info_.ordinal);
  cudaEvent_t e = nullptr;
  // Blocking sync: the waiting lane thread sleeps in the driver instead of spinning on a core.
  HCR_CUDA_CHECK(cudaEventCreateWithFlags(
      &e, timing ? cudaEventBlockingSync : cudaEventBlockingSync | cudaEventDisableTiming));
  return e;
}

void Gpu::give_event(cudaEvent_t e, bool timing) noexcept {
  if (e == nullptr) return;
  if (!lost_.load(std::memory_order_relaxed)) {
    try {
      std::lock_guard<std::mutex> lock(event_mutex_);
      events_[timing ? 1 : 0].push_back(e);
      return;
    } catch (...) {
    }
  }
  cudaEventDestroy(e);
}

void* Gpu::allocate(uint64_t bytes) {
  DeviceGuard guard(info_.ordinal);
  void* p = nullptr;
  cudaError_t e = pools_ ? cudaMallocAsync(&p, bytes, alloc_stream_) : cudaMalloc(&p, bytes);
  // The allocation is complete, and usable from every stream, once its stream has passed it.
  if (e == cudaSuccess && pools_) e = cudaStreamSynchronize(alloc_stream_);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw sdk::Error(HCR_ERROR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(bytes) +
                                                  " bytes on device " + std::to_string(index_) +
                                                  " (" + info_.name + "): out of memory");
  }
  if (e != cudaSuccess) throw_cuda(e, pools_ ? "cudaMallocAsync" : "cudaMalloc");
  return p;
}

void Gpu::release(void* p) noexcept {
  if (p == nullptr) return;
  try {
    DeviceGuard guard(info_.ordinal);
    if ((pools_ ? cudaFreeAsync(p, alloc_stream_) : cudaFree(p)) != cudaSuccess)
      (void)cudaGetLastError();
  } catch (...) {  // the device is gone, and its memory with it
  }
}

void Gpu::release_after(void* p, cudaStream_t stream) noexcept {
  if (p == nullptr) return;
  try {
    DeviceGuard guard(info_.ordinal);
    if ((pools_ ? cudaFreeAsync(p, stream) : cudaFree(p)) != cudaSuccess) (void)cudaGetLastError();
  } catch (...) {
  }
}

int* Gpu::take_info() {
  std::lock_guard<std::mutex> lock(event_mutex_);
  if (info_free_.empty()) {
    // A page of slots at a time: pinning is a system call, and factorizations come by the hundred.
    constexpr size_t kSlots = 1024;
    // Room for every slot there will be, so that give_info never allocates.
    info_blocks_.reserve(info_blocks_.size() + 1);
    info_free_.reserve(info_free_.size() + kSlots);
    DeviceGuard guard(info_.ordinal);
    void* block = nullptr;
    HCR_CUDA_CHECK(cudaHostAlloc(&block, kSlots * sizeof(int), cudaHostAllocPortable));
    info_blocks_.push_back(block);
    for (size_t i = 0; i < kSlots; ++i) info_free_.push_back(static_cast<int*>(block) + i);
  }
  int* slot = info_free_.back();
  info_free_.pop_back();
  *slot = 0;
  return slot;
}

void Gpu::give_info(int* slot) noexcept {
  if (slot == nullptr) return;
  std::lock_guard<std::mutex> lock(event_mutex_);
  info_free_.push_back(slot);  // never reallocates: reserved for every slot of every block
}

void Gpu::end_op() noexcept {
  // Under the mutex: a waiter that sees zero may destroy this object right after.
  std::lock_guard<std::mutex> lock(idle_mutex_);
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) idle_cv_.notify_all();
}

void Gpu::wait_idle() noexcept {
  std::unique_lock<std::mutex> lock(idle_mutex_);
  idle_cv_.wait(lock, [&] { return outstanding_.load(std::memory_order_acquire) == 0; });
}

void Gpu::run_on(Lane& lane, hcr_done_fn done, void* user, bool measure,
                 const std::function<hcr_error_t*(Lane&)>& enqueue,
                 std::shared_ptr<const void> keep, InfoCheck info) {
  Pending p;
  p.done = done;
  p.user = user;
  p.timing = measure;
  p.keep = std::move(keep);
  p.info = std::move(info);
  std::optional<DeviceGuard> guard;
  try {
    guard.emplace(info_.ordinal);
    p.end = take_event(measure);
    if (measure) p.start = take_event(true);
  } catch (...) {
    give_event(p.end, measure);
    give_info(p.info.host);
    throw;
  }
  begin_op();
  std::unique_lock<std::mutex> lock(lane.enqueue_mutex());
  try {
    if (p.start != nullptr) HCR_CUDA_CHECK(cudaEventRecord(p.start, lane.stream()));
    p.error = enqueue(lane);
  } catch (...) {
    // Whatever enqueue put on the stream before it threw may still write the status slot: wait
    // for the stream before the slot can go to another operation.
    if (p.info.host != nullptr && cudaStreamSynchronize(lane.stream()) != cudaSuccess)
      (void)cudaGetLastError();
    lock.unlock();
    give_event(p.end, measure);
    give_event(p.start, true);
    give_info(p.info.host);
    end_op();
    throw;
  }
  cudaError_t e = cudaEventRecord(p.end, lane.stream());
  if (e != cudaSuccess) {
    // Work may already be on the stream and the host's memory with it: wait for the stream before
    // reporting, so the host frees nothing still in use.
    if (cudaStreamSynchronize(lane.stream()) != cudaSuccess) (void)cudaGetLastError();
    lock.unlock();
    complete(p, e);
    return;
  }
  lane.push(std::move(p));
}

void Gpu::complete(Pending& p, cudaError_t status) noexcept {
  double seconds = -1;
  if (status == cudaSuccess && p.start != nullptr) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, p.start, p.end) == cudaSuccess) seconds = ms * 1e-3;
    else (void)cudaGetLastError();
  }
  hcr_error_t* err = p.error;
  if (p.info.host != nullptr) {
    // The event has passed the copy of the status word: the slot holds it now.
    if (const int value = *p.info.host; status == cudaSuccess && err == nullptr && value != 0) {
      try {
        err = p.info.to_error(value);
      } catch (...) {
        err = sdk::make_error(HCR_ERROR_INTERNAL,
                              "a factorization failed with status " + std::to_string(value));
      }
    }
    give_info(p.info.host);
    p.info = {};
  }
  if (status != cudaSuccess) {
    if (is_sticky(status)) mark_lost(error_text(status));
    std::string msg;
    try {
      msg = "device " + std::to_string(index_) + " (" + info_.name + "): " + error_text(status);
      if (err != nullptr && err != sdk::out_of_memory_error())
        msg += "; the kernel also reported: " + err->message;
    } catch (...) {
    }
    if (err != nullptr && err != sdk::out_of_memory_error()) delete err;
    err = sdk::make_error(error_code(status), std::move(msg));
  }
  give_event(p.end, p.timing);
  give_event(p.start, true);
  p.end = p.start = nullptr;
  sdk::complete(p.done, p.user, err, seconds);
  p.keep.reset();
  end_op();
}

void Gpu::complete_now(hcr_done_fn done, void* user, hcr_error_t* error) noexcept {
  sdk::complete(done, user, error);
  end_op();
}

}  // namespace hcr::cuda
