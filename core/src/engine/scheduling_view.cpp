// What a scheduling policy sees of the engine (scheduling_view.hpp).
#include "scheduling_view.hpp"

#include "device_health.hpp"
#include "task_graph.hpp"
#include "../buffer_state.hpp"
#include "../contexts/context_state.hpp"
#include "../data/data_manager.hpp"
#include "../energy/energy_account.hpp"
#include "../kernel_state.hpp"

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <chrono>

namespace hcr::detail {

double SchedulingView::now() const noexcept {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t SchedulingView::bytes_to_fetch(sched::TaskRef t, sched::DeviceId d) const noexcept {
  const uint32_t node = devices_[d].info.memory_node;
  uint64_t bytes = 0;
  for (const ArgRec& a : t.node()->uargs)
    if (reads(a.access) && !data_.valid_or_arriving(*a.buffer, node)) bytes += a.buffer->bytes();
  return bytes;
}

void SchedulingView::bytes_to_fetch(sched::TaskRef t, sched::DeviceId count,
                                    uint64_t* bytes) const noexcept {
  std::fill(bytes, bytes + count, uint64_t{0});
  if (!data_.active()) return;  // every device works in host memory
  // Where each input is valid or on its way, read once; then a bit test per device.
  struct In {
    uint64_t where[2];
    uint64_t bytes;
  };
  boost::container::small_vector<In, 4> inputs;
  for (const ArgRec& a : t.node()->uargs)
    if (reads(a.access)) {
      In in{{0, 0}, a.buffer->bytes()};
      data_.presence(*a.buffer, in.where);
      inputs.push_back(in);
    }
  if (inputs.empty()) return;
  for (sched::DeviceId d = 0; d < count; ++d) {
    const uint32_t node = devices_.hot(d).node;
    uint64_t sum = 0;
    for (const In& in : inputs)
      if (!((in.where[node / 64] >> (node % 64)) & 1u)) sum += in.bytes;
    bytes[d] = sum;
  }
}

void SchedulingView::capable(sched::TaskRef t, sched::DeviceId count,
                             std::bitset<kMaxDevices>& out) const noexcept {
  out.reset();
  const TaskNode* n = t.node();
  if (!n->kernel) return;
  if (n->pinned >= 0) {
    if (static_cast<sched::DeviceId>(n->pinned) < count && t.can_run(n->pinned)) out.set(n->pinned);
    return;
  }
  // Bits first (the kernel's capable devices, the devices in scheduling), then the few checks
  // per remaining device: a decision over many devices reads two words, not a line per device.
  const KernelState& k = *n->kernel;
  const bool limited = data_.active();
  for (unsigned w = 0; w < 2 && w * 64 < count; ++w) {
    uint64_t bits = k.yes_bits[w].load(std::memory_order_acquire) & health_.usable_bits(w);
    if (count < (w + 1) * 64) bits &= (uint64_t{1} << (count - w * 64)) - 1;
    while (bits != 0) {
      const unsigned d = w * 64 + static_cast<unsigned>(__builtin_ctzll(bits));
      bits &= bits - 1;
      if (!limited || devices_.hot(d).node == 0 || n->bytes <= devices_.hot(d).limit) out.set(d);
    }
  }
  for (uint32_t x : n->excluded)  // devices that already failed it
    if (x < count) out.reset(x);
  if (n->context != nullptr)  // its context's devices only
    for (sched::DeviceId d = 0; d < count; ++d)
      if (out[d] && !n->context->has(d)) out.reset(d);
}

void SchedulingView::locate(const void* buffer, uint64_t valid[2],
                            uint64_t arriving[2]) const noexcept {
  data_.locate(*static_cast<const BufferState*>(buffer), valid, arriving);
}

double SchedulingView::plugin_estimate(sched::TaskRef t, sched::DeviceId d) const noexcept {
  const DeviceState& ds = devices_[d];
  const hcr_plugin_api_t* api = ds.plugin->api;
  TaskNode* n = t.node();
  if (api->estimate == nullptr || !n->kernel || !n->kernel->can_run(d)) return -1;
  // The same view of the arguments a launch would get, without data pointers.
  boost::container::small_vector<hcr_arg_t, 3> args;
  for (const ArgRec& a : n->args) {
    hcr_arg_t x{};
    x.struct_size = HCR_ARG_STRUCT_SIZE;
    x.dtype = static_cast<hcr_dtype_t>(a.buffer->dtype);
    x.access = abi_access(a.access);
    x.rows = a.buffer->rows;
    x.cols = a.buffer->cols;
    x.ld = a.buffer->cols;
    args.push_back(x);
  }
  hcr_launch_args_t la{};
  la.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
  la.device = ds.index;
  la.kernel = n->kernel->devices[d].handle;
  la.args = args.data();
  la.num_args = args.size();
  la.params = n->params.data();
  la.params_size = n->params.size();
  la.param_offsets = n->param_offsets.data();
  la.num_params = n->param_offsets.size();
  double seconds = -1;
  if (hcr_error_t* err = api->estimate(ds.plugin->handle, &la, &seconds)) {
    api->error_destroy(err);
    return -1;
  }
  return seconds;
}

uint64_t SchedulingView::submitted() const noexcept { return graph_.submitted(); }

double SchedulingView::idle_watts(sched::DeviceId d) const noexcept {
  return energy_.idle_watts(d);
}

}  // namespace hcr::detail
