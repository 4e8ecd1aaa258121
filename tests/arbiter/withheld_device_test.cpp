// A device the node arbiter withholds (gives to another process) sees no traffic from this
// runtime: no task, no copy in or out, no allocation — whatever the policy planned. Two runtimes
// over an arbiter on a thread of this process: one keeps its devices busy, the other (simulated
// devices with their own memory) runs a graph under each policy on the share it is granted.
#include "arbiter_support.hpp"

#include <string>

namespace hcr::test {
namespace {

// Two simulated devices of their own memory, the same keys as arbiter_sim's (d0, d1), timing only.
Config own_memory_sim(const std::string& socket, const std::string& policy) {
  Config c = arbiter_sim(2, socket);
  c.policy = policy;
  for (auto& [key, value] : c.backends[0].options)
    if (key.ends_with("host_memory")) value = "false";
  c.backends[0].options.push_back({"compute", "false"});  // timing only: copies are modelled
  return c;
}

constexpr uint64_t kRounds = 4;

void run_graph_beside_a_busy_tenant(const std::string& policy) {
  SCOPED_TRACE("policy " + policy);
  TempDir dir;
  const std::string sock = (dir.path() / "arbiter.sock").string();
  arbiter::ServerOptions o;
  o.socket = sock;
  ServerThread srv(o);

  Ledger la(1000000);
  Runtime a(arbiter_sim(2, sock));
  Kernel ka = ledger_kernel(a, la);
  std::atomic<bool> stop_a{false};
  std::thread fa([&] { feed_until(a, ka, stop_a, 1000000); });

  Runtime b(own_memory_sim(sock, policy));
  ASSERT_TRUE(b.stats().arbiter.joined);
  ASSERT_TRUE(eventually([&] { return b.stats().arbiter.held == 0; }))
      << "b, idle, lends both devices to the busy a";

  // Chains that read a shared input and update their own accumulator: every policy wants the
  // inputs where the chains run, and peft plans the graph whole (submitted while paused).
  Kernel step = b.kernel("work").cpu([](TaskContext&) {});
  std::vector<Buffer<float>> in, acc;
  for (int c = 0; c < 4; ++c) {
    in.push_back(b.buffer<float>(256, 256));
    acc.push_back(b.buffer<float>(256, 256));
  }
  // Several rounds, each a graph planned afresh (a plan made before a device was withheld, or
  // naming the device a round's first tasks cannot have, is what sent copies there).
  for (uint64_t round = 0; round < kRounds; ++round) {
    b.pause();
    for (int i = 0; i < 24; ++i)
      for (size_t c = 0; c < 4; ++c)
        b.submit(Task(step).read(in[c]).read(in[(c + 1) % 4]).read_write(acc[c]).param(i));
    b.resume();
    b.wait_all();
  }
  const RuntimeStats s = b.stats();
  stop_a = true;
  fa.join();

  EXPECT_EQ(s.failed, 0u);
  uint64_t ran = 0;
  for (size_t d = 0; d < s.devices.size(); ++d) {
    const DeviceCounters& c = s.devices[d];
    ran += c.tasks;
    if (c.tasks != 0) continue;
    EXPECT_EQ(c.bytes_in, 0u) << "device " << d << " ran nothing (withheld), yet data moved in";
    EXPECT_EQ(c.bytes_out, 0u) << "device " << d << " ran nothing (withheld), yet data moved out";
  }
  EXPECT_EQ(ran, 96u * kRounds) << "b ran its graphs on the share it was granted";
}

TEST(WithheldDevice, SeesNoCopyUnderPeft) { run_graph_beside_a_busy_tenant("peft"); }
TEST(WithheldDevice, SeesNoCopyUnderDmda) { run_graph_beside_a_busy_tenant("dmda"); }
TEST(WithheldDevice, SeesNoCopyUnderEager) { run_graph_beside_a_busy_tenant("eager"); }

}  // namespace
}  // namespace hcr::test
