// Launches in flight (launches.hpp): slots, answers, and the watchdog.
#include "launches.hpp"

#include "../buffer_state.hpp"
#include "../data/data_manager.hpp"
#include "../kernel_state.hpp"
#include "../log_internal.hpp"
#include "../plugins/plugin_loader.hpp"
#include "../task_node.hpp"
#include "../units.hpp"

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace hcr::detail {

Launches::Launches(DeviceTable& devices, AttemptEnd& end, DataManager& data, double task_timeout)
    : devices_(devices),
      end_(end),
      data_(data),
      task_timeout_(task_timeout),
      task_timeout_duration_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(task_timeout))) {
  if (task_timeout_ > 0) watchdog_thread_ = std::thread([this] { watchdog(); });
}

void Launches::stop() noexcept {
  if (!watchdog_thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> g(watchdog_mutex_);
    watchdog_stop_ = true;
  }
  watchdog_cv_.notify_all();
  watchdog_thread_.join();
}

void Launches::watch(void* token) const noexcept {
  // The last touch of the task before comes first (release; the watchdog reads the deadline
  // with acquire).
  if (task_timeout_ > 0)
    LaunchTable::slot(LaunchTable::index_of(token))
        ->deadline_ns.store(
            std::chrono::duration_cast<std::chrono::nanoseconds>(
                (std::chrono::steady_clock::now() + task_timeout_duration_).time_since_epoch())
                .count(),
            std::memory_order_release);
}

bool Launches::try_arm(uint32_t index, TaskNode* t) noexcept {
  LaunchSlot& s = *LaunchTable::slot(index);
  const uint64_t st = s.state.load(std::memory_order_acquire);
  if (LaunchSlot::status(st) != LaunchSlot::kFree) return false;
  // Free slots change hands only here (one pumper per device). The generation moves first, then
  // the fields, then the status: a late call for the previous launch that reads the kernel field
  // (acquire, pairing with the release here) and then the generation sees whether the field is
  // still that launch's (protocol_error).
  const uint64_t gen = (LaunchSlot::generation(st) + 1) & LaunchSlot::kGenerationMask;
  s.state.store(LaunchSlot::make(gen, LaunchSlot::kFree), std::memory_order_relaxed);
  s.task.store(t, std::memory_order_relaxed);
  s.kernel.store(t->kernel->name.c_str(), std::memory_order_release);
  s.deadline_ns.store(std::numeric_limits<int64_t>::max(), std::memory_order_relaxed);
  t->launch_token = LaunchTable::token(index, gen);
  s.state.store(LaunchSlot::make(gen, LaunchSlot::kArmed), std::memory_order_release);
  return true;
}

bool Launches::arm(DeviceState& d, TaskNode* t) noexcept {
  const uint32_t chunks = d.slot_chunks_used.load(std::memory_order_relaxed);
  const uint32_t capacity = chunks * LaunchTable::kChunk;
  for (uint32_t probe = 0; probe < capacity; ++probe) {
    const uint32_t i = d.slot_cursor;
    d.slot_cursor = i + 1 == capacity ? 0 : i + 1;
    const uint32_t chunk = d.slot_chunks[i / LaunchTable::kChunk].load(std::memory_order_relaxed);
    if (try_arm(chunk * LaunchTable::kChunk + i % LaunchTable::kChunk, t)) return true;
  }
  // Every slot is busy: one chunk more (the first launch of a device comes here too).
  if (chunks == DeviceState::kMaxSlotChunks) return false;
  uint32_t chunk;
  try {
    chunk = LaunchTable::take_chunk(&d);
  } catch (...) {
    return false;
  }
  if (chunk == LaunchTable::kNone) return false;
  d.slot_chunks[chunks].store(chunk, std::memory_order_relaxed);
  d.slot_chunks_used.store(chunks + 1, std::memory_order_release);  // the watchdog reads them
  d.slot_cursor = capacity + 1;
  return try_arm(chunk * LaunchTable::kChunk, t);
}

void Launches::disarm(TaskNode* t) noexcept {
  void* token = std::exchange(t->launch_token, nullptr);
  if (token == nullptr) return;
  LaunchTable::slot(LaunchTable::index_of(token))
      ->state.store(LaunchSlot::make(LaunchTable::generation_of(token), LaunchSlot::kFree),
                    std::memory_order_release);
}

void Launches::on_done(void* token, hcr_error_t* error, const hcr_completion_info_t* info) {
  answered(token, error, info, false);
}

void Launches::answered(void* token, hcr_error_t* error, const hcr_completion_info_t* info,
                        bool returned) noexcept {
  LaunchSlot* s = LaunchTable::slot(LaunchTable::index_of(token));
  if (s == nullptr) {  // no plugin known to free the error through: it is left
    HCR_LOG(error, "a plugin answered a launch with a token the runtime never issued ("
                       << token << "): ignored");
    return;
  }
  const uint64_t gen = LaunchTable::generation_of(token);
  for (;;) {
    uint64_t st = s->state.load(std::memory_order_acquire);
    if (LaunchSlot::generation(st) != gen) break;  // the slot has moved on: a late answer
    const LaunchSlot::Status status = LaunchSlot::status(st);
    if (status == LaunchSlot::kArmed) {  // the first answer: it ends the launch
      TaskNode* t = s->task.load(std::memory_order_relaxed);
      if (!s->state.compare_exchange_strong(st, LaunchSlot::make(gen, LaunchSlot::kFree),
                                            std::memory_order_acq_rel))
        continue;
      t->launch_token = nullptr;
      s->device.load(std::memory_order_relaxed)->attempts->launch_done(t, error, info, nullptr);
      return;
    }
    if (status == LaunchSlot::kGivingUp) {  // the watchdog is taking it over: a moment
      std::this_thread::yield();
      continue;
    }
    if (status == LaunchSlot::kGivenUp) {  // back after the watchdog gave up: only let go
      HungLaunch* h = s->hung.load(std::memory_order_relaxed);
      DeviceState* d = s->device.load(std::memory_order_relaxed);
      const char* kernel = s->kernel.load(std::memory_order_relaxed);
      if (!s->state.compare_exchange_strong(st, LaunchSlot::make(gen, LaunchSlot::kFree),
                                            std::memory_order_acq_rel))
        continue;
      if (error != nullptr) d->plugin->api->error_destroy(error);
      HCR_LOG(debug, "kernel '" << kernel << "' on device '" << d->info.name
                                << "' came back after the task timeout gave up on it");
      release_hung(h, true);
      return;
    }
    break;  // free: answered before
  }
  protocol_error(*s, gen, error, returned);
}

void Launches::protocol_error(LaunchSlot& s, uint64_t gen, hcr_error_t* error,
                              bool returned) noexcept {
  // The slot's device is valid while its plugin can call (devices outlive their plugins; a plugin
  // left running at shutdown keeps the whole runtime). Its kernel field names this launch's
  // kernel unless the generation has moved on since (see try_arm; kernels outlive plugins too).
  DeviceState* d = s.device.load(std::memory_order_acquire);
  const char* kernel = s.kernel.load(std::memory_order_acquire);
  if (LaunchSlot::generation(s.state.load(std::memory_order_relaxed)) != gen) kernel = nullptr;
  if (d == nullptr) {
    HCR_LOG(error, "a launch was answered after its runtime had ended: ignored");
    return;
  }
  if (error != nullptr) d->plugin->api->error_destroy(error);
  const uint64_t n = d->protocol_errors.fetch_add(1, std::memory_order_relaxed) + 1;
  std::ostringstream msg;
  msg << "plugin '" << d->plugin->name << "' "
      << (returned ? "returned an error from launch after calling done for it"
                   : "called done for a launch that had been answered already")
      << " (kernel '" << (kernel != nullptr ? kernel : "?") << "' on device '" << d->info.name
      << "'): ignored";
  if (n == 1) {
    msg << "; further ones are counted in stats().devices[" << d->info.id << "].protocol_errors";
    log::write(LogLevel::error, msg.str());
  } else if (log::enabled(LogLevel::debug)) {
    log::write(LogLevel::debug, msg.str());
  }
}

void Launches::release_hung(HungLaunch* h, bool answered) noexcept {
  if (h->scratch != nullptr) {
    if (answered) h->data->give_back_held(h->scratch);
    else DataManager::forget_held(h->scratch);
  }
  for (BufferState* b : h->buffers) release(b);
  release(h->task);  // its kernel holds the runtime: possibly the last reference
  delete h;
}

void Launches::watchdog() noexcept {
  std::unique_lock<std::mutex> lock(watchdog_mutex_);
  const auto tick = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::min(0.1, task_timeout_ / 4)));
  const std::string why =
      "did not complete within the task timeout of " + detail::format_seconds(task_timeout_);
  while (!watchdog_cv_.wait_for(lock, tick, [&] { return watchdog_stop_; })) {
    const auto now = std::chrono::steady_clock::now();
    const int64_t now_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
    std::vector<TaskNode*> expired;
    for (size_t i = 0, n = devices_.count(); i < n; ++i)
      for_each_slot(devices_[i], [&](LaunchSlot& s) {
        uint64_t st = s.state.load(std::memory_order_acquire);
        if (LaunchSlot::status(st) != LaunchSlot::kArmed ||
            s.deadline_ns.load(std::memory_order_acquire) > now_ns)
          return;
        TaskNode* t = s.task.load(std::memory_order_relaxed);
        const uint64_t gen = LaunchSlot::generation(st);
        if (!s.state.compare_exchange_strong(st, LaunchSlot::make(gen, LaunchSlot::kGivingUp),
                                             std::memory_order_acq_rel))
          return;  // answered meanwhile
        // The attempt is ours to end, so the task is still running it, with its arguments. What
        // the plugin may still be using is held until its done arrives (which waits for
        // kGivenUp): the task ends elsewhere, and would let go of its buffers.
        auto* h = new HungLaunch{t, {}};
        retain(t);
        for (const ArgRec& a : t->args) {
          retain(a.buffer);
          h->buffers.push_back(a.buffer);
        }
        // Its scratch blocks stay out of the pool: another task would be handed them.
        if (!t->scratch.empty()) {
          h->scratch = data_.hold_scratch(t);
          h->data = &data_;
        }
        t->launch_token = nullptr;
        s.hung.store(h, std::memory_order_relaxed);
        s.state.store(LaunchSlot::make(gen, LaunchSlot::kGivenUp), std::memory_order_release);
        expired.push_back(t);  // alive until launch_done ends it (its running reference)
      });
    lock.unlock();
    for (TaskNode* t : expired) end_.launch_done(t, nullptr, nullptr, why.c_str());
    lock.lock();
  }
}

std::vector<PluginInstance*> Launches::settle_hung(
    const std::vector<std::unique_ptr<PluginInstance>>& plugins) noexcept {
  std::vector<PluginInstance*> stuck;
  // A few timeouts, at least a second: time for a launch that was merely slow to come back.
  const auto grace = std::max<std::chrono::steady_clock::duration>(
      4 * std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::duration<double>(task_timeout_)),
      std::chrono::seconds(1));
  for (auto& p : plugins) {
    auto hung = [&] {
      std::vector<std::string> out;
      for (uint32_t i = 0; i < devices_.appended(); ++i) {
        DeviceState* d = &devices_[i];
        if (d->plugin != p.get()) continue;
        Launches::for_each_slot(*d, [&](LaunchSlot& s) {
          const auto st = LaunchSlot::status(s.state.load(std::memory_order_acquire));
          if (st == LaunchSlot::kGivenUp || st == LaunchSlot::kGivingUp)
            out.push_back(std::string("kernel '") + s.kernel.load(std::memory_order_relaxed) +
                          "' on device '" + d->info.name + "'");
        });
      }
      return out;
    };
    if (hung().empty()) continue;
    // Its synchronize ends what a simulated or GPU device can end; a CPU kernel that never
    // returns keeps it waiting forever: a helper thread calls it, and is left behind if so.
    struct Sync {
      std::mutex m;
      std::condition_variable cv;
      bool done = false;
    };
    auto sync = std::make_shared<Sync>();
    std::vector<size_t> indices;
    for (uint32_t i = 0; i < devices_.appended(); ++i)
      if (devices_[i].plugin == p.get()) indices.push_back(devices_[i].index);
    bool done = false;
    try {
      std::thread([sync, api = p->api, handle = p->handle, indices] {
        for (size_t i : indices)
          if (hcr_error_t* e = api->synchronize(handle, i)) api->error_destroy(e);
        std::lock_guard<std::mutex> g(sync->m);
        sync->done = true;
        sync->cv.notify_all();
      }).detach();
      std::unique_lock<std::mutex> lock(sync->m);
      done = sync->cv.wait_for(lock, grace, [&] { return sync->done; });
    } catch (...) {  // no thread: treat it as stuck rather than wait forever
    }
    std::vector<std::string> left = hung();
    if (done && left.empty()) continue;
    std::string list;
    for (const std::string& h : left) list += (list.empty() ? "" : ", ") + h;
    HCR_LOG(error, "shutdown: plugin '"
                       << p->name << "' has not returned from " << left.size()
                       << " launch(es) the task timeout gave up on (" << list << ") within "
                       << format_seconds(std::chrono::duration<double>(grace).count())
                       << "; the runtime ends without it: the plugin stays "
                          "loaded and running, and the tasks' buffers allocated");
    stuck.push_back(p.get());
  }
  return stuck;
}

void Launches::return_slots(DeviceState& d) noexcept {
  // Releasing what a launch given up on held if its plugin ended without answering.
  for_each_slot(d, [](LaunchSlot& s) {
    uint64_t st = s.state.load(std::memory_order_acquire);
    if (LaunchSlot::status(st) == LaunchSlot::kGivenUp &&
        s.state.compare_exchange_strong(
            st, LaunchSlot::make(LaunchSlot::generation(st), LaunchSlot::kFree)))
      release_hung(s.hung.load(std::memory_order_relaxed), false);
  });
  for (uint32_t c = 0, n = d.slot_chunks_used.load(); c < n; ++c)
    LaunchTable::give_back(d.slot_chunks[c].load(std::memory_order_relaxed));
  d.slot_chunks_used.store(0, std::memory_order_release);
}

}  // namespace hcr::detail
