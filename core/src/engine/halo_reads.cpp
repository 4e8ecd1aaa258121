// Halo tiles in dependency order (halo_reads.hpp): the neighbours whose interiors a halo tile's
// ghosts, found through the tiles' grid (for_each_halo_neighbour, the data manager's walk too).
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
  for_each_halo_neighbour(h, [&](BufferState* nb, int di, int dj) {
    if (nb != nullptr)
      out.push_back(
          {Ref<BufferState>::adopt(nb), static_cast<int8_t>(di), static_cast<int8_t>(dj)});
  });
  return out;
}

}  // namespace hcr::detail
