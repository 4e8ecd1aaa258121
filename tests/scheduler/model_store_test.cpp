// The model directory on disk (scheduler/model_store.cpp): saves of several models (processes) at
// once merge instead of replacing each other, count every sample once, keep the models and links
// of devices absent from the run; a write error keeps the old files and warns; an untrusted
// directory is not used; planted links are never followed; FIFOs and huge files are skipped
// without hanging; nothing learned writes nothing. Last, two dmda runtimes sharing a directory.
#include "../../scheduler/cost_model.hpp"
#include "../test_support.hpp"

#include <hcr/sched.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

namespace hcr::sched {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Every sample the files of `dir` count for (kernel, arch, footprint); 0 when there is no cell.
uint32_t saved_count(const fs::path& dir, const std::string& kernel, const std::string& arch,
                     uint64_t footprint) {
  CostModel m;
  std::vector<std::string> warnings;
  m.load(dir, warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  for (auto& r : m.rows())
    if (r.kernel == kernel && r.arch == arch && r.footprint == footprint) return r.samples;
  return 0;
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Runs `f` with writes to files limited to 4 KiB, as a full disk would refuse them.
template <class F>
void with_small_file_limit(F&& f) {
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  f();
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
}

// ---- several savers ---------------------------------------------------------------------------

// Two processes that loaded the same (empty) directory each save what they measured: the second
// save used to replace the first one's file.
TEST(ModelStore, SaversKeepEachOthersSamples) {
  test::TempDir dir;
  CostModel a, b;
  for (int i = 0; i < 5; ++i) a.record("gemm", "gpu", 1, 100, 1.0);
  for (int i = 0; i < 3; ++i) b.record("gemm", "gpu", 1, 100, 1.0);
  for (int i = 0; i < 2; ++i) b.record("gemm", "gpu", 2, 400, 4.0);
  a.save(dir.path());
  b.save(dir.path());
  EXPECT_EQ(saved_count(dir.path(), "gemm", "gpu", 1), 8u) << "a's samples lost";
  EXPECT_EQ(saved_count(dir.path(), "gemm", "gpu", 2), 2u);
  a.save(dir.path());  // nothing new since: the file already holds a's samples
  EXPECT_EQ(saved_count(dir.path(), "gemm", "gpu", 1), 8u);
}

// Samples loaded from the file, or saved already, are never added again.
TEST(ModelStore, ASaveAddsOnlyWhatWasRecordedSinceTheLast) {
  test::TempDir dir;
  CostModel a;
  for (int i = 0; i < 4; ++i) a.record("k", "gpu", 1, 10, 1.0);
  a.save(dir.path());
  for (int i = 0; i < 2; ++i) a.record("k", "gpu", 1, 10, 1.0);
  a.save(dir.path());
  EXPECT_EQ(saved_count(dir.path(), "k", "gpu", 1), 6u);
  CostModel b;  // a later process: loads, measures once, saves
  std::vector<std::string> warnings;
  b.load(dir.path(), warnings);
  b.record("k", "gpu", 1, 10, 1.0);
  b.save(dir.path());
  EXPECT_EQ(saved_count(dir.path(), "k", "gpu", 1), 7u);
  a.record("k", "gpu", 1, 10, 1.0);  // the first one is still running
  a.save(dir.path());
  EXPECT_EQ(saved_count(dir.path(), "k", "gpu", 1), 8u);
}

// Writers at once (threads here; the lock is per open file, so processes alike): every sample of
// every writer is in the file, and the file is always whole.
TEST(ModelStore, ConcurrentSaversLoseNothing) {
  test::TempDir dir;
  constexpr int kWriters = 4, kSaves = 20;
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&, w] {
      CostModel m;
      for (int i = 0; i < kSaves; ++i) {
        m.record("k", "gpu", 1, 10, 1.0 + 0.01 * w);
        m.record("k", "arch-" + std::to_string(w), 1, 10, 1.0);
        try {
          m.save(dir.path());
        } catch (const std::exception& e) {
          ADD_FAILURE() << e.what();
          ++failures;
        }
      }
    });
  for (auto& t : writers) t.join();
  ASSERT_EQ(failures.load(), 0);
  EXPECT_EQ(saved_count(dir.path(), "k", "gpu", 1), uint32_t{kWriters * kSaves});
  for (int w = 0; w < kWriters; ++w)
    EXPECT_EQ(saved_count(dir.path(), "k", "arch-" + std::to_string(w), 1), uint32_t{kSaves});
  for (const std::string& name : entries(dir.path()))
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << "a temporary left: " << name;
}

// A run with some devices saves; a run with others must not drop what the first learned.
TEST(ModelStore, ModelsAndLinksOfDevicesAbsentFromTheRunStay) {
  test::TempDir dir;
  auto copies = [](LinkModel& l, uint32_t to, double bandwidth) {
    for (uint64_t bytes : {4096ull, 1048576ull, 16777216ull})
      l.record(0, to, bytes, 1e-5 + static_cast<double>(bytes) / bandwidth);
  };
  {
    CostModel m;
    LinkModel l;
    l.resize(2);
    m.record("k", "gpuA", 1, 10, 1.0);
    copies(l, 1, 5e9);
    save_models(dir.path().string(), m, l, {"host", "gpuA"});
  }
  {
    CostModel m;
    LinkModel l;
    l.resize(2);
    std::vector<std::string> names{"host", "gpuB"};
    load_models(dir.path().string(), m, l, names);
    m.record("k", "gpuB", 1, 10, 2.0);
    copies(l, 1, 2e10);
    save_models(dir.path().string(), m, l, names);
  }
  EXPECT_EQ(saved_count(dir.path(), "k", "gpuA", 1), 1u);
  EXPECT_EQ(saved_count(dir.path(), "k", "gpuB", 1), 1u);
  auto links = LinkModel::parse(slurp(dir.path() / "links.toml"), "links.toml");
  ASSERT_EQ(links.size(), 2u) << slurp(dir.path() / "links.toml");
  EXPECT_EQ(links[0].to, "gpuA") << "the link of a device absent from the second run was dropped";
  EXPECT_NEAR(links[0].bandwidth, 5e9, 5e9 * 0.02);
  EXPECT_EQ(links[1].to, "gpuB");
  EXPECT_NEAR(links[1].bandwidth, 2e10, 2e10 * 0.02);
}

TEST(LinkModel, MergeReplacesTheSamePairAndKeepsTheOthers) {
  using L = LinkModel::NamedLink;
  auto merged =
      LinkModel::merge({L{"host", "a", 1, 1e9}, L{"host", "b", 1, 1e9}, L{"host", "a", 2, 2e9}},
                       {L{"host", "a", 3, 3e9}, L{"c", "host", 4, 4e9}});
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_EQ(merged[0].bandwidth, 3e9);
  EXPECT_EQ(merged[1].to, "b");
  EXPECT_EQ(merged[2].from, "c");
}

// ---- failures and hostile directories ---------------------------------------------------------

// A full disk (here: the file size limit) during a save: the files stay as they were, a warning
// names the file and the reason, and the samples are saved by the next save that succeeds.
TEST(ModelStore, AWriteErrorKeepsTheOldFilesAndWarns) {
  test::TempDir dir;
  // 60 memory nodes: a links.toml larger than the limit.
  constexpr uint32_t kNodes = 60;
  std::vector<std::string> names{"host"};
  for (uint32_t n = 1; n < kNodes; ++n) names.push_back("device-" + std::to_string(n));
  CostModel m;
  LinkModel l;
  l.resize(kNodes);
  auto measure = [&](double bandwidth) {
    for (uint32_t n = 1; n < kNodes; ++n)
      for (uint64_t bytes : {4096ull, 1048576ull}) {
        l.record(0, n, bytes, 1e-5 + static_cast<double>(bytes) / bandwidth);
        l.record(n, 0, bytes, 1e-5 + static_cast<double>(bytes) / bandwidth);
      }
  };
  for (int i = 0; i < 3; ++i) m.record("k", "gpu", 1, 10, 1.0);
  measure(1e9);
  save_models(dir.path().string(), m, l, names);
  const std::string links_before = slurp(dir.path() / "links.toml");
  ASSERT_GT(links_before.size(), 4096u);
  for (int k = 0; k < 200; ++k) m.record("kernel-" + std::to_string(k), "gpu", 1, 10, 1.0);
  measure(2e9);
  const std::string model_before = slurp(dir.path() / "gpu.model.toml");

  test::LogCapture log(LogLevel::warn);
  with_small_file_limit([&] { save_models(dir.path().string(), m, l, names); });
  EXPECT_TRUE(log.contains("cannot save the cost model under " + dir.path().string()))
      << (log.lines().empty() ? "no warning" : log.lines()[0]);
  EXPECT_TRUE(log.contains("File too large")) << "the warning says why";
  EXPECT_EQ(slurp(dir.path() / "gpu.model.toml"), model_before);
  EXPECT_EQ(slurp(dir.path() / "links.toml"), links_before);
  for (const std::string& name : entries(dir.path()))
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << "a temporary left: " << name;

  save_models(dir.path().string(), m, l, names);  // room again
  EXPECT_EQ(saved_count(dir.path(), "kernel-199", "gpu", 1), 1u);
  EXPECT_EQ(saved_count(dir.path(), "k", "gpu", 1), 3u);
}

// A model directory another user owns, or anyone may write to, could feed us costs (or take our
// writes): neither loaded nor saved, with one warning naming it and why.
TEST(ModelStore, AnUntrustedDirectoryIsNotUsed) {
  test::TempDir tmp;
  const fs::path theirs = tmp.path() / "theirs", open_dir = tmp.path() / "open";
  for (const fs::path& d : {theirs, open_dir}) {
    CostModel seed;
    for (int i = 0; i < 3; ++i) seed.record("k", "gpu", 1, 10, 9.0);
    seed.save(d);
  }
  if (::chown(theirs.c_str(), 12345, 12345) != 0) GTEST_SKIP() << "cannot chown (not root)";
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  for (const fs::path& d : {theirs, open_dir}) {
    const std::string before = slurp(d / "gpu.model.toml");
    test::LogCapture log(LogLevel::warn);
    CostModel m;
    LinkModel l;
    load_models(d.string(), m, l, {"host"});
    EXPECT_TRUE(m.rows().empty()) << d << ": loaded";
    ASSERT_EQ(log.lines().size(), 1u) << d;
    EXPECT_NE(log.lines()[0].find("model directory '" + d.string() + "' not used"),
              std::string::npos)
        << log.lines()[0];
    EXPECT_NE(log.lines()[0].find(d == theirs ? "owned by uid 12345" : "(mode 0777)"),
              std::string::npos)
        << log.lines()[0];
    m.record("k", "gpu", 1, 10, 1.0);
    save_models(d.string(), m, l, {"host"});
    EXPECT_EQ(log.lines().size(), 1u) << "said once";
    EXPECT_EQ(slurp(d / "gpu.model.toml"), before) << d << ": written";
    EXPECT_EQ(entries(d).size(), 2u) << d;  // the model and the lock file of the seeding save
  }
}

// Links planted where hcr writes (the fixed temporary names it used to write through, the files
// themselves) are never followed: their targets stay as they were.
TEST(ModelStore, PlantedLinksAreNeverFollowed) {
  test::TempDir dir, victims;
  std::vector<fs::path> targets;
  for (const char* name :
       {"gpu.model.toml.tmp", "links.toml.tmp", "gpu.model.toml", "links.toml"}) {
    const fs::path victim = victims.path() / name;
    std::ofstream(victim) << "untouched";
    fs::create_symlink(victim, dir.path() / name);
    targets.push_back(victim);
  }
  CostModel m;
  LinkModel l;
  l.resize(2);
  m.record("k", "gpu", 1, 10, 1.0);
  l.record(0, 1, 1 << 20, 1e-3);
  test::LogCapture log(LogLevel::warn);
  save_models(dir.path().string(), m, l, {"host", "gpu"});
  for (const fs::path& v : targets) EXPECT_EQ(slurp(v), "untouched") << v;
  EXPECT_FALSE(fs::is_symlink(dir.path() / "gpu.model.toml")) << "not replaced by the model";
}

// A FIFO would block a reader forever; a huge file would be read whole: both are skipped with a
// warning naming them, and loading goes on.
TEST(ModelStore, FifosAndHugeFilesAreSkippedWithoutHanging) {
  test::TempDir dir;
  CostModel seed;
  seed.record("k", "gpu", 1, 10, 1.0);
  seed.save(dir.path());
  ASSERT_EQ(::mkfifo((dir.path() / "fifo.model.toml").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((dir.path() / "links.toml").c_str(), 0600), 0);
  {
    std::ofstream big(dir.path() / "big.model.toml");
    big.seekp(static_cast<std::streamoff>(kMaxModelFileBytes));  // sparse: no disk used
    big << 'x';
  }
  test::LogCapture log(LogLevel::warn);
  CostModel m;
  LinkModel l;
  load_models(dir.path().string(), m, l, {"host"});
  EXPECT_TRUE(log.contains((dir.path() / "fifo.model.toml").string() + ": a FIFO"));
  EXPECT_TRUE(log.contains((dir.path() / "links.toml").string() + ": a FIFO"));
  EXPECT_TRUE(log.contains((dir.path() / "big.model.toml").string() + ": 67108865 bytes, more "
                                                                      "than the 67108864 allowed"));
  EXPECT_EQ(m.rows().size(), 1u) << "the good file still loads";
}

// A model file grown far beyond the caps (an hcr before them wrote every size it ever saw):
// loading keeps the most recently updated cells within the caps and reads no further than the
// parse bound, with a warning naming the file; the next save rewrites the file within the caps,
// though nothing new was learned.
TEST(ModelStore, AFileGrownBeyondTheCapsIsRewrittenWithinThem) {
  test::TempDir dir;
  std::string text = "format = 'hcr-cost-model'\nversion = 1\narch = 'gpu'\n";
  uint64_t cells = 0;
  for (; text.size() < 2 * kMaxModelParseBytes; ++cells)
    text += "[[cell]]\nkernel = 'k" + std::to_string(cells % 50) + "'\nfootprint = '0x" +
            std::to_string(cells) + "'\nsize = 1.0\ncount = 1\nsamples = [0.25]\n";
  std::ofstream(dir.path() / "gpu.model.toml") << text;
  CostModel m;
  LinkModel l;
  test::LogCapture log(LogLevel::warn);
  const auto t0 = std::chrono::steady_clock::now();
  load_models(dir.path().string(), m, l, {"host"});
  std::printf("a %zu-byte model file of %llu cells: loaded in %.3f s, %zu cells kept\n",
              text.size(), static_cast<unsigned long long>(cells),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              m.rows().size());
  EXPECT_EQ(m.rows().size(), kMaxCellsPerArch);
  EXPECT_TRUE(log.contains((dir.path() / "gpu.model.toml").string() + ": " +
                           std::to_string(text.size()) + " bytes, more than the"))
      << (log.lines().empty() ? "no warning" : log.lines()[0]);
  save_models(dir.path().string(), m, l, {"host"});
  const std::string saved = slurp(dir.path() / "gpu.model.toml");
  EXPECT_LT(saved.size(), text.size() / 10) << "not rewritten";
  CostModel again;
  std::vector<std::string> warnings;
  again.load(dir.path(), warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(again.rows().size(), kMaxCellsPerArch);
  for (int i = 0; i < 5; ++i) again.record("new", "gpu", 1, 1.0, 1.0);  // and a save after samples
  again.save(dir.path());
  CostModel third;
  third.load(dir.path(), warnings);
  EXPECT_EQ(third.rows().size(), kMaxCellsPerArch) << "a save went beyond the caps";
  EXPECT_EQ(third.samples("new", "gpu"), 5u) << "the newest cell was not kept";
}

// A save that died midway left its temporary: the next save (holding the lock, so no other save
// is writing) removes it.
TEST(ModelStore, TemporariesOfADeadSaveGo) {
  test::TempDir dir;
  CostModel m;
  m.record("k", "gpu", 1, 10, 1.0);
  m.save(dir.path());
  std::ofstream(dir.path() / ".gpu.model.toml.tmp.999999.3") << "half a fi";
  m.record("k", "gpu", 1, 10, 1.0);
  m.save(dir.path());
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{".lock", "gpu.model.toml"}));
}

TEST(ModelStore, NothingLearnedWritesNothing) {
  test::TempDir tmp;
  const fs::path dir = tmp.path() / "models" / "host";
  CostModel m;
  LinkModel l;
  l.resize(2);
  save_models(dir.string(), m, l, {"host", "gpu"});
  EXPECT_TRUE(m.save(dir).empty());
  EXPECT_FALSE(fs::exists(tmp.path() / "models")) << "a directory was made for nothing";
}

// ---- through dmda -----------------------------------------------------------------------------

Config sim_dmda(const fs::path& model_dir) {
  Config c;
  c.use_environment = false;
  c.policy = "dmda";
  c.model_dir = model_dir.string();
  c.backends.push_back({"sim",
                        true,
                        {{"compute", "false"},
                         {"device.0.name", "fast"},
                         {"device.0.gflops", "1000"},
                         {"device.0.host_memory", "true"},
                         {"kernel.work.flops", "1e6"}},
                        "test"});
  return c;
}

// Two runtimes at once on one model directory (two processes of one user): each one's samples
// survive the other's save at its end.
TEST(Dmda, TwoRuntimesSharingAModelDirectoryKeepBothRunsSamples) {
  test::TempDir dir;
  const Config c = sim_dmda(dir.path());
  {
    Runtime first(c), second(c);  // both load the (empty) directory
    Kernel k1 = first.kernel("work").cpu([](TaskContext&) {});
    Kernel k2 = second.kernel("work").cpu([](TaskContext&) {});
    for (int i = 0; i < 7; ++i) first.submit(Task(k1)).get();
    for (int i = 0; i < 5; ++i) second.submit(Task(k2)).get();
  }  // each saves as it ends
  std::vector<std::string> warnings;
  auto rows = read_models(model_directory(c), warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].samples, 12u) << "one runtime's samples were lost";
}

// A runtime that learns nothing leaves no model directory behind.
TEST(Dmda, ARuntimeThatLearnsNothingCreatesNoDirectory) {
  test::TempDir tmp;
  { Runtime rt(sim_dmda(tmp.path() / "models")); }
  EXPECT_FALSE(fs::exists(tmp.path() / "models"));
}

}  // namespace
}  // namespace hcr::sched
