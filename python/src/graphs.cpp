// hcr.Graph: Runtime.begin_recording / end_recording and Graph.replay (hcr::Graph). The Buffer
// objects the recorded tasks were given are kept for the graph's life, so that the NumPy arrays
// (or DLPack tensors) they wrap outlive every replay, as they outlive a submitted task.
#include "binding.hpp"

#include <algorithm>

namespace hcrpy {

namespace {

/// hcr.Graph.
struct GraphObj {
  std::shared_ptr<RuntimeHolder> holder;
  hcr::Graph graph;
  // The Buffer objects of the recorded tasks (and through a tile's, its parent): their memory.
  std::vector<PyRef> buffers;
};

/// A Buffer of the binding `index` (`side`: "recorded" or "bound"); an array is wrapped as
/// Runtime.wrap does, which gives back the live Buffer of that memory when there is one.
BufferObj& binding_buffer(const std::shared_ptr<RuntimeHolder>& holder, py::handle o,
                          std::vector<py::object>& made, size_t index, const char* side) {
  py::object obj = py::isinstance<py::array>(o) ? wrap_array(holder, o, std::nullopt)
                                                : py::reinterpret_borrow<py::object>(o);
  if (!py::isinstance<BufferObj>(obj))
    throw_invalid("Graph.replay: binding " + std::to_string(index) + ": the " + side +
                  " buffer must be an hcr.Buffer or a NumPy array, not " +
                  py::cast<std::string>(py::type::handle_of(o).attr("__name__")));
  BufferObj& b = as_buffer(obj);
  if (b.holder.get() != holder.get())
    throw_invalid("Graph.replay: binding " + std::to_string(index) + ": the " + side + " " +
                  b.describe() + " belongs to another runtime");
  made.push_back(std::move(obj));
  return b;
}

/// The bindings of Graph.replay: a dict {recorded: bound} or a sequence of (recorded, bound).
std::vector<hcr::Binding> bindings_of(const std::shared_ptr<RuntimeHolder>& holder, py::handle spec,
                                      std::vector<py::object>& made) {
  std::vector<std::pair<py::object, py::object>> pairs;
  if (py::isinstance<py::dict>(spec)) {
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(spec))
      pairs.emplace_back(py::reinterpret_borrow<py::object>(k),
                         py::reinterpret_borrow<py::object>(v));
  } else if (py::isinstance<py::sequence>(spec) && !py::isinstance<py::str>(spec)) {
    size_t i = 0;
    for (py::handle item : spec) {
      if (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item) ||
          py::len(item) != 2)
        throw_invalid("Graph.replay: binding " + std::to_string(i) +
                      " is not a (recorded, bound) pair: " + py::cast<std::string>(py::repr(item)));
      pairs.emplace_back(item[py::int_(0)], item[py::int_(1)]);
      ++i;
    }
  } else {
    throw_invalid("Graph.replay: bindings must be a dict {recorded: bound} or a sequence of "
                  "(recorded, bound) pairs, not " +
                  py::cast<std::string>(py::type::handle_of(spec).attr("__name__")));
  }
  std::vector<hcr::Binding> out;
  out.reserve(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    BufferObj& was = binding_buffer(holder, pairs[i].first, made, i, "recorded");
    BufferObj& now = binding_buffer(holder, pairs[i].second, made, i, "bound");
    if (was.dtype != now.dtype)
      throw_invalid("Graph.replay: binding " + std::to_string(i) + ": a " + now.describe() +
                    " in place of a " + was.describe() + ": the element types differ");
    // Tasks could be given write access to the recorded buffer unless it wraps read-only memory.
    if (now.readonly && !was.readonly)
      throw_invalid("Graph.replay: binding " + std::to_string(i) + ": the bound " + now.describe() +
                    " wraps read-only memory (flags.writeable is False), in place of the "
                    "writable " +
                    was.describe() + ", which the graph's tasks may write");
    now.used = true;  // the replay's tasks use it: its memory outlives them
    std::visit(
        [&](const auto& a) {
          using B = std::decay_t<decltype(a)>;
          const B* bound = std::get_if<B>(&now.buf);
          if (bound == nullptr)
            throw_invalid("Graph.replay: binding " + std::to_string(i) + ": a " + now.describe() +
                          " in place of a " + was.describe() + ": the element types differ");
          out.emplace_back(a, *bound);
        },
        was.buf);
  }
  return out;
}

}  // namespace

void note_recorded(RuntimeHolder& holder, const std::vector<py::object>& buffers) {
  if (!holder.recording) return;
  for (const py::object& b : buffers) holder.recorded.emplace_back(b);
}

void register_graphs(py::module_& m) {
  py::class_<GraphObj>(m, "Graph", R"doc(Tasks recorded once and submitted again (hcr::Graph).

    rt.begin_recording()
    for i in range(n):                       # submitted, and run, as usual
        rt.submit(step, reads=[u[i]], writes=[v[i]])
    g = rt.end_recording()
    for _ in range(100):
        g.replay()                           # the same tasks again, no analysis
    g.replay({u[0]: w}).wait()               # w (same shape and dtype) in place of u[0]

A replay submits the recorded tasks again with the dependencies found while recording; it waits
for the work submitted before on the graph's buffers, and work submitted after waits for it. Halo
tiles are ordered by their neighbours as submitted ones are (bind a whole grid, not one tile);
reduce accesses get fresh private copies each replay, combined into their buffer at its next
access. The graph keeps the buffers of its tasks (and the arrays they wrap) alive.)doc")
      .def(
          "replay",
          [](GraphObj& g, py::object bindings) {
            auto rt = g.holder->get();  // Error(shutdown) once the runtime is closed
            std::vector<py::object> made;
            std::vector<hcr::Binding> b;
            if (!bindings.is_none()) b = bindings_of(g.holder, bindings, made);
            hcr::Event ev;
            {
              py::gil_scoped_release unlocked;  // it waits under back-pressure
              ev = g.graph.replay(std::span<const hcr::Binding>(b.data(), b.size()));
            }
            return make_event(std::move(ev));
          },
          py::arg("bindings") = py::none(),
          R"doc(Submits the recorded tasks again; returns an Event finished once all have (failed
if one failed). `bindings`: a dict {recorded: bound} or a sequence of (recorded, bound) pairs,
each bound Buffer (or NumPy array, wrapped) used in place of a recorded one of the same shape and
dtype. Raises InvalidArgumentError naming the binding at fault, and while the runtime records.)doc")
      .def_property_readonly(
          "tasks", [](const GraphObj& g) { return g.graph.tasks(); }, "Recorded tasks.")
      .def_property_readonly(
          "buffers", [](const GraphObj& g) { return g.graph.buffers(); },
          "Distinct buffers the tasks use (reduce accesses' private copies and targets, and the "
          "neighbours of halo tiles read, among them).")
      .def_property_readonly(
          "edges", [](const GraphObj& g) { return g.graph.edges(); },
          "Dependencies between recorded tasks.")
      .def("__len__", [](const GraphObj& g) { return g.graph.tasks(); })
      .def("__repr__", [](const GraphObj& g) {
        return "hcr.Graph(" + std::to_string(g.graph.tasks()) + " tasks, " +
               std::to_string(g.graph.buffers()) + " buffers, " + std::to_string(g.graph.edges()) +
               " edges)";
      });
}

void begin_recording(const std::shared_ptr<RuntimeHolder>& holder) {
  holder->get()->begin_recording();
  holder->recording = true;
  holder->recorded.clear();
}

py::object end_recording(const std::shared_ptr<RuntimeHolder>& holder) {
  auto rt = holder->get();
  hcr::Graph graph = rt->end_recording();  // Error(invalid_argument) when none is open
  holder->recording = false;
  auto obj = std::make_unique<GraphObj>();
  obj->holder = holder;
  obj->graph = std::move(graph);
  obj->buffers = std::move(holder->recorded);
  holder->recorded.clear();
  // One reference per Buffer (the recording noted one per task argument).
  auto& kept = obj->buffers;
  std::sort(kept.begin(), kept.end(),
            [](const PyRef& a, const PyRef& b) { return a.get().ptr() < b.get().ptr(); });
  kept.erase(
      std::unique(kept.begin(), kept.end(),
                  [](const PyRef& a, const PyRef& b) { return a.get().ptr() == b.get().ptr(); }),
      kept.end());
  return py::cast(std::move(obj));
}

}  // namespace hcrpy
