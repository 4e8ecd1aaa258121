// Owns what a read of a halo tile stands for in dependency order: reads of the neighbouring
// tiles whose interiors are its ghosts (Buffer::partition with an hcr::Halo).
//
// A halo tile is a view of its region of the partitioned buffer; its own frontier orders the
// writes of its interior. A task that reads the region also reads the edges of up to eight
// neighbours, so the task graph registers it as a reader of each of them too: it waits for their
// earlier writers, and their later writers wait for it. On host memory the ghosts are the
// neighbours' memory; a device with its own memory holds a copy of the region whose ghost edges
// the data manager refreshes from the neighbours' valid copies (data/ghosts.hpp), which this order
// makes current when the task acquires its data.
#pragma once

#include "../task_node.hpp"

#include <hcr/detail/handles.hpp>

#include <boost/container/small_vector.hpp>

namespace hcr::detail {

struct BufferState;

using GhostSources = boost::container::small_vector<Ref<BufferState>, 8>;

/// The tiles `t` reads through the ghosts of the halo tiles it reads (alive ones, a reference
/// each, each once), leaving out the buffers `t` names itself (registered with their own modes).
GhostSources ghost_sources(const TaskNode& t);

/// Whether an access of `b` in `mode` is ordered after an access of `held` in `held_mode` through
/// ghosts alone: two halo tiles of one grid, neighbours (diagonals included), one reading the
/// other's interior through its ghosts while the other writes it. A thread holding the first
/// access that asks for the second would wait for itself.
bool ordered_through_ghosts(const BufferState& held, Access held_mode, const BufferState& b,
                            Access mode) noexcept;

/// A neighbour of a halo tile: the tile at (grid_i + di, grid_j + dj) of its grid.
struct HaloNeighbour {
  Ref<BufferState> tile;
  int8_t di, dj;
};
using HaloNeighbours = boost::container::small_vector<HaloNeighbour, 8>;

/// The alive neighbours of halo tile `h` (a reference each), whose edges its ghosts are: what a
/// recording keeps of a read of `h`, by place, so that a replay that binds other tiles can check
/// that it binds their neighbours too (engine/recorded_graph.hpp).
HaloNeighbours halo_neighbours(const BufferState& h);

}  // namespace hcr::detail
