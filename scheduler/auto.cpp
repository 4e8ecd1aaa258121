// "auto", the default policy name: resolved when the runtime starts, from its devices. A machine
// of one architecture gains nothing from predictions (any device runs anything as fast as any
// other): eager, the cheapest. Devices of several architectures: peft, which predicts where each
// task finishes first with its copies and what its outputs cost their readers.
#include <hcr/sched.hpp>

#include <algorithm>

namespace hcr::sched {

std::string_view default_policy(const std::vector<Device>& devices) {
  for (const Device& d : devices)
    if (d.arch != devices.front().arch) return "peft";
  return "eager";
}

namespace {
// Made without its devices (make_policy("auto") outside a runtime), it is eager.
const bool registered = [] {
  register_policy("auto", [](const Config& c) { return make_policy("eager", c); });
  return true;
}();
}  // namespace

}  // namespace hcr::sched
