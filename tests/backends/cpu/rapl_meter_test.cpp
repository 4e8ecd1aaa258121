// The CPU backend's energy meter on a fake powercap tree: package domains summed (subzones not
// counted twice), counters that wrap around unwrapped, unreadable domains left out, no readable
// domain no meter; and through a runtime, rt.stats() reports the package's joules as measured.
#include "rapl_meter.hpp"

#include "../../test_support.hpp"

#include <filesystem>
#include <fstream>

namespace hcr {
namespace {

namespace fs = std::filesystem;

struct FakePowercap {
  fs::path root;
  FakePowercap() {
    root = fs::temp_directory_path() /
           ("hcr-powercap-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~FakePowercap() { fs::remove_all(root); }
  static int& counter() {
    static int n = 0;
    return n;
  }
  void domain(const std::string& name, uint64_t uj, uint64_t range) {
    fs::create_directories(root / name);
    set(name, uj);
    std::ofstream(root / name / "max_energy_range_uj") << range << "\n";
  }
  void set(const std::string& name, uint64_t uj) {
    std::ofstream(root / name / "energy_uj") << uj << "\n";
  }
};

TEST(RaplMeter, SumsPackagesUnwrapsCountersAndSkipsWhatCannotBeRead) {
  FakePowercap p;
  p.domain("intel-rapl:0", 1'000'000, 10'000'000);
  p.domain("intel-rapl:1", 5'000'000, 10'000'000);
  p.domain("intel-rapl:0:0", 400'000, 10'000'000);  // a subzone (the cores): inside package 0
  fs::create_directories(p.root / "intel-rapl:2" / "energy_uj");  // unreadable: a directory
  fs::create_directories(p.root / "intel-rapl-mmio:0");           // another control type
  cpu::RaplMeter m(p.root);
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m.domains(), 2u);
  EXPECT_DOUBLE_EQ(m.read().joules, 0.0);
  p.set("intel-rapl:0", 3'500'000);  // +2.5 J
  p.set("intel-rapl:1", 5'500'000);  // +0.5 J
  p.set("intel-rapl:0:0", 900'000);  // not counted
  EXPECT_NEAR(m.read().joules, 3.0, 1e-9);
  p.set("intel-rapl:0", 9'900'000);  // +6.4 J
  EXPECT_NEAR(m.read().joules, 9.4, 1e-9);
  p.set("intel-rapl:0", 400'000);  // wrapped at 10 J: +0.1 + 0.4
  const cpu::RaplMeter::Reading r = m.read();
  EXPECT_NEAR(r.joules, 9.9, 1e-9);
  EXPECT_GT(r.watts, 0.0);
  fs::remove(p.root / "intel-rapl:1" / "energy_uj");  // gone for a while: adds nothing
  EXPECT_NEAR(m.read().joules, 9.9, 1e-9);
}

TEST(RaplMeter, NoReadableCounterIsNoMeter) {
  FakePowercap p;
  fs::create_directories(p.root / "intel-rapl:0" / "energy_uj");  // a directory, not a number
  EXPECT_TRUE(cpu::RaplMeter(p.root).empty());
  EXPECT_TRUE(cpu::RaplMeter(p.root / "absent").empty());
}

TEST(RaplMeter, TheCpuDeviceReportsThePackagesJoulesAsMeasured) {
  FakePowercap p;
  p.domain("intel-rapl:0", 2'000'000, 1ull << 32);
  Config c = test::cpu_config(2);
  c.backends[0].options.push_back({"powercap", p.root.string()});
  Runtime rt(c);
  Kernel k = rt.kernel("k").cpu([](TaskContext&) {});
  rt.submit(Task(k)).get();
  p.set("intel-rapl:0", 4'500'000);  // +2.5 J
  rt.submit(Task(k)).get();
  const RuntimeStats s = rt.stats();
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].energy_source, "measured");
  EXPECT_NEAR(s.devices[0].energy_joules, 2.5, 1e-6);

  // Partitions share one package counter: none of them claims it.
  Config parts = test::cpu_config(2);
  parts.backends[0].options.push_back({"powercap", p.root.string()});
  parts.backends[0].options.push_back({"partitions", "2"});
  Runtime split(parts);
  ASSERT_EQ(split.stats().devices.size(), 2u);
  for (const auto& d : split.stats().devices) EXPECT_EQ(d.energy_source, "none");

  Config off = test::cpu_config(2);
  off.backends[0].options.push_back({"powercap", "off"});
  Runtime none(off);
  EXPECT_EQ(none.stats().devices[0].energy_source, "none");
}

}  // namespace
}  // namespace hcr
