// Stress: eight threads submit 1,000,000 tasks at once (HCR_STRESS_TASKS changes the count, for
// the slower sanitizer builds) with random implicit dependencies through buffers and random
// explicit dependencies on other threads' tasks. Every thread's buffers must end as a sequential
// run of that thread's tasks leaves them, every task must read exactly what that sequential run
// read, each task must run exactly once, writers of a shared buffer must never overlap, and a
// task must start only after the task it was made to wait for.
#include "../test_support.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

namespace hcr {
namespace {

constexpr size_t kThreads = 8;
constexpr size_t kPrivate = 6;  // buffers per submitting thread
constexpr size_t kElems = 2;

size_t task_count() {
  if (const char* s = std::getenv("HCR_STRESS_TASKS"); s && *s)
    return std::strtoull(s, nullptr, 10);
  return 1'000'000;
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

struct Arg {
  uint8_t buffer;  // index among the thread's private buffers
  Access mode;
};
struct Spec {
  std::array<Arg, 3> args;
  uint8_t nargs = 0;
  bool shared_read = false;   // also reads the constant buffer every thread shares
  bool shared_count = false;  // also read-writes the shared counter (+1, serialised by hcr)
  bool explicit_dep = false;  // also waits for a recent task of another thread
};

// The work of one task on its private buffers: hash what it reads, then overwrite (write) or fold
// into (read_write) what it writes. Returns the hash, which the task records as what it saw.
uint64_t run_op(uint64_t id, const Spec& s, const std::array<int64_t*, 3>& p) {
  uint64_t h = mix(0x5eed, id);
  for (size_t i = 0; i < s.nargs; ++i)
    if (reads(s.args[i].mode))
      for (size_t j = 0; j < kElems; ++j) h = mix(h, static_cast<uint64_t>(p[i][j]));
  for (size_t i = 0; i < s.nargs; ++i)
    if (writes(s.args[i].mode))
      for (size_t j = 0; j < kElems; ++j)
        p[i][j] = static_cast<int64_t>(
            mix(h, j + (reads(s.args[i].mode) ? static_cast<uint64_t>(p[i][j]) : 0)));
  return h;
}

std::vector<Spec> make_specs(size_t count, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<Spec> specs(count);
  static const Access modes[] = {Access::read, Access::read, Access::write, Access::read_write};
  for (auto& s : specs) {
    s.nargs = static_cast<uint8_t>(1 + gen() % 3);
    for (size_t i = 0; i < s.nargs; ++i) {
      uint8_t b;
      bool dup;
      do {
        b = static_cast<uint8_t>(gen() % kPrivate);
        dup = false;
        for (size_t k = 0; k < i; ++k) dup |= s.args[k].buffer == b;
      } while (dup);
      s.args[i] = {b, modes[gen() % 4]};
    }
    uint64_t r = gen();
    s.shared_read = r % 4 == 0;
    s.shared_count = (r >> 8) % 16 == 0;
    s.explicit_dep = (r >> 16) % 16 == 0;
  }
  return specs;
}

// Recent events of one submitting thread, for the others to wait on.
struct Recent {
  std::mutex m;
  std::array<std::pair<Event, uint64_t>, 16> slots;  // event, global task id
  size_t next = 0;
};

TEST(Stress, EightThreadsSubmitRandomDependenciesMatchingSequentialExecution) {
  const size_t total = task_count(), per_thread = total / kThreads;
  ASSERT_GT(per_thread, 0u);
  std::vector<std::vector<Spec>> specs(kThreads);
  for (size_t t = 0; t < kThreads; ++t) specs[t] = make_specs(per_thread, 20261123 + t);
  auto id_of = [&](size_t t, size_t i) { return static_cast<uint64_t>(t * per_thread + i); };
  auto initial = [](size_t t, size_t b, size_t j) {
    return static_cast<int64_t>(t * 1000 + b * 10 + j);
  };

  // Sequential reference, thread by thread (threads share no written buffer but the counter).
  std::vector<std::array<std::array<int64_t, kElems>, kPrivate>> ref(kThreads);
  std::vector<uint64_t> ref_seen(total);
  int64_t ref_count = 0;
  for (size_t t = 0; t < kThreads; ++t) {
    for (size_t b = 0; b < kPrivate; ++b)
      for (size_t j = 0; j < kElems; ++j) ref[t][b][j] = initial(t, b, j);
    for (size_t i = 0; i < per_thread; ++i) {
      const Spec& s = specs[t][i];
      std::array<int64_t*, 3> p{};
      for (size_t a = 0; a < s.nargs; ++a) p[a] = ref[t][s.args[a].buffer].data();
      ref_seen[id_of(t, i)] = run_op(id_of(t, i), s, p);
      ref_count += s.shared_count;
    }
  }

  Runtime rt(test::cpu_config(4));
  std::vector<uint64_t> seen(total, 0);
  std::unique_ptr<std::atomic<uint8_t>[]> runs(new std::atomic<uint8_t>[total]);
  for (size_t i = 0; i < total; ++i) runs[i].store(0, std::memory_order_relaxed);
  std::atomic<size_t> early{0}, overlapping{0}, bad_shared{0};
  std::atomic<int> in_counter{0};

  // Parameters: thread, index in thread, the task it must follow (~0: none).
  Kernel op = rt.kernel("stress").cpu([&](TaskContext& ctx) {
    const auto t = ctx.param<uint64_t>(0), i = ctx.param<uint64_t>(1), dep = ctx.param<uint64_t>(2);
    const Spec& s = specs[t][i];
    if (dep != ~uint64_t{0} && runs[dep].load(std::memory_order_acquire) == 0)
      early.fetch_add(1, std::memory_order_relaxed);
    std::array<int64_t*, 3> p{};
    for (size_t a = 0; a < s.nargs; ++a) p[a] = ctx.arg<int64_t>(a).data;
    size_t next = s.nargs;
    if (s.shared_read) {
      auto c = ctx.arg<int64_t>(next++);
      if (c.data[0] != 42 || c.data[1] != 43) bad_shared.fetch_add(1, std::memory_order_relaxed);
    }
    if (s.shared_count) {
      if (in_counter.fetch_add(1) != 0) overlapping.fetch_add(1, std::memory_order_relaxed);
      auto c = ctx.arg<int64_t>(next++);
      c.data[0] = c.data[0] + 1;  // not atomic: hcr must never run two writers at once
      in_counter.fetch_sub(1);
    }
    seen[t * per_thread + i] = run_op(t * per_thread + i, s, p);
    runs[t * per_thread + i].fetch_add(1, std::memory_order_release);
  });

  std::vector<std::vector<Buffer<int64_t>>> bufs(kThreads);
  for (size_t t = 0; t < kThreads; ++t)
    for (size_t b = 0; b < kPrivate; ++b) {
      bufs[t].push_back(rt.vector<int64_t>(kElems));
      auto v = bufs[t].back().acquire(Access::write);
      for (size_t j = 0; j < kElems; ++j) v(0, j) = initial(t, b, j);
    }
  auto constant = rt.vector<int64_t>(kElems);
  {
    auto v = constant.acquire(Access::write);
    v(0, 0) = 42;
    v(0, 1) = 43;
  }
  auto counter = rt.vector<int64_t>(1);  // zeroed

  std::array<Recent, kThreads> recent;
  std::vector<std::thread> submitters;
  for (size_t t = 0; t < kThreads; ++t)
    submitters.emplace_back([&, t] {
      std::mt19937_64 gen(t + 7);
      for (size_t i = 0; i < per_thread; ++i) {
        const Spec& s = specs[t][i];
        Task task(op);
        for (size_t a = 0; a < s.nargs; ++a) task.arg(bufs[t][s.args[a].buffer], s.args[a].mode);
        if (s.shared_read) task.read(constant);
        if (s.shared_count) task.read_write(counter);
        uint64_t dep = ~uint64_t{0};
        if (s.explicit_dep) {
          Recent& r = recent[(t + 1 + gen() % (kThreads - 1)) % kThreads];
          std::lock_guard<std::mutex> lock(r.m);
          auto& [e, id] = r.slots[gen() % r.slots.size()];
          if (e.valid()) {
            task.after(e);
            dep = id;
          }
        }
        Event e = rt.submit(task.param(uint64_t{t}).param(uint64_t{i}).param(dep));
        if (i % 8 == 0) {
          Recent& mine = recent[t];
          std::lock_guard<std::mutex> lock(mine.m);
          mine.slots[mine.next++ % mine.slots.size()] = {std::move(e), id_of(t, i)};
        }
      }
    });
  for (auto& th : submitters) th.join();
  for (auto& r : recent)
    for (auto& [e, id] : r.slots) e = Event();
  rt.wait_all();

  for (size_t t = 0; t < kThreads; ++t)
    for (size_t b = 0; b < kPrivate; ++b) {
      auto got = bufs[t][b].to_vector();
      ASSERT_EQ(got, std::vector<int64_t>(ref[t][b].begin(), ref[t][b].end()))
          << "thread " << t << " buffer " << b;
    }
  EXPECT_EQ(counter.to_vector()[0], ref_count) << "increments of the shared counter were lost";
  size_t wrong = 0, not_once = 0;
  for (size_t i = 0; i < total; ++i) {
    wrong += seen[i] != ref_seen[i];
    not_once += runs[i].load(std::memory_order_relaxed) != 1;
  }
  EXPECT_EQ(not_once, 0u) << "tasks that did not run exactly once";
  EXPECT_EQ(wrong, 0u) << "tasks that read a version other than sequential order gives";
  EXPECT_EQ(early.load(), 0u) << "tasks that started before the task they were made to follow";
  EXPECT_EQ(overlapping.load(), 0u) << "writers of the shared counter that ran at once";
  EXPECT_EQ(bad_shared.load(), 0u);
}

}  // namespace
}  // namespace hcr
