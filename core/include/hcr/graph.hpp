/// \file graph.hpp
/// Task graphs recorded once and replayed (Taskflow's taskflow run many times, CUDA graphs'
/// capture and launch).
///
/// \code
/// rt.begin_recording();
/// for (size_t t = 0; t < tiles; ++t)                 // submitted, and run, as usual
///   rt.submit(hcr::Task(step).read(u[t]).write(v[t]));
/// hcr::Graph g = rt.end_recording();
/// for (int it = 0; it < 100; ++it) g.replay();        // the same tasks again, no analysis
/// g.replay({{u[0], w}}).get();                        // w (same shape and type) in place of u[0]
/// \endcode
///
/// A replay submits the recorded tasks again — kernels, arguments and access modes, parameters,
/// priorities, pins, contexts, grids, workspaces — with the dependencies found while recording,
/// without looking at the buffers' dependency state task by task. It waits for the work already
/// submitted on the graph's buffers (ordinary submits, earlier replays) and work submitted after
/// it waits for it, as if its tasks had been submitted one by one. Each task is first offered to
/// the device it ran on in the previous run, when that device still takes work and can run it.
/// Halo tiles are ordered as submit orders them: a read of one waits for the writers of its
/// neighbours (whose edges its ghosts are), recorded as edges; a replay that binds a halo tile
/// binds its neighbours with it (a whole grid for another). Reduce accesses (Access::reduce) get
/// fresh private copies holding the identity on every replay; the copies are combined into their
/// target when it is next accessed in another mode (or at wait_all), as submitted ones are, or by
/// the combine tasks recorded with them when the recording itself accessed the target.
///
/// Device graphs: where every task of the last task-by-task run (the recording's, or a replay's)
/// ran and succeeded on one device D whose plugin runs device graphs (plugin ABI 1.2), a replay is
/// handed to D's plugin as a whole: the graph is created there once (on the first such replay)
/// and each replay is then one launch of it, which the plugin runs following the recorded edges,
/// with no round trip to the runtime per task. It counts as one task ("graph (N tasks)" in traces,
/// RuntimeStats::graph_launches; nothing learned by the cost model), pinned to D, accessing each of
/// the graph's buffers in the modes its tasks do. Not for graphs with reduce accesses, halo tiles,
/// scratch, commute accesses or contexts, nor while another replay's launch of the same graph is
/// running (that replay runs task by task), nor when D's plugin refused the graph or D left
/// scheduling. With several devices, every 64th such replay runs task by task again, where the
/// policy may place tasks anew: the next ones follow what it chose. A failing node skips the nodes
/// after it, the others run, and the Event rethrows the kernel's exception (or names the recorded
/// task and its kernel); as the replay is one task, every task after it that reads what the graph
/// writes fails with Error(dependency). `[runtime] device_graphs = false` replays task by task.
/// Thread safety: a Graph may be replayed from several threads; replays are ordered by their
/// buffers as submits are.
#pragma once

#include <hcr/buffer.hpp>
#include <hcr/event.hpp>
#include <hcr/export.hpp>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>

namespace hcr {

namespace detail {
class RecordedGraph;
}

/// A buffer of a recorded graph, and the one a replay uses in its place (the same shape and
/// element type; Buffer<T> on both sides checks the type when compiling).
struct Binding {
  detail::BufferState* recorded;
  detail::BufferState* bound;
  template <class T>
  Binding(const Buffer<T>& recorded_buffer, const Buffer<T>& bound_buffer)
      : recorded(recorded_buffer.state()), bound(bound_buffer.state()) {}
};

/// What Runtime::end_recording() returns: the tasks submitted since begin_recording(), kept to be
/// submitted again. Cheap to copy (copies share the graph). It keeps its buffers and kernels
/// alive (memory registered with Runtime::wrap must outlive its replays, as it must any task);
/// using it after its runtime ended throws Error(shutdown).
class HCR_API Graph {
 public:
  /// An empty graph: replay() returns an empty (ready) Event.
  Graph() = default;
  explicit Graph(std::shared_ptr<detail::RecordedGraph> g) : g_(std::move(g)) {}

  /// Submits the recorded tasks again on the recorded buffers. The Event finishes once all of
  /// them have; it fails when one of them fails (its error, or Error(dependency) naming it).
  /// Throws Error(invalid_argument) while the runtime is recording, and when a recorded buffer can
  /// no longer be used (a tile whose buffer was unpartitioned, a buffer partitioned since).
  Event replay();
  /// The same with some buffers replaced: each `recorded` buffer of the graph by `bound`, of the
  /// same shape and element type. Throws Error(invalid_argument) naming the binding at fault: a
  /// buffer the graph does not use, another shape, another runtime, or two of the graph's buffers
  /// bound to one.
  Event replay(std::initializer_list<Binding> bindings) {
    return replay(std::span<const Binding>(bindings.begin(), bindings.size()));
  }
  Event replay(std::span<const Binding> bindings);

  /// Recorded tasks.
  size_t tasks() const noexcept;
  /// Distinct buffers they use (reduce accesses' targets and private copies among them, and the
  /// neighbours of the halo tiles they read).
  size_t buffers() const noexcept;
  /// Dependencies between recorded tasks.
  size_t edges() const noexcept;
  bool empty() const noexcept { return tasks() == 0; }

 private:
  std::shared_ptr<detail::RecordedGraph> g_;
};

}  // namespace hcr
