// Owns bringing device data home: eager write-through, evacuating a device, and shutdown.
#pragma once

#include "coherence.hpp"
#include "data_events.hpp"

#include <hcr/plugin.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace hcr::detail {

class NodeMemory;
class Transfers;

class WriteBack {
 public:
  WriteBack(std::mutex& mutex, Coherence& coherence, NodeMemory& memory, Transfers& transfers,
            DataEvents& events)
      : mutex_(mutex),
        coherence_(coherence),
        memory_(memory),
        transfers_(transfers),
        events_(events) {}
  WriteBack(const WriteBack&) = delete;
  WriteBack& operator=(const WriteBack&) = delete;

  /// "eager": a task's writes on a device are copied home before it finishes (Config::writeback).
  void set_eager(bool on) noexcept { eager_ = on; }
  /// See DataManager::write_through.
  bool write_through(TaskNode* t);
  /// See DataManager::evacuate.
  bool evacuate(uint32_t node, double timeout_s) noexcept;
  /// Copies every buffer whose only valid replica is on a device home, frees all allocations;
  /// `active` goes false (under the lock) once nothing is left on a device.
  void shutdown(std::atomic<bool>& active) noexcept;

 private:
  struct WriteThrough;
  static void on_stage_done(void* user, hcr_error_t* error, const hcr_completion_info_t* info);
  void finish_write_through(WriteThrough* wt) noexcept;

  std::mutex& mutex_;  // the data manager's
  Coherence& coherence_;
  NodeMemory& memory_;
  Transfers& transfers_;
  DataEvents& events_;
  bool eager_ = false;
};

}  // namespace hcr::detail
