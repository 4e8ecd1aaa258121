// A tenant process for the two-process arbiter tests: a runtime of simulated devices joins the
// arbiter on argv[1], runs argv[2] tasks (argv[3] devices) and checks each ran exactly once.
// Prints "joined <0|1> held <n>" once the runtime is up, then "done <tasks> ok <0|1> connected
// <0|1> held <n> revoked <n> released <n>"; exits 0 when every task ran once and none failed.
#include "arbiter_support.hpp"

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s SOCKET TASKS DEVICES\n", argv[0]);
    return 2;
  }
  const int tasks = std::atoi(argv[2]);
  hcr::Runtime rt(hcr::test::arbiter_sim(std::atoi(argv[3]), argv[1]));
  hcr::test::Ledger l(static_cast<size_t>(tasks));
  hcr::Kernel k = hcr::test::ledger_kernel(rt, l);
  const hcr::ArbiterStats a = rt.stats().arbiter;
  std::printf("joined %d held %u\n", a.joined ? 1 : 0, a.held);
  std::fflush(stdout);
  hcr::test::feed(rt, k, 0, tasks);
  const hcr::RuntimeStats s = rt.stats();
  const bool ok = l.all_once() && s.failed == 0;
  std::printf("done %d ok %d connected %d held %u revoked %llu released %llu\n", tasks, ok ? 1 : 0,
              s.arbiter.connected ? 1 : 0, s.arbiter.held,
              static_cast<unsigned long long>(s.arbiter.revoked),
              static_cast<unsigned long long>(s.arbiter.released));
  std::fflush(stdout);
  return ok ? 0 : 1;
}
