// EnergyShare (energy_share.hpp).
#include "energy_share.hpp"

#include "../energy/energy_account.hpp"
#include "../engine/placement.hpp"
#include "../kernel_state.hpp"

#include <vector>

namespace hcr::detail {

void EnergyShare::attempt_ended(const AttemptRecord& r) noexcept {
  if (r.failed) return;
  TaskNode* t = r.task;
  const hcr_completion_info_t* info = r.info;
  const double joules =
      info != nullptr && info->struct_size >= HCR_COMPLETION_INFO_STRUCT_SIZE ? info->joules : -1;
  if (!t->footprint_valid) compute_footprint(t);
  thread_local std::vector<EnergyAccount::Sample> samples;
  samples.clear();
  const uint32_t d = r.device.info.id;
  energy_.task_done(d, t->kernel->id, t->footprint, t->size, r.seconds, joules, now_(), samples);
  if (!policy_learns_ || samples.empty()) return;
  sched::Policy* policy = placement_.policy();
  if (samples.size() == 1 && samples[0].kernel == t->kernel->id) {  // the task's own share
    const EnergyAccount::Sample& x = samples[0];
    policy->energy(x.kernel, t->kernel->name, x.footprint, x.size, x.device, x.joules);
    return;
  }
  // A measured meter's interval closes with the tasks of several kernels: their names by id.
  for (const EnergyAccount::Sample& x : samples)
    policy->energy(x.kernel, kernel_name_(x.kernel), x.footprint, x.size, x.device, x.joules);
}

}  // namespace hcr::detail
