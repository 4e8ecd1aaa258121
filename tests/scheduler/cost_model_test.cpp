// The cost model on its own: convergence, outlier rejection, following a change, extrapolation to
// an unseen size, persistence (files and their text, the link file), and files it must refuse.
#include "../../scheduler/cost_model.hpp"
#include "../test_support.hpp"

#include <cmath>
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
  write("e.model.toml", "format = \"hcr-cost-model\"\nversion = 1\narch = \"y\"\n[[cell]]\n"
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
                       "to = 'gpu'\n" + link,
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
              std::string::npos) << e.what();
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
