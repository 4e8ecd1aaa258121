// The CPU backend plugin: one device whose slots are oneTBB worker threads. Built-in gemm_f32 and
// gemm_f64 call single-threaded OpenBLAS (parallelism comes from running tiles side by side);
// user kernels arrive as host functions. Idle TBB workers sleep.
#include <hcr/sdk/backend.hpp>

#include <cblas.h>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
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

enum class KernelType { gemm_f32, gemm_f64, host };

struct CpuKernel {
  KernelType type;
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

std::string shape(const hcr_arg_t& a) {
  return std::to_string(a.rows) + "x" + std::to_string(a.cols);
}

template <class T>
void gemm(const hcr_launch_args_t& a) {
  if (a.num_args != 3)
    throw Error(HCR_ERROR_INVALID_ARGUMENT,
                "gemm takes 3 buffers (A, B, C), got " + std::to_string(a.num_args));
  const hcr_dtype_t want = sizeof(T) == 4 ? HCR_DTYPE_F32 : HCR_DTYPE_F64;
  for (size_t i = 0; i < 3; ++i) {
    const char* which = i == 0 ? "A" : i == 1 ? "B" : "C";
    if (a.args[i].dtype != want)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "gemm_" + sdk::dtype_name(want) + ": " + which + " is a " +
                      sdk::dtype_name(a.args[i].dtype) + " matrix, expected " +
                      sdk::dtype_name(want));
    if (a.args[i].host == nullptr)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, std::string("gemm_") + sdk::dtype_name(want) +
                                                  ": " + which + " is not in host memory");
  }
  const hcr_arg_t &A = a.args[0], &B = a.args[1], &C = a.args[2];
  const uint64_t m = A.rows, k = A.cols, n = B.cols;
  if (B.rows != k || C.rows != m || C.cols != n)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, "gemm shapes do not match: A is " + shape(A) +
                                                ", B is " + shape(B) + ", C is " + shape(C));
  hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
  if (a.params_size >= HCR_GEMM_PARAMS_STRUCT_SIZE && a.params != nullptr)
    p = sdk::read_struct(static_cast<const hcr_gemm_params_t*>(a.params));
  else if (a.params_size != 0)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, "gemm parameters: " + std::to_string(a.params_size) +
                                                " bytes, expected an hcr_gemm_params_t");
  if constexpr (sizeof(T) == 4)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), static_cast<float>(p.alpha),
                static_cast<const float*>(A.host), static_cast<blasint>(A.ld),
                static_cast<const float*>(B.host), static_cast<blasint>(B.ld),
                static_cast<float>(p.beta), static_cast<float*>(C.host),
                static_cast<blasint>(C.ld));
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), p.alpha,
                static_cast<const double*>(A.host), static_cast<blasint>(A.ld),
                static_cast<const double*>(B.host), static_cast<blasint>(B.ld), p.beta,
                static_cast<double*>(C.host), static_cast<blasint>(C.ld));
}

class CpuBackend final : public sdk::Backend {
 public:
  explicit CpuBackend(const sdk::CreateContext& ctx) : Backend(ctx) {
    long long threads = ctx.options.get_int("threads", 0);
    ctx.options.check_all_used();
    if (threads < 0 || threads > 4096)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "option 'threads' = " + std::to_string(threads) +
                      ": must be 0 (all cores) or 1 to 4096");
    threads_ = threads == 0 ? static_cast<int>(tbb::info::default_concurrency())
                            : static_cast<int>(threads);
    // TBB's pool holds one thread fewer than allowed (the caller is expected to join in); our
    // arena is fed by enqueue only, so allow one more so that `threads` workers exist.
    parallelism_ = std::make_unique<tbb::global_control>(
        tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads_) + 1);
    arena_.initialize(threads_, 0);
    // Each task calls BLAS on one tile: BLAS must not start threads of its own.
    openblas_set_num_threads(1);
    model_ = cpu_model();
    host().info("cpu: " + std::to_string(threads_) + " worker(s) on " + model_);
  }

  // The library may be unloaded right after this, and libtbb with it when we were its only user:
  // TBB's worker threads must be gone by then, so the pool is finalized (joined), not left asleep.
  ~CpuBackend() noexcept override {
    try {
      synchronize(0);
    } catch (...) {  // nothing sensible to do while unloading
    }
    arena_.terminate();
    parallelism_.reset();
    if (!tbb::finalize(scheduler_, std::nothrow))
      host().debug("cpu: TBB workers stay: another part of the process uses TBB");
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
        if (name == "gemm_f32") return wrap(new CpuKernel{KernelType::gemm_f32});
        if (name == "gemm_f64") return wrap(new CpuKernel{KernelType::gemm_f64});
        throw Error(HCR_ERROR_NOT_FOUND, "no built-in kernel '" + name + "'");
      case HCR_IMPL_HOST_FUNCTION:
        if (desc.fn == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, "host function '" + name + "' is NULL");
        return wrap(new CpuKernel{KernelType::host, desc.fn, desc.user_data});
      default:
        throw Error(HCR_ERROR_UNSUPPORTED,
                    "runs host functions and its built-ins, not " +
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
    switch (k.type) {
      case KernelType::gemm_f32: err = sdk::guard([&] { gemm<float>(a); }); break;
      case KernelType::gemm_f64: err = sdk::guard([&] { gemm<double>(a); }); break;
      case KernelType::host: {
        int slot = tbb::this_task_arena::current_thread_index();
        hcr_exec_context_t ctx = sdk::exec_context(a, slot < 0 ? 0u : static_cast<uint32_t>(slot));
        err = sdk::run_host_function(k.fn, k.user_data, ctx);
        break;
      }
    }
    double seconds = -1;
    if (measure)
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sdk::complete(a.done, a.done_user_data, err, seconds);
  }

  tbb::task_scheduler_handle scheduler_{tbb::attach{}};  // first in, last out
  int threads_ = 1;
  std::string model_;
  std::unique_ptr<tbb::global_control> parallelism_;
  tbb::task_arena arena_;
  tbb::task_group group_;  // destroyed before the arena
};

}  // namespace
}  // namespace hcr::cpu

HCR_SDK_PLUGIN(hcr::cpu::CpuBackend, "cpu", "0.1.0")
