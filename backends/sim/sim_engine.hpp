// The simulator's timeline: devices are sets of engines (a compute engine with `concurrency` slots,
// one copy engine per direction), each slot busy from an operation's modelled start to its
// modelled end. One timer thread ends operations at their modelled end, on the wall clock scaled
// by time_scale; a small worker pool runs the real work (kernels, memcpy) meanwhile. An operation
// completes (its `done` is called) when both its modelled end has passed and its work finished —
// never earlier than modelled.
//
// Thread safety: every member may be called from any thread. `done` callbacks run on the timer
// thread, a worker, or a synchronize() caller, never with the simulator's lock held: the host's
// handler may call straight back in to start more work.
#pragma once

#include "sim_config.hpp"

#include <hcr/plugin.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace hcr::sim {

/// Modelled seconds since creation, and the wall-clock instant each modelled time maps to.
class Clock {
 public:
  using Real = std::chrono::steady_clock;
  explicit Clock(double time_scale) : scale_(time_scale), epoch_(Real::now()) {}
  double now() const noexcept {
    return std::chrono::duration<double>(Real::now() - epoch_).count() / scale_;
  }
  /// The first wall-clock instant at which now() >= t (rounded up, so never early).
  Real::time_point real(double t) const noexcept;
  double scale() const noexcept { return scale_; }

 private:
  double scale_;
  Real::time_point epoch_;
};

/// Deterministic uniform number in [0, 1) from (seed, device key, stream, counter).
double uniform(uint64_t seed, uint64_t device_key, uint64_t stream, uint64_t counter) noexcept;
/// A log-normal factor with mean 1 and relative standard deviation `noise` (1 when noise is 0).
double noise_factor(double noise, uint64_t seed, uint64_t device_key, uint64_t stream,
                    uint64_t counter) noexcept;

/// Which engine of its device an operation occupies.
enum class EngineKind { compute = 0, copy_in = 1, copy_out = 2 };

/// One operation: a launch or a copy. Built by the backend, owned by the Simulator once submitted.
struct Op {
  size_t device = 0;
  EngineKind engine = EngineKind::compute;
  std::string what;   // "launch #3 of 'gemm_f32'": for error messages
  double base = 0;    // modelled seconds, noise included, slowdown not yet
  bool hang = false;  // never ends on its own (see DeviceConfig::hang_timeout)
  hcr_error_code_t fault = static_cast<hcr_error_code_t>(0);  // injected failure, 0: none
  std::string fault_message;
  /// The real work, run on a worker when the operation starts; returns its error (NULL: fine).
  /// Empty: nothing to run. Dropped when the operation is doomed (fault, hang, lost device).
  std::function<hcr_error_t*(uint32_t slot)> work;
  hcr_done_fn done = nullptr;
  void* done_user_data = nullptr;
  double watts = 0;  // above the device's idle draw while it runs (the power model; 0: none)

  // Set by the Simulator.
  uint64_t id = 0;
  uint64_t token = 0;  // bumped to invalidate a scheduled end event
  double arrival = 0, start = 0, end = 0, duration = 0;
  uint32_t slot = 0;
  bool ended_early = false;  // lost, abandoned: report end - start, not duration
  hcr_error_t* work_error = nullptr;
  std::atomic<int> parts{0};  // what still has to happen before done: the end, the work
};

class Simulator {
 public:
  /// `warn` (may be empty) receives the simulator's warnings: once per device whose real work
  /// keeps taking much longer than its modelled duration (see note_real_time). Thread-safe.
  Simulator(const MachineConfig& machine, std::vector<uint64_t> device_keys,
            std::function<void(const std::string&)> warn = {});
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  const Clock& clock() const noexcept { return clock_; }
  /// The next launch (or copy) counter of a device: 0, 1, 2, ...
  uint64_t next_launch(size_t device) noexcept;
  uint64_t next_copy(size_t device) noexcept;
  uint64_t device_key(size_t device) const noexcept { return keys_[device]; }
  /// Joules above idle the device's operations used so far (real seconds x their watts).
  double dynamic_joules(size_t device) const noexcept {
    return devices_[device]->dynamic_joules.load(std::memory_order_relaxed);
  }

  /// Places `op` on its engine: it starts now if a slot is free, else when one frees up.
  void submit(std::unique_ptr<Op> op);
  /// Blocks until every operation of `device` has called its done. Hung operations are abandoned
  /// (done with HCR_ERROR_TIMEOUT), including ones that start while this waits.
  void synchronize(size_t device);
  /// Synchronizes every device, then stops the threads. Idempotent.
  void shutdown() noexcept;

 private:
  struct Engine {
    std::vector<Op*> slot_op;       // the operation occupying each slot, or null
    std::vector<double> slot_free;  // modelled time each slot last became free
    std::deque<Op*> queue;          // waiting for a slot, in arrival order
  };
  struct Device {
    const DeviceConfig* config = nullptr;
    Engine engines[3];
    uint64_t pending = 0;  // submitted, done not yet returned
    int syncing = 0;       // synchronize() calls waiting
    std::atomic<uint64_t> launches{0};
    std::atomic<uint64_t> copies{0};
    std::atomic<uint32_t> overruns{0};  // the last 8 works, a bit each: 1 = ran far past its model
    std::atomic<bool> warned{false};
    std::atomic<double> dynamic_joules{0};  // of the operations ended so far (the power model)
  };
  struct Event {
    Clock::Real::time_point when;
    uint64_t id;
    uint64_t token;
    bool operator>(const Event& o) const noexcept { return when > o.when; }
  };
  using Fired = std::vector<Op*>;

  void start(Device& d, Engine& e, uint32_t slot, Op* op, double at);
  void end(Device& d, Op* op, Fired& out);
  void abandon(Device& d, Op* op, double at, Fired& out);
  void schedule(Op* op);
  void fire(Op* op) noexcept;
  void timer_loop();
  void worker_loop();
  void note_real_time(Device& d, const Op& op, double real_seconds);

  const MachineConfig& machine_;
  std::function<void(const std::string&)> warn_;
  Clock clock_;
  std::vector<uint64_t> keys_;
  std::vector<std::unique_ptr<Device>> devices_;

  std::mutex mutex_;
  std::condition_variable timer_cv_;
  std::condition_variable sync_cv_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::unordered_map<uint64_t, std::unique_ptr<Op>> ops_;
  uint64_t next_id_ = 1;
  bool stop_ = false;

  std::mutex work_mutex_;
  std::condition_variable work_cv_;
  std::deque<Op*> work_;
  bool work_stop_ = false;

  std::thread timer_;
  std::vector<std::thread> workers_;
  std::atomic<bool> shut_down_{false};
};

}  // namespace hcr::sim
