// Recorded graphs (recorded_graph.hpp): recording what Runtime::submit is given, and replaying it
// through TaskGraph::submit_prepared with the edges found once.
#include "recorded_graph.hpp"

#include "device_graphs.hpp"
#include "reductions.hpp"
#include "task_graph.hpp"
#include "../buffer_state.hpp"
#include "../kernel_registry.hpp"
#include "../kernel_state.hpp"
#include "../log_internal.hpp"

#include <hcr/error.hpp>
#include <hcr/sched.hpp>

#include <algorithm>
#include <new>
#include <string>
#include <utility>

namespace hcr::detail {

// ---- recording ----------------------------------------------------------------------------------

void Recorder::check_recordable(const TaskNode&) {}

void Recorder::begin(std::shared_ptr<RuntimeCore> rt, ReplayHost& host) {
  std::lock_guard<std::mutex> g(mutex_);
  if (on_.load(std::memory_order_relaxed))
    throw Error(ErrorCode::invalid_argument,
                "Runtime::begin_recording: a recording is open already (recordings do not nest): "
                "end_recording() first");
  g_ = std::make_shared<RecordedGraph>(graph_, kernels_, reductions_);
  g_->rt_ = rt.get();
  g_->host_ = &host;
  g_->keep_ = std::move(rt);
  on_.store(true, std::memory_order_relaxed);
}

std::shared_ptr<RecordedGraph> Recorder::end() {
  std::lock_guard<std::mutex> g(mutex_);
  if (!on_.load(std::memory_order_relaxed))
    throw Error(ErrorCode::invalid_argument,
                "Runtime::end_recording without a Runtime::begin_recording to end");
  on_.store(false, std::memory_order_relaxed);
  std::shared_ptr<RecordedGraph> out = std::move(g_);
  for (uint32_t i = 0; i < out->tasks_.size(); ++i)
    if (out->tasks_[i].predecessors == 0) out->roots_.push_back(i);
  if (!out->copies_.empty()) {
    out->slot_kinds_.assign(out->buffers_.size(), RecordedGraph::kPlain);
    for (const RecordedGraph::CopySlot& c : out->copies_) {
      out->slot_kinds_[c.slot] = RecordedGraph::kCopy;
      // A target no recorded task accesses itself: what is pending on it is combined later.
      if (out->modes_[c.target] == Access::read &&
          out->slot_kinds_[c.target] == RecordedGraph::kPlain)
        out->slot_kinds_[c.target] = RecordedGraph::kReduceTarget;
    }
    for (const RecordedTask& t : out->tasks_)
      for (const RecordedTask::Arg& a : t.args)
        if (out->slot_kinds_[a.slot] == RecordedGraph::kReduceTarget)
          out->slot_kinds_[a.slot] = RecordedGraph::kPlain;
  }
  // What device graphs leave to the task-by-task machinery (recorded_graph.hpp).
  out->device_graph_ok_ = out->copies_.empty() && out->halos_.empty() && out->excluded_.empty();
  for (const RecordedTask& t : out->tasks_)
    if (!t.scratch.empty() || t.commutes || t.context != nullptr) out->device_graph_ok_ = false;
  // The recording's own task records are the first run's: reused once they are free.
  out->nodes_ = std::move(recorded_nodes_);
  recorded_nodes_.clear();
  slots_.clear();
  kernels_seen_.clear();
  index_.clear();
  frontiers_.clear();
  edge_set_.clear();
  copy_index_.clear();
  halo_seen_.clear();
  return out;
}

Recorder::Captured Recorder::capture(TaskNode& t) {
  Captured c;
  RecordedTask& r = c.r;
  for (const ArgRec& a : t.args) {
    c.buffers.push_back(Ref<BufferState>::share(a.buffer));
    c.modes.push_back(a.access);
  }
  c.after.assign(t.after.begin(), t.after.end());
  c.node = Ref<TaskNode>::share(&t);
  // A reduce access: its copy is an argument already; what a replay needs to make another.
  for (const ReduceRec& x : t.reduces) {
    Captured::Reduce red{x.copy, Ref<BufferState>::share(x.target), {}};
    ReductionState& s = *x.target->reduction.load(std::memory_order_acquire);
    std::lock_guard<std::mutex> lock(s.mutex);
    red.info.combine = s.combine;
    red.info.fill = !s.identity_kernel;
    red.info.zero = red.info.fill && s.zero_identity;
    red.info.identity = s.identity;
    c.reduces.push_back(std::move(red));
  }
  // A halo tile read: its neighbours, whose edges the task reads too (TaskGraph::submit registers
  // it as their reader), and the devices Runtime::submit excluded for it.
  for (const ArgRec& a : t.args)
    if (a.buffer->halo != 0 && reads(a.access)) {
      bool seen = false;
      for (const Captured::HaloRead& h : c.halos) seen = seen || h.tile == a.buffer;
      if (!seen) c.halos.push_back({a.buffer, halo_neighbours(*a.buffer)});
    }
  bool halo = false;
  for (const ArgRec& a : t.args) halo = halo || a.buffer->halo != 0;
  if (halo) {
    c.excluded.assign(t.excluded.begin(), t.excluded.end());
    c.excluded_why = t.device_errors;
  }
  r.kernel = t.kernel;
  r.params = t.params;
  r.param_offsets = t.param_offsets;
  r.scratch = t.scratch;
  r.scratch_bytes = t.scratch_bytes;
  std::copy(std::begin(t.global_size), std::end(t.global_size), r.global_size);
  std::copy(std::begin(t.local_size), std::end(t.local_size), r.local_size);
  r.priority = t.priority;
  r.user_priority = t.user_priority;
  r.pinned = t.pinned;
  r.context = t.context;
  compute_footprint(&t);  // shapes only: the same for every buffer a replay may bind
  r.footprint = t.footprint;
  r.size = t.size;
  return c;
}

void Recorder::add_edge(uint32_t pred, uint32_t succ, bool data) {
  if (pred == succ) return;
  RecordedTask& p = g_->tasks_[pred];
  if (!edge_set_.insert((uint64_t{pred} << 32) | succ).second) {
    for (RecordedTask::Next& n : p.successors)
      if (n.task == succ) n.data = n.data || data;
    return;
  }
  p.successors.push_back({succ, data});
  ++g_->tasks_[succ].predecessors;
  ++g_->edges_;
}

// The slot of `b` (a fresh one the first time), its modes joined by `access`.
uint32_t Recorder::slot_of(const Ref<BufferState>& b, Access access) {
  RecordedGraph& g = *g_;
  auto [it, fresh] = slots_.emplace(b.get(), static_cast<uint32_t>(g.buffers_.size()));
  if (fresh) {
    g.buffers_.push_back(b);
    g.recorded_.push_back(b.get());
    g.modes_.push_back(access);
    frontiers_.emplace_back();
  }
  const uint32_t slot = it->second;
  g.modes_[slot] = static_cast<Access>(static_cast<int>(g.modes_[slot]) | static_cast<int>(access));
  return slot;
}

void Recorder::commit(Captured c) {
  RecordedGraph& g = *g_;
  RecordedTask& r = c.r;
  const auto self = static_cast<uint32_t>(g.tasks_.size());
  if (kernels_seen_.emplace(r.kernel, true).second)
    g.kernels_used_.push_back(Ref<KernelState>::share(r.kernel));
  for (size_t i = 0; i < c.buffers.size(); ++i) {
    const uint32_t slot = slot_of(c.buffers[i], c.modes[i]);
    r.args.push_back({slot, c.modes[i]});
    // A copy a recorded reduce task made, used again: by a recorded combine.
    if (auto it = copy_index_.find(slot); it != copy_index_.end())
      g.copies_[it->second].combined = true;
  }
  // One access per distinct buffer, modes combined, as TaskGraph::submit registers them.
  for (size_t i = 0; i < r.args.size(); ++i) {
    bool first = true;
    int mode = 0;
    for (size_t j = 0; j < r.args.size(); ++j) {
      if (r.args[j].slot != r.args[i].slot) continue;
      if (j < i) {
        first = false;
        break;
      }
      mode |= static_cast<int>(r.args[j].access);
    }
    if (first) {
      r.uargs.push_back({r.args[i].slot, static_cast<Access>(mode)});
      r.commutes = r.commutes || commutes(static_cast<Access>(mode));
    }
  }
  g.tasks_.push_back(std::move(r));
  // The dependencies TaskGraph::register_access finds, among recorded tasks (the work before the
  // recording is what a replay's front join waits for).
  for (const RecordedTask::Arg& u : g.tasks_[self].uargs) access(self, u.slot, u.access);
  // The ghosts' reads of the neighbours, registered after the task's own accesses as
  // TaskGraph::submit does (ghost_sources: each once, none the task names itself).
  boost::container::small_vector<uint32_t, 8> ghosts;
  for (const Captured::HaloRead& h : c.halos) {
    const uint32_t tile = slots_.at(h.tile);
    // A tile's first read: its neighbours by place, made where they stay (halos_ is a deque): a
    // HaloSlot is never moved, whose small_vector GCC 12 warns about when moved
    // (-Wstringop-overread over its inline buffer, though only the elements in use are copied).
    RecordedGraph::HaloSlot* hs = nullptr;
    if (halo_seen_.insert(tile).second) {
      hs = &g.halos_.emplace_back();
      hs->slot = tile;
    }
    for (const HaloNeighbour& n : h.neighbours) {
      bool named = false;
      for (const Ref<BufferState>& b : c.buffers) named = named || b.get() == n.tile.get();
      const uint32_t slot = named ? slots_.at(n.tile.get()) : slot_of(n.tile, Access::read);
      if (hs != nullptr) hs->neighbours.push_back({slot, n.di, n.dj});
      if (!named && std::find(ghosts.begin(), ghosts.end(), slot) == ghosts.end()) {
        ghosts.push_back(slot);
        access(self, slot, Access::read);
      }
    }
  }
  if (!c.excluded.empty())
    g.excluded_.push_back({self, std::move(c.excluded), std::move(c.excluded_why)});
  // The reduce accesses' copies, made afresh by each replay; their targets, bound as any buffer.
  for (Captured::Reduce& x : c.reduces) {
    RecordedGraph::CopySlot info = std::move(x.info);
    info.slot = slots_.at(x.copy);
    info.target = slot_of(x.target, Access::read);
    copy_index_.emplace(info.slot, static_cast<uint32_t>(g.copies_.size()));
    g.copies_.push_back(std::move(info));
  }
  for (const TaskNode* before : c.after)  // explicit dependencies on recorded tasks
    if (auto it = index_.find(before); it != index_.end()) add_edge(it->second, self, true);
  index_.emplace(c.node.get(), self);
  recorded_nodes_.push_back(c.node.detach());
}

// Task `self`'s access of `slot` in the recording's frontier (task_graph.cpp's rules, by index).
void Recorder::access(uint32_t self, uint32_t slot, Access mode) {
  Frontier& f = frontiers_[slot];
  if (commutes(mode)) {
    if (!f.run_open) {
      for (uint32_t w : f.writers) f.before_run.push_back({w, true});
      for (uint32_t x : f.readers) f.before_run.push_back({x, false});
      f.writers.clear();
      f.readers.clear();
      f.run.clear();
      f.run_open = true;
    }
    for (const RecordedTask::Next& b : f.before_run) add_edge(b.task, self, b.data);
    f.run.push_back(self);
    return;
  }
  if (f.run_open) {  // the run closes: its tasks are the writers now
    f.writers = std::move(f.run);
    f.run.clear();
    f.before_run.clear();
    f.run_open = false;
  }
  for (uint32_t w : f.writers) add_edge(w, self, reads(mode));
  if (writes(mode)) {
    for (uint32_t x : f.readers) add_edge(x, self, false);
    f.readers.clear();
    f.writers.assign(1, self);
  } else {
    f.readers.push_back(self);
  }
}

// ---- replay -------------------------------------------------------------------------------------

RecordedGraph::~RecordedGraph() {
  for (TaskNode* n : nodes_) release(n);
  for (DeviceGraph* g : device_graphs_)
    if (g != nullptr) release(g);
  if (graph_kernel_ != nullptr) release(graph_kernel_);
}

TaskNode* RecordedGraph::record_for(size_t i) {
  TaskNode*& n = nodes_[i];
  const bool done = n->state.load(std::memory_order_acquire) != kPending;
  // What the last run chose becomes the plan (where there is a choice).
  if (done && host_->replay_devices() > 1)
    tasks_[i].device = n->device.load(std::memory_order_relaxed);
  if (done && n->refs.load(std::memory_order_acquire) == 1) {
    // Its kernel reference carries over to the new record (the same recorded task's kernel).
    KernelState* kernel = std::exchange(n->kernel, nullptr);
    n->~TaskNode();
    n = ::new (static_cast<void*>(n)) TaskNode();
    n->kernel = kernel;
  } else {  // still running, or held (an Event of the recording run): its holders keep it
    release(n);
    n = new TaskNode;
  }
  return n;
}

void RecordedGraph::fill(TaskNode* n, const RecordedTask& r, BufferState* const* bound) {
  n->rt = rt_;
  if (n->kernel == nullptr) {  // a new record (record_for)
    retain(r.kernel);
    n->kernel = r.kernel;
  }
  for (const RecordedTask::Arg& a : r.args) {
    retain(bound[a.slot]);
    n->args.push_back({bound[a.slot], a.access});
  }
  uint64_t bytes = r.scratch_bytes;
  for (const RecordedTask::Arg& a : r.uargs) {
    n->uargs.push_back({bound[a.slot], a.access});
    bytes += bound[a.slot]->bytes();
  }
  n->bytes = bytes;
  n->params = r.params;
  n->param_offsets = r.param_offsets;
  if (!r.scratch.empty()) n->scratch = r.scratch;
  n->scratch_bytes = r.scratch_bytes;
  std::copy(std::begin(r.global_size), std::end(r.global_size), n->global_size);
  std::copy(std::begin(r.local_size), std::end(r.local_size), n->local_size);
  n->priority = r.priority;
  n->user_priority = r.user_priority;
  n->pinned = r.pinned;
  n->context = r.context;
  n->commutes = r.commutes;
  n->footprint = r.footprint;
  n->size = r.size;
  n->footprint_valid = true;
  n->waited = r.predecessors != 0;
  // The previous run's placement as the first one tried: a hint placement lifts when that device
  // cannot take the task (engine/placement.cpp).
  if (r.pinned < 0 && r.device >= 0 && sched::TaskRef(n).can_run(static_cast<uint32_t>(r.device))) {
    n->pinned = r.device;
    n->pin_is_hint = true;
  }
}

Ref<TaskNode> RecordedGraph::replay(std::span<const Binding> bindings) {
  host_->check_replay_alive("Graph::replay");
  if (host_->recording())
    throw Error(ErrorCode::invalid_argument,
                "Graph::replay while the runtime is recording (between begin_recording and "
                "end_recording): end the recording first");
  if (tasks_.empty()) return {};
  std::lock_guard<std::mutex> g(mutex_);
  const size_t nb = buffers_.size();
  BufferState* const* bound = recorded_.data();
  if (!bindings.empty()) {
    bound_.assign(recorded_.begin(), recorded_.end());
    for (size_t i = 0; i < bindings.size(); ++i) {
      const Binding& b = bindings[i];
      auto which = [&] { return "Graph::replay: binding " + std::to_string(i); };
      if (b.recorded == nullptr || b.bound == nullptr)
        throw Error(ErrorCode::invalid_argument, which() + ": an empty Buffer handle");
      const auto at = std::find(recorded_.begin(), recorded_.end(), b.recorded);
      if (at == recorded_.end())
        throw Error(ErrorCode::invalid_argument,
                    which() + ": the " + describe(*b.recorded) + " is not one the graph uses");
      if (b.bound->rt.get() != rt_)
        throw Error(ErrorCode::invalid_argument,
                    which() + ": the " + describe(*b.bound) + " belongs to another runtime");
      if (b.bound->dtype != b.recorded->dtype || b.bound->rows != b.recorded->rows ||
          b.bound->cols != b.recorded->cols)
        throw Error(ErrorCode::invalid_argument,
                    which() + ": a " + describe(*b.bound) + " in place of the recorded " +
                        describe(*b.recorded) + ": the shape and element type must be the same");
      bound_[static_cast<size_t>(at - recorded_.begin())] = b.bound;
    }
    std::vector<BufferState*> sorted = bound_;
    std::sort(sorted.begin(), sorted.end());
    if (const auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end())
      throw Error(ErrorCode::invalid_argument,
                  "Graph::replay: the " + describe(**dup) +
                      " would stand for two of the graph's buffers (the recorded dependencies "
                      "assume they are distinct)");
    bound = bound_.data();
  }
  for (size_t s = 0; s < nb; ++s) {
    BufferState* b = bound[s];
    if (b->detached.load(std::memory_order_acquire))
      throw Error(
          ErrorCode::invalid_argument,
          "Graph::replay: the " + describe(*b) +
              " no longer exists (its buffer was unpartitioned); bind another in its place");
    b->lock.lock();
    const bool partitioned = b->partitioned;
    b->lock.unlock();
    if (partitioned)
      throw Error(ErrorCode::invalid_argument,
                  "Graph::replay: the " + describe(*b) +
                      " has been partitioned since it was recorded: unpartition it first");
  }
  if (!bindings.empty()) check_halo_bindings(bound);
  for (const Ref<KernelState>& k : kernels_used_) kernels_.resolve(*k);
  bound = prepare_reductions(bound);
  if (device_graph_ok_)
    if (Ref<TaskNode> one = replay_on_device(bound)) return one;
  placement_seen_ = false;  // this run's placement is the one to look at next

  const size_t n = tasks_.size();
  // Two joins around the tasks: the front one waits for the work before this replay on each
  // buffer, the back one is what the work after it waits for (and the replay's event).
  auto* front = new TaskNode;
  front->kind = TaskKind::join;
  front->rt = rt_;
  auto* back = new TaskNode;
  back->kind = TaskKind::join;
  back->rt = rt_;
  batch_.assign(n + 2, nullptr);
  batch_.front() = front;
  batch_.back() = back;
  // One pass, last task first: a recorded edge always goes to a later task, whose record for this
  // run is then made already (the records are many and large: each pass over them costs).
  // Any failure is the replay's: it reaches the back join along data edges. A task with a data
  // successor passes its failure on to it (which then fails, and so on), and finishes before it
  // starts: only the tasks without one need an edge to the back join, which then counts far fewer
  // ends than there are tasks (one per chain, not one per task).
  int32_t to_back = 0;
  for (size_t i = n; i-- > 0;) {
    TaskNode* t = record_for(i);
    const RecordedTask& r = tasks_[i];
    fill(t, r, bound);
    t->pending.store(1 + static_cast<int32_t>(r.predecessors), std::memory_order_relaxed);
    retain(t);  // the submission's (TaskGraph::close gives it up); nodes_ keeps its own
    bool passes_on = false;
    for (const RecordedTask::Next& x : r.successors) {
      t->successors.push_back({nodes_[x.task], x.data});
      passes_on = passes_on || x.data;
    }
    if (!passes_on) {
      t->successors.push_back({back, true});
      ++to_back;
    }
    batch_[i + 1] = t;
  }
  back->pending.store(1 + to_back, std::memory_order_relaxed);
  exclude_devices();
  Ref<TaskNode> done = Ref<TaskNode>::share(back);
  // submit_prepared wants every task kept alive until it returns: nodes_ keeps the tasks, `done`
  // the back join, this the front one.
  const Ref<TaskNode> keep_front = Ref<TaskNode>::share(front);
  struct Link {
    RecordedGraph* g;
    BufferState* const* bound;
    TaskNode* front;
    TaskNode* back;
  } link{this, bound, front, back};
  graph_.submit_prepared(
      {batch_.data(), batch_.size()},
      [](void* user) noexcept {
        auto& l = *static_cast<Link*>(user);
        l.g->link(l.bound, l.front, l.back);
      },
      &link);
  contribute(bound);
  return done;
}

Ref<TaskNode> RecordedGraph::replay_on_device(BufferState* const* bound) {
  DeviceGraphs& graphs = host_->device_graphs();
  if (!graphs.enabled()) return {};
  const size_t n = tasks_.size();
  if (!placement_seen_) {  // where the last task-by-task run put each task
    int32_t on = -1;
    for (size_t i = 0; i < n; ++i) {
      const TaskNode* t = nodes_[i];
      // Still running (or failed): task by task again, and a look at that run next time.
      if (t->state.load(std::memory_order_acquire) != kSucceeded) return {};
      const int32_t d = t->device.load(std::memory_order_relaxed);
      if (d < 0 || (on >= 0 && d != on)) {
        on = -1;
        break;
      }
      on = d;
    }
    placement_seen_ = true;
    graph_device_ = on;
    graph_replays_ = 0;
  }
  if (graph_device_ < 0) return {};
  const auto d = static_cast<uint32_t>(graph_device_);
  // Several devices: now and then a run task by task again, where placement may choose anew.
  if (host_->replay_devices() > 1 && ++graph_replays_ % kReexamine == 0) return {};
  if (d >= graphs.devices().count() ||
      graphs.devices()[d].status.load(std::memory_order_relaxed) != DeviceState::kActive ||
      !graphs.supported(d))
    return {};
  DeviceGraph* g = device_graph(d, bound);
  if (g == nullptr) return {};
  if (g->in_flight.exchange(true, std::memory_order_acq_rel)) return {};  // the other replay's
  auto* t = new TaskNode;
  t->rt = rt_;
  retain(graph_kernel_);
  t->kernel = graph_kernel_;
  for (size_t s = 0; s < buffers_.size(); ++s) {
    retain(bound[s]);
    t->args.push_back({bound[s], commutes(modes_[s]) ? Access::read_write : modes_[s]});
  }
  t->pinned = static_cast<int32_t>(d);
  t->footprint = n;
  t->size = static_cast<double>(n);
  t->footprint_valid = true;
  retain(g);
  t->device_graph = g;
  Ref<TaskNode> done = Ref<TaskNode>::share(t);
  graphs.launches.fetch_add(1, std::memory_order_relaxed);
  try {
    graph_.submit(t);
  } catch (...) {  // refused (it took the task): no launch comes
    g->in_flight.store(false, std::memory_order_release);
    throw;
  }
  return done;
}

DeviceGraph* RecordedGraph::device_graph(uint32_t d, BufferState* const* bound) {
  if (d < device_graphs_.size() && device_graphs_[d] != nullptr) {
    DeviceGraph* g = device_graphs_[d];
    return g->abandoned.load(std::memory_order_acquire) ? nullptr : g;
  }
  if (d < graph_refused_.size() && graph_refused_[d] != 0) return nullptr;
  if (device_graphs_.size() <= d) device_graphs_.resize(d + 1, nullptr);
  if (graph_refused_.size() <= d) graph_refused_.resize(d + 1, 0);
  DeviceGraphs& graphs = host_->device_graphs();
  DeviceState& ds = graphs.devices()[d];
  const size_t n = tasks_.size();
  std::string why;
  DeviceGraph* g = graphs.make(d, tasks_, kernels_used_, bound, why);
  if (g == nullptr) {
    HCR_LOG(debug, "a graph of " << n << " tasks runs task by task on device '" << ds.info.name
                                 << "': " << why);
    graph_refused_[d] = 1;
    return nullptr;
  }
  if (graph_kernel_ == nullptr) {
    Ref<KernelState> k = kernels_.get("graph (" + std::to_string(n) + " tasks)", keep_);
    // Runs wherever it is pinned: it is never asked of a plugin as a kernel.
    std::lock_guard<std::mutex> lock(k->mutex);
    for (size_t i = 0; i < k->num_devices; ++i) k->set_capability(i, Capability::yes);
    k->any_capable.store(true, std::memory_order_relaxed);
    k->resolved.store(true, std::memory_order_release);
    graph_kernel_ = k.detach();
  }
  device_graphs_[d] = g;
  return g;
}

// The replay enters the buffers' frontiers (TaskGraph::submit_prepared's link): its tasks are
// counted, none handed on yet.
void RecordedGraph::link(BufferState* const* bound, TaskNode* front, TaskNode* back) noexcept {
  // Each buffer's frontier sees the two joins, back to back (nothing submitted meanwhile comes
  // between them), each accessing it as the whole graph does (a commute run as a read_write): the
  // front one reads what the graph reads, so a failed writer before it fails the replay, and what
  // comes after reads the back one's.
  for (size_t s = 0; s < buffers_.size(); ++s) {
    const Access mode = commutes(modes_[s]) ? Access::read_write : modes_[s];
    graph_.register_access(*bound[s], front, mode);
    graph_.register_access(*bound[s], back, mode);
  }
  // Front waits for nothing and inherits no failure (the buffers were idle, their last writers
  // succeeded): the tasks need not wait for it. Else the tasks without recorded predecessors do
  // (its count only drops: once 1, it stays). Other threads add its successors meanwhile (a task
  // submitted after it on a buffer the graph only reads): under its lock.
  front->lock.lock();
  if (front->pending.load(std::memory_order_acquire) > 1 || front->dep_error != nullptr)
    for (uint32_t root : roots_) {
      TaskNode* t = nodes_[root];
      front->successors.push_back({t, true});
      t->pending.fetch_add(1, std::memory_order_relaxed);
    }
  front->lock.unlock();
}

}  // namespace hcr::detail

namespace hcr {

Event Graph::replay() { return replay(std::span<const Binding>()); }
Event Graph::replay(std::span<const Binding> bindings) {
  if (!g_) return {};
  return Event(g_->replay(bindings));
}
size_t Graph::tasks() const noexcept { return g_ ? g_->tasks() : 0; }
size_t Graph::buffers() const noexcept { return g_ ? g_->buffers() : 0; }
size_t Graph::edges() const noexcept { return g_ ? g_->edges() : 0; }

}  // namespace hcr
