// What every tiled call shares: the built-in kernels' names, and from core (shared with
// hcr::blas::gemm) the shapes in messages and the operands' checks and partitioning into tiles,
// all operands or none. An installed detail header of hcr::linalg (tile_tasks.hpp includes it);
// not an API.
#pragma once

#include <hcr/detail/operands.hpp>
#include <hcr/linalg.hpp>

#include <string>
#include <type_traits>

namespace hcr::linalg::detail {

using hcr::detail::Operands;
using hcr::detail::shape;

/// The built-in kernel `op` for T: "potrf" -> "potrf_f32".
template <class T>
std::string kernel_name(const char* op) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  return std::string(op) + (std::is_same_v<T, float> ? "_f32" : "_f64");
}

}  // namespace hcr::linalg::detail
