// The arbiter's state machine (arbiter/src/arbitration.cpp), without sockets: own shares by
// weighted dominant-resource fairness, lending an idle tenant's devices, revoke -> release ->
// grant order, a stale release refused, a tenant that leaves returning its devices; 64 tenants of
// 128 devices each, arbitrated without delay.
#include <hcr/arbiter/arbitration.hpp>

#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>

namespace hcr::arbiter {
namespace {

using Ids = std::vector<uint32_t>;

std::vector<DeviceReport> sims(int n) {
  std::vector<DeviceReport> v;
  for (int i = 0; i < n; ++i) v.push_back({"sim/" + std::to_string(i), Kind::sim, 1u << 30, 1});
  return v;
}

// The last grant each tenant was sent.
struct Seen {
  std::map<TenantId, Grant> last;
  void take(Arbitration& a) {
    for (Grant& g : a.take_changes()) last[g.tenant] = g;
  }
};

// Releases every device `t` is asked to give up, with the seq of its last grant.
void release_all(Arbitration& a, Seen& s, TenantId t) {
  s.take(a);
  for (uint32_t d : a.releasing(t)) EXPECT_TRUE(a.released(t, d, s.last[t].seq));
  s.take(a);
}

TEST(Arbitration, AloneATenantHoldsEveryDevice) {
  Arbitration a;
  Seen s;
  const TenantId t = a.join(1, sims(4));
  s.take(a);
  EXPECT_EQ(a.held(t), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(a.own(t), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(s.last[t].held, (Ids{0, 1, 2, 3}));
  EXPECT_EQ(a.devices(), 4u);
}

TEST(Arbitration, ASecondTenantGetsItsShareOnlyOnceTheFirstReleasesIt) {
  Arbitration a;
  Seen s;
  const TenantId t1 = a.join(1, sims(4));
  s.take(a);
  const TenantId t2 = a.join(1, sims(4));
  s.take(a);
  // Equal weights: two devices each; t1 must first stop using two.
  EXPECT_EQ(a.own(t1).size(), 2u);
  EXPECT_EQ(a.own(t2).size(), 2u);
  EXPECT_EQ(a.releasing(t1).size(), 2u);
  EXPECT_EQ(a.held(t1).size(), 2u);
  EXPECT_TRUE(a.held(t2).empty()) << "granted before the holder released";
  EXPECT_EQ(s.last[t1].held, a.held(t1));
  release_all(a, s, t1);
  EXPECT_EQ(a.held(t2), a.own(t2));
  EXPECT_EQ(s.last[t2].held, a.own(t2));
  // Disjoint, and together every device.
  Ids all = a.held(t1);
  for (uint32_t d : a.held(t2)) {
    EXPECT_EQ(std::count(all.begin(), all.end(), d), 0);
    all.push_back(d);
  }
  EXPECT_EQ(all.size(), 4u);
}

TEST(Arbitration, OwnSharesFollowTheWeights) {
  Arbitration a;
  const TenantId heavy = a.join(3, sims(4));
  const TenantId light = a.join(1, sims(4));
  EXPECT_EQ(a.own(heavy).size(), 3u);
  EXPECT_EQ(a.own(light).size(), 1u);
}

TEST(Arbitration, DominantResourceNotDeviceCount) {
  // One CPU device (all 8 cores) and three GPUs: the CPU is one tenant's whole dominant share
  // (all the cores), as the three GPUs are the other's (all the GPU time and memory). A split
  // by device count (two and two) would give one tenant a dominant share of 1 and the other 2/3.
  std::vector<DeviceReport> node = {{"cpu/0", Kind::cpu, 0, 8},
                                    {"gpu/1", Kind::gpu, 16u << 30, 100},
                                    {"gpu/2", Kind::gpu, 16u << 30, 100},
                                    {"gpu/3", Kind::gpu, 16u << 30, 100}};
  Arbitration a;
  const TenantId t1 = a.join(1, node);
  const TenantId t2 = a.join(1, node);
  const Ids o1 = a.own(t1), o2 = a.own(t2);
  const bool t1_cpu = o1 == Ids{0};
  EXPECT_TRUE(t1_cpu ? o2 == (Ids{1, 2, 3}) : (o2 == Ids{0} && o1 == (Ids{1, 2, 3})))
      << "own shares " << o1.size() << " and " << o2.size();
}

TEST(Arbitration, AnIdleTenantsDevicesAreLentAndReclaimedInOrder) {
  Arbitration a;
  Seen s;
  const TenantId t1 = a.join(1, sims(4));
  const TenantId t2 = a.join(1, sims(4));
  release_all(a, s, t1);
  const Ids own2 = a.own(t2);
  // t1 busy, t2 idle: t2's devices go to t1, once t2 let them go.
  a.demand(t1, true);
  s.take(a);
  EXPECT_EQ(a.releasing(t2), own2);
  EXPECT_EQ(a.held(t1).size(), 2u);
  release_all(a, s, t2);
  EXPECT_EQ(a.held(t1), (Ids{0, 1, 2, 3}));
  EXPECT_TRUE(a.held(t2).empty());
  EXPECT_EQ(s.last[t1].own, a.own(t1)) << "lending does not move own shares";
  EXPECT_EQ(a.counters().lends, 2u);
  // t2 has work again: its devices are revoked from t1, and reach t2 only when t1 releases.
  a.demand(t2, true);
  s.take(a);
  EXPECT_EQ(a.releasing(t1), own2);
  EXPECT_TRUE(a.held(t2).empty());
  const uint64_t revoke_seq = s.last[t1].seq;
  // A release with a grant older than the revoke is refused (it answers an earlier one).
  EXPECT_FALSE(a.released(t1, own2[0], revoke_seq - 1));
  EXPECT_TRUE(a.held(t2).empty());
  // Released one by one: each goes to t2 as it comes.
  EXPECT_TRUE(a.released(t1, own2[0], revoke_seq));
  s.take(a);
  EXPECT_EQ(a.held(t2), (Ids{own2[0]}));
  EXPECT_TRUE(a.released(t1, own2[1], revoke_seq));
  s.take(a);
  EXPECT_EQ(a.held(t2), own2);
  EXPECT_EQ(s.last[t2].held, own2);
  EXPECT_FALSE(a.released(t1, own2[1], revoke_seq)) << "released twice";
}

TEST(Arbitration, ARevokeIsCalledOffWhenTheOwnerGoesIdleBeforeTheRelease) {
  Arbitration a;
  Seen s;
  const TenantId t1 = a.join(1, sims(2));
  const TenantId t2 = a.join(1, sims(2));
  release_all(a, s, t1);
  a.demand(t1, true);
  release_all(a, s, t2);  // t1 holds both
  ASSERT_EQ(a.held(t1).size(), 2u);
  a.demand(t2, true);
  s.take(a);
  ASSERT_EQ(a.releasing(t1).size(), 1u);
  a.demand(t2, false);  // idle again before t1 let go: t1 keeps it
  s.take(a);
  EXPECT_TRUE(a.releasing(t1).empty());
  EXPECT_EQ(a.held(t1).size(), 2u);
  EXPECT_EQ(s.last[t1].held.size(), 2u) << "t1 is told it may use it again";
}

TEST(Arbitration, ATenantThatLeavesReturnsItsDevicesAtOnce) {
  Arbitration a;
  Seen s;
  const TenantId t1 = a.join(1, sims(4));
  const TenantId t2 = a.join(1, sims(4));
  release_all(a, s, t1);
  a.demand(t1, true);
  release_all(a, s, t2);  // t1 holds all four, two of them borrowed
  a.demand(t2, true);
  s.take(a);
  ASSERT_EQ(a.releasing(t1).size(), 2u);
  a.leave(t1);  // died holding everything, releasing nothing
  s.take(a);
  EXPECT_EQ(a.held(t2), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(a.own(t2), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(a.counters().returned, 4u);
  EXPECT_EQ(a.tenants(), 1u);
  a.leave(t2);
  EXPECT_EQ(a.devices(), 0u);
}

TEST(Arbitration, ADeviceGoesOnlyToTenantsThatHaveIt) {
  Arbitration a;
  std::vector<DeviceReport> only_first = sims(3);
  only_first.push_back({"gpu/private", Kind::gpu, 1u << 30, 1});
  const TenantId t1 = a.join(1, only_first);
  const TenantId t2 = a.join(1, sims(3));
  a.demand(t2, true);  // t1 idle: only what t2 has can be lent to it
  for (uint32_t d : a.releasing(t1)) a.released(t1, d, 100);
  EXPECT_EQ(a.held(t2).size(), 3u);
  EXPECT_EQ(a.held(t1), (Ids{3}));  // its private device stays with it
}

TEST(Arbitration, ARevokeNotReleasedInTimeIsOverdue) {
  Arbitration a;
  Seen s;
  a.tick(100);
  const TenantId t1 = a.join(1, sims(2));
  a.tick(101);
  const TenantId t2 = a.join(1, sims(2));  // t1 must release one, from t = 101
  s.take(a);
  ASSERT_EQ(a.releasing(t1).size(), 1u);
  a.tick(105);
  EXPECT_TRUE(a.overdue(5).empty());
  a.tick(106.5);
  EXPECT_EQ(a.overdue(5), (std::vector<TenantId>{t1}));
  release_all(a, s, t1);
  EXPECT_TRUE(a.overdue(5).empty());
  EXPECT_EQ(a.held(t2).size(), 1u);
}

TEST(Arbitration, BadJoinsAreRefused) {
  Arbitration a;
  EXPECT_THROW(a.join(0, sims(1)), std::invalid_argument);
  std::vector<DeviceReport> twice = sims(2);
  twice[1].key = twice[0].key;
  EXPECT_THROW(a.join(1, twice), std::invalid_argument);
  EXPECT_EQ(a.tenants(), 0u);
}

// 64 tenants of 128 devices, the same 128 (shared) or each its own (distinct): joins, lending to
// busy tenants and back, with every revoked device released as tenants do. "" when every check
// held, else the first that did not.
std::string at_scale(bool shared) {
  constexpr int kTenants = 64, kKeys = 128;
  Arbitration a;
  Seen s;
  auto settle = [&] {
    for (bool any = true; any;) {
      s.take(a);
      any = false;
      for (auto& [t, g] : s.last)
        for (uint32_t d : a.releasing(t)) any = a.released(t, d, g.seq) || any;
    }
  };
  std::vector<TenantId> ids;
  for (int t = 0; t < kTenants; ++t) {
    std::vector<DeviceReport> v = sims(kKeys);
    std::string prefix = "t";  // distinct: each tenant's own keys
    prefix += std::to_string(t);
    prefix += '/';
    if (!shared)
      for (DeviceReport& d : v) d.key.insert(0, prefix);
    ids.push_back(a.join(1, std::move(v)));
    settle();
  }
  // Every device held by one tenant at most (shared: local index i is the same device for all).
  auto disjoint = [&] {
    std::set<std::pair<int, uint32_t>> seen;
    for (size_t i = 0; i < ids.size(); ++i)
      for (uint32_t d : a.held(ids[i]))
        if (!seen.insert({shared ? 0 : static_cast<int>(i), d}).second) return false;
    return true;
  };
  auto held_each = [&](size_t first, size_t last, size_t n) {
    for (size_t i = first; i < last; ++i)
      if (a.held(ids[i]).size() != n || !a.releasing(ids[i]).empty()) return false;
    return true;
  };
  const size_t own = shared ? kKeys / kTenants : kKeys;
  if (a.devices() != (shared ? 128u : 128u * kTenants)) return "devices in the pool";
  if (!held_each(0, kTenants, own) || !disjoint()) return "own shares, all idle";
  for (int t = 0; t < kTenants / 2; ++t) a.demand(ids[static_cast<size_t>(t)], true);
  settle();
  // Shared: the idle half's devices are lent to the busy half; distinct: nobody else has them.
  if (!held_each(0, kTenants / 2, shared ? 2 * own : own) ||
      !held_each(kTenants / 2, kTenants, shared ? 0 : own) || !disjoint())
    return "half of them busy";
  for (int t = 0; t < kTenants / 2; ++t) a.demand(ids[static_cast<size_t>(t)], false);
  settle();
  if (!held_each(0, kTenants, own) || !disjoint()) return "all idle again";
  a.leave(ids.back());
  settle();
  if (a.tenants() != kTenants - 1 || !disjoint()) return "one left";
  return "";
}

// In a child process, bounded: a pass that tried every tenant against every free device at each
// step took seconds per rebalance at 20 tenants of 128 devices of their own (hours here).
TEST(Arbitration, SixtyFourTenantsOf128DevicesEachAreArbitratedWithoutDelay) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(p[0]);
    std::string out;
    for (bool shared : {true, false}) {
      const std::string why = at_scale(shared);
      if (!why.empty()) out += std::string(shared ? "shared" : "distinct") + " keys: " + why + "; ";
    }
    out += "done";
    [[maybe_unused]] ssize_t n = ::write(p[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(p[1]);
  std::string got;
  pollfd pf{p[0], POLLIN, 0};
  char buf[256];
  for (ssize_t n = 1; n > 0;) {
    if (::poll(&pf, 1, 120000) <= 0) break;  // 120 s: far beyond the few ms it takes
    n = ::read(p[0], buf, sizeof buf);
    if (n > 0) got.append(buf, static_cast<size_t>(n));
  }
  ::close(p[0]);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(got, "done") << (got.empty() ? "not done within 120 s" : got);
}

}  // namespace
}  // namespace hcr::arbiter
