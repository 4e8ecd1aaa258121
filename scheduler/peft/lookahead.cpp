// The look ahead: each consumer's best execution per memory, and the copies to reach the others.
#include "lookahead.hpp"

#include <algorithm>
#include <bitset>
#include <climits>
#include <cmath>

namespace hcr::sched {

void LookaheadTable::fill(TaskRef t, Lookahead& out) const {
  TaskRef succ[kConsumers];
  bool data[kConsumers];
  const size_t n = std::min(t.successors(succ, data, kConsumers), kConsumers);
  if (n == 0) return;
  const DeviceId count = ctx_->device_count();
  const uint32_t nodes = std::min<uint32_t>(nodes_, static_cast<uint32_t>(out.by_node.size()));
  for (size_t i = 0; i < n; ++i) {
    if (!data[i]) continue;
    const TaskRef s = succ[i];
    const uint64_t bytes = passed_bytes(t, s);
    std::bitset<kMaxDevices> can;
    ctx_->capable(s, count, can);
    uint64_t can_words[2];
    words_of(can, can_words);
    ColdStart::ArchCosts costs;
    const KernelPairs& pairs = kernels_.of(s);
    cold_.costs(s, pairs, can_words, /*estimates=*/false, costs);
    // The consumer's best execution in each memory, then with the copy there from `t`.
    std::array<float, kNodeSlots> here;
    here.fill(INFINITY);
    bool known = false;
    for (DeviceId d = 0; d < count; ++d) {
      if (!can[d]) continue;
      const double exec = ColdStart::exec_on(pairs, costs, d);
      if (exec < 0 || loads_[d].node >= nodes) continue;
      here[loads_[d].node] = std::min(here[loads_[d].node], static_cast<float>(exec));
      known = true;
    }
    if (!known) continue;
    // Copying from memory a to memory b (a != b): out of a (unless host) + into b (unless
    // host). The two cheapest (execution + copy in) over all memories, for "anywhere else".
    double v1 = INFINITY, v2 = INFINITY;
    uint32_t m1 = UINT32_MAX;
    for (uint32_t m = 0; m < nodes; ++m) {
      if (!std::isfinite(here[m])) continue;
      const double v = here[m] + (m == 0 ? 0 : links_.predict(0, m, bytes));
      if (v < v1) {
        v2 = v1;
        v1 = v;
        m1 = m;
      } else if (v < v2) {
        v2 = v;
      }
    }
    for (uint32_t m = 0; m < nodes; ++m) {
      const double away = (m == 0 ? 0 : links_.predict(m, 0, bytes)) + (m1 == m ? v2 : v1);
      const double oct = std::min(static_cast<double>(here[m]), away);
      if (std::isfinite(oct)) out.by_node[m] = std::max(out.by_node[m], static_cast<float>(oct));
    }
    out.any = true;
  }
}

uint64_t LookaheadTable::passed_bytes(TaskRef from, TaskRef to) {
  uint64_t bytes = 0;
  for (size_t i = 0, nf = from.arg_count(); i < nf; ++i) {
    const TaskArg a = from.arg(i);
    if (!writes(a.access)) continue;
    for (size_t j = 0, nt = to.arg_count(); j < nt; ++j) {
      const TaskArg b = to.arg(j);
      if (b.buffer == a.buffer && reads(b.access)) {
        bytes += a.bytes;
        break;
      }
    }
  }
  return bytes;
}

}  // namespace hcr::sched
