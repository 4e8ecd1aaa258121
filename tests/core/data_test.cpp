// The data manager on several memory nodes (the stub backend with its own memory, beside the CPU):
// coherence for every access-mode sequence, tight memory limits, placement that respects memory,
// exactly the transfers a tiled gemm's placement needs, and the thrash case.
#include "../test_support.hpp"

#include <chrono>
#include <future>
#include <map>
#include <random>
#include <set>

namespace hcr {
namespace {

Config mixed_config(bool async, uint64_t stub_memory = 1ull << 30, int stub_devices = 2) {
  Config c = test::cpu_config(2);
  c.plugin_paths = {HCR_TEST_GOOD_DIR};
  c.backends.push_back({"stub",
                        true,
                        {{"own_memory", "true"},
                         {"devices", std::to_string(stub_devices)},
                         {"memory", std::to_string(stub_memory)},
                         {"async", async ? "true" : "false"}},
                        "test",
                        "100%"});
  return c;
}

// Device ids: the CPU is 0 (host memory), stub devices follow with their own memory.
uint32_t cpu_id(const Runtime& rt) {
  for (auto& d : rt.devices())
    if (d.backend == "cpu") return d.id;
  return 0;
}
std::vector<uint32_t> stub_ids(const Runtime& rt) {
  std::vector<uint32_t> ids;
  for (auto& d : rt.devices())
    if (d.backend == "stub") ids.push_back(d.id);
  return ids;
}

Kernel adder(Runtime& rt) {
  // out = (reads ? out : 0) * 3 + param + sum of the other arguments' first elements, computed
  // modulo 2^64: long chains of tasks overflow, which for int64_t would be undefined behaviour.
  return rt.kernel("mix").cpu([](TaskContext& ctx) {
    uint64_t extra = 0;
    for (size_t i = 1; i < ctx.num_args(); ++i)
      extra += static_cast<uint64_t>(ctx.arg<int64_t>(i)(0, 0));
    auto out = ctx.arg<int64_t>(0);
    bool reads_out = reads(static_cast<Access>(ctx.raw().args[0].access));
    for (size_t r = 0; r < out.rows; ++r)
      for (size_t c = 0; c < out.cols; ++c)
        out(r, c) = static_cast<int64_t>(static_cast<uint64_t>(reads_out ? out(r, c) : 0) * 3 +
                                         static_cast<uint64_t>(ctx.param<int64_t>(0)) + extra +
                                         r * out.cols + c);
  });
}

TEST(Data, EveryAccessModePairAcrossNodesIsCoherent) {
  for (bool async : {false, true}) {
    Runtime rt(mixed_config(async));
    Kernel mix = adder(rt);
    std::vector<uint32_t> places = {cpu_id(rt)};
    for (uint32_t id : stub_ids(rt)) places.push_back(id);
    ASSERT_EQ(places.size(), 3u);
    const Access firsts[] = {Access::write, Access::read_write};
    const Access seconds[] = {Access::read, Access::write, Access::read_write};
    for (uint32_t x : places)
      for (uint32_t y : places)
        for (Access m1 : firsts)
          for (Access m2 : seconds) {
            auto b = rt.buffer<int64_t>(3, 4), probe = rt.vector<int64_t>(1);
            rt.submit(Task(mix).arg(b, m1).param(int64_t{5}).on(x));
            if (m2 == Access::read) {
              rt.submit(Task(mix).write(probe).read(b).param(int64_t{0}).on(y));
            } else {
              rt.submit(Task(mix).arg(b, m2).param(int64_t{7}).on(y));
            }
            // Reference on the host.
            std::vector<int64_t> want(12);
            for (int i = 0; i < 12; ++i) want[i] = 0 * 3 + 5 + i;  // fresh buffer is zero
            if (m2 != Access::read) {
              for (int i = 0; i < 12; ++i)
                want[i] = (m2 == Access::read_write ? want[i] : 0) * 3 + 7 + i;
            }
            ASSERT_EQ(b.to_vector(), want) << "x=" << x << " y=" << y << " m1=" << int(m1)
                                           << " m2=" << int(m2) << " async=" << async;
            if (m2 == Access::read) {
              ASSERT_EQ(probe.to_vector()[0], 5);  // 0 + first element
            }
          }
  }
}

TEST(Data, RandomTasksOnRandomNodesMatchSequentialExecution) {
  for (bool async : {false, true}) {
    for (uint64_t memory : {uint64_t{1} << 30, uint64_t{3 * 64 * 8}}) {  // roomy, then 3 buffers
      Runtime rt(mixed_config(async, memory));
      Kernel mix = adder(rt);
      std::vector<uint32_t> places = {cpu_id(rt)};
      for (uint32_t id : stub_ids(rt)) places.push_back(id);
      constexpr size_t kBuffers = 8, kElems = 64, kTasks = 1500;
      std::vector<Buffer<int64_t>> bufs;
      std::vector<std::vector<int64_t>> ref(kBuffers, std::vector<int64_t>(kElems, 0));
      for (size_t i = 0; i < kBuffers; ++i) bufs.push_back(rt.buffer<int64_t>(8, 8));
      std::mt19937_64 gen(42 + async + memory);
      for (size_t i = 0; i < kTasks; ++i) {
        size_t out = gen() % kBuffers, in = gen() % kBuffers;
        Access mode = (gen() % 3 == 0) ? Access::write : Access::read_write;
        int64_t p = static_cast<int64_t>(gen() % 100);
        uint32_t where = places[gen() % places.size()];
        if (gen() % 50 == 0) {  // the host reads or edits in between
          auto v = bufs[out].acquire(Access::read_write);
          for (size_t j = 0; j < kElems; ++j) {
            ASSERT_EQ(v.data()[j], ref[out][j])
                << "task " << i << " async=" << async << " memory=" << memory;
          }
          v.data()[0] += 1;
          ref[out][0] += 1;
          continue;
        }
        Task t(mix);
        t.arg(bufs[out], mode);
        if (in != out) t.read(bufs[in]);
        rt.submit(t.param(p).on(where));
        int64_t extra = in != out ? ref[in][0] : 0;
        for (size_t j = 0; j < kElems; ++j)
          ref[out][j] = static_cast<int64_t>(  // modulo 2^64, as the kernel computes it
              static_cast<uint64_t>(mode == Access::read_write ? ref[out][j] : 0) * 3 +
              static_cast<uint64_t>(p) + static_cast<uint64_t>(extra) + j);
      }
      for (size_t b = 0; b < kBuffers; ++b) {
        ASSERT_EQ(bufs[b].to_vector(), ref[b])
            << "buffer " << b << " async=" << async << " memory=" << memory;
      }
      DataCounters dc = rt.stats().data;
      EXPECT_GT(dc.bytes_moved(), 0u);
      if (memory < 1024) {
        EXPECT_GT(dc.evictions, 0u) << "the tight limit should have evicted";
      }
      for (auto& n : dc.nodes) {
        if (n.id != 0) {
          EXPECT_LE(n.used, n.limit) << n.name;
        }
      }
    }
  }
}

TEST(Data, OversizedBufferIsNeverPlacedOnASmallDevice) {
  Config c;
  c.use_environment = false;
  c.plugin_paths = {HCR_TEST_GOOD_DIR};
  c.backends.push_back({"stub",
                        true,
                        {{"own_memory", "true"}, {"memory", "65536"}, {"name_prefix", "small"}},
                        "test",
                        "100%"});
  c.backends.push_back({"stub", true, {{"own_memory", "true"}, {"name_prefix", "big"}}, "test"});
  Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 2u);
  Kernel mix = adder(rt);
  auto big = rt.buffer<int64_t>(256, 256);  // 512 KiB
  auto small = rt.vector<int64_t>(16);
  std::vector<Event> on_big;
  for (int i = 0; i < 50; ++i) {
    on_big.push_back(rt.submit(Task(mix).read_write(big).param(int64_t{1})));
    rt.submit(Task(mix).read_write(small).param(int64_t{1}));
  }
  rt.wait_all();
  for (const Event& e : on_big)
    EXPECT_EQ(rt.devices()[static_cast<size_t>(e.device())].name, "big0");
  Error err = test::expect_error(
      [&] { rt.submit(Task(mix).read_write(big).param(int64_t{1}).on(0)).get(); });
  EXPECT_EQ(err.code(), ErrorCode::no_device);
  EXPECT_NE(
      std::string(err.what()).find("memory limit of 65536 bytes cannot hold the task's 524288"),
      std::string::npos)
      << err.what();
  for (auto& n : rt.stats().data.nodes) {
    if (n.name == "small0") {
      EXPECT_LE(n.used, 65536u);
    }
  }
}

TEST(Data, WorkingSetThatFitsNeverThrashes) {
  constexpr uint64_t kBytes = 32 * 32 * 8;
  // Room for exactly two buffers: a manager that evicted the one it will need next would never
  // finish, or move the pair back and forth every task.
  Config c;
  c.use_environment = false;
  c.plugin_paths = {HCR_TEST_GOOD_DIR};
  c.backends.push_back(
      {"stub",
       true,
       {{"own_memory", "true"}, {"memory", std::to_string(2 * kBytes)}, {"async", "true"}},
       "test",
       "100%"});
  Runtime rt(c);
  Kernel mix = adder(rt);
  auto a = rt.buffer<int64_t>(32, 32), b = rt.buffer<int64_t>(32, 32);
  for (int i = 0; i < 1000; ++i) {
    if (i % 2) rt.submit(Task(mix).read_write(a).read(b).param(int64_t{1}));
    else rt.submit(Task(mix).read_write(b).read(a).param(int64_t{2}));
  }
  rt.wait_all();
  DataCounters dc = rt.stats().data;
  EXPECT_EQ(dc.evictions, 0u);
  EXPECT_EQ(dc.bytes_moved(), 2 * kBytes) << "each buffer copied in once, nothing back yet";
  (void)a.to_vector();
  (void)b.to_vector();
  EXPECT_EQ(rt.stats().data.bytes_moved(), 4 * kBytes) << "and each copied home once to read";

  // Three buffers in turn through room for two: it must still finish, evicting as it goes.
  auto z = rt.buffer<int64_t>(32, 32);
  Buffer<int64_t> ring[] = {a, b, z};
  for (int i = 0; i < 300; ++i)
    rt.submit(Task(mix).read_write(ring[i % 3]).read(ring[(i + 1) % 3]).param(int64_t{i}));
  rt.wait_all();
  EXPECT_GT(rt.stats().data.evictions, 0u);
}

TEST(Data, TiledGemmMovesExactlyWhatItsPlacementNeeds) {
  for (bool async : {false, true}) {
    Runtime rt(mixed_config(async));
    // The stub runs gemm through a CPU implementation added to the built-in kernel's name; the
    // CPU device keeps its OpenBLAS built-in.
    Kernel gemm = rt.kernel("gemm_f32").cpu([](TaskContext& ctx) {
      auto a = ctx.arg<float>(0), b = ctx.arg<float>(1), c = ctx.arg<float>(2);
      auto p = ctx.param<hcr_gemm_params_t>(0);
      for (size_t i = 0; i < c.rows; ++i)
        for (size_t j = 0; j < c.cols; ++j) {
          double s = 0;
          for (size_t k = 0; k < a.cols; ++k) s += double(a(i, k)) * b(k, j);
          c(i, j) = static_cast<float>(p.alpha * s + (p.beta == 0 ? 0.0 : p.beta * c(i, j)));
        }
    });
    const size_t n = 96, t = 32, g = n / t;
    auto A = rt.buffer<float>(n, n), B = rt.buffer<float>(n, n), C = rt.buffer<float>(n, n);
    {
      auto va = A.acquire(Access::write), vb = B.acquire(Access::write);
      for (size_t i = 0; i < n * n; ++i) {
        va.data()[i] = float(i % 7) - 3;
        vb.data()[i] = float(i % 5) - 2;
      }
    }
    auto ta = A.partition(t, t), tb = B.partition(t, t), tc = C.partition(t, t);
    std::map<std::tuple<size_t, size_t, size_t>, Event> ran;
    for (size_t i = 0; i < g; ++i)
      for (size_t j = 0; j < g; ++j)
        for (size_t k = 0; k < g; ++k) {
          hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, k == 0 ? 0.0 : 1.0};
          ran[{i, j, k}] = rt.submit(Task(gemm)
                                         .read(ta(i, k))
                                         .read(tb(k, j))
                                         .arg(tc(i, j), k == 0 ? Access::write : Access::read_write)
                                         .param(p));
        }
    A.unpartition();
    B.unpartition();
    C.unpartition().get();

    // The least a placement needs: each input tile once on each device node that read it, a C
    // tile between consecutive k steps that ran on different nodes, and home at the end.
    const uint64_t tile = t * t * sizeof(float);
    auto node_of = [&](const Event& e) {
      return rt.devices()[static_cast<size_t>(e.device())].memory_node;
    };
    std::set<std::tuple<char, size_t, size_t, uint32_t>> inputs;
    uint64_t expected = 0;
    for (size_t i = 0; i < g; ++i)
      for (size_t j = 0; j < g; ++j) {
        uint32_t prev = 0;
        for (size_t k = 0; k < g; ++k) {
          uint32_t node = node_of(ran[{i, j, k}]);
          if (node != 0) {
            inputs.insert({'a', i, k, node});
            inputs.insert({'b', k, j, node});
          }
          if (k > 0 && node != prev) expected += tile;
          prev = node;
        }
        if (prev != 0) expected += tile;
      }
    expected += inputs.size() * tile;
    DataCounters dc = rt.stats().data;
    std::string links;
    for (auto& l : dc.links)
      links += " " + std::to_string(l.from) + "->" + std::to_string(l.to) + ":" +
               std::to_string(l.transfers);
    std::string placement;
    for (size_t i = 0; i < g; ++i)
      for (size_t j = 0; j < g; ++j) {
        placement += " C" + std::to_string(i) + std::to_string(j) + "=";
        for (size_t k = 0; k < g; ++k) placement += std::to_string(node_of(ran[{i, j, k}]));
      }
    EXPECT_EQ(dc.bytes_moved(), expected) << "async=" << async << " links" << links << "\n"
                                          << placement;
    EXPECT_EQ(dc.evictions, 0u);

    auto c = C.to_vector();
    auto va = A.to_vector(), vb = B.to_vector();
    for (size_t i = 0; i < n; i += 7) {
      for (size_t j = 0; j < n; j += 5) {
        double s = 0;
        for (size_t k = 0; k < n; ++k) s += double(va[i * n + k]) * vb[k * n + j];
        ASSERT_FLOAT_EQ(c[i * n + j], static_cast<float>(s)) << i << "," << j;
      }
    }
  }
}

TEST(Data, RuntimeEndBringsDeviceDataHome) {
  std::vector<int64_t> mine(16, 0);
  {
    Runtime rt(mixed_config(true));
    Kernel mix = adder(rt);
    auto b = rt.wrap(mine.data(), 4, 4);
    rt.submit(Task(mix).write(b).param(int64_t{10}).on(stub_ids(rt)[0]));
  }  // no read: the runtime's end copies the only valid replica home
  for (int i = 0; i < 16; ++i) EXPECT_EQ(mine[i], 10 + i);
}

TEST(Data, HitsAndMissesAreCounted) {
  Runtime rt(mixed_config(false));
  Kernel mix = adder(rt);
  uint32_t dev = stub_ids(rt)[0];
  auto b = rt.vector<int64_t>(8), out = rt.vector<int64_t>(1);
  for (int i = 0; i < 10; ++i) rt.submit(Task(mix).write(out).read(b).param(int64_t{0}).on(dev));
  rt.wait_all();
  DataCounters dc = rt.stats().data;
  EXPECT_EQ(dc.misses, 1u);  // b copied in once
  EXPECT_EQ(dc.hits, 9u);    // then found there
  ASSERT_EQ(dc.links.size(), 1u);
  EXPECT_EQ(dc.links[0].from, 0u);
  EXPECT_EQ(dc.links[0].to, rt.devices()[dev].memory_node);
  EXPECT_EQ(dc.links[0].bytes, 64u);
}

TEST(Data, MemoryLimitFromConfiguration) {
  Config c = mixed_config(false, 1 << 20);
  c.backends[1].memory_limit = "25%";
  Runtime rt(c);
  for (auto& n : rt.stats().data.nodes) {
    if (n.id != 0) {
      EXPECT_EQ(n.limit, (1u << 20) / 4) << n.name;
    }
  }
  Error e = test::expect_error(
      [] { Config::parse("[[backend]]\nname = \"stub\"\nmemory_limit = \"lots\"\n", "m.toml"); });
  EXPECT_NE(std::string(e.what()).find("m.toml:3: backend.memory_limit: 'lots' is not a size"),
            std::string::npos)
      << e.what();
}

// Two simulated devices "a" and "b" with their own memories, under eager: "short" takes 1 ms,
// "long" 300 ms (host delays — a sanitizer, a loaded machine — stay well below it), "use" 1 ms.
Config two_own_memory_devices() {
  Config c;
  c.use_environment = false;
  c.policy = "eager";
  c.model_dir = "off";
  c.backends.push_back({"sim",
                        true,
                        {{"compute", "false"},
                         {"flops_per_byte", "0"},
                         {"kernel.short.flops", "1e9"},
                         {"kernel.long.flops", "3e11"},
                         {"kernel.use.flops", "1e9"},
                         {"device.0.name", "a"},
                         {"device.0.gflops", "1000"},
                         {"device.1.name", "b"},
                         {"device.1.gflops", "1000"}},
                        "test"});
  return c;
}

// "use" on b reads x (written by "short" on a) and y (written by "long" on b): when x reaches b's
// memory, and when "long" ends. `x_done_first`: "use" is submitted only once "short" has finished
// (nobody is left to move x when a producer finishes, so its submit must); otherwise "short" starts
// only once "use" is submitted (a gate held by the host), so that its end moves x.
std::pair<double, double> x_arrival_and_long_end(bool x_done_first) {
  Runtime rt(two_own_memory_devices());
  Kernel shorter = rt.kernel("short").cpu([](TaskContext&) {});
  Kernel longer = rt.kernel("long").cpu([](TaskContext&) {});
  Kernel use = rt.kernel("use").cpu([](TaskContext&) {});
  auto x = rt.buffer<float>(256, 256), y = rt.buffer<float>(256, 256), z = rt.buffer<float>(4, 4);
  auto gate = rt.buffer<float>(4, 4);
  rt.start_trace();
  rt.submit(Task(longer).write(y).on(1));
  if (x_done_first) {
    rt.submit(Task(shorter).write(x).on(0)).wait();
    rt.submit(Task(use).read(x).read(y).write(z).on(1));
  } else {
    auto hold = gate.acquire(Access::write);
    rt.submit(Task(shorter).read(gate).write(x).on(0));
    rt.submit(Task(use).read(x).read(y).write(z).on(1));
  }
  rt.wait_all();
  double long_end = -1, x_arrives = -1;
  for (const TraceEvent& e : rt.trace_events()) {
    if (e.kind == TraceEvent::Kind::task && e.kernel == "long") long_end = e.end;
    if (e.kind == TraceEvent::Kind::transfer && e.to == rt.devices()[1].memory_node &&
        e.bytes == x.bytes())
      x_arrives = e.end;
  }
  return {x_arrives, long_end};
}

// A task waiting for two others, pinned to a device with its own memory: what the first one wrote
// starts moving there as soon as it is done, while the second still runs — not once both are.
TEST(Data, AWaitingTasksInputMovesAsSoonAsItsProducerIsDone) {
  auto [x_arrives, long_end] = x_arrival_and_long_end(false);
  ASSERT_GT(long_end, 0);
  ASSERT_GT(x_arrives, 0) << "x was never copied to b's memory";
  EXPECT_LT(x_arrives, long_end) << "x waited for the long task before moving";
}

// The same when x's producer finished before the waiting task was submitted: the submit moves it.
// (Before the gate, a sanitizer's delays once made the test above meet this case in CI.)
TEST(Data, AnInputReadyAtSubmitMovesWhileTheTaskWaitsForOthers) {
  auto [x_arrives, long_end] = x_arrival_and_long_end(true);
  ASSERT_GT(long_end, 0);
  ASSERT_GT(x_arrives, 0) << "x was never copied to b's memory";
  EXPECT_LT(x_arrives, long_end) << "x waited for the long task before moving";
}

// One simulated device "a" with its own memory behind a 50 MB/s link (1 MB: 20 ms of copy), under
// dmdas; kernels "use" and "mark" take 1 ms.
Config slow_link_device(int lookahead = -1) {
  Config c;
  c.use_environment = false;
  c.policy = "dmdas";
  c.model_dir = "off";
  c.lookahead = lookahead;
  c.backends.push_back({"sim",
                        true,
                        {{"compute", "false"},
                         {"flops_per_byte", "0"},
                         {"kernel.use.flops", "1e9"},
                         {"kernel.mark.flops", "1e9"},
                         {"device.0.name", "a"},
                         {"device.0.gflops", "1000"},
                         {"device.0.host_memory", "false"},
                         {"device.0.bandwidth", "50MB/s"}},
                        "test"});
  return c;
}

// The first task to ask for a replica is often not its most urgent reader: a copy still waiting in
// its lane moves up when a more urgent task needs it. Four tasks on a device whose copies are
// issued two at a time: A and B go at once, C (priority 1) and X (priority 0) wait; then a task of
// priority 5 reads X, and X goes before C. A's and B's copies must not end before that reader is
// submitted, however late this thread gets there: the simulator does the copies' work on its one
// worker, which a task of ours holds until then (a copy ends once its work is done too).
TEST(Data, ACopyWaitingInItsLaneMovesUpForAMoreUrgentReader) {
  std::promise<void> holding, open;
  std::shared_future<void> gate = open.get_future().share();
  Config c = slow_link_device();
  for (auto& [key, value] : c.backends[0].options)
    if (key == "compute") value = "true";  // timing only, a copy has no work to wait for
  c.backends[0].options.push_back({"workers", "1"});
  Runtime rt(c);
  Kernel use = rt.kernel("use").cpu([](TaskContext&) {});
  Kernel hold = rt.kernel("hold").cpu([&](TaskContext&) {
    holding.set_value();
    gate.wait();
  });
  // A 16 MB, the others 1 MB (20 ms at 50 MB/s); C and X apart by their sizes.
  auto a = rt.buffer<float>(4096, 1024), b = rt.buffer<float>(256, 1024),
       cc = rt.buffer<float>(250, 1024), x = rt.buffer<float>(240, 1024);
  {
    auto warm = rt.buffer<float>(4, 4);  // measured, so each task is placed when submitted
    for (int i = 0; i < 4; ++i) rt.submit(Task(use).read(warm).on(0));
    rt.wait_all();
  }
  auto held = rt.buffer<float>(4, 4);
  rt.submit(Task(hold).write(held).on(0));
  EXPECT_EQ(holding.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "the task holding the simulator's worker never started";
  rt.start_trace();
  rt.submit(Task(use).read(a).on(0));
  rt.submit(Task(use).read(b).on(0));
  rt.submit(Task(use).read(cc).on(0).priority(1));
  rt.submit(Task(use).read(x).on(0));
  rt.submit(Task(use).read(x).on(0).priority(5));
  open.set_value();
  rt.wait_all();
  double c_starts = -1, x_starts = -1;
  for (const TraceEvent& e : rt.trace_events()) {
    if (e.kind != TraceEvent::Kind::transfer || e.to != rt.devices()[0].memory_node) continue;
    if (e.bytes == cc.bytes()) c_starts = e.start;
    if (e.bytes == x.bytes()) x_starts = e.start;
  }
  ASSERT_GE(c_starts, 0) << "C was never copied";
  ASSERT_GE(x_starts, 0) << "X was never copied";
  EXPECT_LT(x_starts, c_starts) << "X's copy kept the priority of the first task that asked for it";
}

// A task handed to a device and waiting for its copies does not hold the device's window: a task
// whose data is there already runs meanwhile. One device with its own memory behind a 50 MB/s link,
// one task at a time (lookahead 0): A reads a 16 MB buffer (320 ms of copy: a submitting thread's
// delays stay well below it), B only writes (nothing to copy); B, submitted after A was handed
// over, ends long before A's copy does.
TEST(Data, ATaskWaitingForItsCopiesDoesNotHoldTheDevice) {
  Runtime rt(slow_link_device(/*lookahead=*/0));
  Kernel use = rt.kernel("use").cpu([](TaskContext&) {});
  Kernel mark = rt.kernel("mark").cpu([](TaskContext&) {});
  auto big = rt.buffer<float>(4096, 1024), out = rt.buffer<float>(4, 4);
  {
    auto warm = rt.buffer<float>(4, 4);  // measured, so each task is placed when submitted
    for (int i = 0; i < 4; ++i) {
      rt.submit(Task(use).write(warm).on(0));
      rt.submit(Task(mark).write(warm).on(0));
    }
    rt.wait_all();
  }
  rt.start_trace();
  rt.submit(Task(use).read(big).on(0));
  rt.submit(Task(mark).write(out).on(0));
  rt.wait_all();
  double copy_end = -1, b_end = -1;
  for (const TraceEvent& e : rt.trace_events()) {
    if (e.kind == TraceEvent::Kind::transfer && e.bytes == big.bytes()) copy_end = e.end;
    if (e.kind == TraceEvent::Kind::task && e.kernel == "mark") b_end = e.end;
  }
  ASSERT_GT(copy_end, 0) << "A's input was never copied";
  ASSERT_GT(b_end, 0) << "B never ran";
  EXPECT_LT(b_end, copy_end) << "B waited for A's copy: A held the device while it waited";
}

}  // namespace
}  // namespace hcr
