// Recorded graphs misused: recording states, bindings, recorded buffers that no longer exist, a
// replay refused for room, a recording open at the end, a graph outliving its runtime. Each is
// refused with a message naming what was wrong, and the graph stays usable.
#include "replay_support.hpp"

#include <string>
#include <vector>

namespace hcr::test {
namespace {

TEST(ReplayMisuse, RecordingStatesAreChecked) {
  Runtime rt(test::cpu_config(1));
  Kernel affine = affine_kernel(rt);
  auto a = rt.vector<int64_t>(2);
  EXPECT_TRUE(says(error_of([&] { rt.end_recording(); }), "without a Runtime::begin_recording"));
  rt.begin_recording();
  EXPECT_TRUE(says(error_of([&] { rt.begin_recording(); }), "do not nest"));
  rt.submit(Task(affine).read(a).write(a).param(int64_t{0}));
  Graph g = rt.end_recording();
  rt.begin_recording();
  EXPECT_TRUE(says(error_of([&] { g.replay(); }), "while the runtime is recording"));
  Graph empty = rt.end_recording();
  EXPECT_TRUE(empty.empty());
  EXPECT_TRUE(empty.replay().ready());
  EXPECT_TRUE(Graph().replay().ready());
  g.replay().get();
}

TEST(ReplayMisuse, BindingsAreChecked) {
  Runtime rt(test::cpu_config(1));
  Kernel affine = affine_kernel(rt);
  auto a = rt.vector<int64_t>(4), t = rt.vector<int64_t>(4);
  auto longer = rt.vector<int64_t>(5), other = rt.vector<int64_t>(4);
  rt.begin_recording();
  rt.submit(Task(affine).read(a).write(t).param(int64_t{0}));
  Graph g = rt.end_recording();
  std::string m = error_of([&] { g.replay({{a, longer}}); });
  EXPECT_TRUE(says(m, "1x5 i64 buffer") && says(m, "1x4 i64 buffer") && says(m, "binding 0")) << m;
  m = error_of([&] { g.replay({{a, a}, {other, t}}); });
  EXPECT_TRUE(says(m, "binding 1") && says(m, "not one the graph uses")) << m;
  m = error_of([&] { g.replay({{a, other}, {t, other}}); });
  EXPECT_TRUE(says(m, "two of the graph's buffers")) << m;
  m = error_of([&] { g.replay({{a, t}}); });  // t would be both the input and the output
  EXPECT_TRUE(says(m, "two of the graph's buffers")) << m;
  Runtime rt2(test::cpu_config(1));
  auto foreign = rt2.vector<int64_t>(4);
  m = error_of([&] { g.replay({{a, foreign}}); });
  EXPECT_TRUE(says(m, "another runtime")) << m;
  g.replay({{a, other}}).get();  // still usable after refusals
}

// A recorded tile whose buffer was unpartitioned no longer exists; a recorded buffer partitioned
// since cannot be used whole. Both are refused, naming the buffer; binding another works.
TEST(ReplayMisuse, RecordedBuffersThatNoLongerExist) {
  Runtime rt(test::cpu_config(1));
  Kernel affine = affine_kernel(rt);
  auto whole = rt.vector<int64_t>(4), other = rt.vector<int64_t>(2);
  fill(other, 5);
  Tiles<int64_t> tiles = whole.partition(1, 2);
  Buffer<int64_t> tile = tiles(0, 1);
  rt.begin_recording();
  rt.submit(Task(affine).read(tile).write(tile).param(int64_t{0}));
  Graph g = rt.end_recording();
  g.replay().get();
  whole.unpartition().get();
  std::string m = error_of([&] { g.replay(); });
  EXPECT_TRUE(says(m, "no longer exists") && says(m, "tile at (0, 2)")) << m;
  g.replay({{tile, other}}).get();
  EXPECT_EQ(other.to_vector()[0], 10);

  auto plain = rt.vector<int64_t>(4);
  rt.begin_recording();
  rt.submit(Task(affine).read(plain).write(plain).param(int64_t{0}));
  Graph h = rt.end_recording();
  Tiles<int64_t> parts = plain.partition(1, 2);
  m = error_of([&] { h.replay(); });
  EXPECT_TRUE(says(m, "partitioned since")) << m;
  plain.unpartition().get();
  h.replay().get();
}

// A replay refused for want of room (tasks held by a pause fill max_tasks_in_flight) leaves no
// trace in its buffers' order: once resumed, replays and submits on them run.
TEST(ReplayMisuse, RefusedForRoomLeavesNoTrace) {
  Config c = test::cpu_config(1);
  c.max_tasks_in_flight = 4;
  Runtime rt(c);
  Kernel add = add_kernel(rt);
  auto a = rt.vector<int64_t>(1), other = rt.vector<int64_t>(1);
  rt.begin_recording();
  rt.submit(Task(add).read_write(a).param(int64_t{1}));
  Graph g = rt.end_recording();
  rt.wait_all();
  rt.pause();
  for (int i = 0; i < 4; ++i) rt.submit(Task(add).read_write(other).param(int64_t{1}));
  const std::string m = error_of([&] { g.replay(); });
  EXPECT_TRUE(says(m, "wait forever")) << m;
  rt.resume();
  g.replay().get();
  rt.submit(Task(add).read_write(a).param(int64_t{10})).get();
  EXPECT_EQ(a.to_vector()[0], 12);
  EXPECT_EQ(other.to_vector()[0], 4);
}

// A recording still open when the runtime ends is dropped with it (valgrind, LeakSanitizer: no
// cycle through the recorded buffers keeps the runtime alive).
TEST(ReplayMisuse, RecordingOpenAtTheEnd) {
  Runtime rt(test::cpu_config(1));
  Kernel add = add_kernel(rt);
  auto a = rt.vector<int64_t>(1);
  rt.begin_recording();
  rt.submit(Task(add).read_write(a).param(int64_t{1}));
  EXPECT_EQ(a.to_vector()[0], 1);
}

TEST(ReplayMisuse, AfterTheRuntimeEnded) {
  Graph g;
  {
    Runtime rt(test::cpu_config(1));
    Kernel affine = affine_kernel(rt);
    auto a = rt.vector<int64_t>(2);
    rt.begin_recording();
    rt.submit(Task(affine).read(a).write(a).param(int64_t{0}));
    g = rt.end_recording();
  }
  error_of([&] { g.replay(); }, ErrorCode::shutdown);
}

}  // namespace
}  // namespace hcr::test
