// Owns the copies between memory nodes: lanes, urgency, handing them to plugins, completion.
//
// Each device has a lane per direction: a few copies in flight, the rest waiting, most urgent
// first.
#pragma once

#include "coherence.hpp"
#include "data_events.hpp"

#include <hcr/data.hpp>
#include <hcr/error.hpp>
#include <hcr/plugin.h>

#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <queue>
#include <string>
#include <vector>

namespace hcr::detail {

class NodeMemory;

/// What a copy's end changes in the replicas it wrote into and read from: the data manager says.
class CopyLanding {
 public:
  /// What comes of it, done after the lock.
  struct After {
    std::vector<TaskNode*> ready, retry;  // tasks to release, and to acquire again
    std::vector<Copy> more;               // copies it leads to
    std::vector<BufferState*> drop;       // references to give up
  };
  /// Copy `c` ended (failed, when `failure` is set). Called with the lock held.
  virtual void landed(const Copy& c, const std::exception_ptr& failure, After& after) noexcept = 0;

 protected:
  ~CopyLanding() = default;
};

/// A copy that failed, with the device whose plugin did it: the fault is that device's, which
/// is not always the device of the task that waited for the copy.
class CopyError : public hcr::Error {
 public:
  CopyError(const std::string& message, uint32_t device, bool lost)
      : hcr::Error(hcr::ErrorCode::backend, message), device(device), lost(lost) {}
  uint32_t device;  ///< Device::id of the device that did the copy
  bool lost;        ///< it reported itself gone (and is retired as lost)
};

/// What a failed copy says of its device: gone (the plugin's HCR_ERROR_DEVICE_LOST: the runtime
/// retires it and reports the data only it held as lost), or a fault to count toward quarantine.
ErrorCode copy_error_code(const hcr_plugin_api_t* api, hcr_error_t* error) noexcept;

class Transfers {
 public:
  Transfers(std::mutex& mutex, Coherence& coherence, NodeMemory& memory, CopyLanding& landing,
            DataEvents& events);
  ~Transfers();
  Transfers(const Transfers&) = delete;
  Transfers& operator=(const Transfers&) = delete;

  /// A node joined: its lanes (lock held).
  void add_node();
  /// Hands a copy to its device's lane: started now, or when an earlier one of the lane is done.
  void issue(const Copy& c) noexcept;
  /// A copy waiting in its lane moves up to `c.priority`: queued again, its new ticket returned
  /// (lock held). The entry left behind is dropped when it comes up.
  uint64_t queue_again(const Copy& c);
  /// Until every copy handed to a lane has completed (abandoned nodes' lanes aside).
  void drain() noexcept;
  /// Bytes and copies per link, for DataCounters (lock held).
  void count_link(uint32_t from, uint32_t to, uint64_t bytes);
  void links(DataCounters& c) const;

 private:
  // The copies of one device's engine in one direction: a few in flight in the plugin (so that
  // it never idles between two), the rest waiting here, the most urgent task's first. Copies
  // handed to a plugin run in the order given; without this a copy for an urgent task would
  // wait behind every prefetch placed before it.
  struct Lane {
    static constexpr uint32_t kDepth = 2;
    uint32_t in_flight = 0;
    uint64_t seq = 0;
    // A copy whose priority rose waits twice: the entry whose seq is no longer its replica's
    // ticket is dropped when it comes up.
    struct Waiting {
      int priority;
      uint64_t seq;
      Copy copy;
      bool operator<(const Waiting& o) const {
        return priority != o.priority ? priority < o.priority : seq > o.seq;
      }
    };
    std::priority_queue<Waiting> waiting;
  };
  struct Lanes {
    Lane in, out;  // copies into this node, and out of it to host memory
  };
  struct Transfer;

  Lane& lane(const Copy& c) noexcept;  // lock held
  void start(const Copy& c) noexcept;  // hands it to the plugin
  static void on_copy_done(void* user, hcr_error_t* error, const hcr_completion_info_t* info);
  void copy_done(Transfer* tr, hcr_error_t* error) noexcept;
  // A second answer for a copy (done again, or an error returned after done): counted in the
  // device's protocol_errors and logged, never completing a copy twice.
  void copy_answered_twice(Transfer* tr, hcr_error_t* error, bool returned) noexcept;

  std::mutex& mutex_;  // the data manager's
  Coherence& coherence_;
  NodeMemory& memory_;
  CopyLanding& landing_;
  DataEvents& events_;
  std::vector<Lanes> lanes_;  // per node, under the lock
  // Every Transfer made, freed with the Transfers only (see Transfer); those not in flight.
  std::vector<Transfer*> transfers_;                                              // lock held
  Transfer* free_transfers_ = nullptr;                                            // lock held
  std::map<std::pair<uint32_t, uint32_t>, std::pair<uint64_t, uint64_t>> links_;  // bytes, copies
};

}  // namespace hcr::detail
