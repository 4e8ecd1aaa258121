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

}  // namespace hcr::detail
