/// \file runtime.hpp
/// The runtime: plugins, devices, the task graph, data and the scheduler.
///
/// \code
/// hcr::Runtime rt(hcr::Config::load("devices.toml"));   // or hcr::Runtime rt; for defaults
/// for (const hcr::Device& d : rt.devices()) std::cout << d.name << "\n";
/// auto a = rt.buffer<float>(n, n), b = rt.buffer<float>(n, n), c = rt.buffer<float>(n, n);
/// hcr::blas::gemm(rt, a, b, c, 512);
/// rt.wait_all();
/// \endcode
///
/// Construction loads plugins (a plugin that cannot be used is skipped with a diagnostic, see
/// load_report()); destruction waits for every submitted task, writes data back to the host and
/// unloads the plugins. Buffers, kernels and events outlive it as handles, but using one after its
/// runtime ended throws Error(ErrorCode::shutdown). Thread safety: every member may be called from
/// any thread, concurrently.
///
/// With Config::task_timeout set, destruction never waits forever for a launch the timeout gave up
/// on (a CPU kernel that never returns cannot be stopped): it waits for its plugin a few timeouts
/// (at least a second), then logs (error level) each such launch's kernel and device and returns,
/// leaving that plugin loaded and running, and everything the launch may still touch (its task,
/// buffers and kernel) allocated. Nothing is freed under a running kernel; the memory is given up.
#pragma once

#include <hcr/buffer.hpp>
#include <hcr/config.hpp>
#include <hcr/context.hpp>
#include <hcr/data.hpp>
#include <hcr/device.hpp>
#include <hcr/graph.hpp>
#include <hcr/kernel.hpp>
#include <hcr/task.hpp>
#include <hcr/trace.hpp>

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hcr {

/// What the loader did with one library file or one [[backend]] table.
struct PluginRecord {
  enum class Status { loaded, skipped };
  std::string path;     ///< the library file (empty for a backend table with no library)
  std::string name;     ///< the plugin's name, when it got that far
  std::string version;  ///< the plugin's own version text
  Status status = Status::skipped;
  std::string reason;  ///< why it was skipped ("no entry symbol hcr_plugin_get_api", ...), or,
                       ///< loaded with no device, why none (the plugin's own words)
  size_t devices = 0;  ///< devices it contributed
};

/// Everything the loader looked at, in order.
struct LoadReport {
  struct Dir {
    std::string path;
    std::string origin;  ///< "config", "HCR_PLUGIN_PATH" or "install"
    bool used = false;
    std::string reason;  ///< why it was not searched (relative, world-writable, missing)
  };
  std::vector<Dir> dirs;
  std::vector<PluginRecord> plugins;
};

/// Whether a device still takes work.
enum class DeviceHealth : uint8_t {
  active,
  quarantined,  ///< failed quarantine_failures times within quarantine_window
  lost,         ///< its plugin reported it gone (HCR_ERROR_DEVICE_LOST)
  removed,      ///< taken out by Runtime::remove_device
  withheld,     ///< the node arbiter gave it to another process for now (comes back active)
};

/// Per-device counters since the runtime started.
struct DeviceCounters {
  DeviceHealth health = DeviceHealth::active;
  std::string last_fault;  ///< the last failure it had, if any
  uint64_t tasks = 0;      ///< tasks run to completion (successful or not)
  uint64_t failed = 0;     ///< of which failed
  /// Answers from its plugin that broke the launch protocol and were ignored: done called again
  /// for a launch already answered, or an error returned from launch after calling done. The
  /// first is logged (error level) naming the plugin and the kernel.
  uint64_t protocol_errors = 0;
  /// Summed execution time its plugin reported (all slots); measured when the policy learns
  /// (dmda), a trace records, or Config::counters is set — else 0.
  double busy_seconds = 0;
  double idle_seconds = 0;  ///< wall time x slots - busy time
  uint64_t bytes_in = 0;    ///< copied into its memory node (devices with their own memory)
  uint64_t bytes_out = 0;   ///< copied out of it
  /// Energy since the runtime started, joules, and where the figure comes from: "measured" (the
  /// hardware's meter: NVML, RAPL), "modelled" (a simulated device's power model), "declared"
  /// (the [[backend]] table's idle_watts/busy_watts over the device's busy time) or "none".
  double energy_joules = 0;
  std::string energy_source = "none";
  double watts = -1;  ///< the draw at the last reading (< 0: unknown)
};

/// The node arbiter as this runtime sees it ([arbiter] socket, HCR_ARBITER_SOCKET): all zero and
/// false without one.
struct ArbiterStats {
  bool joined = false;     ///< it joined an arbiter at the start
  bool connected = false;  ///< and is still connected (false after the arbiter went away)
  uint64_t tenant = 0;     ///< the arbiter's id for this runtime
  uint64_t grants = 0;     ///< grants received
  uint64_t gained = 0;     ///< devices a grant gave (back) to it
  uint64_t revoked = 0;    ///< devices a grant took away (lent to another process, or returned)
  uint64_t released = 0;   ///< of those, released once nothing ran there any more
  uint32_t held = 0;       ///< devices it may use now
  uint32_t own = 0;        ///< its own share (kept when every process is busy)
  uint32_t borrowed = 0;   ///< usable now and not of its own share
  double max_release_seconds = 0;  ///< longest revoke -> release (one task's time at most)
};

struct RuntimeStats {
  uint64_t submitted = 0;
  uint64_t completed = 0;
  uint64_t failed = 0;
  /// Submits that waited for room under Config::max_tasks_in_flight.
  uint64_t throttled = 0;
  /// Replays of recorded graphs run as one device graph (graph.hpp): each counts as one task in
  /// `submitted` and `completed`, however many tasks the graph has.
  uint64_t graph_launches = 0;
  double wall_seconds = 0;  ///< since the runtime started
  /// Placement decisions (the policy's push) and the time they took, measured when execution
  /// times are (policies that learn, Config::counters); else 0.
  uint64_t decisions = 0;
  double decision_seconds = 0;
  std::vector<DeviceCounters> devices;  ///< indexed by Device::id
  DataCounters data;                    ///< transfers, hits, misses, evictions per memory node
  /// The scheduler's predictions against measurements (policies that predict: dmda, dmdas).
  std::vector<ModelAccuracy> accuracy;
  /// The devices' energy summed over those with a figure (DeviceCounters::energy_source), joules.
  double energy_joules = 0;
  /// Per scheduling context, once one exists (else empty): the default context ("default": the
  /// tasks submitted without one) first, then the others in the order they were made.
  std::vector<ContextStats> contexts;
  ArbiterStats arbiter;
};

class HCR_API Runtime {
 public:
  /// Default configuration (every plugin found), with HCR_* environment overrides.
  Runtime();
  /// Throws Error(config) naming the key and the value for a value outside what the TOML parser
  /// accepts (a Config built by hand skips the parser).
  explicit Runtime(Config config);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The devices (a snapshot: devices may join, see load_plugin). Device::id indexes it.
  std::vector<Device> devices() const;
  /// What the loader did (a snapshot; load_plugin appends to it).
  LoadReport load_report() const;

  /// Hot-plug: loads one plugin library (an absolute file path; a relative one throws
  /// Error(invalid_argument)) with `backend`'s options, as a [[backend]] table would give them;
  /// its devices join scheduling at once (learning policies explore them) and take work already
  /// waiting. Throws Error(plugin) naming the file and the loader's reason when the library cannot
  /// be used (including a file or directory on its path that someone else may write).
  PluginRecord load_plugin(const std::string& path, const BackendConfig& backend = {});
  /// Takes a device out of scheduling for good: work queued for it is placed elsewhere, tasks
  /// running there finish, and data whose only valid copy is in its memory is written back
  /// before the memory is freed. Returns when that is done. Its id stays (health: removed).
  void remove_device(uint32_t device);
  const Config& config() const noexcept;
  /// Name of the scheduling policy in use.
  std::string_view policy() const noexcept;

  /// A buffer owned by the runtime, zero-initialised. Cheap enough to make one per task: small
  /// ones come from a pool, and a buffer of a MiB or more is fresh pages (zero already, placed
  /// where first touched).
  template <class T>
  Buffer<T> buffer(size_t rows, size_t cols = 1) {
    return Buffer<T>(make_buffer(dtype_of_v<T>, rows, cols, nullptr, cols, true));
  }
  /// The same without the zero fill: the contents are unspecified until a task or a host view
  /// writes them (`rt.buffer<float>(n, n, hcr::uninitialized)`). Memory is reused rather than
  /// mapped afresh, whatever the size.
  template <class T>
  Buffer<T> buffer(size_t rows, size_t cols, Uninitialized) {
    return Buffer<T>(make_buffer(dtype_of_v<T>, rows, cols, nullptr, cols, false));
  }
  /// A 1 x n vector owned by the runtime (zeroed, or `hcr::uninitialized`).
  template <class T>
  Buffer<T> vector(size_t n) {
    return Buffer<T>(make_buffer(dtype_of_v<T>, 1, n, nullptr, n, true));
  }
  template <class T>
  Buffer<T> vector(size_t n, Uninitialized) {
    return Buffer<T>(make_buffer(dtype_of_v<T>, 1, n, nullptr, n, false));
  }
  /// Registers host memory the caller owns: it must outlive every task that uses the buffer.
  /// `ld` (elements between row starts) defaults to `cols`.
  template <class T>
  Buffer<T> wrap(T* data, size_t rows, size_t cols, size_t ld = 0) {
    if (data == nullptr)  // make_buffer would allocate: the caller's writes would go nowhere
      throw Error(ErrorCode::invalid_argument,
                  "wrap: a null pointer for a " + std::to_string(rows) + "x" +
                      std::to_string(cols) + " " + std::string(dtype_name(dtype_of_v<T>)) +
                      " buffer");
    return Buffer<T>(make_buffer(dtype_of_v<T>, rows, cols, data, ld == 0 ? cols : ld, false));
  }

  /// The kernel called `name`: a plugin's built-in, or a new one to add implementations to.
  Kernel kernel(std::string_view name);

  /// Submits a task, consuming it. Returns at once, unless Config::max_tasks_in_flight tasks are
  /// unfinished (submitted, not yet finished): then it waits until some have finished
  /// (back-pressure), so that a loop submitting millions of tasks uses bounded memory. It never
  /// waits where that could deadlock: inside a kernel of this runtime, or on a thread that holds
  /// a host view (Buffer::acquire); there the bound is exceeded instead. A thread whose tasks wait
  /// for a view another thread holds is not protected: release views before submitting much.
  /// Throws Error for misuse (buffers of another runtime, a partitioned buffer, a task already
  /// submitted).
  Event submit(Task& task);
  Event submit(Task&& task) { return submit(task); }
  /// Starts recording the tasks submitted from now on, from any thread (not those kernels
  /// submit: a replayed kernel submits them again), for end_recording() to return as a Graph
  /// (see graph.hpp). They are submitted and run as usual meanwhile: the recording is a side
  /// effect of a first run, whose placement the first replay starts from. Host views, partitions
  /// and explicit dependencies on tasks submitted before the recording are not part of it.
  /// Throws Error(invalid_argument) when a recording is open already (they do not nest).
  /// \code
  /// rt.begin_recording();
  /// rt.submit(hcr::Task(step).read(u).write(v));
  /// rt.submit(hcr::Task(step).read(v).write(u));
  /// hcr::Graph g = rt.end_recording();
  /// for (int i = 0; i < 50; ++i) g.replay();
  /// g.replay({{u, u2}, {v, v2}}).get();  // the same steps on other buffers of the same shapes
  /// \endcode
  void begin_recording();
  /// Ends the recording: the tasks submitted since begin_recording(), with the dependencies found
  /// between them. Throws Error(invalid_argument) without a recording open.
  Graph end_recording();
  /// A new scheduling context (see context.hpp): tasks join it with Task::in(ctx). The first one
  /// puts the runtime's policy behind a per-context arbiter (from then on execution times are
  /// measured, two clock reads per task). Throws Error(invalid_argument) for an empty, duplicate
  /// or "default" name, a weight that is not positive, or a device id that does not exist.
  /// \code
  /// hcr::Context batch = rt.context({.name = "batch", .devices = {0, 1}, .weight = 3});
  /// rt.submit(hcr::Task(k).write(x).in(batch));
  /// \endcode
  Context context(const ContextSpec& spec);
  /// The context called `name` (made by context() or a [[context]] table); throws
  /// Error(invalid_argument) naming the contexts there are.
  Context find_context(std::string_view name) const;

  /// Blocks until every task whose submit() returned before this call began has finished (also
  /// tasks the runtime made for those calls: acquire, partition), and every task those tasks'
  /// kernels submit, at any depth. Tasks other threads submit while it waits may or may not have
  /// finished when it returns: a thread that never stops submitting does not keep it waiting.
  /// Throws Error(invalid_argument) where it would never return: from inside a kernel of this
  /// runtime, or from a thread that holds a host view (Buffer::acquire), which counts as unfinished
  /// work until released.
  void wait_all();

  /// Holds back every kernel task submitted from now on until resume(), as StarPU's
  /// starpu_pause(): submit a whole task graph, then let it go at once. Submitted one by one, a
  /// graph starts while it is being submitted: its first tasks take the idle devices whatever
  /// their priority, and a planning policy plans around the part it has seen. On resume, the held
  /// tasks that are ready are placed together, highest priority first, before any device starts
  /// one. Work submitted before the pause goes on; host views (Buffer::acquire) are not held.
  /// Pauses nest: the last resume() lets go. Waiting for a held task while paused — wait_all(),
  /// Event::wait(), acquire() of a buffer one uses — throws Error(invalid_argument) rather than
  /// wait forever; the runtime's end resumes.
  /// \code
  /// rt.pause();
  /// for (auto& t : graph) rt.submit(t);
  /// rt.resume();
  /// rt.wait_all();
  /// \endcode
  void pause();
  /// Ends a pause(); throws Error(invalid_argument) when the runtime is not paused.
  void resume();

  RuntimeStats stats() const;

  /// Starts recording task and copy events (see trace.hpp); clears earlier ones.
  void start_trace();
  /// Stops recording; the events stay until the next start_trace().
  void stop_trace();
  /// The events recorded so far, ordered by start time.
  std::vector<TraceEvent> trace_events() const;
  /// Writes the events as Chrome/Perfetto trace JSON (one track per device and per link).
  void write_trace(const std::string& path) const;
  /// Writes a Gantt chart of the events as SVG: a row per device slot, tasks coloured by
  /// kernel, copies on rows per link.
  void write_gantt(const std::string& path) const;

  detail::RuntimeCore& core() const noexcept { return *core_; }

 private:
  detail::Ref<detail::BufferState> make_buffer(DType t, size_t rows, size_t cols, void* data,
                                               size_t ld, bool zero);
  std::shared_ptr<detail::RuntimeCore> core_;
};

}  // namespace hcr
