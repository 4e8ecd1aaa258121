// Every misuse of the public API throws hcr::Error with the right code and a message naming the
// value at fault: one test per misuse. A few tests at the end pin down what is deliberately NOT
// misuse, so that a later "fix" has to change them on purpose.
#include "../test_support.hpp"

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>

namespace hcr {
namespace {

namespace fs = std::filesystem;

// The error `f` throws has `code` and a message holding every one of `parts`.
template <class F>
void expect_misuse(F&& f, ErrorCode code, std::initializer_list<std::string> parts) {
  Error e = test::expect_error(std::forward<F>(f));
  EXPECT_EQ(e.code(), code) << error_code_name(e.code()) << ": " << e.what();
  for (const std::string& p : parts)
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
        << "'" << p << "' not in: " << e.what();
}

Config stub(int devices = 1) { return test::stub_config({{"devices", std::to_string(devices)}}); }

// A host-function kernel every stub device runs.
Kernel nothing(Runtime& rt, const char* name = "nothing") {
  return rt.kernel(name).cpu([](TaskContext&) {});
}

// ---- configuration ----------------------------------------------------------------------------

TEST(ConfigMisuse, QuarantineFailuresOutOfRange) {
  Config c = stub();
  c.quarantine_failures = 0;  // would quarantine a device at its first fault
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config,
                {"runtime.quarantine_failures", "0 is not 1 to 1000000"});
}

TEST(ConfigMisuse, QuarantineWindowNotPositive) {
  Config c = stub();
  c.quarantine_window = -2;
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config, {"runtime.quarantine_window", "-2"});
  c.quarantine_window = std::numeric_limits<double>::quiet_NaN();
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config, {"runtime.quarantine_window", "nan"});
}

TEST(ConfigMisuse, TaskTimeoutNegativeOrNotFinite) {
  Config c = stub();
  c.task_timeout = -1;
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config, {"runtime.task_timeout", "-1"});
  c.task_timeout = std::numeric_limits<double>::infinity();  // would overflow the clock
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config, {"runtime.task_timeout", "inf"});
  c.task_timeout = std::numeric_limits<double>::quiet_NaN();
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config, {"runtime.task_timeout", "nan"});
}

TEST(ConfigMisuse, WritebackNotLazyOrEager) {
  Config c = stub();
  c.writeback = "eagre";  // was silently lazy
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config, {"data.writeback", "'eagre'"});
}

TEST(ConfigMisuse, LookaheadOutOfRange) {
  Config c = stub();
  c.lookahead = -5;  // was a window of four billion tasks
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config, {"data.lookahead", "-5"});
}

TEST(ConfigMisuse, CalibrateNotAWordItKnows) {
  Config c = stub();
  c.calibrate = "always";
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config, {"scheduler.calibrate", "'always'"});
}

TEST(ConfigMisuse, CalibrateSamplesOutOfRange) {
  Config c = stub();
  c.calibrate_samples = 0;
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config, {"scheduler.calibrate_samples", "0"});
}

TEST(ConfigMisuse, UnknownPolicy) {
  Config c = stub();
  c.policy = "fastest";
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config, {"'fastest'", "eager"});
}

TEST(ConfigMisuse, BackendWithoutAName) {
  Config c = stub();
  c.backends.push_back({"", true, {}, "hand.toml:4"});
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config, {"backend 1", "hand.toml:4", "name"});
}

TEST(ConfigMisuse, BackendMemoryLimitNotASize) {
  Config c = stub();
  c.backends[0].memory_limit = "lots";
  expect_misuse([&] { Runtime rt(c); }, ErrorCode::config, {"backend 0", "'lots'"});
}

// ---- buffers ----------------------------------------------------------------------------------

TEST(BufferMisuse, ZeroRows) {
  Runtime rt(stub());
  expect_misuse([&] { rt.buffer<float>(0, 5); }, ErrorCode::invalid_argument, {"0x5"});
}

TEST(BufferMisuse, EmptyVector) {
  Runtime rt(stub());
  expect_misuse([&] { rt.vector<double>(0); }, ErrorCode::invalid_argument, {"1x0"});
}

TEST(BufferMisuse, WrapNullPointer) {
  Runtime rt(stub());
  // Used to allocate a fresh buffer: the caller's data was never seen.
  expect_misuse([&] { rt.wrap(static_cast<float*>(nullptr), 2, 3); }, ErrorCode::invalid_argument,
                {"wrap", "null pointer", "2x3 f32"});
}

TEST(BufferMisuse, WrapLeadingDimensionBelowColumns) {
  Runtime rt(stub());
  std::vector<int32_t> host(12);
  expect_misuse([&] { rt.wrap(host.data(), 3, 4, 2); }, ErrorCode::invalid_argument,
                {"leading dimension 2", "4 columns"});
}

TEST(BufferMisuse, EmptyHandle) {
  expect_misuse([] { Buffer<float>().acquire(); }, ErrorCode::invalid_argument,
                {"empty Buffer handle"});
}

TEST(BufferMisuse, AcquireWithAnInvalidAccessMode) {
  Runtime rt(stub());
  auto b = rt.buffer<float>(2, 2);
  expect_misuse([&] { b.acquire(static_cast<Access>(0)); }, ErrorCode::invalid_argument,
                {"access mode 0"});
}

TEST(BufferMisuse, PartitionIntoEmptyTiles) {
  Runtime rt(stub());
  auto m = rt.buffer<float>(4, 4);
  expect_misuse([&] { m.partition(0, 2); }, ErrorCode::invalid_argument, {"0x2 tiles"});
  EXPECT_NO_THROW(m.to_vector());  // nothing was left partitioned
}

TEST(BufferMisuse, PartitionTwice) {
  Runtime rt(stub());
  auto m = rt.buffer<float>(4, 6);
  auto t = m.partition(2, 2);
  expect_misuse([&] { m.partition(2, 3); }, ErrorCode::invalid_argument,
                {"4x6", "already partitioned"});
}

TEST(BufferMisuse, UnpartitionWithoutPartition) {
  Runtime rt(stub());
  auto m = rt.buffer<float>(4, 6);
  expect_misuse([&] { m.unpartition(); }, ErrorCode::invalid_argument, {"4x6", "not partitioned"});
}

TEST(BufferMisuse, TileOutsideTheGrid) {
  Runtime rt(stub());
  auto m = rt.buffer<float>(4, 4);
  auto t = m.partition(2, 2);
  expect_misuse([&] { t(3, 0); }, ErrorCode::invalid_argument, {"tile (3, 0)", "2x2 grid"});
}

TEST(BufferMisuse, PartitionedBufferInATask) {
  Runtime rt(stub());
  auto m = rt.buffer<float>(4, 4);
  auto t = m.partition(2, 2);
  expect_misuse([&] { rt.submit(Task(nothing(rt)).read(t(0, 0)).write(m)); },
                ErrorCode::invalid_argument, {"argument 1", "4x4 f32 buffer", "is partitioned"});
}

TEST(BufferMisuse, AcquireOfAPartitionedBuffer) {
  Runtime rt(stub());
  auto m = rt.buffer<float>(4, 4);
  auto t = m.partition(2, 2);
  expect_misuse([&] { m.acquire(); }, ErrorCode::invalid_argument, {"partitioned 4x4"});
}

TEST(BufferMisuse, TileUsedAfterUnpartition) {
  Runtime rt(stub());
  auto m = rt.buffer<float>(4, 4);
  auto t = m.partition(2, 2);
  Buffer<float> tile = t(1, 0);
  m.unpartition();
  expect_misuse([&] { rt.submit(Task(nothing(rt)).write(tile)); }, ErrorCode::invalid_argument,
                {"argument 0", "2x2 f32 tile at (2, 0) of a 4x4 buffer", "unpartitioned"});
  expect_misuse([&] { tile.acquire(); }, ErrorCode::invalid_argument,
                {"acquire", "tile at (2, 0)", "unpartitioned"});
  expect_misuse([&] { tile.partition(1, 1); }, ErrorCode::invalid_argument,
                {"partition", "tile at (2, 0)", "unpartitioned"});
}

TEST(BufferMisuse, UnpartitionWhileATileIsPartitioned) {
  // The tile's own tiles would escape the join: their tasks could still run on the whole.
  Runtime rt(stub());
  auto m = rt.buffer<float>(4, 4);
  auto t = m.partition(2, 2);
  Buffer<float> tile = t(0, 1);
  tile.partition(1, 1);
  expect_misuse([&] { m.unpartition(); }, ErrorCode::invalid_argument,
                {"2x2 tile at (0, 2)", "partitioned itself"});
  tile.unpartition();
  EXPECT_NO_THROW(m.unpartition().get());
}

TEST(BufferMisuse, SecondConflictingAcquireInOneThread) {
  // Used to wait forever for a view only this thread could release.
  Runtime rt(stub());
  auto b = rt.buffer<float>(4, 4);
  {
    auto v = b.acquire(Access::write);
    expect_misuse([&] { b.acquire(Access::read); }, ErrorCode::invalid_argument,
                  {"acquire(read) of a 4x4 f32 buffer", "write view"});
    expect_misuse([&] { b.to_vector(); }, ErrorCode::invalid_argument, {"4x4 f32", "write view"});
  }
  {
    auto r = b.acquire(Access::read);
    EXPECT_NO_THROW(b.acquire(Access::read));  // readers share
    expect_misuse([&] { b.acquire(Access::read_write); }, ErrorCode::invalid_argument,
                  {"acquire(read_write)", "read view"});
  }
  EXPECT_NO_THROW(b.acquire(Access::write));  // released: fine again
}

TEST(BufferMisuse, AcquireOfATileWhileHoldingTheWhole) {
  // partition() orders the tiles after the whole's view; acquiring a tile waits for that view.
  Runtime rt(stub());
  auto m = rt.buffer<float>(4, 4);
  std::optional<HostView<float>> whole(m.acquire(Access::read));
  auto t = m.partition(2, 2);
  expect_misuse([&] { t(1, 1).acquire(Access::read); }, ErrorCode::invalid_argument,
                {"2x2 f32 tile at (2, 2)", "read view of the 4x4 f32 buffer"});
  whole.reset();
  EXPECT_NO_THROW(t(1, 1).acquire(Access::read));
  m.unpartition();
}

TEST(BufferMisuse, WaitAllWhileHoldingAView) {
  Runtime rt(stub());
  auto b = rt.buffer<double>(3, 2);
  {
    auto v = b.acquire(Access::read_write);
    expect_misuse([&] { rt.wait_all(); }, ErrorCode::invalid_argument,
                  {"wait_all", "read_write view of a 3x2 f64 buffer"});
  }
  EXPECT_NO_THROW(rt.wait_all());
}

TEST(BufferMisuse, WaitingOnATaskThatNeedsAViewThisThreadHolds) {
  // The task waits for the view, the view for this thread: Event::wait says so instead of
  // hanging, directly and through a chain of tasks. A task that does not need the view, and the
  // same task once the view is gone, are waited for as usual.
  Runtime rt(stub());
  auto b = rt.buffer<double>(3, 2), other = rt.buffer<double>(3, 2);
  Kernel k = rt.kernel("touch").cpu([](TaskContext&) {});
  Event direct, chained;
  {
    auto v = b.acquire(Access::read_write);
    direct = rt.submit(Task(k).read(b));
    chained = rt.submit(Task(k).after(direct));
    expect_misuse([&] { direct.wait(); }, ErrorCode::invalid_argument,
                  {"Event::wait would wait forever", "kernel 'touch'",
                   "read_write view of a 3x2 f64 buffer"});
    expect_misuse([&] { chained.get(); }, ErrorCode::invalid_argument,
                  {"Event::wait would wait forever"});
    EXPECT_NO_THROW(rt.submit(Task(k).write(other)).get());
    EXPECT_FALSE(direct.ready());
  }
  EXPECT_NO_THROW(direct.get());
  EXPECT_NO_THROW(chained.get());
}

TEST(BufferMisuse, AcquireInsideAKernelOfItsOwnArgument) {
  // It would wait for the very task that runs the kernel. The kernel's error fails its task.
  Runtime rt(stub());
  auto b = rt.buffer<float>(2, 3);
  Kernel k = rt.kernel("peeks").cpu([&](TaskContext&) { b.acquire(Access::read); });
  Event e = rt.submit(Task(k).write(b));
  expect_misuse([&] { e.get(); }, ErrorCode::invalid_argument,
                {"acquire(read) of a 2x3 f32 buffer inside kernel 'peeks'", "as write argument"});
}

TEST(BufferMisuse, WaitAllInsideAKernel) {
  Runtime rt(stub());
  Kernel k = rt.kernel("waits").cpu([&](TaskContext&) { rt.wait_all(); });
  Event e = rt.submit(Task(k));
  expect_misuse([&] { e.get(); }, ErrorCode::invalid_argument, {"wait_all inside kernel 'waits'"});
}

TEST(BufferMisuse, RuntimeEndingWhileAViewIsHeldDoesNotHang) {
  // The destructor cannot throw: it releases the view with an error, and the work behind it runs.
  test::LogCapture log(LogLevel::error);
  std::atomic<bool> ran{false};
  std::optional<HostView<float>> view;
  {
    Runtime rt(stub());
    auto b = rt.buffer<float>(2, 5);
    view.emplace(b.acquire(Access::write));
    rt.submit(Task(rt.kernel("after").cpu([&](TaskContext&) { ran = true; })).write(b));
  }
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(log.contains("write view of a 2x5 f32 buffer")) << "no error names the view";
  view.reset();  // its own release is harmless now
}

TEST(BufferMisuse, UseAfterTheRuntimeEnded) {
  Buffer<float> b;
  {
    Runtime rt(stub());
    b = rt.buffer<float>(4, 4);
  }
  expect_misuse([&] { b.acquire(); }, ErrorCode::shutdown, {"acquire", "runtime has ended"});
  expect_misuse([&] { b.partition(2, 2); }, ErrorCode::shutdown, {"partition", "ended"});
  expect_misuse([&] { b.unpartition(); }, ErrorCode::shutdown, {"unpartition", "ended"});
  EXPECT_EQ(b.rows(), 4u);  // its shape is still known
}

TEST(BufferMisuse, BufferOfAnEndedRuntimeInAnotherRuntimesTask) {
  Buffer<float> old;
  {
    Runtime rt(stub());
    old = rt.buffer<float>(3, 3);
  }
  Runtime rt(stub());
  expect_misuse([&] { Task(nothing(rt)).read(old); }, ErrorCode::shutdown,
                {"Task::read: argument 0", "3x3 f32 buffer", "runtime that has ended"});
}

TEST(BufferMisuse, BufferOfAnotherRuntimeInATask) {
  Runtime rt(stub()), other(stub());
  auto theirs = other.buffer<float>(2, 2);
  expect_misuse([&] { Task(nothing(rt, "mine")).read(theirs); }, ErrorCode::invalid_argument,
                {"Task::read: argument 0", "2x2 f32 buffer", "another runtime", "'mine'"});
}

TEST(BufferMisuse, SpanOfAStridedView) {
  Runtime rt(stub());
  auto m = rt.buffer<float>(4, 4);
  auto t = m.partition(2, 2);
  auto v = t(0, 0).acquire(Access::read);
  expect_misuse([&] { v.span(); }, ErrorCode::invalid_argument,
                {"2x2 view with leading dimension 4"});
}

// ---- kernels ----------------------------------------------------------------------------------

TEST(KernelMisuse, EmptyName) {
  Runtime rt(stub());
  expect_misuse([&] { rt.kernel(""); }, ErrorCode::invalid_argument, {"name"});
}

TEST(KernelMisuse, EmptyHandle) {
  expect_misuse([] { Kernel().cpu([](TaskContext&) {}); }, ErrorCode::invalid_argument,
                {"empty Kernel handle"});
  expect_misuse([] { Task t{Kernel{}}; }, ErrorCode::invalid_argument, {"empty Kernel handle"});
}

TEST(KernelMisuse, EmptyCpuFunction) {
  Runtime rt(stub());
  expect_misuse([&] { rt.kernel("k").cpu(nullptr); }, ErrorCode::invalid_argument,
                {"kernel 'k'", "empty CPU function"});
}

TEST(KernelMisuse, ImplementationForNoBackend) {
  // Would never be offered to any backend: the task would fail later, with "no device".
  Runtime rt(stub());
  expect_misuse([&] { rt.kernel("k").source("", "kernel void k() {}"); },
                ErrorCode::invalid_argument, {"kernel 'k'", "backend ''"});
  expect_misuse(
      [&] {
        rt.kernel("k").native(
            "", [](void*, const hcr_exec_context_t*, char*, size_t) { return 0; }, nullptr);
      },
      ErrorCode::invalid_argument, {"kernel 'k'", "backend ''"});
  expect_misuse([&] { rt.kernel("k").binary("", "/tmp/k.bin"); }, ErrorCode::invalid_argument,
                {"kernel 'k'", "backend ''"});
}

TEST(KernelMisuse, UseAfterTheRuntimeEnded) {
  Kernel k;
  {
    Runtime rt(stub());
    k = rt.kernel("late");
  }
  expect_misuse([&] { k.cpu([](TaskContext&) {}); }, ErrorCode::shutdown,
                {"kernel 'late'", "runtime has ended"});
  expect_misuse([&] { Task t(k); }, ErrorCode::shutdown, {"kernel 'late'", "runtime has ended"});
}

// ---- tasks ------------------------------------------------------------------------------------

TEST(TaskMisuse, SubmittedTwice) {
  Runtime rt(stub());
  Task t(nothing(rt));
  rt.submit(t);
  expect_misuse([&] { rt.submit(t); }, ErrorCode::invalid_argument,
                {"Runtime::submit", "already submitted"});
}

TEST(TaskMisuse, MovedFrom) {
  Runtime rt(stub());
  auto b = rt.buffer<float>(2, 2);
  Task t(nothing(rt));
  Task u(std::move(t));
  expect_misuse([&] { t.read(b); }, ErrorCode::invalid_argument, {"moved from"});
  expect_misuse([&] { t.param(1); }, ErrorCode::invalid_argument, {"Task::param", "moved from"});
  expect_misuse([&] { t.on(0); }, ErrorCode::invalid_argument, {"Task::on", "moved from"});
  expect_misuse([&] { rt.submit(t); }, ErrorCode::invalid_argument, {"moved from"});
  EXPECT_NO_THROW(rt.submit(u).get());
}

TEST(TaskMisuse, SubmittedToAnotherRuntime) {
  Runtime rt(stub()), other(stub());
  expect_misuse([&] { rt.submit(Task(nothing(other, "theirs"))); }, ErrorCode::invalid_argument,
                {"kernel 'theirs'", "another runtime"});
}

TEST(TaskMisuse, EmptyBufferArgument) {
  Runtime rt(stub());
  auto b = rt.buffer<float>(2, 2);
  expect_misuse([&] { Task(nothing(rt)).read(b).write(Buffer<float>()); },
                ErrorCode::invalid_argument, {"Task::write: argument 1", "empty Buffer handle"});
}

TEST(TaskMisuse, InvalidAccessMode) {
  Runtime rt(stub());
  auto b = rt.buffer<float>(2, 2);
  expect_misuse([&] { Task(nothing(rt)).arg(b, static_cast<Access>(4)); },
                ErrorCode::invalid_argument, {"argument 0", "access mode 4"});
}

TEST(TaskMisuse, OnADeviceThatDoesNotExist) {
  Runtime rt(stub(3));
  expect_misuse([&] { Task(nothing(rt)).on(7); }, ErrorCode::invalid_argument,
                {"Task::on: device 7 does not exist (the runtime has 3 devices)"});
}

TEST(TaskMisuse, OnADeviceThatCannotRunTheKernel) {
  // Whether a device runs a kernel can change after submit (an implementation added, a device
  // quarantined): like every "no device" case, this fails the task's Event, naming the device.
  Runtime rt(stub(2));
  Event e = rt.submit(Task(rt.kernel("warp_drive")).on(1));
  expect_misuse([&] { e.get(); }, ErrorCode::no_device,
                {"'warp_drive'", "device 1 ('stub1')", "stub has no built-in 'warp_drive'"});
}

TEST(TaskMisuse, AfterAnEventOfAnotherRuntime) {
  Runtime rt(stub()), other(stub());
  Event theirs = other.submit(Task(nothing(other, "theirs")));
  expect_misuse([&] { Task(nothing(rt)).after(theirs); }, ErrorCode::invalid_argument,
                {"Task::after", "another runtime", "'theirs'"});
}

TEST(TaskMisuse, GridWithAnEmptyDimension) {
  Runtime rt(stub());
  expect_misuse([&] { Task(nothing(rt)).grid(64, 0); }, ErrorCode::invalid_argument,
                {"Task::grid: 64x0x1"});
}

TEST(TaskMisuse, BlockWithXZeroBesideOtherDimensions) {
  Runtime rt(stub());
  expect_misuse([&] { Task(nothing(rt)).block(0, 4); }, ErrorCode::invalid_argument,
                {"Task::block: 0x4x1"});
  EXPECT_NO_THROW(Task(nothing(rt)).block(0));      // the backend chooses
  EXPECT_NO_THROW(Task(nothing(rt)).block(16, 0));  // y counts as 1
}

TEST(TaskMisuse, TooManyParameters) {
  Runtime rt(stub());
  Task t(nothing(rt));
  for (int i = 0; i < 64; ++i) t.param(i);
  expect_misuse([&] { t.param(64); }, ErrorCode::invalid_argument, {"parameter 64", "64"});
}

TEST(TaskMisuse, ParametersOverSixtyFourKiB) {
  Runtime rt(stub());
  struct Big {
    char bytes[40000];
  };
  Task t(nothing(rt));
  t.param(Big{});
  expect_misuse([&] { t.param(Big{}); }, ErrorCode::invalid_argument,
                {"40000-byte parameter", "64 KiB"});
}

TEST(TaskMisuse, ParameterOfAnotherSizeThanTheKernelReads) {
  // Only the kernel knows what it reads: its task fails, naming both sizes.
  Runtime rt(stub());
  Kernel k = rt.kernel("reads_double").cpu([](TaskContext& ctx) { ctx.param<double>(0); });
  Event e = rt.submit(Task(k).param(1.0f));
  expect_misuse([&] { e.get(); }, ErrorCode::invalid_argument,
                {"parameter 0 holds 4 bytes; 8 requested"});
}

TEST(TaskMisuse, ArgumentOfAnotherTypeThanTheKernelReads) {
  Runtime rt(stub());
  auto b = rt.buffer<int32_t>(2, 2);
  Kernel k = rt.kernel("reads_float").cpu([](TaskContext& ctx) { ctx.arg<float>(0); });
  Event e = rt.submit(Task(k).read(b));
  expect_misuse([&] { e.get(); }, ErrorCode::invalid_argument, {"argument 0 holds i32, not f32"});
}

// ---- gemm -------------------------------------------------------------------------------------

TEST(GemmMisuse, OperandOfAnotherRuntime) {
  Runtime rt(stub()), other(stub());
  auto a = rt.buffer<float>(4, 4), c = rt.buffer<float>(4, 4);
  auto b = other.buffer<float>(4, 4);
  expect_misuse([&] { blas::gemm(rt, a, b, c, 2); }, ErrorCode::invalid_argument,
                {"gemm: B", "4x4 f32 buffer", "another runtime"});
  EXPECT_NO_THROW(a.acquire());  // A was not left partitioned
}

TEST(GemmMisuse, PartitionedOperand) {
  Runtime rt(stub());
  auto a = rt.buffer<double>(4, 4), b = rt.buffer<double>(4, 4), c = rt.buffer<double>(4, 4);
  auto tiles = c.partition(2, 2);
  expect_misuse([&] { blas::gemm(rt, a, b, c, 2); }, ErrorCode::invalid_argument,
                {"gemm: C", "4x4 f64 buffer", "is partitioned"});
  EXPECT_NO_THROW(a.acquire());  // A and B were not left partitioned
  EXPECT_NO_THROW(b.acquire());
}

TEST(GemmMisuse, TileOfAnUnpartitionedBuffer) {
  Runtime rt(stub());
  auto m = rt.buffer<float>(4, 4), b = rt.buffer<float>(2, 2), c = rt.buffer<float>(2, 2);
  Buffer<float> dead = m.partition(2, 2)(0, 0);
  m.unpartition();
  expect_misuse([&] { blas::gemm(rt, dead, b, c, 1); }, ErrorCode::invalid_argument,
                {"gemm: A", "tile at (0, 0)", "unpartitioned"});
}

TEST(GemmMisuse, ShapesThatDoNotMatch) {
  Runtime rt(stub());
  auto a = rt.buffer<float>(3, 4), b = rt.buffer<float>(5, 6), c = rt.buffer<float>(3, 6);
  expect_misuse([&] { blas::gemm(rt, a, b, c, 2); }, ErrorCode::invalid_argument,
                {"A is 3x4, B is 5x6, C is 3x6"});
}

TEST(GemmMisuse, TileSizeZero) {
  Runtime rt(stub());
  auto a = rt.buffer<float>(2, 2), b = rt.buffer<float>(2, 2), c = rt.buffer<float>(2, 2);
  expect_misuse([&] { blas::gemm(rt, a, b, c, 0); }, ErrorCode::invalid_argument, {"tile size 0"});
}

TEST(GemmMisuse, EmptyHandle) {
  Runtime rt(stub());
  auto a = rt.buffer<float>(2, 2), c = rt.buffer<float>(2, 2);
  expect_misuse([&] { blas::gemm(rt, a, Buffer<float>(), c, 1); }, ErrorCode::invalid_argument,
                {"gemm: B is an empty Buffer handle"});
}

// ---- devices and plugins ----------------------------------------------------------------------

TEST(DeviceMisuse, RemoveADeviceThatDoesNotExist) {
  Runtime rt(stub(2));
  expect_misuse([&] { rt.remove_device(5); }, ErrorCode::invalid_argument,
                {"remove_device: no device 5", "has 2"});
}

TEST(PluginMisuse, LoadAMissingFile) {
  Runtime rt(stub());
  test::TempDir dir;
  const std::string path = (dir.path() / "absent.so").string();
  expect_misuse([&] { rt.load_plugin(path); }, ErrorCode::plugin, {path, "not a file"});
}

TEST(PluginMisuse, LoadAPluginByARelativePath) {
  // A relative name would load whatever the working directory holds under it: refused, as the
  // search directories' relative names are.
  Runtime rt(stub());
  const fs::path rel =
      fs::relative(fs::path(HCR_TEST_GOOD_DIR) / "libhcr-stub.so", fs::current_path());
  ASSERT_TRUE(rel.is_relative()) << rel;
  expect_misuse(
      [&] {
        rt.load_plugin(rel.string(), {"stub", true, {}, "test"});
      },
      ErrorCode::invalid_argument, {"'" + rel.string() + "' is not an absolute path"});
  EXPECT_EQ(rt.devices().size(), 1u);
}

TEST(PluginMisuse, LoadWithADisabledTable) {
  Runtime rt(stub());
  const std::string path = std::string(HCR_TEST_GOOD_DIR) + "/libhcr-stub.so";
  expect_misuse(
      [&] {
        rt.load_plugin(path, {"stub", false, {}, "devices.toml:9"});
      },
      ErrorCode::invalid_argument, {path, "enabled = false", "devices.toml:9"});
  EXPECT_EQ(rt.devices().size(), 1u);
}

// ---- not misuse -------------------------------------------------------------------------------

TEST(NotMisuse, AnEmptyEventIsAlreadyComplete) {
  // `Event last; for (...) last = rt.submit(Task(k).after(last));` needs no special first step.
  Runtime rt(stub());
  Event e;
  EXPECT_TRUE(e.ready());
  EXPECT_NO_THROW(e.wait());
  EXPECT_NO_THROW(e.get());
  EXPECT_EQ(e.device(), -1);
  EXPECT_NO_THROW(rt.submit(Task(nothing(rt)).after(e)).get());
}

TEST(NotMisuse, TheSameBufferTwiceInOneTask) {
  // An in-place kernel may be given its input and output as one buffer: the task uses the union
  // of the modes, and both arguments see the same memory.
  Runtime rt(stub());
  auto b = rt.vector<int32_t>(1);
  Kernel inc = rt.kernel("inc").cpu([](TaskContext& ctx) {
    ctx.arg<int32_t>(1)(0, 0) = ctx.arg<int32_t>(0)(0, 0) + 1;
    EXPECT_EQ(ctx.arg<int32_t>(0).data, ctx.arg<int32_t>(1).data);
  });
  for (int i = 0; i < 10; ++i) rt.submit(Task(inc).read(b).write(b));
  EXPECT_EQ(b.to_vector()[0], 10);  // ordered as read_write: each saw the one before
}

TEST(NotMisuse, NegativePriorities) {
  Runtime rt(stub());
  EXPECT_NO_THROW(rt.submit(Task(nothing(rt)).priority(-5)).get());
  EXPECT_NO_THROW(rt.submit(Task(nothing(rt)).priority(std::numeric_limits<int>::min())).get());
}

TEST(NotMisuse, TilesThatDoNotDivideOrExceedTheMatrix) {
  Runtime rt(stub());
  auto m = rt.buffer<float>(5, 7);
  auto t = m.partition(2, 3);  // edge tiles are smaller
  EXPECT_EQ(t(2, 2).rows(), 1u);
  EXPECT_EQ(t(2, 2).cols(), 1u);
  m.unpartition();
  auto whole = m.partition(64, 64);  // one tile: the whole matrix
  EXPECT_EQ(whole.rows(), 1u);
  EXPECT_EQ(whole(0, 0).rows(), 5u);
  m.unpartition();
}

}  // namespace
}  // namespace hcr
