// User kernels: arguments and parameters, errors reaching the Event, and failure propagation.
#include "../test_support.hpp"

#include <stdexcept>

namespace hcr {
namespace {

struct Axpy {
  float a;
  int n;
};

TEST(Kernels, UserCpuKernelReadsArgumentsAndParameters) {
  Runtime rt(test::cpu_config(2));
  auto x = rt.vector<float>(100), y = rt.vector<float>(100);
  {
    auto vx = x.acquire(Access::write), vy = y.acquire(Access::write);
    for (int i = 0; i < 100; ++i) {
      vx(0, i) = static_cast<float>(i);
      vy(0, i) = 1.0f;
    }
  }
  Kernel axpy = rt.kernel("axpy").cpu([](TaskContext& ctx) {
    auto x = ctx.arg<float>(0);
    auto y = ctx.arg<float>(1);
    float a = ctx.param<float>(0);
    auto p = ctx.param<Axpy>(1);
    ASSERT_EQ(p.n, 100);
    for (size_t i = 0; i < x.cols; ++i) y(0, i) += a * x(0, i) + p.a;
  });
  rt.submit(Task(axpy).read(x).read_write(y).param(2.0f).param(Axpy{0.5f, 100})).get();
  auto out = y.to_vector();
  for (int i = 0; i < 100; ++i) ASSERT_FLOAT_EQ(out[i], 1.0f + 2.0f * i + 0.5f);
}

TEST(Kernels, KernelExceptionReachesTheEventUnchanged) {
  Runtime rt(test::cpu_config(2));
  Kernel bad = rt.kernel("bad").cpu([](TaskContext&) { throw std::out_of_range("index 42"); });
  Event e = rt.submit(Task(bad));
  try {
    e.get();
    FAIL() << "no exception";
  } catch (const std::out_of_range& ex) {
    EXPECT_STREQ(ex.what(), "index 42");
  }
  EXPECT_TRUE(e.error() != nullptr);
  EXPECT_EQ(rt.stats().failed, 1u);
  EXPECT_EQ(rt.stats().devices[0].failed, 1u);
  // The runtime carries on.
  rt.submit(Task(rt.kernel("fine").cpu([](TaskContext&) {}))).get();
}

TEST(Kernels, BackendErrorNamesKernelAndDevice) {
  // A device-side failure is retried on another device; with none left the task fails, naming
  // the kernel and what each device said.
  Runtime rt(test::stub_config());
  Event e = rt.submit(Task(rt.kernel("fail")));
  Error err = test::expect_error([&] { e.get(); });
  EXPECT_EQ(err.code(), ErrorCode::no_device);
  std::string w = err.what();
  EXPECT_NE(w.find("kernel 'fail'"), std::string::npos) << w;
  EXPECT_NE(w.find("stub0: failed: stub kernel 'fail' failed as asked"), std::string::npos) << w;
}

TEST(Kernels, KernelNobodyRunsFailsWithEveryDevicesReason) {
  Runtime rt(test::stub_config({{"devices", "2"}}));
  Event e = rt.submit(Task(rt.kernel("warp_drive")));
  Error err = test::expect_error([&] { e.get(); });
  EXPECT_EQ(err.code(), ErrorCode::no_device);
  std::string w = err.what();
  EXPECT_NE(w.find("no device can run kernel 'warp_drive'"), std::string::npos) << w;
  EXPECT_NE(w.find("stub0: stub has no built-in 'warp_drive'"), std::string::npos) << w;
  EXPECT_NE(w.find("stub1:"), std::string::npos) << w;
}

TEST(Kernels, AddingAnImplementationLaterMakesDevicesAskAgain) {
  Runtime rt(test::cpu_config(1));
  Kernel k = rt.kernel("late");
  EXPECT_EQ(test::expect_error([&] { rt.submit(Task(k)).get(); }).code(), ErrorCode::no_device);
  bool ran = false;
  k.cpu([&](TaskContext&) { ran = true; });
  rt.submit(Task(k)).get();
  EXPECT_TRUE(ran);
}

TEST(Kernels, WrongArgumentTypeOrIndexIsAnError) {
  Runtime rt(test::cpu_config(1));
  auto b = rt.vector<double>(4);
  Kernel wrong_type = rt.kernel("wt").cpu([](TaskContext& ctx) { ctx.arg<float>(0); });
  Error e = test::expect_error([&] { rt.submit(Task(wrong_type).read(b)).get(); });
  EXPECT_NE(std::string(e.what()).find("argument 0 holds f64, not f32"), std::string::npos);
  Kernel wrong_index = rt.kernel("wi").cpu([](TaskContext& ctx) { ctx.arg<double>(3); });
  e = test::expect_error([&] { rt.submit(Task(wrong_index).read(b)).get(); });
  EXPECT_NE(std::string(e.what()).find("argument 3 requested; the task has 1"), std::string::npos);
  Kernel wrong_param = rt.kernel("wp").cpu([](TaskContext& ctx) { ctx.param<double>(0); });
  e = test::expect_error([&] { rt.submit(Task(wrong_param).param(1.0f)).get(); });
  EXPECT_NE(std::string(e.what()).find("parameter 0 holds 4 bytes; 8 requested"), std::string::npos)
      << e.what();
}

// A parameter read as a smaller type than it was given as (a double given for a float) is refused,
// not cut to its low half; a smaller value followed by the padding before the next one is fine.
TEST(Kernels, AParameterReadAsASmallerTypeIsAnError) {
  Runtime rt(test::cpu_config(1));
  float got = -1;
  Kernel scale = rt.kernel("scale").cpu([&](TaskContext& ctx) { got = ctx.param<float>(0); });
  Error e = test::expect_error([&] { rt.submit(Task(scale).param(2.0)).get(); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("parameter 0 holds 8 bytes; 4 requested"), std::string::npos)
      << e.what();
  EXPECT_NE(std::string(e.what()).find("give 2.0f"), std::string::npos) << e.what();
  EXPECT_EQ(got, -1.0f) << "the kernel read the double's low half";
  // The same before another parameter: its 8 bytes run up to the int, and are no padding.
  e = test::expect_error([&] { rt.submit(Task(scale).param(2.0).param(int32_t{3})).get(); });
  EXPECT_NE(std::string(e.what()).find("not the padding before the next parameter"),
            std::string::npos)
      << e.what();
  rt.submit(Task(scale).param(2.0f)).get();
  EXPECT_EQ(got, 2.0f);
  // A byte, then a double: seven bytes of padding between them, read correctly.
  int8_t small = 0;
  double big = 0;
  Kernel mixed = rt.kernel("mixed").cpu([&](TaskContext& ctx) {
    small = ctx.param<int8_t>(0);
    big = ctx.param<double>(1);
  });
  rt.submit(Task(mixed).param(int8_t{-5}).param(2.5)).get();
  EXPECT_EQ(small, -5);
  EXPECT_EQ(big, 2.5);
}

TEST(Kernels, FailureFlowsAlongDataButNotAlongOverwrites) {
  Runtime rt(test::cpu_config(2));
  auto b = rt.vector<int32_t>(4);
  Kernel boom = rt.kernel("boom").cpu([](TaskContext&) { throw std::runtime_error("boom"); });
  Kernel touch = rt.kernel("touch").cpu([](TaskContext& ctx) { ctx.arg<int32_t>(0)(0, 0) = 7; });
  Event writer = rt.submit(Task(boom).write(b));
  Event reader = rt.submit(Task(touch).read_write(b));  // reads what the failed task wrote
  Event after_reader = rt.submit(Task(touch).after(reader));
  EXPECT_THROW(writer.get(), std::runtime_error);
  Error e = test::expect_error([&] { reader.get(); });
  EXPECT_EQ(e.code(), ErrorCode::dependency);
  EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos) << e.what();
  EXPECT_EQ(test::expect_error([&] { after_reader.get(); }).code(), ErrorCode::dependency);
  // Reading the buffer on the host reports the failure instead of handing out garbage...
  EXPECT_EQ(test::expect_error([&] { b.to_vector(); }).code(), ErrorCode::dependency);
  // ... until a task overwrites it without reading: that one does not inherit the failure.
  Kernel fill = rt.kernel("fill").cpu([](TaskContext& ctx) {
    auto v = ctx.arg<int32_t>(0);
    for (size_t i = 0; i < v.cols; ++i) v(0, i) = 3;
  });
  rt.submit(Task(fill).write(b)).get();
  EXPECT_EQ(b.to_vector(), (std::vector<int32_t>{3, 3, 3, 3}));
}

}  // namespace
}  // namespace hcr
