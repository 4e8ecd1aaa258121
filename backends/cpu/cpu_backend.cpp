// The CPU backend plugin: one device whose slots are oneTBB worker threads (or, with option
// `partitions`, several devices sharing them out, each with an arena of its own). The built-in BLAS
// and LAPACK kernels (gemm, syrk, trsm, potrf, getrf_nopiv; f32 and f64) run through hcr_host_blas
// on hcr's own single-threaded OpenBLAS (parallelism comes from running tiles side by side; the
// application's OpenBLAS and its thread count are never touched); user kernels arrive as host
// functions. Idle TBB workers sleep.
#include "host_blas.hpp"
#include "rapl_meter.hpp"

#include <hcr/sdk/backend.hpp>

#include <sched.h>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>
#include <tbb/task_scheduler_observer.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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

// Keeps the workers of one partition's arena on that partition's cores while they work there (a
// TBB worker may serve another arena later: it takes that one's cores then). The application's
// own threads entering the arena (synchronize) are left alone.
class PinToCores final : public tbb::task_scheduler_observer {
 public:
  PinToCores(tbb::task_arena& arena, const cpu_set_t& cores)
      : tbb::task_scheduler_observer(arena), cores_(cores) {
    observe(true);
  }
  ~PinToCores() override { observe(false); }

  void on_scheduler_entry(bool worker) override {
    if (!worker) return;
    Saved& s = saved();
    s.valid = ::sched_getaffinity(0, sizeof s.mask, &s.mask) == 0;
    if (s.valid) (void)::sched_setaffinity(0, sizeof cores_, &cores_);
  }
  void on_scheduler_exit(bool worker) override {
    if (!worker) return;
    Saved& s = saved();
    if (s.valid) (void)::sched_setaffinity(0, sizeof s.mask, &s.mask);
    s.valid = false;
  }

 private:
  struct Saved {
    cpu_set_t mask;
    bool valid = false;
  };
  static Saved& saved() {  // a worker is in one arena at a time
    thread_local Saved s;
    return s;
  }
  cpu_set_t cores_;
};

// The cores of partition `k` of `parts`: the process's allowed cores cut into runs, in order (a
// core each in turn when there are fewer cores than partitions).
cpu_set_t partition_cores(size_t k, size_t parts) {
  cpu_set_t allowed, out;
  CPU_ZERO(&out);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &out);
    return out;
  }
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  const size_t m = cores.size();
  if (m < parts) CPU_SET(cores[k % m], &out);
  else
    for (size_t i = k * m / parts; i < (k + 1) * m / parts; ++i) CPU_SET(cores[i], &out);
  return out;
}

class CpuBackend final : public sdk::Backend {
 public:
  explicit CpuBackend(const sdk::CreateContext& ctx) : Backend(ctx) {
    long long threads = ctx.options.get_int("threads", 0);
    const long long partitions = ctx.options.get_int("partitions", 1);
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
    // Partitions, as OpenCL's CL_DEVICE_PARTITION_EQUALLY: devices of threads / partitions workers
    // (the first ones one more where it does not divide), each working on its own share of the
    // process's cores. Tasks pinned to a partition keep to those cores, and their data to those
    // cores' caches: a stencil whose neighbouring tiles run on one partition reads its ghosts
    // from its own writes (bench/tile_affinity_bench).
    if (partitions < 1 || partitions > threads_)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "option 'partitions' = " + std::to_string(partitions) + ": must be 1 to the " +
                      std::to_string(threads_) + " worker thread(s)");
    // TBB's pool holds one thread fewer than allowed (the caller is expected to join in); our
    // arena is fed by enqueue only, so allow one more so that `threads` workers exist.
    parallelism_ = std::make_unique<tbb::global_control>(
        tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads_) + 1);
    for (long long i = 0; i < partitions; ++i) {
      auto& part = parts_.emplace_back(std::make_unique<Partition>());
      part->init(threads_ / static_cast<int>(partitions) + (i < threads_ % partitions ? 1 : 0));
      part->arena.initialize(part->threads, 0);
      if (partitions > 1)
        part->pin = std::make_unique<PinToCores>(
            part->arena, partition_cores(static_cast<size_t>(i), static_cast<size_t>(partitions)));
    }
    // One package counter cannot be shared out between partitions: none of them measures energy.
    const bool rapl_found = rapl_.has_value();
    if (partitions > 1) rapl_.reset();
    model_ = cpu_model();
    host().info("cpu: " + std::to_string(threads_) + " worker(s) on " + model_ +
                (partitions > 1 ? " in " + std::to_string(partitions) + " partitions" : "") +
                (rapl_ ? ", energy from " + std::to_string(rapl_->domains()) + " RAPL package(s)"
                 : rapl_found ? ", energy not measured (RAPL counts the package, not a partition)"
                              : ", no readable RAPL counter"));
  }

  // The library may be unloaded right after this, and libtbb with it when we were its only user:
  // TBB's worker threads must be gone by then, so the pool is finalized (joined), not left asleep.
  ~CpuBackend() noexcept override {
    for (size_t d = 0; d < parts_.size(); ++d) {
      try {
        synchronize(d);
      } catch (...) {  // nothing sensible to do while unloading
      }
      parts_[d]->pin.reset();
      parts_[d]->arena.terminate();
    }
    if (!tbb::finalize(scheduler_, std::nothrow))
      host().debug("cpu: TBB workers stay: another part of the process uses TBB");
    parallelism_.reset();
  }

  size_t device_count() override { return parts_.size(); }

  void device_info(size_t device, sdk::DeviceInfo& info) override {
    const int threads = parts_.at(device)->threads;
    info.name = model_ + " (" + std::to_string(threads) + " threads)";
    if (parts_.size() > 1)
      info.name +=
          " [partition " + std::to_string(device) + " of " + std::to_string(parts_.size()) + "]";
    info.arch = model_;
    info.kind = HCR_DEVICE_CPU;
    info.flags = HCR_DEVICE_HOST_MEMORY;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    info.memory_bytes = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : 0;
    info.compute_units = static_cast<uint32_t>(threads);
    info.concurrency = static_cast<uint32_t>(threads);
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
    Partition& part = *parts_.at(args.device);
    tbb::task_handle task = part.group.defer([this, args] {
      HCR_CPU_HANDOVER_ACQUIRE();
      run(args);
    });
    HCR_CPU_HANDOVER_RELEASE();
    part.arena.enqueue(std::move(task));
  }

  // Device graphs (ABI 1.2): the host hands over a recorded graph once; each launch is one task in
  // the partition's arena and group (synchronize waits for it), which runs the nodes itself.
  hcr_graph_t* graph_create(sdk::GraphDesc desc) override {
    auto g = std::make_unique<CpuGraph>();
    g->device = desc.device;
    (void)parts_.at(desc.device);
    const size_t n = desc.nodes.size();
    g->nodes = std::move(desc.nodes);
    g->predecessors = std::move(desc.predecessors);
    g->roots = std::move(desc.roots);
    g->pending = std::make_unique<std::atomic<uint32_t>[]>(n);
    g->skipped = std::make_unique<std::atomic<bool>[]>(n);
    return reinterpret_cast<hcr_graph_t*>(g.release());
  }

  void graph_launch(const hcr_graph_launch_args_t& args) override {
    CpuGraph& g = *reinterpret_cast<CpuGraph*>(args.graph);
    Partition& part = *parts_.at(g.device);
    if (args.num_args > 0 && args.args[0].struct_size < HCR_ARG_STRUCT_SIZE)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "graph_launch: arguments of an older ABI");
    // The host launches a graph again only after done: nothing of the last launch runs now.
    const size_t n = g.nodes.size();
    for (size_t i = 0; i < n; ++i) {
      g.pending[i].store(g.predecessors[i], std::memory_order_relaxed);
      g.skipped[i].store(false, std::memory_order_relaxed);
    }
    g.launch = args;
    g.failed.store(false, std::memory_order_relaxed);
    g.error = nullptr;
    g.failed_index = 0;
    g.remaining.store(n, std::memory_order_relaxed);
    tbb::task_handle task = part.group.defer([this, &g, &part] {
      HCR_CPU_HANDOVER_ACQUIRE();
      if (g.launch.flags & HCR_LAUNCH_MEASURE) g.started = std::chrono::steady_clock::now();
      if (g.nodes.empty()) {
        finish_graph(g);
        return;
      }
      // The roots spread over the workers in a few runs (one task per root would cost more than
      // an empty node), each root followed by the successors it makes ready; this task runs the
      // first run.
      const size_t roots = g.roots.size();
      const size_t runs = std::min(roots, 4 * static_cast<size_t>(part.threads));
      for (size_t k = 1; k < runs; ++k)
        spawn_roots(part, g, k * roots / runs, (k + 1) * roots / runs);
      for (size_t k = 0; k < roots / runs; ++k) run_nodes(part, g, g.roots[k]);
    });
    HCR_CPU_HANDOVER_RELEASE();
    part.arena.enqueue(std::move(task));
  }

  void graph_release(hcr_graph_t* graph) noexcept override {
    delete reinterpret_cast<CpuGraph*>(graph);
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
  void synchronize(size_t device) override {
    Partition& part = *parts_.at(device);
    auto wait = [&part] {
      HCR_CPU_HANDOVER_ACQUIRE();
      part.group.wait();
      HCR_CPU_HANDOVER_RELEASE();
    };
    HCR_CPU_HANDOVER_RELEASE();
    part.arena.execute(wait);
    HCR_CPU_HANDOVER_ACQUIRE();
  }

 private:
  static hcr_kernel_t* wrap(CpuKernel* k) { return reinterpret_cast<hcr_kernel_t*>(k); }
  static CpuKernel* unwrap(hcr_kernel_t* k) { return reinterpret_cast<CpuKernel*>(k); }

  void run(const hcr_launch_args_t& a) noexcept {
    const bool measure = (a.flags & HCR_LAUNCH_MEASURE) != 0;
    std::chrono::steady_clock::time_point t0;
    if (measure) t0 = std::chrono::steady_clock::now();
    hcr_error_t* err = execute(a);
    double seconds = -1;
    if (measure)
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sdk::complete(a.done, a.done_user_data, err, seconds);
  }

  // One launch's kernel, its error returned (NULL: success).
  hcr_error_t* execute(const hcr_launch_args_t& a) noexcept {
    const CpuKernel& k = *unwrap(a.kernel);
    hcr_error_t* err = nullptr;
    if (k.builtin) {
      err = sdk::guard([&] {
        host_blas::Call call =
            host_blas::check(*k.builtin, a.args, a.num_args, a.params, a.params_size);
        if (parallel_tasks_ && parts_[a.device]->threads > 1)
          host_blas::run_split(call, a.args, split_);
        else host_blas::run(call, a.args, blas_threads(a));
      });
    } else {
      Partition& part = *parts_[a.device];
      const uint32_t worker = part.claim_worker();
      hcr_exec_context_t ctx = sdk::exec_context(a, worker);
      err = sdk::run_host_function(k.fn, k.user_data, ctx);
      part.release_worker(worker);
    }
    return err;
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
  // A device: its workers' arena and the launches it runs (destroyed before the arena).
  struct Partition {
    int threads = 1;
    tbb::task_arena arena;
    tbb::task_group group;
    std::unique_ptr<PinToCores> pin;  // with several partitions: its workers on its cores
    // The worker index a kernel sees (TaskContext::worker, what per-worker storage is indexed
    // by): below `threads` and unique among the tasks running at once. TBB's slot index is
    // neither (a worker of a one-thread arena has run tasks in slot 1). One bit per index.
    std::unique_ptr<std::atomic<uint64_t>[]> busy;

    void init(int n) {
      threads = n;
      const size_t words = (static_cast<size_t>(n) + 63) / 64;
      busy = std::make_unique<std::atomic<uint64_t>[]>(words);
      for (size_t w = 0; w < words; ++w) busy[w].store(0, std::memory_order_relaxed);
      if (const int rest = n % 64; rest != 0)  // the last word's bits past `threads`: never free
        busy[words - 1].store(~uint64_t{0} << rest, std::memory_order_relaxed);
    }
    uint32_t claim_worker() noexcept {
      // At most `threads` tasks run at once (the arena's concurrency), so a bit is free.
      const size_t words = (static_cast<size_t>(threads) + 63) / 64;
      for (;;)
        for (size_t w = 0; w < words; ++w) {
          uint64_t bits = busy[w].load(std::memory_order_relaxed);
          while (~bits != 0) {
            const int free = std::countr_one(bits);
            if (busy[w].compare_exchange_weak(bits, bits | (uint64_t{1} << free),
                                              std::memory_order_acquire))
              return static_cast<uint32_t>(w * 64 + static_cast<size_t>(free));
          }
        }
    }
    void release_worker(uint32_t worker) noexcept {
      busy[worker / 64].fetch_and(~(uint64_t{1} << (worker % 64)), std::memory_order_release);
    }
  };
  std::vector<std::unique_ptr<Partition>> parts_;

  // A device graph: its nodes as graph_create gave them, and one launch's state.
  struct CpuGraph {
    size_t device = 0;
    std::vector<sdk::GraphNode> nodes;
    std::vector<uint32_t> predecessors;  // per node
    std::vector<uint32_t> roots;
    // The launch: predecessors still to finish per node, whether a node is skipped (a predecessor
    // failed or was skipped), nodes not yet finished, the first failure.
    hcr_graph_launch_args_t launch{};
    std::unique_ptr<std::atomic<uint32_t>[]> pending;
    std::unique_ptr<std::atomic<bool>[]> skipped;
    std::atomic<size_t> remaining{0};
    std::atomic<bool> failed{false};
    hcr_error_t* error = nullptr;  // written by the one that set `failed`
    uint64_t failed_index = 0;
    std::chrono::steady_clock::time_point started;
  };

  void spawn_roots(Partition& part, CpuGraph& g, size_t first, size_t last) {
    HCR_CPU_HANDOVER_RELEASE();
    part.group.run([this, &part, &g, first, last] {
      HCR_CPU_HANDOVER_ACQUIRE();
      for (size_t k = first; k < last; ++k) run_nodes(part, g, g.roots[k]);
    });
  }

  void spawn_node(Partition& part, CpuGraph& g, uint32_t i) {
    HCR_CPU_HANDOVER_RELEASE();
    part.group.run([this, &part, &g, i] {
      HCR_CPU_HANDOVER_ACQUIRE();
      run_nodes(part, g, i);
    });
  }

  // Runs node i, then one successor it made ready, and so on; the others it made ready go to the
  // other workers. Each node runs as run() runs one launch.
  void run_nodes(Partition& part, CpuGraph& g, uint32_t i) noexcept {
    for (;;) {
      const sdk::GraphNode& node = g.nodes[i];
      bool bad = g.skipped[i].load(std::memory_order_relaxed);
      if (!bad) {
        const hcr_launch_args_t a = node.launch(
            g.device,
            node.num_args > 0 ? sdk::GraphDesc::arg_at(g.launch.args, node.first_arg) : nullptr);
        if (hcr_error_t* err = execute(a)) {
          bad = true;
          if (!g.failed.exchange(true, std::memory_order_acq_rel)) {
            g.error = err;
            g.failed_index = i;
          } else {
            sdk::detail::Adapter<CpuBackend>::error_destroy(err);
          }
        }
      }
      // Successors: skipped after a failure or a skip (set before the count drops, which hands
      // them on); the ready ones run here (the first) or elsewhere.
      int32_t next = -1;
      for (uint32_t s : node.successors) {
        if (bad) g.skipped[s].store(true, std::memory_order_relaxed);
        if (g.pending[s].fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
        if (next < 0) next = static_cast<int32_t>(s);
        else spawn_node(part, g, s);
      }
      // The last node done ends the launch; `g` is the host's again after done.
      if (g.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        finish_graph(g);
        return;
      }
      if (next < 0) return;
      i = static_cast<uint32_t>(next);
    }
  }

  static void finish_graph(CpuGraph& g) noexcept {
    const hcr_graph_launch_args_t a = g.launch;
    double seconds = -1;
    if (a.flags & HCR_LAUNCH_MEASURE)
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - g.started).count();
    hcr_error_t* err = g.failed.load(std::memory_order_acquire) ? g.error : nullptr;
    if (err != nullptr && a.failed_node != nullptr) *a.failed_node = g.failed_index;
    sdk::complete(a.done, a.done_user_data, err, seconds);
  }
};

}  // namespace
}  // namespace hcr::cpu

HCR_SDK_PLUGIN(hcr::cpu::CpuBackend, "cpu", "0.1.0")
