// The simulator's timeline, timer thread and worker pool (see sim_engine.hpp for the model).
//
// Start times are modelled, not observed: an operation queued behind another starts at that one's
// modelled end, even if the timer thread noticed the end a little late. So timer jitter and slow
// host computation never accumulate into the model; they only delay a `done` past its modelled end.
#include "sim_engine.hpp"

#include "sim_units.hpp"

#include <hcr/sdk/backend.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>

namespace hcr::sim {

namespace {

uint64_t splitmix(uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void destroy_error(hcr_error_t* e) noexcept {
  if (e != nullptr && e != sdk::out_of_memory_error()) delete e;
}

constexpr double kPi = 3.14159265358979323846;

}  // namespace

Clock::Real::time_point Clock::real(double t) const noexcept {
  double ns = std::ceil(t * scale_ * 1e9);
  // Far beyond any run (a century): treat as "never", without overflowing the clock's integer.
  if (!(ns < 3e18)) ns = 3e18;
  if (ns < 0) ns = 0;
  return epoch_ + std::chrono::duration_cast<Real::duration>(
                      std::chrono::nanoseconds(static_cast<int64_t>(ns)));
}

double uniform(uint64_t seed, uint64_t device_key, uint64_t stream, uint64_t counter) noexcept {
  uint64_t h = splitmix(seed);
  h = splitmix(h ^ device_key);
  h = splitmix(h ^ stream);
  h = splitmix(h ^ counter);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

double noise_factor(double noise, uint64_t seed, uint64_t device_key, uint64_t stream,
                    uint64_t counter) noexcept {
  if (noise <= 0) return 1;
  // Log-normal with mean 1 and the requested relative standard deviation: durations stay
  // positive, and a large noise gives the long right tail real timings have.
  double sigma2 = std::log1p(noise * noise);
  double u1 = 1.0 - uniform(seed, device_key, 2 * stream, counter);  // (0, 1]
  double u2 = uniform(seed, device_key, 2 * stream + 1, counter);
  double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
  return std::exp(-0.5 * sigma2 + std::sqrt(sigma2) * z);
}

// ---- construction and shutdown --------------------------------------------------------------

Simulator::Simulator(const MachineConfig& machine, std::vector<uint64_t> device_keys,
                     std::function<void(const std::string&)> warn)
    : machine_(machine),
      warn_(std::move(warn)),
      clock_(machine.time_scale),
      keys_(std::move(device_keys)) {
  for (const DeviceConfig& c : machine_.devices) {
    auto d = std::make_unique<Device>();
    d->config = &c;
    uint32_t slots[3] = {c.concurrency, 1, 1};
    for (int i = 0; i < 3; ++i) {
      d->engines[i].slot_op.assign(slots[i], nullptr);
      d->engines[i].slot_free.assign(slots[i], 0.0);
    }
    devices_.push_back(std::move(d));
  }
  timer_ = std::thread([this] { timer_loop(); });
  for (uint32_t i = 0; i < machine_.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

Simulator::~Simulator() { shutdown(); }

void Simulator::shutdown() noexcept {
  if (shut_down_.exchange(true)) return;
  // A done handler may start work on a device already synchronized: repeat until all are idle.
  for (;;) {
    for (size_t i = 0; i < devices_.size(); ++i) synchronize(i);
    std::lock_guard<std::mutex> lock(mutex_);
    if (ops_.empty()) break;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  timer_cv_.notify_all();
  timer_.join();
  {
    std::lock_guard<std::mutex> lock(work_mutex_);
    work_stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

uint64_t Simulator::next_launch(size_t device) noexcept {
  return devices_[device]->launches.fetch_add(1, std::memory_order_relaxed);
}
uint64_t Simulator::next_copy(size_t device) noexcept {
  return devices_[device]->copies.fetch_add(1, std::memory_order_relaxed);
}

// ---- the timeline ---------------------------------------------------------------------------

void Simulator::submit(std::unique_ptr<Op> op) {
  std::lock_guard<std::mutex> lock(mutex_);
  Device& d = *devices_[op->device];
  Engine& e = d.engines[static_cast<int>(op->engine)];
  Op* p = op.get();
  p->id = next_id_++;
  p->arrival = clock_.now();
  ops_.emplace(p->id, std::move(op));
  ++d.pending;
  for (uint32_t s = 0; s < e.slot_op.size(); ++s)
    if (e.slot_op[s] == nullptr) {
      start(d, e, s, p, std::max(p->arrival, e.slot_free[s]));
      return;
    }
  e.queue.push_back(p);
}

// Under the lock. Decides how the operation ends, hands its work to the pool and schedules its end.
void Simulator::start(Device& d, Engine& e, uint32_t slot, Op* op, double at) {
  const DeviceConfig& c = *d.config;
  e.slot_op[slot] = op;
  op->slot = slot;
  op->start = at;
  op->duration = op->base * (at >= c.slowdown_at ? c.slowdown_factor : 1.0);
  double end = at + op->duration;
  if (op->fault != 0) op->work = nullptr;  // it fails: what it would compute does not matter
  if (op->hang) {
    op->work = nullptr;
    op->fault = HCR_ERROR_TIMEOUT;
    op->ended_early = true;
    if (d.syncing > 0) {
      end = at;
      op->fault_message = op->what + " on device '" + c.name +
                          "' hung; abandoned when the host synchronized the device";
    } else {
      end = at + c.hang_timeout;  // kNever: only synchronize ends it
      op->fault_message = op->what + " on device '" + c.name + "' hung; stopped after " +
                          "hang_timeout " + format_seconds(c.hang_timeout) + " (modelled)";
    }
  }
  if (end > c.lost_at || at >= c.lost_at) {
    end = std::max(at, c.lost_at);
    op->work = nullptr;
    op->fault = HCR_ERROR_DEVICE_LOST;
    op->ended_early = true;
    op->fault_message = "device '" + c.name + "' was lost at " + format_seconds(c.lost_at) +
                        " (modelled, lost_at): " + op->what + " did not complete";
  }
  op->end = end;
  op->parts.store(op->work ? 2 : 1, std::memory_order_relaxed);
  if (op->work) {
    {
      std::lock_guard<std::mutex> wl(work_mutex_);
      work_.push_back(op);
    }
    work_cv_.notify_one();
  }
  if (std::isfinite(end)) schedule(op);
}

void Simulator::schedule(Op* op) {
  Event ev{clock_.real(op->end), op->id, op->token};
  events_.push(ev);
  if (events_.top().id == ev.id && events_.top().token == ev.token) timer_cv_.notify_one();
}

// Under the lock: the operation's modelled end. Frees its slot for the next in line.
void Simulator::end(Device& d, Op* op, Fired& out) {
  Engine& e = d.engines[static_cast<int>(op->engine)];
  e.slot_op[op->slot] = nullptr;
  e.slot_free[op->slot] = op->end;
  if (!e.queue.empty()) {
    Op* next = e.queue.front();
    e.queue.pop_front();
    start(d, e, op->slot, next, std::max(op->end, next->arrival));
  }
  if (op->parts.fetch_sub(1, std::memory_order_acq_rel) == 1) out.push_back(op);
}

void Simulator::abandon(Device& d, Op* op, double at, Fired& out) {
  ++op->token;  // its scheduled end, if any, no longer applies
  op->end = std::max(op->start, at);
  op->fault = HCR_ERROR_TIMEOUT;
  op->ended_early = true;
  op->fault_message = op->what + " on device '" + d.config->name +
                      "' hung; abandoned when the host synchronized the device";
  end(d, op, out);
}

// Without the lock: calls done, then forgets the operation.
void Simulator::fire(Op* op) noexcept {
  hcr_error_t* err = op->work_error;
  if (op->fault != 0) {
    destroy_error(err);
    err = sdk::make_error(op->fault, op->fault_message);
  }
  // Reported in real seconds (modelled x time_scale), like every figure the plugin reports: a
  // scaled machine is simply a slower one, so traces, busy counters and learned costs agree with
  // the wall clock.
  double seconds = (op->ended_early ? op->end - op->start : op->duration) * clock_.scale();
  // The power model: what the operation drew above idle while it ran, for its whole duration.
  double joules = -1;
  if (op->watts > 0) {
    joules = op->watts * seconds;
    std::atomic<double>& total = devices_[op->device]->dynamic_joules;
    double was = total.load(std::memory_order_relaxed);
    while (!total.compare_exchange_weak(was, was + joules, std::memory_order_relaxed)) {
    }
  }
  sdk::complete(op->done, op->done_user_data, err, seconds, joules);

  std::unique_ptr<Op> owned;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --devices_[op->device]->pending;
    auto it = ops_.find(op->id);
    owned = std::move(it->second);
    ops_.erase(it);
  }
  sync_cv_.notify_all();
}

void Simulator::synchronize(size_t device) {
  std::unique_lock<std::mutex> lock(mutex_);
  Device& d = *devices_[device];
  ++d.syncing;
  for (;;) {
    Fired out;
    double now = clock_.now();
    for (Engine& e : d.engines)
      for (uint32_t s = 0; s < e.slot_op.size(); ++s)
        if (Op* op = e.slot_op[s]; op != nullptr && op->hang) abandon(d, op, now, out);
    if (!out.empty()) {
      lock.unlock();
      for (Op* op : out) fire(op);
      lock.lock();
      continue;
    }
    if (d.pending == 0) break;
    sync_cv_.wait(lock);
  }
  --d.syncing;
}

// ---- threads --------------------------------------------------------------------------------

void Simulator::timer_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (events_.empty()) {
      timer_cv_.wait(lock);
      continue;
    }
    Event ev = events_.top();
    if (ev.when > Clock::Real::now()) {
      timer_cv_.wait_until(lock, ev.when);
      continue;
    }
    events_.pop();
    auto it = ops_.find(ev.id);
    if (it == ops_.end() || it->second->token != ev.token) continue;  // abandoned meanwhile
    Op* op = it->second.get();
    Fired out;
    end(*devices_[op->device], op, out);
    if (!out.empty()) {
      lock.unlock();
      for (Op* o : out) fire(o);
      lock.lock();
    }
  }
}

// A device's real work (the host computing its kernels, copying its bytes) that keeps running far
// past the modelled duration means the host, not the model, sets the device's pace: `done` comes
// when the work ends, so the scheduler learns this machine's speed instead of the simulated one
// and every device looks alike. Said once per device, when 4 of its last 8 works took more than
// twice their modelled (wall) time.
void Simulator::note_real_time(Device& d, const Op& op, double real_seconds) {
  constexpr double kRatio = 2;
  const double modelled = op.duration * clock_.scale();
  const bool over = real_seconds > kRatio * modelled;
  uint32_t bits = d.overruns.load(std::memory_order_relaxed), next = 0;
  do {
    next = ((bits << 1) | (over ? 1u : 0u)) & 0xffu;
  } while (!d.overruns.compare_exchange_weak(bits, next, std::memory_order_relaxed));
  if (!over || std::popcount(next) < 4 || !warn_ || d.warned.exchange(true)) return;
  char scale[32];
  std::snprintf(scale, sizeof scale, "%g", clock_.scale());
  warn_("sim: device '" + d.config->name + "': the host took " + format_seconds(real_seconds) +
        " for the real work of " + op.what + ", modelled at " + format_seconds(modelled) +
        " (time_scale " + scale +
        "), and ran past twice the model in 4 of the device's last 8 "
        "operations: the host's computation, not the model, sets this device's pace, so its "
        "timings and the scheduler's choices reflect this machine, not the simulated one. Set "
        "compute = false (timing only) or a larger time_scale");
}

void Simulator::worker_loop() {
  for (;;) {
    Op* op = nullptr;
    {
      std::unique_lock<std::mutex> lock(work_mutex_);
      work_cv_.wait(lock, [&] { return work_stop_ || !work_.empty(); });
      if (work_.empty()) return;
      op = work_.front();
      work_.pop_front();
    }
    hcr_error_t* err = nullptr;
    const auto began = Clock::Real::now();
    try {
      err = op->work(op->slot);
    } catch (...) {  // work functions guard themselves; this is the last line
      err = sdk::make_error(HCR_ERROR_INTERNAL, op->what + ": work threw");
    }
    note_real_time(*devices_[op->device], *op,
                   std::chrono::duration<double>(Clock::Real::now() - began).count());
    op->work_error = err;
    if (op->parts.fetch_sub(1, std::memory_order_acq_rel) == 1) fire(op);
  }
}

}  // namespace hcr::sim
