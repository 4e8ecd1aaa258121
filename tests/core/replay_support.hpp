// Helpers of the replay tests (replay_test, replay_misuse_test, replay_reduce_halo_test): the
// backends the Replay suite runs on, a start grid, small kernels, a refusal's message.
#pragma once

#include "../test_support.hpp"

#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace hcr::test {

/// Two simulated devices, "a" and "b", each with its own memory (the data moves between them).
inline Config two_memories() {
  Config c;
  c.use_environment = false;
  c.policy = "eager";
  c.model_dir = "off";
  c.backends.push_back({"sim",
                        true,
                        {{"flops_per_byte", "0"},
                         {"device.0.name", "a"},
                         {"device.0.gflops", "1000"},
                         {"device.0.concurrency", "2"},
                         {"device.1.name", "b"},
                         {"device.1.gflops", "1000"},
                         {"device.1.concurrency", "2"}},
                        "test"});
  return c;
}

/// A configuration the Replay suite runs on, and its name in the test's.
struct Param {
  const char* name;
  Config config;
};

inline void PrintTo(const Param& p, std::ostream* os) { *os << p.name; }

class Replay : public ::testing::TestWithParam<Param> {};

/// The backends of TEST_P(Replay, ...): each file instantiates them as
/// `INSTANTIATE_TEST_SUITE_P(Backends, Replay, replay_backends(), backend_name)`.
inline auto replay_backends() {
  return ::testing::Values(Param{"cpu", cpu_config(2)}, Param{"sim_two_memories", two_memories()});
}

inline std::string backend_name(const ::testing::TestParamInfo<Param>& info) {
  return info.param.name;
}

/// A grid with a hot top row and left column, and a little texture elsewhere.
inline std::vector<double> initial_grid(size_t rows, size_t cols) {
  std::vector<double> g(rows * cols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c)
      g[r * cols + c] = (r == 0 ? 100.0 : 0.0) + (c == 0 ? 50.0 : 0.0) + 0.01 * double(r * c % 7);
  return g;
}

inline Kernel affine_kernel(Runtime& rt) {
  // out = in * 2 + param, element by element (in and out may be one buffer).
  return rt.kernel("affine").cpu([](TaskContext& ctx) {
    auto in = ctx.arg<int64_t>(0), out = ctx.arg<int64_t>(1);
    const int64_t add = ctx.param<int64_t>(0);
    for (size_t i = 0; i < in.cols; ++i) {
      if (in(0, i) < 0) throw std::runtime_error("negative input " + std::to_string(in(0, i)));
      out(0, i) = in(0, i) * 2 + add;
    }
  });
}

/// Element i of the vector `b` becomes v + i.
inline void fill(Buffer<int64_t>& b, int64_t v) {
  auto h = b.acquire(Access::write);
  for (size_t i = 0; i < h.cols(); ++i) h(0, i) = v + int64_t(i);
}

/// x += param, element by element.
inline Kernel add_kernel(Runtime& rt) {
  return rt.kernel("add").cpu([](TaskContext& ctx) {
    auto x = ctx.arg<int64_t>(0);
    for (size_t i = 0; i < x.cols; ++i) x(0, i) += ctx.param<int64_t>(0);
  });
}

/// What `f` threw (an Error of `code`); a failure when it threw nothing.
template <class F>
std::string error_of(F&& f, ErrorCode code = ErrorCode::invalid_argument) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

/// Whether `text` contains `part`.
inline bool says(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

}  // namespace hcr::test
