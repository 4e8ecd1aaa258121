// Halo tiles in dependency order (halo_reads.hpp): the neighbours whose interiors a halo tile's
// ghosts are, found through the parent's grid.
#include "halo_reads.hpp"

#include "../buffer_state.hpp"

namespace hcr::detail {

GhostSources ghost_sources(const TaskNode& t) {
  GhostSources out;
  auto named = [&](const BufferState* b) {
    for (const ArgRec& a : t.uargs)
      if (a.buffer == b) return true;
    for (const Ref<BufferState>& s : out)
      if (s.get() == b) return true;
    return false;
  };
  for (const ArgRec& a : t.uargs) {
    const BufferState& h = *a.buffer;
    if (h.halo == 0 || !reads(a.access)) continue;
    BufferState& parent = *h.parent;
    // The parent knows its tiles by plain pointer; a tile whose last handle went has no task
    // left to order against (its slot is null, or its count is 0 while it is being destroyed).
    parent.lock.lock();
    if (parent.tiles.size() == size_t{h.grid_rows} * h.grid_cols)
      for (int di = -1; di <= 1; ++di)
        for (int dj = -1; dj <= 1; ++dj) {
          const int64_t i = int64_t{h.grid_i} + di, j = int64_t{h.grid_j} + dj;
          if ((di == 0 && dj == 0) || i < 0 || j < 0 || i >= h.grid_rows || j >= h.grid_cols)
            continue;
          BufferState* n = parent.tiles[static_cast<size_t>(i) * h.grid_cols + j];
          if (n != nullptr && !named(n) && try_retain(n)) out.push_back(Ref<BufferState>::adopt(n));
        }
    parent.lock.unlock();
  }
  return out;
}

}  // namespace hcr::detail
