// Buffers: shapes, registered host memory, host access ordering, partitioning into tiles.
#include "../test_support.hpp"

#include <future>
#include <numeric>
#include <optional>
#include <thread>

namespace hcr {
namespace {

TEST(Buffers, ShapesAndValidation) {
  Runtime rt(test::cpu_config(1));
  auto m = rt.buffer<double>(3, 5);
  EXPECT_EQ(m.rows(), 3u);
  EXPECT_EQ(m.cols(), 5u);
  EXPECT_EQ(m.ld(), 5u);
  EXPECT_EQ(m.bytes(), 120u);
  EXPECT_EQ(m.to_vector(), std::vector<double>(15, 0.0));  // zero-initialised
  Error e = test::expect_error([&] { rt.buffer<float>(0, 4); });
  EXPECT_NE(std::string(e.what()).find("buffer of 0x4 elements"), std::string::npos);
  std::vector<float> host(12);
  e = test::expect_error([&] { rt.wrap(host.data(), 3, 4, 2); });
  EXPECT_NE(std::string(e.what()).find("leading dimension 2 is less than the 4 columns"),
            std::string::npos);
  EXPECT_EQ(test::expect_error([&] { Buffer<float>().rows(); }).code(),
            ErrorCode::invalid_argument);
}

TEST(Buffers, WrappedHostMemoryIsUsedInPlace) {
  Runtime rt(test::cpu_config(2));
  std::vector<int32_t> data(2 * 8);  // a 2x3 view with leading dimension 8
  std::iota(data.begin(), data.end(), 0);
  auto b = rt.wrap(data.data(), 2, 3, 8);
  Kernel inc = rt.kernel("inc").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<int32_t>(0);
    EXPECT_EQ(v.ld, 8u);
    for (size_t r = 0; r < v.rows; ++r)
      for (size_t c = 0; c < v.cols; ++c) v(r, c) += 100;
  });
  rt.submit(Task(inc).read_write(b)).get();
  EXPECT_EQ(b.to_vector(), (std::vector<int32_t>{100, 101, 102, 108, 109, 110}));
  EXPECT_EQ(data[3], 3);  // outside the view: untouched
}

TEST(Buffers, AcquireWaitsForWritersAndHoldsLaterTasks) {
  Runtime rt(test::cpu_config(2));
  auto b = rt.vector<int64_t>(1);
  Kernel add = rt.kernel("add").cpu(
      [](TaskContext& ctx) { ctx.arg<int64_t>(0)(0, 0) += ctx.param<int64_t>(0); });
  for (int i = 1; i <= 100; ++i) rt.submit(Task(add).read_write(b).param(int64_t{i}));
  {
    auto v = b.acquire(Access::read_write);
    EXPECT_EQ(v(0, 0), 5050);  // every earlier writer has finished
    Event later = rt.submit(Task(add).read_write(b).param(int64_t{1000}));
    std::this_thread::yield();
    EXPECT_FALSE(later.ready());  // held by the host's access
    v(0, 0) = 0;
  }
  EXPECT_EQ(b.to_vector()[0], 1000);
}

TEST(Buffers, ReadersRunConcurrentlyWithAHostReader) {
  Runtime rt(test::cpu_config(2));
  auto b = rt.vector<int32_t>(1);
  std::atomic<int> reads{0};
  Kernel rd = rt.kernel("rd").cpu([&](TaskContext&) { reads.fetch_add(1); });
  auto v = b.acquire(Access::read);
  Event e = rt.submit(Task(rd).read(b));
  e.wait();  // a read does not wait for the host's read
  EXPECT_EQ(reads.load(), 1);
}

TEST(Buffers, TilesAreViewsAndUnpartitionJoinsThem) {
  Runtime rt(test::cpu_config(2));
  auto m = rt.buffer<int32_t>(5, 7);
  Kernel fill = rt.kernel("fill").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<int32_t>(0);
    int32_t id = ctx.param<int32_t>(0);
    for (size_t r = 0; r < v.rows; ++r)
      for (size_t c = 0; c < v.cols; ++c) v(r, c) = id;
  });
  auto tiles = m.partition(2, 3);
  ASSERT_EQ(tiles.rows(), 3u);
  ASSERT_EQ(tiles.cols(), 3u);
  EXPECT_EQ(tiles(2, 2).rows(), 1u);  // edge tiles are smaller
  EXPECT_EQ(tiles(2, 2).cols(), 1u);
  EXPECT_EQ(tiles(0, 0).ld(), 7u);
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < 3; ++j)
      rt.submit(Task(fill).write(tiles(i, j)).param(static_cast<int32_t>(i * 10 + j)));
  // The whole buffer is off limits while partitioned.
  Error e = test::expect_error([&] { rt.submit(Task(fill).write(m).param(0)); });
  EXPECT_NE(std::string(e.what()).find("is partitioned"), std::string::npos);
  EXPECT_THROW(m.acquire(), Error);
  EXPECT_THROW(m.partition(1, 1), Error);

  Event joined = m.unpartition();
  joined.get();
  auto v = m.to_vector();
  for (size_t r = 0; r < 5; ++r)
    for (size_t c = 0; c < 7; ++c)
      ASSERT_EQ(v[r * 7 + c], static_cast<int32_t>((r / 2) * 10 + c / 3)) << r << "," << c;
  // A tile of the unpartitioned buffer is dead.
  e = test::expect_error([&] { rt.submit(Task(fill).write(tiles(0, 0)).param(0)); });
  EXPECT_NE(std::string(e.what()).find("unpartitioned"), std::string::npos);
  EXPECT_THROW(m.unpartition(), Error);
}

TEST(Buffers, PartitionWaitsForEarlierUseOfTheWhole) {
  Runtime rt(test::cpu_config(2));
  auto m = rt.buffer<int32_t>(4, 4);
  Kernel set = rt.kernel("set").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<int32_t>(0);
    for (size_t r = 0; r < v.rows; ++r)
      for (size_t c = 0; c < v.cols; ++c) v(r, c) = ctx.param<int32_t>(0);
  });
  Kernel add_one = rt.kernel("add1").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<int32_t>(0);
    for (size_t r = 0; r < v.rows; ++r)
      for (size_t c = 0; c < v.cols; ++c) v(r, c) += 1;
  });
  rt.submit(Task(set).write(m).param(41));
  auto t = m.partition(2, 2);
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j) rt.submit(Task(add_one).read_write(t(i, j)));
  m.unpartition();
  rt.submit(Task(add_one).read_write(m));
  EXPECT_EQ(m.to_vector(), std::vector<int32_t>(16, 43));
}

TEST(Buffers, DroppedTilesDoNotLeakOrBreakUnpartition) {
  Runtime rt(test::cpu_config(1));
  auto m = rt.buffer<float>(8, 8);
  { auto t = m.partition(4, 4); }  // tiles dropped unused
  EXPECT_NO_THROW(m.unpartition().get());
  EXPECT_EQ(m.to_vector().size(), 64u);
}

TEST(Buffers, UninitializedSkipsTheZeroFillAndZeroedNeverShowsOldData) {
  Runtime rt(test::cpu_config(1));
  Kernel fill = rt.kernel("fill").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<uint8_t>(0);
    for (size_t c = 0; c < v.cols; ++c) v(0, c) = ctx.param<uint8_t>(0);
  });
  // Pooled, heap and mapped sizes: memory a freed buffer leaves behind is reused, and a zeroed
  // buffer made from it is zero all the same.
  for (size_t n : {size_t{64}, size_t{65536}, size_t{2} << 20}) {
    {
      auto a = rt.vector<uint8_t>(n, uninitialized);
      rt.submit(Task(fill).write(a).param(uint8_t{0xab})).get();
      EXPECT_EQ(a.to_vector(), std::vector<uint8_t>(n, 0xab)) << n;
    }
    EXPECT_EQ(rt.vector<uint8_t>(n).to_vector(), std::vector<uint8_t>(n, 0)) << n;
    EXPECT_EQ(rt.buffer<uint8_t>(1, n).to_vector(), std::vector<uint8_t>(n, 0)) << n;
  }
  // Without the fill, a small buffer is the block the last one freed, as it was left.
  {
    auto a = rt.buffer<uint8_t>(4, 16, uninitialized);
    a.acquire(Access::write).span()[40] = 0x5a;
  }
  auto b = rt.buffer<uint8_t>(4, 16, uninitialized);
  EXPECT_EQ(b.rows(), 4u);
  EXPECT_EQ(b.cols(), 16u);
  EXPECT_EQ(b.to_vector()[40], 0x5a) << "the memory was filled";
}

// ---- acquire_async ---------------------------------------------------------------------------

TEST(AsyncAccess, TakesItsPlaceInOrderAndIsReleasedFromAnotherThread) {
  Runtime rt(test::cpu_config(2));
  auto b = rt.vector<int64_t>(1);
  Kernel add = rt.kernel("add").cpu(
      [](TaskContext& ctx) { ctx.arg<int64_t>(0)(0, 0) += ctx.param<int64_t>(0); });
  for (int i = 1; i <= 100; ++i) rt.submit(Task(add).read_write(b).param(int64_t{i}));
  std::promise<AsyncAccess<int64_t>> granted;
  b.acquire_async(Access::read_write,
                  [&](AsyncAccess<int64_t> a) { granted.set_value(std::move(a)); });
  Event later = rt.submit(Task(add).read_write(b).param(int64_t{1000}));
  AsyncAccess<int64_t> a = granted.get_future().get();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.rows(), 1u);
  EXPECT_EQ(a.data()[0], 5050);  // every earlier writer has finished
  std::this_thread::yield();
  EXPECT_FALSE(later.ready());  // held by the unreleased access
  std::thread([&] {
    a.data()[0] = 7;
    a.release();
  }).join();
  later.get();
  EXPECT_EQ(b.to_vector()[0], 1007);  // the later task saw what the access wrote
}

// The callbacks below hand their access to the test thread through a promise: they may run on a
// runtime thread.
template <class T>
auto handoff(std::promise<AsyncAccess<T>>& p) {
  return [&p](AsyncAccess<T> a) { p.set_value(std::move(a)); };
}

TEST(AsyncAccess, ReadersShareAndAccessesOfOneThreadDoNotConflict) {
  using namespace std::chrono_literals;
  Runtime rt(test::cpu_config(1));
  auto b = rt.vector<int32_t>(4);
  // Two writes from one thread: the blocking acquire would refuse the second (it would wait for
  // itself); an async access holds no thread, so the second simply waits for the first.
  std::promise<AsyncAccess<int32_t>> p1, p2;
  b.acquire_async(Access::write, handoff(p1));
  b.acquire_async(Access::write, handoff(p2));
  std::future<AsyncAccess<int32_t>> f2 = p2.get_future();
  AsyncAccess<int32_t> first = p1.get_future().get();
  EXPECT_EQ(f2.wait_for(0s), std::future_status::timeout);  // held by the first
  first.data()[0] = 11;
  first.release();
  {
    AsyncAccess<int32_t> second = f2.get();  // granted by the first's release
    EXPECT_EQ(second.data()[0], 11);
    second.data()[1] = 12;
  }  // the destructor releases
  std::atomic<int> reads{0};
  Kernel rd = rt.kernel("rd").cpu([&](TaskContext&) { reads.fetch_add(1); });
  std::promise<AsyncAccess<int32_t>> p3;
  b.acquire_async(Access::read, handoff(p3));
  AsyncAccess<int32_t> reader = p3.get_future().get();
  rt.submit(Task(rd).read(b)).get();  // a read does not wait for an async read
  EXPECT_EQ(reads.load(), 1);
  EXPECT_EQ(reader.data()[1], 12);
  reader.release();
  rt.wait_all();
}

TEST(AsyncAccess, ReleaseWithAnErrorFailsWhatReadsItsData) {
  Runtime rt(test::cpu_config(1));
  auto b = rt.vector<int32_t>(1);
  Kernel rd = rt.kernel("rd").cpu([](TaskContext&) {});
  std::promise<AsyncAccess<int32_t>> pw;
  b.acquire_async(Access::write, handoff(pw));
  AsyncAccess<int32_t> w = pw.get_future().get();
  Event reader = rt.submit(Task(rd).read(b));
  std::promise<AsyncAccess<int32_t>> pr;
  b.acquire_async(Access::read, handoff(pr));
  w.release(std::make_exception_ptr(Error(ErrorCode::communication, "receive from rank 3 failed")));
  Error e = test::expect_error([&] { reader.get(); });
  EXPECT_EQ(e.code(), ErrorCode::dependency);
  EXPECT_NE(std::string(e.what()).find("receive from rank 3 failed"), std::string::npos)
      << e.what();
  AsyncAccess<int32_t> failed = pr.get_future().get();
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(failed.data(), nullptr);
  failed.release();  // a no-op on a failed access
  ASSERT_TRUE(failed.error());
  e = test::expect_error([&] { std::rethrow_exception(failed.error()); });
  EXPECT_NE(std::string(e.what()).find("receive from rank 3 failed"), std::string::npos)
      << e.what();
  // A write after the failure starts anew: it does not read the failed data.
  std::promise<AsyncAccess<int32_t>> pa;
  b.acquire_async(Access::write, handoff(pa));
  AsyncAccess<int32_t> again = pa.get_future().get();
  EXPECT_TRUE(again.ok());
  again.data()[0] = 5;
  again.release();
  EXPECT_EQ(b.to_vector()[0], 5);
}

TEST(AsyncAccess, AFailedWriterGivesTheCallbackItsError) {
  Runtime rt(test::cpu_config(1));
  auto b = rt.vector<int32_t>(1);
  Kernel bad = rt.kernel("bad").cpu(
      [](TaskContext&) { throw Error(ErrorCode::invalid_argument, "the kernel gave up"); });
  rt.submit(Task(bad).write(b));
  std::promise<std::exception_ptr> error;
  b.acquire_async(Access::read, [&](AsyncAccess<int32_t> a) { error.set_value(a.error()); });
  std::exception_ptr e = error.get_future().get();
  ASSERT_TRUE(e);
  Error err = test::expect_error([&] { std::rethrow_exception(e); });
  EXPECT_EQ(err.code(), ErrorCode::dependency);
  EXPECT_NE(std::string(err.what()).find("the kernel gave up"), std::string::npos) << err.what();
}

TEST(AsyncAccess, TheRuntimesEndEndsAnAccessNeverReleased) {
  test::LogCapture log(LogLevel::warn);
  std::promise<AsyncAccess<int32_t>> granted;
  std::optional<AsyncAccess<int32_t>> held;
  std::promise<std::exception_ptr> queued;
  {
    Runtime rt(test::cpu_config(1));
    auto b = rt.vector<int32_t>(8);
    b.acquire_async(Access::write, handoff(granted));
    held.emplace(granted.get_future().get());
    b.acquire_async(Access::read, [&](AsyncAccess<int32_t> a) { queued.set_value(a.error()); });
  }  // would wait forever for `held` if the runtime did not end it
  EXPECT_TRUE(log.contains("acquire_async access (write) of a 1x8 i32 buffer is unreleased"));
  std::exception_ptr e = queued.get_future().get();
  ASSERT_TRUE(e);  // granted only after the end began: failed, not handed data
  EXPECT_EQ(test::expect_error([&] { std::rethrow_exception(e); }).code(), ErrorCode::shutdown);
  held->data()[7] = 1;  // its memory outlives the runtime while the access lives
  held->release();      // only drops the access's references now
}

}  // namespace
}  // namespace hcr
