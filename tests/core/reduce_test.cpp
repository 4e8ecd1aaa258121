// Reductions (Access::reduce, Buffer::set_reduction): tasks contribute to a buffer through private
// copies holding the identity, combined into it before its next access of another mode. A dot
// product and a histogram checked against references computed here, min and max, a user's identity
// and combine kernels, reads between rounds, tiles, failures and misuse; on CPU slots, on simulated
// devices with memories of their own, and on one whose launches sometimes fail (placed again).
#include "../test_support.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <ostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace hcr {
namespace {

// Simulated devices with their own memories; the kernels really run.
Config own_memories(int devices, int concurrency, const char* fail_probability = nullptr) {
  Config c;
  c.use_environment = false;
  c.policy = "eager";
  c.model_dir = "off";
  std::vector<std::pair<std::string, std::string>> options = {{"flops_per_byte", "0"},
                                                              {"kernel.work.flops", "1e6"}};
  for (int d = 0; d < devices; ++d) {
    const std::string p = "device." + std::to_string(d) + ".";
    options.push_back({p + "name", std::string(1, static_cast<char>('a' + d))});
    options.push_back({p + "gflops", "1000"});
    options.push_back({p + "concurrency", std::to_string(concurrency)});
  }
  if (fail_probability != nullptr)
    options.push_back(
        {"device." + std::to_string(devices - 1) + ".fail_probability", fail_probability});
  c.backends.push_back({"sim", true, {options.begin(), options.end()}, "test", "100%"});
  return c;
}

struct Param {
  const char* name;
  Config config;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.name; }

class Reduce : public ::testing::TestWithParam<Param> {};

template <class T>
std::vector<T> random_values(size_t n, unsigned seed, double lo, double hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(gen));
  return v;
}

template <class T>
Buffer<T> vector_of(Runtime& rt, const std::vector<T>& values) {
  auto b = rt.vector<T>(values.size());
  auto v = b.acquire(Access::write);
  std::copy(values.begin(), values.end(), v.span().begin());
  return b;
}

// The copies running kernels hold: one seen twice at once would be shared.
struct InUse {
  std::mutex m;
  std::set<const void*> copies;
  int shared = 0;
  void enter(const void* p) {
    std::lock_guard<std::mutex> g(m);
    if (!copies.insert(p).second) ++shared;
  }
  void leave(const void* p) {
    std::lock_guard<std::mutex> g(m);
    copies.erase(p);
  }
};

// A dot product of 64 tiles reduced into one f32 scalar, against a double-precision reference;
// each task's copy is its own, holds 0 when it starts, and the combines are real tasks.
TEST_P(Reduce, DotProduct) {
  Runtime rt(GetParam().config);
  constexpr size_t kTasks = 64, kTile = 1000, kN = kTasks * kTile;
  const auto xs = random_values<float>(kN, 1, -1, 1), ys = random_values<float>(kN, 2, -1, 1);
  double want = 0;
  for (size_t i = 0; i < kN; ++i) want += double(xs[i]) * double(ys[i]);
  InUse in_use;
  std::atomic<int> not_identity{0};
  Kernel dot = rt.kernel("work").cpu([&](TaskContext& ctx) {
    auto x = ctx.arg<float>(0), y = ctx.arg<float>(1);
    auto acc = ctx.arg<float>(2);
    in_use.enter(acc.data);
    if (acc(0, 0) != 0.0f) not_identity.fetch_add(1);
    float s = 0;
    for (size_t i = 0; i < x.cols; ++i) s += x(0, i) * y(0, i);
    acc(0, 0) += s;
    in_use.leave(acc.data);
  });
  auto x = vector_of(rt, xs), y = vector_of(rt, ys);
  auto xt = x.partition(1, kTile), yt = y.partition(1, kTile);
  auto result = rt.buffer<float>(1, 1);
  result.set_reduction(Reduction::sum);
  rt.start_trace();
  for (size_t i = 0; i < kTasks; ++i)
    rt.submit(Task(dot).read(xt(0, i)).read(yt(0, i)).reduce(result));
  const float got = result.to_vector()[0];
  EXPECT_NEAR(got, want, 1e-4 * std::max(1.0, std::abs(want)));
  EXPECT_EQ(in_use.shared, 0) << "two running tasks shared a private copy";
  EXPECT_EQ(not_identity.load(), 0) << "a private copy did not start at the identity";
  rt.wait_all();
  size_t combines = 0, works = 0;
  for (const TraceEvent& e : rt.trace_events())
    if (e.kind == TraceEvent::Kind::task && !e.failed) {
      combines += e.kernel == "hcr_reduce_sum_f32";
      works += e.kernel == "work";
    }
  EXPECT_EQ(works, kTasks);
  // A built-in combine folds up to 15 copies into its first: 4 combines of 16, then one into the
  // buffer with the 4 results.
  EXPECT_EQ(combines, 5u);
}

// A histogram of i32 bins: each task counts its chunk into its copy; exact.
TEST_P(Reduce, Histogram) {
  Runtime rt(GetParam().config);
  constexpr size_t kBins = 32, kTasks = 40, kChunk = 512;
  const auto data = random_values<float>(kTasks * kChunk, 3, 0, 1);
  std::vector<int32_t> want(kBins, 0);
  for (float v : data) ++want[std::min<size_t>(kBins - 1, static_cast<size_t>(v * kBins))];
  Kernel count = rt.kernel("count").cpu([](TaskContext& ctx) {
    auto in = ctx.arg<float>(0);
    auto bins = ctx.arg<int32_t>(1);
    for (size_t i = 0; i < in.cols; ++i)
      ++bins(0, std::min<size_t>(bins.cols - 1, static_cast<size_t>(in(0, i) * bins.cols)));
  });
  auto in = vector_of(rt, data);
  auto chunks = in.partition(1, kChunk);
  auto hist = rt.vector<int32_t>(kBins);
  hist.set_reduction(Reduction::sum);
  for (size_t i = 0; i < kTasks; ++i) rt.submit(Task(count).read(chunks(0, i)).reduce(hist));
  EXPECT_EQ(hist.to_vector(), want);
}

// min and max over f64 and i64, starting from the buffer's own value.
TEST_P(Reduce, MinAndMax) {
  Runtime rt(GetParam().config);
  constexpr size_t kTasks = 30, kTile = 100;
  const auto vals = random_values<double>(kTasks * kTile, 4, -1000, 1000);
  Kernel extremes = rt.kernel("extremes").cpu([](TaskContext& ctx) {
    auto in = ctx.arg<double>(0);
    auto lo = ctx.arg<double>(1), hi = ctx.arg<double>(2);
    auto ilo = ctx.arg<int64_t>(3);
    for (size_t i = 0; i < in.cols; ++i) {
      lo(0, 0) = std::min(lo(0, 0), in(0, i));
      hi(0, 0) = std::max(hi(0, 0), in(0, i));
      ilo(0, 0) = std::min(ilo(0, 0), static_cast<int64_t>(std::floor(in(0, i))));
    }
  });
  auto in = vector_of(rt, vals);
  auto tiles = in.partition(1, kTile);
  auto lo = vector_of<double>(rt, {-5.0}), hi = vector_of<double>(rt, {5.0});
  auto ilo = vector_of<int64_t>(rt, {std::numeric_limits<int64_t>::max()});
  lo.set_reduction(Reduction::min);
  hi.set_reduction(Reduction::max);
  ilo.set_reduction(Reduction::min);
  for (size_t i = 0; i < kTasks; ++i)
    rt.submit(Task(extremes).read(tiles(0, i)).reduce(lo).reduce(hi).reduce(ilo));
  const double want_lo = std::min(-5.0, *std::min_element(vals.begin(), vals.end()));
  const double want_hi = std::max(5.0, *std::max_element(vals.begin(), vals.end()));
  EXPECT_EQ(lo.to_vector()[0], want_lo);
  EXPECT_EQ(hi.to_vector()[0], want_hi);
  EXPECT_EQ(ilo.to_vector()[0], static_cast<int64_t>(std::floor(want_lo)));
}

// A user's reduction: a product, whose identity (1) only its identity kernel knows.
TEST_P(Reduce, UserIdentityAndCombineKernels) {
  Runtime rt(GetParam().config);
  Kernel one = rt.kernel("one").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<int64_t>(0);
    for (size_t i = 0; i < v.cols; ++i) v(0, i) = 1;
  });
  Kernel times = rt.kernel("times").cpu([](TaskContext& ctx) {
    auto into = ctx.arg<int64_t>(0), from = ctx.arg<int64_t>(1);
    for (size_t i = 0; i < into.cols; ++i) into(0, i) *= from(0, i);
  });
  Kernel factor = rt.kernel("factor").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<int64_t>(0);
    const int64_t k = ctx.param<int64_t>(0);
    for (size_t i = 0; i < v.cols; ++i) v(0, i) *= k + static_cast<int64_t>(i);
  });
  auto prod = vector_of<int64_t>(rt, {3, 5});
  prod.set_reduction(one, times);
  std::vector<int64_t> want = {3, 5};
  for (int64_t k = 1; k <= 12; ++k) {
    rt.submit(Task(factor).reduce(prod).param(k));
    for (size_t i = 0; i < want.size(); ++i) want[i] *= k + static_cast<int64_t>(i);
  }
  EXPECT_EQ(prod.to_vector(), want);
}

// Rounds of contributions with other accesses between them: a read, a task that reads and writes
// the buffer, a host write; each sees every contribution submitted before it.
TEST_P(Reduce, OtherAccessesBetweenRounds) {
  Runtime rt(GetParam().config);
  Kernel add = rt.kernel("add").cpu(
      [](TaskContext& ctx) { ctx.arg<double>(0)(0, 0) += ctx.param<double>(0); });
  Kernel twice = rt.kernel("twice").cpu([](TaskContext& ctx) { ctx.arg<double>(0)(0, 0) *= 2; });
  auto acc = vector_of<double>(rt, {10});
  acc.set_reduction(Reduction::sum);
  double want = 10;
  for (int round = 0; round < 4; ++round) {
    for (int i = 1; i <= 20; ++i) {
      rt.submit(Task(add).reduce(acc).param(double(i + round)));
      want += i + round;
    }
    switch (round) {
      case 0: EXPECT_EQ(acc.to_vector()[0], want); break;
      case 1:
        rt.submit(Task(twice).read_write(acc));
        want *= 2;
        break;
      case 2: {
        auto v = acc.acquire(Access::read_write);
        EXPECT_EQ(v(0, 0), want);
        v(0, 0) += 1;
        want += 1;
        break;
      }
      default: break;
    }
  }
  EXPECT_EQ(acc.to_vector()[0], want);
}

std::vector<Param> params() {
  return {{"cpu4", test::cpu_config(4)},
          {"sim_own_memories", own_memories(3, 2)},
          // A launch in three on "c" fails: the task is placed again elsewhere.
          {"sim_failing_device", own_memories(3, 2, "0.3")}};
}

INSTANTIATE_TEST_SUITE_P(Runtime, Reduce, ::testing::ValuesIn(params()),
                         [](const auto& info) { return std::string(info.param.name); });

// Contributions made on two devices with memories of their own: the combines are tasks the policy
// places and its cost model learns (they are in the model file it saves), and the data manager
// moves the copies to where each combine runs.
TEST(ReduceDevices, CombinesArePlacedLearntAndMoveTheCopies) {
  test::TempDir models;
  Config c = own_memories(2, 1);
  c.policy = "dmda";
  c.model_dir = models.path().string();
  // The simulated devices time a kernel by its flops: the combine's are said here.
  c.backends[0].options.push_back({"kernel.hcr_reduce_sum_f64.flops", "1e5"});
  RuntimeStats st;
  {
    Runtime rt(c);
    Kernel add = rt.kernel("work").cpu([](TaskContext& ctx) {
      auto v = ctx.arg<double>(0);
      for (size_t i = 0; i < v.cols; ++i) v(0, i) += ctx.param<double>(0);
    });
    constexpr size_t kBins = 64;
    constexpr int kRounds = 4;
    auto acc = rt.vector<double>(kBins);
    acc.set_reduction(Reduction::sum);
    rt.start_trace();
    double want = 0;
    for (int round = 0; round < kRounds; ++round) {
      for (uint32_t i = 0; i < 16; ++i) {
        rt.submit(Task(add).reduce(acc).param(double(i)).on(i % 2));
        want += i;
      }
      ASSERT_EQ(acc.to_vector(), std::vector<double>(kBins, want)) << "round " << round;
    }
    rt.wait_all();
    size_t combines = 0, measured = 0;
    for (const TraceEvent& e : rt.trace_events())
      if (e.kind == TraceEvent::Kind::task && e.kernel == "hcr_reduce_sum_f64") {
        ++combines;
        measured += e.measured > 0;
      }
    EXPECT_EQ(combines, 2u * kRounds);  // per round: 15 copies into the 16th, that one into acc
    EXPECT_EQ(measured, combines);
    st = rt.stats();
  }
  // Copies made on both devices met somewhere: some crossed between memories.
  EXPECT_GT(st.data.bytes_moved(), 0u);
  bool learnt = false;
  for (const auto& f : std::filesystem::recursive_directory_iterator(models.path()))
    if (f.is_regular_file()) {
      std::ifstream in(f.path());
      std::stringstream text;
      text << in.rdbuf();
      learnt |= text.str().find("hcr_reduce_sum_f64") != std::string::npos;
    }
  EXPECT_TRUE(learnt) << "the saved cost model has no entry for the combine kernel";
}

// Runtime::wait_all combines too: wrapped user memory holds the value after it, unread.
TEST(ReduceWaitAll, CombinesIntoWrappedMemory) {
  Runtime rt(test::cpu_config(2));
  Kernel add = rt.kernel("add").cpu([](TaskContext& ctx) { ctx.arg<float>(0)(0, 0) += 1.5f; });
  float value = 1;
  auto acc = rt.wrap(&value, 1, 1);
  acc.set_reduction(Reduction::sum);
  for (int i = 0; i < 10; ++i) rt.submit(Task(add).reduce(acc));
  rt.wait_all();
  EXPECT_EQ(value, 16.0f);
}

// A tile reduced into: unpartition combines its contributions before the whole comes back.
TEST(ReduceTiles, UnpartitionCombinesTheTiles) {
  Runtime rt(test::cpu_config(2));
  Kernel add = rt.kernel("add").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<int32_t>(0);
    for (size_t i = 0; i < v.cols; ++i) v(0, i) += static_cast<int32_t>(i + 1);
  });
  auto whole = rt.vector<int32_t>(6);
  auto tiles = whole.partition(1, 3);
  auto right = tiles(0, 1);
  right.set_reduction(Reduction::sum);
  for (int i = 0; i < 5; ++i) rt.submit(Task(add).reduce(right));
  whole.unpartition();
  EXPECT_EQ(whole.to_vector(), (std::vector<int32_t>{0, 0, 0, 5, 10, 15}));
}

// Paused: wait_all leaves the contributions for later (their combines would be held, and it would
// wait for them for ever); a read would wait for held combines, so it is refused; after the resume
// the read combines them.
TEST(ReducePause, WaitAllLeavesThemAndReadsAfterResumeCombine) {
  Runtime rt(test::cpu_config(2));
  Kernel add = rt.kernel("add").cpu([](TaskContext& ctx) { ctx.arg<int64_t>(0)(0, 0) += 2; });
  auto acc = rt.vector<int64_t>(1);
  acc.set_reduction(Reduction::sum);
  for (int i = 0; i < 10; ++i) rt.submit(Task(add).reduce(acc));
  rt.wait_all();  // combines: nothing held
  std::vector<Event> done;
  for (int i = 0; i < 5; ++i) done.push_back(rt.submit(Task(add).reduce(acc)));
  for (Event& d : done) d.get();
  rt.pause();
  rt.wait_all();  // returns: no combine submitted while paused
  Error e = test::expect_error([&] { acc.to_vector(); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  rt.resume();
  EXPECT_EQ(acc.to_vector()[0], 30);
}

// A failed contribution fails the value: reading it rethrows, as for any failed writer.
TEST(ReduceFailure, AFailedContributionFailsTheRead) {
  Runtime rt(test::cpu_config(2));
  Kernel add = rt.kernel("add").cpu([](TaskContext& ctx) {
    if (ctx.param<int>(0) == 3) throw std::runtime_error("contribution 3 broke");
    ctx.arg<float>(0)(0, 0) += 1;
  });
  auto acc = rt.buffer<float>(1, 1);
  acc.set_reduction(Reduction::sum);
  for (int i = 0; i < 6; ++i) rt.submit(Task(add).reduce(acc).param(i));
  try {
    acc.to_vector();
    ADD_FAILURE() << "read a reduction with a failed contribution";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("contribution 3 broke"), std::string::npos) << e.what();
  }
}

TEST(ReduceErrors, MisuseIsNamed) {
  Runtime rt(test::cpu_config(1));
  Kernel k = rt.kernel("k").cpu([](TaskContext&) {});
  auto plain = rt.buffer<float>(1, 1);
  Error e = test::expect_error([&] { Task(k).reduce(plain); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("has no reduction"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("1x1 f32 buffer"), std::string::npos) << e.what();

  auto bytes = rt.buffer<uint8_t>(1, 4);
  e = test::expect_error([&] { bytes.set_reduction(Reduction::max); });
  EXPECT_NE(std::string(e.what()).find("u8"), std::string::npos) << e.what();

  auto acc = rt.buffer<float>(1, 1);
  acc.set_reduction(Reduction::sum);
  e = test::expect_error([&] { rt.submit(Task(k).reduce(acc).read(acc)); });
  EXPECT_NE(std::string(e.what()).find("also has it as read"), std::string::npos) << e.what();
  e = test::expect_error([&] { rt.submit(Task(k).reduce(acc).reduce(acc)); });
  EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos) << e.what();
  e = test::expect_error([&] { acc.acquire(Access::reduce); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);

  auto wide = rt.buffer<float>(1, 4);
  wide.set_reduction(Reduction::sum);
  auto tiles = wide.partition(1, 2);
  e = test::expect_error([&] { rt.submit(Task(k).reduce(wide)); });
  EXPECT_NE(std::string(e.what()).find("partitioned"), std::string::npos) << e.what();

  e = test::expect_error([&] { acc.set_reduction(Kernel(), k); });
  EXPECT_NE(std::string(e.what()).find("identity kernel is an empty"), std::string::npos)
      << e.what();
  // None of these left a contribution behind.
  EXPECT_EQ(acc.to_vector()[0], 0.0f);
}

}  // namespace
}  // namespace hcr
