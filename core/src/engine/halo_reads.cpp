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
    if (a.buffer->halo == 0 || !reads(a.access)) continue;
    for (HaloNeighbour& n : halo_neighbours(*a.buffer))
      if (!named(n.tile.get())) out.push_back(std::move(n.tile));
  }
  return out;
}

bool ordered_through_ghosts(const BufferState& held, Access held_mode, const BufferState& b,
                            Access mode) noexcept {
  if (held.halo == 0 || b.halo == 0 || held.parent != b.parent || &held == &b) return false;
  const auto apart = [](uint32_t x, uint32_t y) { return x > y ? x - y : y - x; };
  if (apart(held.grid_i, b.grid_i) > 1 || apart(held.grid_j, b.grid_j) > 1) return false;
  // Each reads the other's edge through its ghosts; writes touch only their own interiors.
  return (reads(mode) && writes(held_mode)) || (reads(held_mode) && writes(mode));
}

HaloNeighbours halo_neighbours(const BufferState& h) {
  HaloNeighbours out;
  BufferState& parent = *h.parent;
  parent.lock.lock();
  if (parent.tiles.size() == size_t{h.grid_rows} * h.grid_cols)
    for (int di = -1; di <= 1; ++di)
      for (int dj = -1; dj <= 1; ++dj) {
        const int64_t i = int64_t{h.grid_i} + di, j = int64_t{h.grid_j} + dj;
        if ((di == 0 && dj == 0) || i < 0 || j < 0 || i >= h.grid_rows || j >= h.grid_cols)
          continue;
        BufferState* n = parent.tiles[static_cast<size_t>(i) * h.grid_cols + j];
        if (n != nullptr && try_retain(n))
          out.push_back(
              {Ref<BufferState>::adopt(n), static_cast<int8_t>(di), static_cast<int8_t>(dj)});
      }
  parent.lock.unlock();
  return out;
}

}  // namespace hcr::detail
