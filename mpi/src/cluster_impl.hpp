// The state behind hcr::mpi::Cluster: the registered buffers' version record (the submitting
// thread's) and the progress thread's transfers (its own; the inbox joins the two).
#pragma once

#include <hcr/mpi.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace hcr::mpi::detail {

// The layer's whole tag space: correctness never depends on MPI_TAG_UB. Headers carry the 64-bit
// (buffer, version); a source's payloads follow its headers in order (MPI's non-overtaking rule).
constexpr int kHeaderTag = 0;
constexpr int kDataTag = 1;

struct Entry {
  hcr::detail::BufferState* buf = nullptr;  // a reference held
  uint64_t id = 0;
  int owner = 0;
  // The same on every rank: the latest version, the rank that wrote it, who holds it.
  uint64_t version = 0;
  int writer = 0;
  std::vector<uint8_t> holders;           // by rank
  uint64_t written_by_task = UINT64_MAX;  // the task (submission number) that wrote `version`
  size_t rows = 0, cols = 0, ld = 0, elem = 0, bytes = 0;
};

struct Arrival;
class ClusterImpl;

// One send or receive of one version, from submission until its access is released and MPI is
// done with it. Made by the submitting thread; the progress thread owns it once in the inbox.
struct Op {
  enum Kind : uint8_t { send, recv } kind = send;
  ClusterImpl* cl = nullptr;
  uint32_t entry = 0;
  uint64_t version = 0;
  int peer = 0;
  // The entry's facts the progress thread needs (it never reads entries_, which the submitting
  // thread grows).
  uint64_t id = 0;
  int owner = 0;
  DType dtype = DType::bytes;
  size_t rows = 0, cols = 0, ld = 0, elem = 0, bytes = 0;
  bool contiguous() const noexcept { return rows <= 1 || ld == cols; }
  // Set by the grant (a runtime thread), read by the progress thread after the inbox hands it on.
  void* data = nullptr;
  hcr::detail::TaskNode* token = nullptr;
  std::exception_ptr grant_error;
  // Progress thread only.
  bool granted = false;
  bool failed = false;    // released with an error
  bool done = false;      // its access is released
  bool discard = false;   // a receive whose data is consumed and dropped
  bool mpi_done = false;  // a receive whose header and payload are both in
  bool settled = false;   // counted out of ClusterImpl::unsettled_ (what wait_all waits for)
  int reqs = 0;           // a send's requests in MPI's hands
  std::chrono::steady_clock::time_point since;  // granted (receive), posted (send)
  uint64_t header[4] = {0, 0, 0, 0};            // send: id, version, bytes, failed at the sender
  std::string failure_text;                     // sent in place of the payload when failed
  std::exception_ptr failure;                   // why it failed (a receive failed before its grant)
  Arrival* arrival = nullptr;                   // receive: its header, once come
};

// A header received, and then its payload.
struct Arrival {
  int src = 0;
  uint64_t id = 0, version = 0, bytes = 0;
  bool sender_failed = false;  // the payload is a failure's text (or bytes that fit nothing)
  std::exception_ptr failure;
  Op* op = nullptr;           // its receive, once registered
  std::byte* temp = nullptr;  // where the payload went when its receive was not ready
  bool early = false;         // temp counts against the early-arrival cap
  bool direct = false;        // received straight into the replica
  bool parked = false;        // waiting for memory since `parked_since`
  std::chrono::steady_clock::time_point parked_since;
  enum State : uint8_t { queued, receiving, received } state = queued;
};

struct Key {
  int src;
  uint64_t id, version;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    uint64_t h = (k.id * 0x9E3779B97F4A7C15ull) ^ (k.version * 0xC2B2AE3D27D4EB4Full) ^
                 (static_cast<uint64_t>(static_cast<uint32_t>(k.src)) << 48);
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

// What every rank checks at each wait_all: that all made the same calls. Phase 1 all-gathers
// each rank's counts and running hashes; only where they differ does phase 2 all-gather the
// buffers registered since the last check, to name the first one whose owner or shape differs.
// Made by the submitting thread, posted and completed by the progress thread (an MPI_Iallgather
// or MPI_Iallgatherv on the layer's communicator); abandoned (left to MPI, never freed) when it
// does not complete within Options::timeout.
struct Agreement {
  enum Field { kRegistered, kRegisteredHash, kSubmitted, kSubmittedHash, kRun, kFields };
  int phase = 0;                    // 1 or 2
  bool posted = false;              // (mutex_) its collective is in MPI's hands
  bool done = false;                // (mutex_) its collective completed
  int error = 0;                    // (mutex_) with this MPI error code
  std::vector<uint64_t> mine, all;  // phase 1: kFields per rank; phase 2: 2 per buffer
  std::vector<int> counts, displs;  // phase 2: uint64_t per rank
};

struct Pending {
  enum What : uint8_t { none, header, payload, send_header, send_payload, agreement } what = none;
  Op* op = nullptr;
  Arrival* arrival = nullptr;
  Agreement* check = nullptr;
};

class ClusterImpl {
 public:
  ClusterImpl(Runtime& rt, MPI_Comm comm, Options options);
  ~ClusterImpl();
  void stop();

  uint64_t distribute(hcr::detail::BufferState* b, int owner);
  uint32_t lookup(const hcr::detail::BufferState* b, const char* what) const;
  Event submit(Task& task);
  void flush();
  // Collective (every rank's wait_all): whether the ranks made the same calls since the last
  // check; the error that says how they differ, or null. With `only_if_new`, no check when this
  // rank registered and submitted nothing since the last (the destructor's wait_all).
  std::exception_ptr check_agreement(bool only_if_new);

  enum class Event_ : uint8_t { registered, granted };

  Runtime& rt_;
  Options options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;

  // Submitting thread.
  std::vector<Entry> entries_;  // by id
  std::unordered_map<const hcr::detail::BufferState*, uint32_t> index_;
  uint64_t seq_ = 0;  // tasks submitted
  // What check_agreement compares: running hashes of every registration (id, owner, shape) and of
  // every task's executor and arguments; the counts the last check agreed on; the tasks this rank
  // ran since; the checks made; the disagreement found (every later wait_all throws it again).
  uint64_t registered_hash_ = 0, submitted_hash_ = 0;
  uint64_t agreed_registered_ = 0, agreed_submitted_ = 0, run_since_ = 0, checks_ = 0;
  std::string disagreement_;
  std::exception_ptr agreement_failed_;  // a check that did not complete

  // Shared: the inbox, the stop flag, the first error.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::pair<Op*, Event_>> inbox_;
  bool stop_ = false;
  std::exception_ptr first_error_;
  // The agreement check in flight (requested by the submitting thread, done by the progress one).
  Agreement* agreement_ = nullptr;
  std::condition_variable agreement_cv_;
  // Transfers of this rank not yet over (sent, received, or failed): wait_all waits for them, as
  // a failed send's access ends before its message (the failure) goes.
  int64_t unsettled_ = 0;
  std::condition_variable settled_cv_;
  void wait_settled();

  mutable std::mutex stats_mutex_;
  Stats stats_;                                            // the progress thread's counters
  std::atomic<uint64_t> tasks_run_{0}, tasks_skipped_{0};  // the submitting thread's

 private:
  void transfer(uint32_t entry, int from, int to);
  // One phase of check_agreement: all-gathers `a` (progress thread); false when it did not
  // complete within the timeout (it is then abandoned, and `a` with it).
  bool exchange(Agreement* a, int phase);
  std::string describe_disagreement(const Agreement& phase1, const Agreement* phase2) const;
  void post_agreement();  // progress thread
  static void on_grant(void* user, void* data, hcr::detail::TaskNode* token,
                       std::exception_ptr error);
  void push(Op* op, Event_ what);
  void note_error(std::exception_ptr e);
  std::exception_ptr error_for(const Op* op, const std::string& what) const;

  // Progress thread.
  void progress();
  void on_registered(Op* op);
  void on_recv_granted(Op* op);
  void on_send_granted(Op* op);
  void finish_arrival(Op* op);
  void complete_recv(Op* op);
  void fail(Op* op, std::exception_ptr e);
  void fail_expected(const std::string& why);
  void maybe_delete(Op* op);
  void settle(Op* op);
  void start_sends();
  void post_header_recv();
  void on_header(int src);
  void pump_fifo(int src);
  bool must_let_in(const std::deque<Arrival*>& q) const;
  bool any_parked() const;
  void payload_done(Arrival* a, int err);
  void add_request(MPI_Request r, Pending::What what, Op* op, Arrival* a,
                   Agreement* agreement = nullptr);
  bool test_requests();
  void complete(const Pending& p, const MPI_Status& st);
  void check_timeouts();
  void shutdown_requests();
  MPI_Datatype type_of(const Op* op);  // a tile's rows: cols elements, ld apart

  std::thread thread_;
  std::vector<MPI_Request> reqs_;  // in MPI's hands, with what each is in pending_
  std::vector<Pending> pending_;
  std::vector<int> done_idx_;
  std::vector<MPI_Status> statuses_;
  std::vector<std::pair<Pending, MPI_Status>> done_;
  bool header_posted_ = false;
  uint64_t header_in_[4] = {0, 0, 0, 0};
  std::unordered_map<Key, Op*, KeyHash> expected_;        // receives waiting for their header
  std::unordered_map<Key, Arrival*, KeyHash> unmatched_;  // headers before their receive
  std::vector<std::deque<Arrival*>> fifo_;                // by source: payloads not yet posted
  std::vector<Op*> waiting_;                              // granted receives not yet in
  std::deque<Op*> send_q_;                                // granted sends not yet posted
  uint32_t sends_in_flight_ = 0;
  size_t early_bytes_ = 0;
  std::unordered_map<uint32_t, MPI_Datatype> types_;  // by entry, for tiles
  bool periodic_ = false;                             // pump_fifo called from check_timeouts
  std::chrono::steady_clock::time_point next_timeout_check_{};
};

}  // namespace hcr::mpi::detail
