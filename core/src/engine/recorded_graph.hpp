// Recorded graphs: the recording in progress (Recorder, one per runtime, fed by Runtime::submit)
// and what it produces (RecordedGraph, hcr::Graph's state), which submits its tasks again through
// TaskGraph::submit_prepared: its internal edges were found once, while recording; the buffers'
// dependency frontiers see only two joins per replay, one in front (waiting for the work before
// it on each buffer) and one behind (what work after it waits for).
//
// Thread safety: Recorder's calls take its mutex; a RecordedGraph replays under its own mutex.
#pragma once

#include "halo_reads.hpp"
#include "../task_node.hpp"

#include <hcr/detail/handles.hpp>
#include <hcr/graph.hpp>
#include <hcr/types.hpp>

#include <boost/container/small_vector.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace hcr::detail {

class DeviceGraphs;
class KernelRegistry;
class Reductions;
struct DeviceGraph;
class TaskGraph;
struct BufferState;
struct KernelState;

/// One recorded task: what a replay copies into a fresh task record. Buffers are by slot in
/// RecordedGraph::buffers_, so that a replay can bind others in their place.
struct RecordedTask {
  struct Arg {
    uint32_t slot;
    Access access;
  };
  struct Next {
    uint32_t task;
    bool data;  // as Edge::data
  };
  KernelState* kernel = nullptr;  // a reference held by the graph
  boost::container::small_vector<Arg, 3> args;
  boost::container::small_vector<Arg, 3> uargs;  // one per distinct buffer, modes combined
  boost::container::small_vector<std::byte, 32> params;
  boost::container::small_vector<uint32_t, 4> param_offsets;
  std::vector<ScratchRec> scratch;
  uint64_t scratch_bytes = 0;
  uint64_t global_size[3] = {0, 0, 0};
  uint32_t local_size[3] = {0, 0, 0};
  int32_t priority = 0, user_priority = 0, pinned = -1;
  ContextState* context = nullptr;
  bool commutes = false;
  uint64_t footprint = 0;
  double size = 0;
  boost::container::small_vector<Next, 2> successors;
  uint32_t predecessors = 0;
  // The device it ran on last (-1: unknown): the first one a replay offers it to.
  int32_t device = -1;
};

/// What a replay asks of the runtime it replays in (RuntimeCore implements it).
class ReplayHost {
 public:
  /// Throws Error(shutdown) once the runtime has ended, naming the call.
  virtual void check_replay_alive(std::string_view what) const = 0;
  /// Whether a recording is open (a replay then is refused).
  virtual bool recording() const noexcept = 0;
  virtual uint32_t replay_devices() const noexcept = 0;
  /// Device graphs (engine/device_graphs.hpp): whether they are on, the plugins' handles.
  virtual DeviceGraphs& device_graphs() noexcept = 0;

 protected:
  ~ReplayHost() = default;
};

class RecordedGraph {
 public:
  RecordedGraph(TaskGraph& graph, KernelRegistry& kernels, Reductions& reductions)
      : graph_(graph), kernels_(kernels), reductions_(reductions) {}
  ~RecordedGraph();
  RecordedGraph(const RecordedGraph&) = delete;
  RecordedGraph& operator=(const RecordedGraph&) = delete;

  /// Submits the tasks again, `bindings` in place of recorded buffers (see hcr::Graph).
  Ref<TaskNode> replay(std::span<const Binding> bindings);

  size_t tasks() const noexcept { return tasks_.size(); }
  size_t buffers() const noexcept { return buffers_.size(); }
  size_t edges() const noexcept { return edges_; }

 private:
  friend class Recorder;
  // The task record of task `i` for this replay: the last run's, made afresh in the same storage
  // once nothing else holds it (the usual case: that run finished), else a new one.
  TaskNode* record_for(size_t i);
  void fill(TaskNode* n, const RecordedTask& r, BufferState* const* bound);
  void link(BufferState* const* bound, TaskNode* front, TaskNode* back) noexcept;

  // ---- device graphs (engine/device_graphs.hpp) ----
  // A replay is one device graph's launch (one task, the graph task, of kernel "graph (N tasks)",
  // pinned to device D, accessing each of the graph's buffers once in its combined mode) when:
  //  - device graphs are on ([runtime] device_graphs) and D's plugin has the ABI 1.2 entries;
  //  - the graph has no reduce access, halo tile, scratch, commute access or context (device_
  //    graph_ok_: those keep their task-by-task machinery);
  //  - every task ran on D, and succeeded, in the last task-by-task run (the recording's, or a
  //    replay's), and D takes work now;
  //  - D's plugin created the graph (once, lazily; refused: never asked again for D);
  //  - no launch of it is in flight (a concurrent replay runs task by task).
  // With several devices, every kReexamine-th replay runs task by task again, so that placement
  // can move tasks (graph.hpp).
  static constexpr uint32_t kReexamine = 64;
  /// The graph task of this replay, or null when it runs task by task.
  Ref<TaskNode> replay_on_device(BufferState* const* bound);
  /// D's device graph, made on first use (DeviceGraphs::make); null when D's plugin refused it.
  DeviceGraph* device_graph(uint32_t d, BufferState* const* bound);
  bool device_graph_ok_ = false;
  bool placement_seen_ = false;              // graph_device_ is the last task-by-task run's
  int32_t graph_device_ = -1;                // the one device every task ran on then, or -1
  uint32_t graph_replays_ = 0;               // device-graph replays since that run
  std::vector<DeviceGraph*> device_graphs_;  // per device (a reference each), null: none yet
  std::vector<uint8_t> graph_refused_;       // per device: its plugin refused the graph
  KernelState* graph_kernel_ = nullptr;      // "graph (N tasks)" (a reference)

  TaskGraph& graph_;
  KernelRegistry& kernels_;
  RuntimeCore* rt_ = nullptr;
  ReplayHost* host_ = nullptr;
  std::shared_ptr<RuntimeCore> keep_;  // the runtime outlives its buffers and this graph
  std::vector<Ref<BufferState>> buffers_;
  std::vector<BufferState*> recorded_;  // buffers_, plain
  std::vector<Access> modes_;           // per buffer, every recorded access combined
  std::vector<Ref<KernelState>> kernels_used_;
  std::deque<RecordedTask> tasks_;  // (a deque: recording appends without moving them)
  std::vector<uint32_t> roots_;     // tasks without recorded predecessors
  size_t edges_ = 0;

  std::mutex mutex_;
  std::vector<TaskNode*> nodes_;  // the last run's task records, a reference each
  std::vector<TaskNode*> batch_;  // one replay's: front join, tasks, back join
  std::vector<BufferState*> bound_;

  // ---- reduce accesses and halo tiles (recorded_reductions_halos.cpp) ----
  // A reduce access's private copy, a slot the replay binds to a fresh copy each time. Its target
  // is a slot too (so that a replay can bind another), accessed as a read by the replay's joins.
  struct CopySlot {
    uint32_t slot;
    uint32_t target;
    Ref<KernelState> combine;  // the target's reduction when recorded: a bound target's must match
    // Filled on the host with `identity` (a built-in reduction); else the graph's identity task,
    // recorded with the reduce task, writes it.
    bool fill = false;
    bool zero = false;
    std::array<std::byte, 8> identity{};
    // Folded by the graph's own combine tasks (the target was accessed in another mode while
    // recording); else a contribution to the target once the replay is submitted.
    bool combined = false;
  };
  std::vector<CopySlot> copies_;
  std::vector<Ref<BufferState>> fresh_;  // one replay's private copies, as copies_
  // What each slot is: what a replay combines first (kPlain slots) and what it makes afresh.
  enum SlotKind : uint8_t { kPlain = 0, kCopy = 1, kReduceTarget = 2 };
  std::vector<uint8_t> slot_kinds_;  // per slot (empty: all plain)
  // A halo tile read by the graph and its neighbours by place (their slots), for the bindings'
  // check: the ghosts' reads are recorded edges, valid only where a bound tile's neighbours are
  // the buffers bound in place of the recorded tile's.
  struct HaloSlot {
    struct Neighbour {
      uint32_t slot;
      int8_t di, dj;
    };
    uint32_t slot;
    boost::container::small_vector<Neighbour, 8> neighbours;
  };
  std::deque<HaloSlot> halos_;  // (a deque: each made in place, never moved; see Recorder::commit)
  // A task with halo tiles: the devices Runtime::submit excluded for it (engine/halo_reads.hpp).
  struct Excluded {
    uint32_t task;
    boost::container::small_vector<uint32_t, 2> devices;
    std::string why;
  };
  std::vector<Excluded> excluded_;
  Reductions& reductions_;

  // replay()'s steps for them, each a no-op for a graph without any:
  /// With bindings: refuses a halo tile bound where its neighbours are not (or a plain buffer in
  /// place of a halo tile the graph reads, or the reverse).
  void check_halo_bindings(BufferState* const* bound) const;
  /// Combines the contributions pending on the plain buffers the graph uses (as Runtime::submit
  /// does for each argument), checks the bound reduce targets and binds fresh private copies;
  /// returns the bindings to use.
  BufferState* const* prepare_reductions(BufferState* const* bound);
  /// The excluded devices of the halo tasks, on their fresh records (nodes_).
  void exclude_devices();
  /// After the replay's submit: its copies that no recorded combine folds join their targets'
  /// contributions.
  void contribute(BufferState* const* bound);
};

/// The recording in progress, one per runtime: Runtime::begin_recording() to end_recording().
class Recorder {
 public:
  Recorder(TaskGraph& graph, KernelRegistry& kernels, Reductions& reductions)
      : graph_(graph), kernels_(kernels), reductions_(reductions) {}

  /// Whether a recording is open (read on every submit: a relaxed load).
  bool on() const noexcept { return on_.load(std::memory_order_relaxed); }
  /// Throws Error(invalid_argument) when a recording is open already.
  void begin(std::shared_ptr<RuntimeCore> rt, ReplayHost& host);
  /// Throws Error(invalid_argument) when none is open.
  std::shared_ptr<RecordedGraph> end();

  /// Throws Error(unsupported) for a task a recording cannot replay. Every kernel task can be
  /// recorded now: reduce accesses (a replay makes fresh private copies, and the identity and
  /// combine tasks submitted while recording are recorded with them) and halo tiles (the ghosts'
  /// reads of the neighbours are recorded edges) included; Runtime::submit keeps the check.
  static void check_recordable(const TaskNode& t);
  /// Runtime::submit while recording: keeps `t` (a kernel task, checked, not yet submitted) and
  /// submits it with `submit`, under the recorder's lock so that the recorded order is the
  /// submission order. Tasks a kernel submits are not recorded (the kernel submits them again
  /// when replayed): the caller submits those itself.
  template <class Submit>
  void record_and_submit(TaskNode* t, Submit&& submit) {
    std::lock_guard<std::mutex> g(mutex_);
    if (!on_.load(std::memory_order_relaxed)) {
      submit();
      return;
    }
    Captured c = capture(*t);
    submit();
    commit(std::move(c));
  }

 private:
  // What a submit consumes, kept across it: the task's fields, its buffers, its explicit
  // dependencies (by identity only) and its record.
  struct Captured {
    RecordedTask r;
    boost::container::small_vector<Ref<BufferState>, 3> buffers;
    boost::container::small_vector<Access, 3> modes;
    boost::container::small_vector<const TaskNode*, 1> after;
    Ref<TaskNode> node;
    // Its reduce accesses: the private copy (among `buffers`), the target and its reduction.
    struct Reduce {
      BufferState* copy;
      Ref<BufferState> target;
      RecordedGraph::CopySlot info;  // slot and target filled by commit
    };
    boost::container::small_vector<Reduce, 1> reduces;
    // The halo tiles it reads (among `buffers`) and their neighbours.
    struct HaloRead {
      BufferState* tile;
      HaloNeighbours neighbours;
    };
    boost::container::small_vector<HaloRead, 1> halos;
    boost::container::small_vector<uint32_t, 2> excluded;
    std::string excluded_why;
  };
  Captured capture(TaskNode& t);
  void commit(Captured c);

  // The dependency frontier of a buffer within the recording (task_graph.cpp's rules, by index).
  struct Frontier {
    std::vector<uint32_t> writers;  // the last writer, or the tasks of a closed commute run
    std::vector<uint32_t> readers;  // since the writers
    std::vector<RecordedTask::Next> before_run;
    std::vector<uint32_t> run;  // an open commute run
    bool run_open = false;
  };
  void add_edge(uint32_t pred, uint32_t succ, bool data);
  uint32_t slot_of(const Ref<BufferState>& b, Access access);
  void access(uint32_t self, uint32_t slot, Access mode);

  TaskGraph& graph_;
  KernelRegistry& kernels_;
  Reductions& reductions_;
  std::mutex mutex_;
  std::atomic<bool> on_{false};
  std::shared_ptr<RecordedGraph> g_;
  std::unordered_map<BufferState*, uint32_t> slots_;
  std::unordered_map<KernelState*, bool> kernels_seen_;
  std::unordered_map<const TaskNode*, uint32_t> index_;  // recorded task records -> their index
  std::vector<Frontier> frontiers_;                      // per slot
  std::vector<TaskNode*> recorded_nodes_;                // a reference each
  std::unordered_set<uint64_t> edge_set_;                // pred << 32 | succ
  std::unordered_map<uint32_t, uint32_t> copy_index_;    // copy slots -> their index in copies_
  std::unordered_set<uint32_t> halo_seen_;               // halo tile slots in halos_
};

}  // namespace hcr::detail
