// Owns halo tiles' ghosts on memory nodes: which version of each neighbour's data a replica's
// ghost edges hold, and the copies of edges that refresh them.
//
// A halo tile (Buffer::partition with an hcr::Halo) is a region of the partitioned buffer: its
// interior, its own data, and ghost edges that are its neighbours' interiors. Coherence treats
// only the interior as the tile's data: its replicas are valid or not as any buffer's, and every
// copy of the tile itself moves the interior alone (Transfers, WriteBack), so a copy home never
// overwrites the neighbours' edges in host memory. A replica on a device is region-sized; before
// a task that reads the tile runs there, each ghost edge is copied in from the neighbour's valid
// copy (on that device, in host memory, or on another device of the same plugin) unless the
// ghosts already hold the neighbour's current version: each buffer counts its writes
// (BufferData::version), each device replica of a halo tile remembers, per neighbour, the version
// its ghosts received (Replica::ghost_seen). Only edges move, and only those whose neighbour
// changed. The task graph orders the read after the neighbours' earlier writers and before
// their later ones (engine/halo_reads.hpp), so the version seen when the task acquires its data
// is the one it must read. A neighbour whose only valid copy is on another plugin's device goes
// home first, the task waiting (acquire retried when a copy lands).
//
// In host memory the ghosts are the neighbours' own memory. A task reading a tile there (a host
// task, a host view) needs of each neighbour only the pieces of its interior that its ghosts
// cover: a neighbour whose host replica is invalid gets those pieces copied home from a device
// that holds it, each tagged with the neighbour's version (Replica::edges_home), and stays invalid
// there as a whole (its own readers fetch its interior). The pieces (border_piece) cut each
// interior at the ghost width from each side, so a corner copied home for one neighbour serves the
// others and no two copies home write the same memory. A piece is never copied while a copy of
// the whole interior is on its way home (that one may be stale, and land over it: the task waits
// for it instead, as any reader), and a whole copy or a writer there waits for the pieces in
// flight. The neighbour's writers are ordered after the task, and each commit counts a new version,
// so what the task reads stays current while it runs; a copy of the neighbour's whole interior
// home meanwhile (its own reader's, a write-back) brings only the pieces not home yet
// (Coherence::copy_home), and so never writes under the task either.
#pragma once

#include "coherence.hpp"
#include "transfers.hpp"

#include "../buffer_state.hpp"
#include "../task_node.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <vector>

namespace hcr::detail {

class NodeMemory;

/// The ghost edge of `tile` that lies in the neighbour at (di, dj) from it, in the partitioned
/// buffer's coordinates (computed from the tile alone: the neighbour may be gone).
inline ElementRect ghost_edge(const BufferState& tile, int di, int dj) noexcept {
  const ElementRect own = own_elements(tile);
  ElementRect e;
  e.row0 = di < 0 ? tile.row0 : di == 0 ? own.row0 : own.row0 + own.rows;
  e.rows = di < 0 ? own.row0 - tile.row0 : di == 0 ? own.rows : tile.row0 + tile.rows - e.row0;
  e.col0 = dj < 0 ? tile.col0 : dj == 0 ? own.col0 : own.col0 + own.cols;
  e.cols = dj < 0 ? own.col0 - tile.col0 : dj == 0 ? own.cols : tile.col0 + tile.cols - e.col0;
  return e;
}

/// Piece `p` (0..8 row-major) of `b`'s interior cut in 3 x 3 at the ghost width from each side (a
/// side narrower than two widths is cut where its neighbours' ghosts end), so that the edge any
/// neighbour's ghosts read of it is a union of pieces.
inline ElementRect border_piece(const BufferState& b, uint8_t p) noexcept {
  const ElementRect own = own_elements(b);
  auto cut = [&](size_t length, int part, size_t& first, size_t& count) {
    const size_t near = std::min<size_t>(b.halo, length);
    const size_t far = length > b.halo ? length - b.halo : 0;
    const size_t bounds[4] = {0, std::min(near, far), std::max(near, far), length};
    first = bounds[part];
    count = bounds[part + 1] - bounds[part];
  };
  ElementRect e;
  size_t r = 0, c = 0;
  cut(own.rows, p / 3, r, e.rows);
  cut(own.cols, p % 3, c, e.cols);
  e.row0 = own.row0 + r;
  e.col0 = own.col0 + c;
  return e;
}

/// A neighbour's place around a tile, 0..8 row-major over (di, dj) in [-1, 1]^2 (4, the tile
/// itself, never used).
constexpr uint8_t ghost_slot(int di, int dj) noexcept {
  return static_cast<uint8_t>((di + 1) * 3 + (dj + 1));
}

/// Where rectangle `r` lies in `x`'s replica: in host memory (the buffer's pitch) or in a device
/// replica of x's region (packed, row-major).
struct RectPlace {
  std::byte* host;  // node 0
  uint64_t offset;  // device nodes
  uint64_t pitch;
};
inline RectPlace rect_place(const BufferState& x, bool host, const ElementRect& r) noexcept {
  const size_t dr = r.row0 - x.row0, dc = r.col0 - x.col0;
  if (host) return {x.host + (dr * x.ld + dc) * x.elem, 0, x.ld * x.elem};
  return {nullptr, (dr * x.cols + dc) * x.elem, x.cols * x.elem};
}

/// What a task's halo reads need on a node, decided before it pins anything, done once it does.
struct GhostPlan {
  struct Edge {
    BufferState* tile;
    BufferState* from;  // the neighbour (null: gone, its data in host memory)
    uint32_t src;       // the node its edge is read on
    uint8_t slot;
    uint64_t version;
  };
  struct Piece {
    BufferState* nb;  // the neighbour
    uint32_t src;     // the device node its piece is copied home from
    uint8_t piece;    // border_piece
    uint64_t version;
  };
  std::vector<Edge> edges;            // device nodes: edges to copy into the tiles' ghosts
  std::vector<BufferState*> homes;    // host memory: neighbours whose host replica must be valid
  std::vector<Piece> pieces;          // host memory: pieces of neighbours to copy home
  std::vector<BufferState*> landing;  // host memory: neighbours whose pieces home the task reads
  std::vector<BufferState*> refs;     // the neighbours' references taken

  GhostPlan() = default;
  GhostPlan(const GhostPlan&) = delete;
  GhostPlan& operator=(const GhostPlan&) = delete;
  /// Releases the references: outside the data manager's lock (one may be the last).
  ~GhostPlan() {
    for (BufferState* b : refs) release(b);
  }
};

/// The ghosts' part of the data manager; everything runs under its lock.
class Ghosts {
 public:
  static constexpr uint64_t kGone = UINT64_MAX;  // ghost_seen of a neighbour that no longer lives

  Ghosts(Coherence& coherence, const NodeMemory& memory) : coherence_(coherence), memory_(memory) {}
  Ghosts(const Ghosts&) = delete;
  Ghosts& operator=(const Ghosts&) = delete;

  enum class Step {
    go,     // `plan` holds what to do once the task pins its replicas
    retry,  // not now (a neighbour on its way home, ghosts still receiving an older edge):
            // acquire again when a copy lands; copies that lead there are in `copies`
    failed  // a neighbour's data was lost: t->transfer_error says so
  };
  /// What task `t`'s reads of halo tiles need on node `n`.
  Step plan(TaskNode* t, uint32_t n, GhostPlan& plan, std::vector<Copy>& copies);
  /// `t` pins its replicas on `n`: the planned edge copies start (their tiles' readers wait for
  /// them, Replica::ghost_fetches), and `t` waits for its neighbours' host replicas; in host
  /// memory the pieces home start, and `t` waits for those it reads (Replica::edges_landing).
  void start(TaskNode* t, uint32_t n, const GhostPlan& plan, std::vector<Copy>& copies);
  /// Prefetch of halo tile `tile` to device node `n`, its replica there allocated: copies start
  /// into its stale ghost edges from the neighbours' copies that are valid on `n`, in host memory
  /// or on another device of the plugin (one valid elsewhere is left to the reader's acquire), so
  /// that the task it is prefetched for finds its ghosts current. The neighbours' references go
  /// into `plan.refs`.
  void prefetch(BufferState& tile, uint32_t n, int priority, GhostPlan& plan,
                std::vector<Copy>& copies);
  /// Edge copy `c` ended (failed, when `failure` is set).
  void landed(const Copy& c, const std::exception_ptr& failure, CopyLanding::After& after);
  /// Copy `c` of a piece home ended (failed, when `failure` is set).
  void landed_home(const Copy& c, const std::exception_ptr& failure, CopyLanding::After& after);

 private:
  // What a task reading `tile` in host memory needs of neighbour `nb`, at `slot` around it: its
  // host replica valid (`plan.homes`), or the pieces its ghosts cover home (`plan.pieces`).
  void plan_home(BufferState& tile, BufferState& nb, uint8_t slot, GhostPlan& plan);
  // Where the edge of neighbour `nb` can be read for node `n` without a copy home: n itself, host
  // memory, another device of n's plugin; -1 when nowhere.
  int edge_source(BufferState& nb, uint32_t n);
  // The planned edge copies start (start's and prefetch's).
  void start_edges(const GhostPlan& plan, uint32_t n, int priority, std::vector<Copy>& copies);

  Coherence& coherence_;
  const NodeMemory& memory_;
};

}  // namespace hcr::detail
