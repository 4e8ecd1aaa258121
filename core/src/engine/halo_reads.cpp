// Halo tiles in dependency order (halo_reads.hpp): the neighbours whose interiors a halo tile's
// ghosts are, found through the parent's grid, and the devices a task with one cannot use.
#include "halo_reads.hpp"

#include "../buffer_state.hpp"

#include <algorithm>

namespace hcr::detail {

namespace {
bool try_retain(BufferState* b) noexcept {
  uint32_t r = b->refs.load(std::memory_order_relaxed);
  while (r != 0)
    if (b->refs.compare_exchange_weak(r, r + 1, std::memory_order_acq_rel)) return true;
  return false;
}
}  // namespace

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

void exclude_own_memory_devices(TaskNode& t, const BufferState& b,
                                std::span<const Device> devices) {
  for (const Device& d : devices) {
    if (d.memory_node == 0 ||
        std::find(t.excluded.begin(), t.excluded.end(), d.id) != t.excluded.end())
      continue;
    t.excluded.push_back(d.id);
    if (!t.device_errors.empty()) t.device_errors += "; ";
    t.device_errors += d.name + ": the task's " + describe(b) +
                       " is a view of host memory, and this device has its own memory (halo "
                       "tiles run on devices that work in host memory)";
  }
}

}  // namespace hcr::detail
