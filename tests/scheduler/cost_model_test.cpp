// The cost model on its own: convergence, outlier rejection, following a change, extrapolation to
// an unseen size, persistence (files and their text, the link file), and files it must refuse.
#include "../../scheduler/cost_model.hpp"
#include "../test_support.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>

namespace hcr::sched {
namespace {

TEST(History, ConvergesToTheTypicalDuration) {
  History h;
  std::mt19937 gen(1);
  std::normal_distribution<double> noise(1.0, 0.03);
  for (int i = 0; i < 12; ++i) h.add(0.010 * noise(gen));
  EXPECT_NEAR(h.estimate(), 0.010, 0.0003);
  EXPECT_GT(h.spread(), 0.0);
  EXPECT_LT(h.spread(), 0.001);
  EXPECT_EQ(h.count(), 12u);
}

TEST(History, OneSpikeMovesNothing) {
  History h;
  for (int i = 0; i < 10; ++i) h.add(1.0);
  h.add(500.0);  // a page fault storm, a preempted thread
  EXPECT_DOUBLE_EQ(h.estimate(), 1.0);
  h.add(1.0);
  h.add(0.001);  // and one absurdly fast
  EXPECT_DOUBLE_EQ(h.estimate(), 1.0);
}

TEST(History, FollowsADeviceThatBecameSlower) {
  History h;
  for (int i = 0; i < 16; ++i) h.add(1.0);
  h.add(10.0);
  h.add(10.0);
  EXPECT_DOUBLE_EQ(h.estimate(), 1.0) << "two samples are not yet a trend";
  h.add(10.0);
  EXPECT_DOUBLE_EQ(h.estimate(), 10.0) << "three in a row are";
  // And back: a device that became faster again.
  for (int i = 0; i < 3; ++i) h.add(2.0);
  EXPECT_DOUBLE_EQ(h.estimate(), 2.0);
}

TEST(History, DecaysThroughItsWindow) {
  History h;
  for (int i = 0; i < 16; ++i) h.add(1.0);
  for (int i = 0; i < 16; ++i) h.add(1.2);  // a drift within the outlier tolerance
  EXPECT_DOUBLE_EQ(h.estimate(), 1.2);
}

TEST(PowerLaw, ExtrapolatesToAnUnseenSizeWithinFivePercent) {
  // Tiled gemm on a device: t = 3e-12 * bytes^1.5 + 20 us launch cost.
  auto truth = [](double n) { return 3e-12 * std::pow(n, 1.5) + 2e-5; };
  std::vector<std::array<double, 3>> pts;
  for (double n : {1e4, 5e4, 2e5, 8e5}) pts.push_back({n, truth(n), 4});
  PowerLaw f = fit_power_law(pts);
  ASSERT_TRUE(f.valid);
  for (double unseen : {3e6, 1e7, 3e3})
    EXPECT_NEAR(f(unseen), truth(unseen), 0.05 * truth(unseen)) << "size " << unseen;
  EXPECT_NEAR(f.b, 1.5, 0.05);
}

TEST(CostModel, PredictsFromHistoryThenFromTheRegression) {
  CostModel m;
  EXPECT_FALSE(m.predict("gemm_f32", "gpu", 1, 100).known());
  m.record("gemm_f32", "gpu", 1, 1e4, 1e-3);
  Prediction p = m.predict("gemm_f32", "gpu", 1, 1e4);
  EXPECT_EQ(p.source, Prediction::Source::history);
  EXPECT_DOUBLE_EQ(p.seconds, 1e-3);
  EXPECT_EQ(p.samples, 1u);
  m.record("gemm_f32", "gpu", 2, 4e4, 8e-3);  // t ~ n^1.5
  Prediction q = m.predict("gemm_f32", "gpu", 3, 1.6e5);
  EXPECT_EQ(q.source, Prediction::Source::regression);
  EXPECT_NEAR(q.seconds, 64e-3, 64e-3 * 0.05);
  EXPECT_EQ(m.samples("gemm_f32", "gpu"), 2u);
  EXPECT_FALSE(m.predict("gemm_f32", "cpu", 1, 1e4).known()) << "architectures are separate";
}

TEST(CostModel, SavesAndLoadsEveryCell) {
  test::TempDir dir;
  CostModel a;
  for (int i = 0; i < 5; ++i) {
    a.record("k1", "arch one", 0xabc, 1000, 0.5 + 0.01 * i);
    a.record("k2", "arch/two", 7, 2000, 2.0);
  }
  auto files = a.save(dir.path());
  ASSERT_EQ(files.size(), 2u);
  CostModel b;
  std::vector<std::string> warnings;
  b.load(dir.path(), warnings);
  EXPECT_TRUE(warnings.empty());
  for (auto [k, arch, fp, size] : {std::tuple{"k1", "arch one", 0xabcull, 1000.0},
                                   std::tuple{"k2", "arch/two", 7ull, 2000.0}}) {
    Prediction pa = a.predict(k, arch, fp, size), pb = b.predict(k, arch, fp, size);
    EXPECT_EQ(pb.source, Prediction::Source::history);
    EXPECT_DOUBLE_EQ(pa.seconds, pb.seconds);
    EXPECT_EQ(pa.samples, pb.samples);
  }
  // Human-readable: the file says what it is.
  std::ifstream in(files[0]);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("format = 'hcr-cost-model'"), std::string::npos) << text;
  EXPECT_NE(text.find("version = 1"), std::string::npos);
}

TEST(CostModel, CorruptAndForeignFilesAreIgnoredNamingThem) {
  test::TempDir dir;
  auto write = [&](const char* name, const char* text) {
    std::ofstream(dir.path() / name) << text;
  };
  write("a.model.toml", "format = \"hcr-cost-model\"\nversion = 1\narch = \"x\"\n[[cell]]\n"
                        "kernel = \"k\"\nfootprint = \"0x1\"\nsize = 1.0\ncount = 3\n"
                        "samples = [0.5, 0.5]\n");
  write("b.model.toml", "format = \"hcr-cost-model\"\nversion = 99\narch = \"x\"\n");
  write("c.model.toml", "this is [not toml");
  write("d.model.toml", "format = \"something-else\"\n");
  write("e.model.toml",
        "format = \"hcr-cost-model\"\nversion = 1\narch = \"y\"\n[[cell]]\n"
        "kernel = \"k\"\nfootprint = \"zz\"\nsize = 1.0\ncount = 1\nsamples = [1.0]\n");
  write("f.model.toml", "format = \"hcr-cost-model\"\nversion = 1\narch = \"z\"\n[[cell]]\n"
                        "kernel = \"k\"\nfootprint = \"0x2\"\nsize = 1.0\ncount = 1\n"
                        "samples = [-4.0]\n");
  CostModel m;
  std::vector<std::string> warnings;
  m.load(dir.path(), warnings);
  ASSERT_EQ(warnings.size(), 5u);
  auto said = [&](const std::string& file, const std::string& what) {
    for (auto& w : warnings)
      if (w.find(file) != std::string::npos && w.find(what) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(said("b.model.toml", "version 99")) << warnings[0];
  EXPECT_TRUE(said("c.model.toml", "c.model.toml:1"));
  EXPECT_TRUE(said("d.model.toml", "not an hcr cost model"));
  EXPECT_TRUE(said("e.model.toml", "'zz' is not hexadecimal"));
  EXPECT_TRUE(said("f.model.toml", "non-negative"));
  // The good file still counts; the bad ones changed nothing.
  EXPECT_EQ(m.predict("k", "x", 1, 1).source, Prediction::Source::history);
  EXPECT_FALSE(m.predict("k", "y", 1, 1).known());
  EXPECT_FALSE(m.predict("k", "z", 2, 1).known());
}

// The text entry points the fuzzers drive (tests/fuzz): what load_file and save() use.
constexpr const char* kModelHead = "format = 'hcr-cost-model'\nversion = 1\narch = 'gpu'\n";

// The regression over sizes is made again lazily (when a prediction needs it), never left stale:
// samples recorded after a prediction for an unseen size move the next one.
TEST(CostModel, TheRegressionFollowsSamplesRecordedAfterItWasUsed) {
  CostModel m;
  for (int i = 0; i < 4; ++i) {
    m.record("gemm", "gpu", 1, 1e4, 1e-3);
    m.record("gemm", "gpu", 2, 4e4, 4e-3);
  }
  const Prediction before = m.predict("gemm", "gpu", 3, 1.6e5);
  ASSERT_EQ(before.source, Prediction::Source::regression);
  EXPECT_NEAR(before.seconds, 16e-3, 1e-4) << "linear in the size";
  for (int i = 0; i < 16; ++i) m.record("gemm", "gpu", 2, 4e4, 16e-3);  // size 2 now 4x slower
  const Prediction after = m.predict("gemm", "gpu", 3, 1.6e5);
  ASSERT_EQ(after.source, Prediction::Source::regression);
  EXPECT_GT(after.seconds, 2 * before.seconds) << "the fit did not see the new samples";
}

TEST(CostModel, TextRoundTrip) {
  CostModel a;
  for (int i = 0; i < 20; ++i) {
    a.record("gemm", "gpu", 1, 1e4, 1e-3 * (1 + 0.01 * (i % 3)));
    a.record("gemm", "gpu", 2, 4e4, 8e-3);
  }
  auto texts = a.save_text();
  ASSERT_EQ(texts.size(), 1u);
  CostModel b;
  b.load_text(texts.at("gpu"), "gpu.model.toml");
  EXPECT_EQ(b.save_text(), texts);
  for (auto [fp, size] : {std::pair{1ull, 1e4}, std::pair{2ull, 4e4}, std::pair{3ull, 1.6e5}}) {
    Prediction pa = a.predict("gemm", "gpu", fp, size), pb = b.predict("gemm", "gpu", fp, size);
    EXPECT_EQ(pa.source, pb.source);
    EXPECT_EQ(pa.seconds, pb.seconds);
    EXPECT_EQ(pa.spread, pb.spread);
  }
  EXPECT_EQ(b.samples("gemm", "gpu"), 32u) << "the two windows of 16";
}

// Architectures whose names differ only in characters a file name cannot hold keep their own
// files: neither model overwrites the other.
TEST(CostModel, ArchitecturesNeverShareAFile) {
  test::TempDir dir;
  CostModel a;
  const char* archs[] = {"gpu a", "gpu/a", "gpu_a", "sm_90", ".."};
  for (int i = 0; i < 5; ++i)
    for (size_t j = 0; j < std::size(archs); ++j) a.record("k", archs[j], 1, 10, 1.0 + double(j));
  auto files = a.save(dir.path());
  ASSERT_EQ(files.size(), std::size(archs));
  std::set<std::string> names;
  for (auto& f : files) {
    names.insert(f.filename().string());
    EXPECT_EQ(f.parent_path(), dir.path()) << f;
  }
  EXPECT_EQ(names.size(), std::size(archs));
  EXPECT_TRUE(names.count("sm_90.model.toml")) << "a plain name is kept as it is";
  CostModel b;
  std::vector<std::string> warnings;
  b.load(dir.path(), warnings);
  EXPECT_TRUE(warnings.empty());
  for (size_t j = 0; j < std::size(archs); ++j)
    EXPECT_DOUBLE_EQ(b.predict("k", archs[j], 1, 10).seconds, 1.0 + double(j)) << archs[j];
}

// A file of another name holding an architecture (what an earlier hcr named it) loses to the file
// of record, whatever the names' order, and the next save removes it.
TEST(CostModel, TheFileOfRecordWinsAndOthersOfItsArchitectureGo) {
  test::TempDir dir;
  CostModel old_model, model;
  for (int i = 0; i < 5; ++i) {
    old_model.record("k", "sim:gpu", 1, 10, 5.0);
    model.record("k", "sim:gpu", 1, 10, 1.0);
  }
  auto old_files = old_model.save(dir.path());
  ASSERT_EQ(old_files.size(), 1u);
  const auto stale = dir.path() / "sim_gpu.model.toml";  // the name hcr gave it before
  std::filesystem::rename(old_files[0], stale);
  auto files = model.save(dir.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(stale)) << "save leaves a stale file of its architecture";
  std::filesystem::rename(files[0], dir.path() / "keep");  // now both at once, the stale last
  old_model.save(dir.path());
  std::filesystem::rename(files[0], stale);
  std::filesystem::rename(dir.path() / "keep", files[0]);
  CostModel loaded;
  std::vector<std::string> warnings;
  loaded.load(dir.path(), warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_DOUBLE_EQ(loaded.predict("k", "sim:gpu", 1, 10).seconds, 1.0) << "the stale file won";
}

// A plugin that reports a garbage duration must not turn the saved model into a file the next
// run refuses as corrupt (durations above kMaxFileSeconds).
TEST(CostModel, AbsurdMeasurementsNeverReachTheFile) {
  CostModel a;
  for (int i = 0; i < 5; ++i) a.record("gemm", "gpu", 1, 1e4, 1e-3);
  for (int i = 0; i < 3; ++i) a.record("gemm", "gpu", 1, 1e4, 1e12);  // a "new regime" of it
  a.record("gemm", "gpu", 1, 1e4, INFINITY);
  auto texts = a.save_text();
  ASSERT_EQ(texts.size(), 1u);
  CostModel b;
  ASSERT_NO_THROW(b.load_text(texts.at("gpu"), "gpu.model.toml"));
  EXPECT_DOUBLE_EQ(b.predict("gemm", "gpu", 1, 1e4).seconds, 1e-3);
}

TEST(CostModel, LoadTextNamesTheOriginAndChangesNothingWhenRefused) {
  CostModel m;
  try {
    m.load_text(std::string(kModelHead) + "[[cell]]\nkernel = 'k'\n", "mine.model.toml");
    FAIL() << "an incomplete cell loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("mine.model.toml:4: a cell needs", 0), 0u) << e.what();
  }
  EXPECT_TRUE(m.rows().empty());
  try {
    m.load_file("/nonexistent/x.model.toml");
    FAIL() << "a missing file loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/x.model.toml"), std::string::npos);
  }
}

// Found by tests/fuzz/cost_model_fuzz: a cell twice in a file (or in two files of one
// architecture) counted its samples twice, so the model said something else once saved.
TEST(CostModel, ACellReadTwiceCountsOnce) {
  const std::string cell =
      "[[cell]]\nkernel = 'k'\nfootprint = '0x1'\nsize = 1.0\ncount = 4\nsamples = [1.0, 1.0]\n";
  CostModel m;
  m.load_text(kModelHead + cell + cell, "twice.model.toml");
  EXPECT_EQ(m.samples("k", "gpu"), 2u);
  m.load_text(kModelHead + cell, "again.model.toml");
  EXPECT_EQ(m.samples("k", "gpu"), 2u);
  ASSERT_EQ(m.rows().size(), 1u);
}

// Found by tests/fuzz/cost_model_fuzz: a cell without samples took part in the model (it made a
// one-size pair look like two) but was not saved, so the model predicted differently once saved.
TEST(CostModel, ACellWithoutSamplesIsSkipped) {
  CostModel m;
  const std::string cells =
      "[[cell]]\nkernel = 'k'\nfootprint = '0x1'\nsize = 1.0\ncount = 0\nsamples = []\n"
      "[[cell]]\nkernel = 'k'\nfootprint = '0x2'\nsize = 2.0\ncount = 1\nsamples = [2.0]\n";
  m.load_text(kModelHead + cells, "empty.model.toml");
  EXPECT_EQ(m.rows().size(), 1u);
  Prediction p = m.predict("k", "gpu", 3, 4.0);
  EXPECT_EQ(p.source, Prediction::Source::regression) << "one size seen: scaled linearly";
  EXPECT_DOUBLE_EQ(p.seconds, 4.0);
}

// Found by tests/fuzz/cost_model_fuzz: finite samples near the largest double made the median
// (the mean of the middle two) infinite; a model file holds durations up to 1e9 s. And a
// footprint is hexadecimal digits, not whatever stoull skips (spaces, a sign).
TEST(CostModel, AbsurdSamplesAndFootprintsAreRefused) {
  auto refused = [](const std::string& cell, const std::string& what) {
    CostModel m;
    try {
      m.load_text(kModelHead + cell, "bad.model.toml");
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_TRUE(m.rows().empty());
      return;
    }
    ADD_FAILURE() << "loaded: " << cell;
  };
  const std::string head = "[[cell]]\nkernel = 'k'\nsize = 1.0\ncount = 2\n";
  refused(head + "footprint = '0x1'\nsamples = [1.7e308, 1.7e308]\n", "at most 1e9");
  refused(head + "footprint = '0x1'\nsamples = [inf]\n", "non-negative numbers of seconds");
  refused(head + "footprint = '0x1'\nsamples = [nan]\n", "non-negative numbers of seconds");
  refused(head + "footprint = '0x1'\nsamples = [-0.5]\n", "non-negative numbers of seconds");
  refused(head + "footprint = ' -0x1'\nsamples = [1.0]\n", "' -0x1' is not hexadecimal");
  refused(head + "footprint = '0x'\nsamples = [1.0]\n", "'0x' is not hexadecimal");
  refused(head + "footprint = '0x10000000000000000'\nsamples = [1.0]\n", "is not hexadecimal");
  // Found by tests/fuzz/cost_model_fuzz: an integer key given a float (version = 1e308) went
  // through TOML++'s float-to-integer conversion, undefined beyond int64; integers only.
  try {
    CostModel m;
    m.load_text("format = 'hcr-cost-model'\nversion = 1e308\narch = 'gpu'\n", "float.model.toml");
    ADD_FAILURE() << "version = 1e308 loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("model format version not an integer"), std::string::npos)
        << e.what();
  }
  refused("[[cell]]\nkernel = 'k'\nfootprint = '0x1'\nsize = 1.0\ncount = 1e300\nsamples = [1.0]\n",
          "a cell needs kernel, footprint, size, count, samples");
  CostModel m;
  m.load_text(kModelHead + head + "footprint = 'FF'\nsamples = [1e9]\n", "ok.model.toml");
  EXPECT_EQ(m.predict("k", "gpu", 0xff, 1).seconds, 1e9);
}

// ---- caps --------------------------------------------------------------------------------------

// One cell's text: kernel, footprint, its last sample's stamp (0: none written).
std::string cell_text(const std::string& kernel, uint64_t footprint, int64_t updated) {
  char hex[20];
  std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(footprint));
  std::string t = "[[cell]]\nkernel = '" + kernel + "'\nfootprint = '0x" + hex +
                  "'\nsize = " + std::to_string(footprint + 1) + ".0\ncount = 1\nsamples = [0.5]\n";
  if (updated > 0) t += "updated = " + std::to_string(updated) + "\n";
  return t;
}

// "k<i>" (built in two steps: GCC 12 warns wrongly of "k" + std::to_string(i), -Wrestrict).
std::string kname(uint64_t i) {
  std::string s = "k";
  s += std::to_string(i);
  return s;
}

// The footprints of `kernel` a model holds.
std::set<uint64_t> footprints(const CostModel& m, const std::string& kernel) {
  std::set<uint64_t> out;
  for (auto& r : m.rows())
    if (r.kernel == kernel) out.insert(r.footprint);
  return out;
}

// A file grown far beyond the caps (written before them, or by hand) loads its most recently
// updated cells only, says so naming the file, and a save of what loaded keeps the caps.
TEST(CostModel, AFileOfFarMoreCellsThanTheCapsLoadsTheNewest) {
  // One kernel, 4 x its cap, the stamps in shuffled order: the newest kMaxCellsPerKernel stay.
  const size_t n = 4 * kMaxCellsPerKernel;
  std::vector<uint64_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  std::string text = kModelHead;
  for (uint64_t fp : order) text += cell_text("k", fp, 1'000'000 + static_cast<int64_t>(fp));
  CostModel m;
  std::vector<std::string> warnings;
  m.load_text(text, "grown.model.toml", &warnings);
  std::set<uint64_t> want;
  for (uint64_t fp = n - kMaxCellsPerKernel; fp < n; ++fp) want.insert(fp);
  EXPECT_EQ(footprints(m, "k"), want);
  ASSERT_EQ(warnings.size(), 1u);
  const std::string said = "grown.model.toml: " + std::to_string(n) + " cells, more than";
  EXPECT_NE(warnings[0].find(said), std::string::npos) << warnings[0];
  EXPECT_TRUE(m.needs_rewrite("gpu"));

  // Many kernels, each within its cap, together beyond the architecture's: the newest
  // kMaxCellsPerArch over all kernels stay (stamps interleave the kernels).
  const size_t kernels = kMaxCellsPerArch / 100 + 3;
  text = kModelHead;
  for (size_t k = 0; k < kernels; ++k)
    for (uint64_t fp = 0; fp < 100; ++fp)
      text += cell_text(kname(k), fp, static_cast<int64_t>(1 + fp * kernels + k));
  CostModel wide;
  wide.load_text(text, "wide.model.toml");
  const auto rows = wide.rows();
  EXPECT_EQ(rows.size(), kMaxCellsPerArch);
  const int64_t oldest_kept = static_cast<int64_t>(kernels * 100 - kMaxCellsPerArch) + 1;
  for (auto& r : rows) {
    const int64_t stamp =
        static_cast<int64_t>(1 + r.footprint * kernels) + std::stoll(r.kernel.substr(1));
    EXPECT_GE(stamp, oldest_kept) << r.kernel << " " << r.footprint << ": an older cell stayed";
  }

  // Saved, the model writes what it kept, stamps included: it loads back the same.
  for (auto* model : {&m, &wide}) {
    const std::string saved = model->save_text().at("gpu");
    CostModel back;
    std::vector<std::string> none;
    back.load_text(saved, "saved.model.toml", &none);
    EXPECT_TRUE(none.empty()) << none.front();
    EXPECT_EQ(back.rows().size(), model->rows().size());
    EXPECT_EQ(back.save_text().at("gpu"), saved);
  }

  // Without stamps (a file of an hcr before them), the later cells of the file count as newer.
  text = kModelHead;
  for (uint64_t fp = 0; fp < n; ++fp) text += cell_text("k", fp, 0);
  CostModel legacy;
  legacy.load_text(text, "legacy.model.toml");
  EXPECT_EQ(footprints(legacy, "k"), want);
}

// Recording sizes never seen: beyond the caps the least recently updated cells go, in memory and
// so in the file; a size recorded again stays however old it first was.
TEST(CostModel, RecordingNewSizesEvictsTheLeastRecentlyUpdated) {
  CostModel m;
  const uint64_t n = 2 * kMaxCellsPerKernel;
  for (uint64_t fp = 0; fp < n; ++fp) {
    m.record("k", "gpu", fp, static_cast<double>(fp + 1), 1e-3);
    m.record("k", "gpu", 0, 1.0, 1e-3);  // footprint 0 is used all along
  }
  const std::set<uint64_t> kept = footprints(m, "k");
  EXPECT_EQ(kept.size(), kMaxCellsPerKernel);
  EXPECT_TRUE(kept.count(0)) << "the size in use was evicted";
  EXPECT_TRUE(kept.count(n - 1));
  EXPECT_FALSE(kept.count(1));
  EXPECT_EQ(*std::next(kept.begin()), n - kMaxCellsPerKernel + 1) << "not the newest that stayed";
  // Across kernels: the architecture's cap; the kernel measured first loses its cells first.
  const size_t kernels = kMaxCellsPerArch / kMaxCellsPerKernel;
  for (size_t k = 1; k <= kernels; ++k)
    for (uint64_t fp = 0; fp < kMaxCellsPerKernel; ++fp)
      m.record(kname(k), "gpu", fp, static_cast<double>(fp + 1), 1e-3);
  EXPECT_EQ(m.rows().size(), kMaxCellsPerArch);
  EXPECT_TRUE(footprints(m, "k").empty()) << "the least recently updated kernel stayed";
  EXPECT_EQ(footprints(m, kname(kernels)).size(), kMaxCellsPerKernel);
  const std::string text = m.save_text().at("gpu");
  size_t cells = 0;
  for (size_t at = text.find("[[cell]]"); at != std::string::npos;
       at = text.find("[[cell]]", at + 1))
    ++cells;
  EXPECT_EQ(cells, kMaxCellsPerArch);
}

// A file beyond what is parsed (kMaxModelParseBytes) is read up to its last cell boundary within
// that bound, with a warning naming it; the cells past it are not read.
TEST(CostModel, AHugeFileIsReadOnlyUpToTheParseBound) {
  std::string text = kModelHead;
  uint64_t fp = 0;
  while (text.size() <= kMaxModelParseBytes + (1 << 20))
    text += cell_text(kname(fp % 97), fp, static_cast<int64_t>(fp + 1)), ++fp;
  CostModel m;
  std::vector<std::string> warnings;
  const auto t0 = std::chrono::steady_clock::now();
  m.load_text(text, "huge.model.toml", &warnings);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("a %zu-byte model file of %llu cells loaded in %.3f s (%zu cells kept)\n",
              text.size(), static_cast<unsigned long long>(fp), seconds, m.rows().size());
  EXPECT_LE(m.rows().size(), kMaxCellsPerArch);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("huge.model.toml: " + std::to_string(text.size()) +
                             " bytes, more than the " + std::to_string(kMaxModelParseBytes)),
            std::string::npos)
      << warnings[0];
  EXPECT_TRUE(footprints(m, kname((fp - 1) % 97)).empty() ||
              !footprints(m, kname((fp - 1) % 97)).count(fp - 1))
      << "a cell past the bound was read";
  // Without a cell boundary within the bound, the file is refused, naming it.
  CostModel none;
  const std::string one_line = std::string(kModelHead) + "# " +
                               std::string(kMaxModelParseBytes, 'x') + "\n" + cell_text("k", 1, 1);
  try {
    none.load_text(one_line, "line.model.toml");
    ADD_FAILURE() << "loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("line.model.toml: "), std::string::npos) << e.what();
  }
  EXPECT_TRUE(none.rows().empty());
}

// What architecture a file holds (asked of every file when a directory loads) is read from its
// head, before the first table: not by parsing the whole of a file that may be huge. Whatever
// follows is not read.
TEST(CostModel, TheArchitectureOfAFileIsReadFromItsHead) {
  const std::string head = "format = 'hcr-cost-model'\nversion = 1\narch = 'gpu'\n";
  EXPECT_EQ(ModelFile::arch_of(head + "[[cell]]\nkernel = 'k'\n" + std::string(64, '\x01')),
            std::optional<std::string>("gpu"));
  // A line opening a table inside a multi-line value: read within the parse bound instead.
  EXPECT_EQ(ModelFile::arch_of("note = '''\n[x]\n'''\n" + head + "[[cell]]\nkernel = 'k'\n"),
            std::optional<std::string>("gpu"));
  EXPECT_EQ(ModelFile::arch_of("not toml ["), std::nullopt);
}

TEST(LinkModel, FileTextRoundTripByNodeNames) {
  LinkModel a;
  a.resize(3);
  for (uint64_t bytes : {4096ull, 1048576ull, 16777216ull}) {
    a.record(0, 1, bytes, 2e-5 + static_cast<double>(bytes) / 5e9);
    a.record(2, 0, bytes, 1e-5 + static_cast<double>(bytes) / 1e10);
  }
  const std::vector<std::string> names{"host", "gpu", "fpga"};
  auto links = a.measured(names);
  ASSERT_EQ(links.size(), 2u);
  std::string text = LinkModel::format(links);
  EXPECT_NE(text.find("format = 'hcr-link-model'"), std::string::npos) << text;
  auto again = LinkModel::parse(text, "links.toml");
  ASSERT_EQ(again.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(again[i].from, links[i].from);
    EXPECT_EQ(again[i].to, links[i].to);
    EXPECT_EQ(again[i].latency, links[i].latency);
    EXPECT_EQ(again[i].bandwidth, links[i].bandwidth);
  }
  // Declared in a model whose nodes come in another order: matched by name.
  LinkModel b;
  b.resize(3);
  b.declare(again, {"host", "fpga", "gpu"});
  EXPECT_DOUBLE_EQ(b.predict(0, 2, 1 << 20), a.predict(0, 1, 1 << 20));
  EXPECT_DOUBLE_EQ(b.predict(1, 0, 1 << 20), a.predict(2, 0, 1 << 20));
  EXPECT_EQ(b.link(0, 2).samples, 0u) << "declared, not measured";
}

// Found by tests/fuzz/cost_model_fuzz: a link file's inf latency made every copy to that node
// take forever, nan did not even survive a save, a tiny bandwidth made copies infinite.
TEST(LinkModel, ParseRefusesWhatBreaksPredictions) {
  auto refused = [](const std::string& link, const std::string& what) {
    try {
      LinkModel::parse("format = 'hcr-link-model'\nversion = 1\n[[link]]\nfrom = 'host'\n"
                       "to = 'gpu'\n" +
                           link,
                       "links.toml");
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("links.toml:", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "parsed: " << link;
  };
  refused("latency = inf\nbandwidth = 1e9\n", "latency must be");
  refused("latency = nan\nbandwidth = 1e9\n", "latency must be");
  refused("latency = -1.0\nbandwidth = 1e9\n", "latency must be");
  refused("latency = 1e-5\nbandwidth = 0.0\n", "bandwidth must be");
  refused("latency = 1e-5\nbandwidth = 1e-300\n", "bandwidth must be");
  refused("latency = 1e-5\nbandwidth = inf\n", "bandwidth must be");
  refused("latency = 1e-5\n", "incomplete link");
  try {
    LinkModel::parse("format = 'hcr-link-model'\nversion = 2\n", "links.toml");
    ADD_FAILURE() << "a foreign version parsed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("links.toml: not an hcr link model of version 1"),
              std::string::npos)
        << e.what();
  }
}

TEST(LinkModel, DeclaredThenMeasured) {
  LinkModel l;
  l.resize(2);
  l.declare(0, 1, 1e-5, 1e9);
  EXPECT_NEAR(l.predict(0, 1, 1000000), 1e-5 + 1e-3, 1e-9);
  EXPECT_EQ(l.predict(0, 1, 0), 0.0);
  // The real link: 20 us and 5 GB/s.
  for (uint64_t bytes : {4096ull, 65536ull, 1048576ull, 16777216ull, 4096ull, 1048576ull})
    l.record(0, 1, bytes, 2e-5 + static_cast<double>(bytes) / 5e9);
  auto link = l.link(0, 1);
  EXPECT_NEAR(link.bandwidth, 5e9, 5e9 * 0.02);
  EXPECT_NEAR(link.latency, 2e-5, 2e-6);
  EXPECT_EQ(link.samples, 6u);
  l.declare(0, 1, 1, 1);  // declared figures no longer override measurements
  EXPECT_NEAR(l.link(0, 1).bandwidth, 5e9, 5e9 * 0.02);
}

}  // namespace
}  // namespace hcr::sched
