/// \file operands.hpp
/// Internals of the tiled calls (hcr::blas::gemm here, hcr::linalg's): the operands' shapes in
/// messages and their partitioning into tiles, all operands or none. Not an API.
#pragma once

#include <hcr/buffer.hpp>
#include <hcr/error.hpp>
#include <hcr/task.hpp>

#include <string>
#include <vector>

namespace hcr::detail {

inline std::string shape(size_t rows, size_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}
template <class T>
std::string shape(const Buffer<T>& b) {
  return shape(b.rows(), b.cols());
}

/// The operands of one call (`fn`, "linalg::potrf"), checked, then partitioned into tiles.
///
/// Every check that could stop the partitioning of an operand runs before any is partitioned, and
/// a partition that fails all the same (another thread partitioned the buffer in between) joins
/// those already made: a failed call leaves no buffer partitioned. An operand that is a tile of a
/// partitioned buffer is partitioned in turn (nested), and joined before the call returns.
template <class T>
class Operands {
 public:
  explicit Operands(const char* fn) : fn_(fn) {}
  Operands(const Operands&) = delete;
  Operands& operator=(const Operands&) = delete;
  /// Joins what is still partitioned: only after a failure (join() ran otherwise).
  ~Operands() {
    for (Part& p : parts_)
      if (p.partitioned) {
        try {
          p.buffer.unpartition();
        } catch (...) {  // the runtime ended meanwhile: nothing is left to join
        }
      }
  }

  /// Throws Error(invalid_argument) "<fn>: <what>".
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorCode::invalid_argument, std::string(fn_) + ": " + what);
  }

  /// Adds operand `name` ("A"); throws for an empty handle. Returns its index for tiles().
  size_t add(const Buffer<T>& b, const char* name) {
    if (!b.valid()) fail(std::string(name) + " is an empty Buffer handle");
    parts_.push_back({b, name, {}, false});
    return parts_.size() - 1;
  }

  /// Throws naming both when operand `out` is operand `in` (the same buffer).
  void no_alias(size_t out, size_t in) const {
    if (parts_[out].buffer == parts_[in].buffer)
      fail(std::string(parts_[out].name) + " must not alias " + parts_[in].name +
           " (it is written while " + parts_[in].name + " is read)");
  }

  /// Partitions every operand into tile x tile tiles; an operand named twice (gemm's A and B) is
  /// partitioned once. `probe` is a kernel of the call: a task of it refuses a buffer of another
  /// runtime, which is how that is found before anything is partitioned or submitted.
  void partition(size_t tile, const Kernel& probe) {
    if (tile == 0) fail("tile size 0");
    for (Part& p : parts_) {
      try {
        Task(probe).read(p.buffer);  // never submitted
      } catch (const Error& e) {
        throw Error(
            e.code(),
            std::string(fn_) + ": " + p.name + " (" + describe(p.buffer) + ") belongs to " +
                (e.code() == ErrorCode::shutdown ? "a runtime that has ended" : "another runtime"));
      }
    }
    for (Part& p : parts_) {
      if (const Part* first = same_as(p)) {
        p.tiles = first->tiles;
        continue;
      }
      try {
        p.tiles = p.buffer.partition(tile, tile);
      } catch (const Error& e) {
        throw Error(e.code(), std::string(fn_) + ": " + p.name + " (" + describe(p.buffer) +
                                  "): " + e.what());  // the destructor joins the others
      }
      p.partitioned = true;
    }
  }

  const Tiles<T>& tiles(size_t i) const { return parts_[i].tiles; }

  /// Joins every operand; returns the join of operand `out`, which completes once every task on
  /// its tiles has (and fails if one that wrote a tile failed).
  Event join(size_t out) {
    Event result;
    for (size_t i = 0; i < parts_.size(); ++i) {
      Part& p = parts_[i];
      if (!p.partitioned) continue;
      p.partitioned = false;
      Event e = p.buffer.unpartition();
      if (p.buffer == parts_[out].buffer) result = std::move(e);
    }
    return result;
  }

 private:
  struct Part {
    Buffer<T> buffer;
    const char* name;
    Tiles<T> tiles;
    bool partitioned;
  };
  // An earlier operand that is the same buffer as `p`, if any.
  const Part* same_as(const Part& p) const {
    for (const Part& q : parts_) {
      if (&q == &p) return nullptr;
      if (q.buffer == p.buffer) return &q;
    }
    return nullptr;
  }
  static std::string describe(const Buffer<T>& b) {
    return "a " + shape(b) + " " + std::string(dtype_name(dtype_of_v<T>)) + " buffer";
  }

  const char* fn_;
  std::vector<Part> parts_;
};

}  // namespace hcr::detail
