// The CPU backend plugin: one device whose slots are oneTBB worker threads. The built-in BLAS and
// LAPACK kernels (gemm, syrk, trsm, potrf, getrf_nopiv; f32 and f64) run through hcr_host_blas on
// hcr's own single-threaded OpenBLAS (parallelism comes from running tiles side by side; the
// application's OpenBLAS and its thread count are never touched); user kernels arrive as host
// functions. Idle TBB workers sleep.
#include "host_blas.hpp"
#include "rapl_meter.hpp"

#include <hcr/sdk/backend.hpp>

#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

// ThreadSanitizer (HCR_SANITIZE=thread) does not see the synchronisation inside libtbb, which is
// not built with it: without being told, it takes every task the arena runs for a data race with
// the launch() that handed it over, and the end of synchronize() for a race with the wait it ran
// in the arena. One sync point stands for the arena's queue, as one lock around it would (a lambda
// cannot name its own closure before reading it): a hand-over releases it, the receiving side
// acquires it before it reads anything. Races anywhere else are reported as ever. (What TBB does
// within itself is left to tests/sanitizers/tsan.supp.)
#if defined(__SANITIZE_THREAD__)
#define HCR_CPU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HCR_CPU_TSAN 1
#endif
#endif
#ifdef HCR_CPU_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
namespace {
char tsan_handover;
}
#define HCR_CPU_HANDOVER_RELEASE() __tsan_release(&tsan_handover)
#define HCR_CPU_HANDOVER_ACQUIRE() __tsan_acquire(&tsan_handover)
#else
#define HCR_CPU_HANDOVER_RELEASE() ((void)0)
#define HCR_CPU_HANDOVER_ACQUIRE() ((void)0)
#endif

namespace hcr::cpu {
namespace {

using sdk::Error;

// A built-in kernel (`builtin` set) or a host function.
struct CpuKernel {
  std::optional<host_blas::Builtin> builtin;
  hcr_kernel_fn fn = nullptr;
  void* user_data = nullptr;
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) {
        std::string v = line.substr(pos + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        if (!v.empty()) return v;
      }
    }
  return "cpu";
}

// How many BLAS threads one launch of a built-in kernel uses: the one place that decides it. Each
// call of hcr's OpenBLAS is single-threaded; a big tile is cut into blocks instead
// (host_blas::run_split), which the workers with nothing else to run take up (see run()).
int blas_threads(const hcr_launch_args_t&) { return 1; }

class CpuBackend final : public sdk::Backend {
 public:
  explicit CpuBackend(const sdk::CreateContext& ctx) : Backend(ctx) {
    long long threads = ctx.options.get_int("threads", 0);
    parallel_tasks_ = ctx.options.get_bool("parallel_tasks", false);
    const std::string powercap = ctx.options.get("powercap", "/sys/class/powercap");
    ctx.options.check_all_used();
    if (!powercap.empty() && powercap != "off") {
      rapl_.emplace(powercap);
      if (rapl_->empty()) rapl_.reset();
    }
    if (threads < 0 || threads > 4096)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "option 'threads' = " + std::to_string(threads) +
                                                  ": must be 0 (all cores) or 1 to 4096");
    threads_ = threads == 0 ? static_cast<int>(tbb::info::default_concurrency())
                            : static_cast<int>(threads);
    // TBB's pool holds one thread fewer than allowed (the caller is expected to join in); our
    // arena is fed by enqueue only, so allow one more so that `threads` workers exist.
    parallelism_ = std::make_unique<tbb::global_control>(
        tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads_) + 1);
    arena_.initialize(threads_, 0);
    model_ = cpu_model();
    host().info("cpu: " + std::to_string(threads_) + " worker(s) on " + model_ +
                (rapl_ ? ", energy from " + std::to_string(rapl_->domains()) + " RAPL package(s)"
                       : ", no readable RAPL counter"));
  }

  // The library may be unloaded right after this, and libtbb with it when we were its only user:
  // TBB's worker threads must be gone by then, so the pool is finalized (joined), not left asleep.
  ~CpuBackend() noexcept override {
    try {
      synchronize(0);
    } catch (...) {  // nothing sensible to do while unloading
    }
    arena_.terminate();
    if (!tbb::finalize(scheduler_, std::nothrow))
      host().debug("cpu: TBB workers stay: another part of the process uses TBB");
    parallelism_.reset();
  }

  size_t device_count() override { return 1; }

  void device_info(size_t, sdk::DeviceInfo& info) override {
    info.name = model_ + " (" + std::to_string(threads_) + " threads)";
    info.arch = model_;
    info.kind = HCR_DEVICE_CPU;
    info.flags = HCR_DEVICE_HOST_MEMORY;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    info.memory_bytes = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : 0;
    info.compute_units = static_cast<uint32_t>(threads_);
    info.concurrency = static_cast<uint32_t>(threads_);
  }

  hcr_kernel_t* kernel_get(size_t, const hcr_kernel_desc_t& desc) override {
    std::string name = desc.name;
    switch (desc.kind) {
      case HCR_IMPL_BUILTIN:
        if (auto b = host_blas::find(name)) return wrap(new CpuKernel{*b});
        throw Error(HCR_ERROR_NOT_FOUND, "no built-in kernel '" + name + "'");
      case HCR_IMPL_HOST_FUNCTION:
        if (desc.fn == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, "host function '" + name + "' is NULL");
        return wrap(new CpuKernel{std::nullopt, desc.fn, desc.user_data});
      default:
        throw Error(HCR_ERROR_UNSUPPORTED, "runs host functions and its built-ins, not " +
                                               std::string(desc.api ? desc.api : "?") + " code");
    }
  }

  void kernel_release(hcr_kernel_t* k) noexcept override { delete unwrap(k); }

  void launch(const hcr_launch_args_t& args) override {
    if (args.kernel == nullptr) throw Error(HCR_ERROR_INVALID_ARGUMENT, "launch without a kernel");
    tbb::task_handle task = group_.defer([this, args] {
      HCR_CPU_HANDOVER_ACQUIRE();
      run(args);
    });
    HCR_CPU_HANDOVER_RELEASE();
    arena_.enqueue(std::move(task));
  }

  // RAPL, where the powercap counters can be read (measured: the whole package's draw).
  bool device_energy(size_t, hcr_energy_reading_t& r) override {
    if (!rapl_) return false;
    const RaplMeter::Reading now = rapl_->read();
    r.source = HCR_ENERGY_MEASURED;
    r.joules = now.joules;
    r.watts = now.watts;
    r.resolution = 0.001;  // RAPL updates about every millisecond
    return true;
  }

  // The group counts each task until its function has returned, so nothing of ours is touched
  // after this: safe to destroy the backend right after.
  void synchronize(size_t) override {
    auto wait = [this] {
      HCR_CPU_HANDOVER_ACQUIRE();
      group_.wait();
      HCR_CPU_HANDOVER_RELEASE();
    };
    HCR_CPU_HANDOVER_RELEASE();
    arena_.execute(wait);
    HCR_CPU_HANDOVER_ACQUIRE();
  }

 private:
  static hcr_kernel_t* wrap(CpuKernel* k) { return reinterpret_cast<hcr_kernel_t*>(k); }
  static CpuKernel* unwrap(hcr_kernel_t* k) { return reinterpret_cast<CpuKernel*>(k); }

  void run(const hcr_launch_args_t& a) noexcept {
    const CpuKernel& k = *unwrap(a.kernel);
    const bool measure = (a.flags & HCR_LAUNCH_MEASURE) != 0;
    std::chrono::steady_clock::time_point t0;
    if (measure) t0 = std::chrono::steady_clock::now();
    hcr_error_t* err = nullptr;
    if (k.builtin) {
      err = sdk::guard([&] {
        host_blas::Call call =
            host_blas::check(*k.builtin, a.args, a.num_args, a.params, a.params_size);
        if (parallel_tasks_ && threads_ > 1) host_blas::run_split(call, a.args, split_);
        else host_blas::run(call, a.args, blas_threads(a));
      });
    } else {
      int slot = tbb::this_task_arena::current_thread_index();
      hcr_exec_context_t ctx = sdk::exec_context(a, slot < 0 ? 0u : static_cast<uint32_t>(slot));
      err = sdk::run_host_function(k.fn, k.user_data, ctx);
    }
    double seconds = -1;
    if (measure)
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sdk::complete(a.done, a.done_user_data, err, seconds);
  }

  tbb::task_scheduler_handle scheduler_{tbb::attach{}};  // first in, last out
  int threads_ = 1;
  // Parallel tasks: a built-in's blocks go to the arena as a parallel_for, which a worker with no
  // launch of its own to run steals from (launches are enqueued, and a worker takes those first),
  // so a big tile runs on as many workers as are idle, from one to all. Isolated: while it waits
  // for its blocks, the launching worker runs only those, never another launch in the middle.
  bool parallel_tasks_ = false;
  std::optional<cpu::RaplMeter> rapl_;  // option powercap ("off": none)
  // The blocks are handed over too (to the workers that steal them, and their results back): the
  // same sync point, released before and acquired in each block, released after each block and
  // acquired once they are all done.
  host_blas::Split split_{[](size_t n, const std::function<void(size_t)>& body) {
    HCR_CPU_HANDOVER_RELEASE();
    tbb::this_task_arena::isolate([&] {
      tbb::parallel_for(
          size_t{0}, n,
          [&](size_t i) {
            HCR_CPU_HANDOVER_ACQUIRE();
            body(i);
            HCR_CPU_HANDOVER_RELEASE();
          },
          tbb::simple_partitioner());
    });
    HCR_CPU_HANDOVER_ACQUIRE();
  }};
  std::string model_;
  std::unique_ptr<tbb::global_control> parallelism_;
  tbb::task_arena arena_;
  tbb::task_group group_;  // destroyed before the arena
};

}  // namespace
}  // namespace hcr::cpu

HCR_SDK_PLUGIN(hcr::cpu::CpuBackend, "cpu", "0.1.0")
