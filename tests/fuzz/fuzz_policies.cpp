// The policy registry as libhcr fills it, for config_fuzz: Config::parse checks [scheduler] policy
// against it, and the fuzz target does not link the policies (nor the runtime they need).
#include <hcr/sched.hpp>

namespace hcr::sched {
std::vector<std::string> policy_names() { return {"dmda", "dmdas", "eager", "random", "ws"}; }
}  // namespace hcr::sched
