// Where and when a task's inputs would arrive in a memory: each copy from where a valid replica
// is, over every link it crosses — out of a device memory into host memory, host memory into a
// device memory, directly between the memories of one plugin, through host memory between those
// of two — each direction of each link free only after the copies booked on it (those of the
// task's priority or higher). Placing the task books its copies, so the next decision sees the
// links busy. The peft policy's prediction of data movement (peft.cpp).
#pragma once

#include "../cost_model.hpp"
#include "../horizons.hpp"

#include <hcr/sched.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>

namespace hcr::sched {

/// One input of a task: its size and where it is (bit sets over memory nodes, Context::locate).
struct InputSite {
  uint64_t bytes = 0;
  uint64_t at[2] = {0, 0};     ///< valid, or a copy on its way
  uint64_t valid[2] = {0, 0};  ///< valid
};

inline bool on_node(const uint64_t bits[2], uint32_t node) {
  return (bits[node / 64] >> (node % 64)) & 1u;
}

class CopyPlanner {
 public:
  /// Copies of one task planned one by one (more inputs count as one copy from host memory).
  static constexpr size_t kInputs = 8;

  explicit CopyPlanner(const LinkModel& links) : links_(links) {}
  /// Links for memory nodes 0 .. nodes-1 (before use; copies to nodes past them are predicted
  /// at the link model's figures without queueing).
  void resize(uint32_t nodes) {
    in_ = std::make_unique<LinkHorizon[]>(nodes);
    out_ = std::make_unique<LinkHorizon[]>(nodes);
    nodes_ = nodes;
  }
  uint32_t nodes() const noexcept { return nodes_; }
  /// A node's link from host memory (and from memories of its own plugin).
  LinkHorizon* inbound(uint32_t node) const { return node < nodes_ ? &in_[node] : nullptr; }
  /// A node's link to host memory.
  LinkHorizon* outbound(uint32_t node) const { return node < nodes_ ? &out_[node] : nullptr; }

  /// The device memory a copy of `in` comes from, as the data manager picks it: the first device
  /// memory other than `except` with a valid replica, else one with a copy arriving; 0 (host
  /// memory) when no device memory has it.
  static uint32_t device_source(const InputSite& in, uint32_t except) {
    for (const uint64_t* bits : {in.valid, in.at})
      for (unsigned w = 0; w < 2; ++w) {
        uint64_t b = bits[w] & (w == 0 ? ~uint64_t{1} : ~uint64_t{0});  // not host memory
        while (b != 0) {
          const uint32_t node = w * 64 + static_cast<uint32_t>(__builtin_ctzll(b));
          b &= b - 1;
          if (node != except) return node;
        }
      }
    return 0;
  }

  /// When the inputs `ins[0..n)` (and `extra` bytes more, from host memory) would all be in
  /// memory node `node` for a task of priority `prio`, copies planned from now; `direct(a, b)`:
  /// whether memory a copies to memory b directly (Context::direct_copy). `book`: the copies are
  /// booked on their links.
  template <class Direct>
  double arrival(const InputSite* ins, size_t n, uint64_t extra, uint32_t node, int prio,
                 double now, bool book, Direct&& direct) const {
    // This task's own copies on one link run one after the other.
    struct Use {
      LinkHorizon* link;
      double free;
    };
    std::array<Use, 2 * kInputs + 1> used;
    size_t n_used = 0;
    auto hop = [&](LinkHorizon* link, double earliest, double seconds) {
      if (link == nullptr) return earliest + seconds;
      Use* u = nullptr;
      for (size_t i = 0; i < n_used && u == nullptr; ++i)
        if (used[i].link == link) u = &used[i];
      if (u == nullptr) {
        u = &used[n_used++];
        *u = {link, link->free_at(prio, now)};
      }
      const double start = std::max(earliest, u->free);
      u->free = start + seconds;
      if (book) link->book(prio, now, earliest, seconds);
      return u->free;
    };
    double ready = now;
    for (size_t i = 0; i < n && i < kInputs; ++i) {
      const InputSite& in = ins[i];
      if (on_node(in.at, node)) continue;  // there, or on its way
      double end;
      if (node == 0) {  // home from the device memory that holds it
        const uint32_t s = device_source(in, node);
        end = hop(outbound(s), now, links_.predict(s, 0, in.bytes));
      } else if (on_node(in.at, 0)) {
        end = hop(inbound(node), now, links_.predict(0, node, in.bytes));
      } else if (const uint32_t s = device_source(in, node); direct(s, node)) {
        end = hop(inbound(node), now, links_.predict(s, node, in.bytes));
      } else {  // through host memory
        const double home = hop(outbound(s), now, links_.predict(s, 0, in.bytes));
        end = hop(inbound(node), home, links_.predict(0, node, in.bytes));
      }
      ready = std::max(ready, end);
    }
    if (extra > 0 && node != 0)
      ready = std::max(ready, hop(inbound(node), now, links_.predict(0, node, extra)));
    return ready;
  }

 private:
  const LinkModel& links_;
  std::unique_ptr<LinkHorizon[]> in_, out_;
  uint32_t nodes_ = 0;
};

/// Where each input of `t` is (Context::locate), read once per decision, into `out` (up to
/// CopyPlanner::kInputs of them; further inputs add their bytes to `extra`). Returns how many.
inline size_t read_inputs(const Context& ctx, TaskRef t, InputSite* out, uint64_t& extra) {
  size_t n = 0;
  extra = 0;
  const size_t args = t.arg_count();
  for (size_t i = 0; i < args; ++i) {
    const TaskArg a = t.arg(i);
    if (!reads(a.access)) continue;
    bool again = false;  // a buffer named twice is read once
    for (size_t k = 0; k < i && !again; ++k) again = t.arg(k).buffer == a.buffer;
    if (again) continue;
    if (n == CopyPlanner::kInputs) {
      extra += a.bytes;
      continue;
    }
    InputSite& in = out[n++];
    in.bytes = a.bytes;
    uint64_t arriving[2];
    ctx.locate(a.buffer, in.valid, arriving);
    in.at[0] = in.valid[0] | arriving[0];
    in.at[1] = in.valid[1] | arriving[1];
  }
  return n;
}

/// Whether every input of `t` has a valid replica in memory node `node`.
inline bool inputs_on(const Context& ctx, TaskRef t, uint32_t node) {
  for (size_t i = 0, n = t.arg_count(); i < n; ++i) {
    const TaskArg a = t.arg(i);
    if (!reads(a.access)) continue;
    uint64_t valid[2], arriving[2];
    ctx.locate(a.buffer, valid, arriving);
    if (!on_node(valid, node)) return false;
  }
  return true;
}

}  // namespace hcr::sched
