// What a replay adds for recorded reduce accesses and halo tiles (recorded_graph.hpp): fresh
// private copies and their contributions, the bindings of halo tiles checked against their
// neighbours, the devices a halo task cannot use. Each step is a no-op for a graph without any.
#include "recorded_graph.hpp"

#include "reductions.hpp"
#include "../buffer_state.hpp"
#include "../kernel_state.hpp"

#include <hcr/error.hpp>

#include <cstring>
#include <string>

namespace hcr::detail {

namespace {
// Appended piece by piece: `"(" + std::to_string(di)` inserts at the front of the temporary,
// which GCC 12 takes for an overlapping memcpy (-Wrestrict: a known false positive of its string
// inlining).
std::string place(int di, int dj) {
  std::string s = "(";
  s += std::to_string(di);
  s += ", ";
  s += std::to_string(dj);
  s += ')';
  return s;
}
}  // namespace

void RecordedGraph::check_halo_bindings(BufferState* const* bound) const {
  // A buffer the graph reads, halo tile for halo tile: a plain buffer's reads were recorded
  // without ghosts, a halo tile's with its neighbours'.
  for (size_t s = 0; s < recorded_.size(); ++s) {
    const BufferState& was = *recorded_[s];
    const BufferState& now = *bound[s];
    if (&now == &was || !reads(modes_[s]) || (now.halo != 0) == (was.halo != 0)) continue;
    throw Error(ErrorCode::invalid_argument,
                "Graph::replay: a " + describe(now) + " in place of the recorded " + describe(was) +
                    ", which the graph reads: " +
                    (now.halo != 0 ? "a halo tile's ghosts would be read unordered"
                                   : "the recorded reads of its ghosts would order nothing") +
                    "; bind a halo tile in place of a halo tile, a plain buffer in place of one");
  }
  for (const HaloSlot& h : halos_) {
    const BufferState& was = *recorded_[h.slot];
    const BufferState& now = *bound[h.slot];
    bool same = &now == &was;
    for (const HaloSlot::Neighbour& n : h.neighbours)
      same = same && bound[n.slot] == recorded_[n.slot];
    if (same) continue;
    auto refuse = [&](const std::string& why) {
      throw Error(ErrorCode::invalid_argument, "Graph::replay: the " + describe(now) +
                                                   " in place of the recorded " + describe(was) +
                                                   ": " + why);
    };
    if (now.halo != was.halo || now.grid_rows != was.grid_rows || now.grid_cols != was.grid_cols ||
        now.grid_i != was.grid_i || now.grid_j != was.grid_j)
      refuse("a halo tile's ghosts are recorded as reads of its neighbours by place: bind one of "
             "the same halo width, at the same place of a grid of as many tiles");
    // Its neighbours now must be the buffers bound in place of the recorded tile's neighbours.
    BufferState& parent = *now.parent;
    parent.lock.lock();
    const bool whole = parent.tiles.size() == size_t{now.grid_rows} * now.grid_cols;
    for (const HaloSlot::Neighbour& n : h.neighbours) {
      const size_t i = static_cast<size_t>(int64_t{now.grid_i} + n.di);
      const size_t j = static_cast<size_t>(int64_t{now.grid_j} + n.dj);
      const BufferState* actual = whole ? parent.tiles[i * now.grid_cols + j] : nullptr;
      if (actual == bound[n.slot]) continue;
      parent.lock.unlock();
      refuse("its neighbour at " + place(n.di, n.dj) + " is the " +
             (actual != nullptr ? describe(*actual) : std::string("tile no longer there")) +
             ", but the graph's neighbour there (the " + describe(*recorded_[n.slot]) +
             ") is bound to the " + describe(*bound[n.slot]) +
             ": bind the neighbours of a bound halo tile with it (the whole grid)");
    }
    parent.lock.unlock();
  }
}

BufferState* const* RecordedGraph::prepare_reductions(BufferState* const* bound) {
  // What was contributed to a buffer the graph accesses is combined before it, as Runtime::submit
  // does for each argument (a target the graph only reduces into is left to its next access).
  for (size_t s = 0; s < recorded_.size(); ++s)
    if (slot_kinds_.empty() || slot_kinds_[s] == kPlain) combine_reductions(*bound[s]);
  if (copies_.empty()) return bound;
  for (const CopySlot& c : copies_) {
    const BufferState& target = *bound[c.target];
    ReductionState* s = target.reduction.load(std::memory_order_acquire);
    const KernelState* k = nullptr;
    if (s != nullptr) {
      std::lock_guard<std::mutex> lock(s->mutex);
      k = s->combine.get();
    }
    if (k != c.combine.get())
      throw Error(ErrorCode::invalid_argument,
                  "Graph::replay: the " + describe(target) + " in place of the recorded " +
                      describe(*recorded_[c.target]) + ", which the graph reduces into, " +
                      (k == nullptr ? std::string("declares no reduction")
                                    : "declares another reduction (combine '" + k->name + "')") +
                      ": declare the recorded one (combine '" + c.combine->name +
                      "') with Buffer::set_reduction");
  }
  if (bound != bound_.data()) bound_.assign(bound, bound + recorded_.size());
  fresh_.clear();
  for (const CopySlot& c : copies_) {
    const BufferState& was = *recorded_[c.slot];
    Ref<BufferState> copy = make_owned_buffer(keep_, was.dtype, was.rows, was.cols, c.zero);
    if (c.fill && !c.zero)
      for (size_t i = 0, n = was.rows * was.cols; i < n; ++i)
        std::memcpy(copy->host + i * was.elem, c.identity.data(), was.elem);
    bound_[c.slot] = copy.get();
    fresh_.push_back(std::move(copy));
  }
  return bound_.data();
}

void RecordedGraph::exclude_devices() {
  for (const Excluded& x : excluded_) {
    TaskNode& t = *nodes_[x.task];
    t.excluded.assign(x.devices.begin(), x.devices.end());
    t.device_errors = x.why;
  }
}

void RecordedGraph::contribute(BufferState* const* bound) {
  for (size_t i = 0; i < copies_.size(); ++i)
    if (!copies_[i].combined)
      reductions_.contribute(*bound[copies_[i].target], std::move(fresh_[i]));
  fresh_.clear();
}

}  // namespace hcr::detail
