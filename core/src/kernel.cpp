// Kernel handles: adding implementations, and the trampoline that runs a C++ CPU implementation
// behind the C ABI's host-function interface.
#include "engine/device_graphs.hpp"
#include "kernel_state.hpp"
#include "runtime_core.hpp"
#include "task_node.hpp"

#include <hcr/kernel.hpp>

#include <cstdio>

namespace hcr {

namespace {

thread_local const detail::TaskNode* tl_running = nullptr;

// Runs a CpuFunction for a plugin. The task is the launch's host token: an exception is kept on
// the task unchanged (the Event rethrows it) and summarised for the plugin's error. A device
// graph's node (a tagged NodeToken) runs within its graph task, the running task its kernel sees;
// the exception is kept on the node's token (DeviceGraph::launch_error).
int cpu_trampoline(void* user_data, const hcr_exec_context_t* ctx, char* message,
                   size_t message_size) {
  auto* impl = static_cast<detail::KernelImpl*>(user_data);
  detail::NodeToken* const node = detail::node_token(ctx->host_token);
  auto* task = node != nullptr ? nullptr : static_cast<detail::TaskNode*>(ctx->host_token);
  struct Running {  // a kernel may run another inline (a plugin completing at once)
    const detail::TaskNode* outer = tl_running;
    explicit Running(const detail::TaskNode* t) noexcept { tl_running = t; }
    ~Running() { tl_running = outer; }
  } running(node != nullptr ? node->graph->task : task);
  try {
    TaskContext tc(ctx, task);
    impl->cpu(tc);
    return 0;
  } catch (...) {
    std::exception_ptr e = std::current_exception();
    std::snprintf(message, message_size, "%s", detail::what(e).c_str());
    if (node != nullptr) {
      node->error = e;
    } else if (task != nullptr) {
      task->error = e;
      task->kernel_threw = true;
    }
    return 1;
  }
}

detail::KernelState& checked(const detail::Ref<detail::KernelState>& s) {
  if (!s) throw Error(ErrorCode::invalid_argument, "use of an empty Kernel handle");
  if (!s->rt->alive()) s->rt->check_alive("kernel '" + s->name + "'");
  return *s;
}

// An implementation for no backend would never be offered to one: the task would fail later, at
// run time, with "no device", far from the mistake.
void check_api(const detail::KernelState& k, const std::string& api, const char* what) {
  if (api.empty())
    throw Error(ErrorCode::invalid_argument, "kernel '" + k.name + "': " + what +
                                                 " implementation for backend '': name the "
                                                 "backend it is for (\"cuda\", \"opencl\", ...)");
}

// Adds an implementation and makes devices that could not run the kernel ask again.
void add_impl(detail::KernelState& k, std::unique_ptr<detail::KernelImpl> impl) {
  std::lock_guard<std::mutex> lock(k.mutex);
  k.impls.push_back(std::move(impl));
  for (size_t d = 0; d < k.num_devices; ++d)
    if (k.devices[d].capability.load(std::memory_order_relaxed) == detail::Capability::no)
      k.devices[d].capability.store(detail::Capability::unknown, std::memory_order_relaxed);
  k.resolved.store(false, std::memory_order_release);
}

}  // namespace

const detail::TaskNode* detail::running_cpu_task() noexcept { return tl_running; }

const std::string& Kernel::name() const {
  if (!s_) throw Error(ErrorCode::invalid_argument, "use of an empty Kernel handle");
  return s_->name;
}

Kernel& Kernel::cpu(CpuFunction fn) {
  auto& k = checked(s_);
  if (!fn) throw Error(ErrorCode::invalid_argument, "kernel '" + k.name + "': empty CPU function");
  auto impl = std::make_unique<detail::KernelImpl>();
  impl->kind = HCR_IMPL_HOST_FUNCTION;
  impl->api = "host";
  impl->cpu = std::move(fn);
  impl->fn = &cpu_trampoline;
  impl->user_data = impl.get();
  add_impl(k, std::move(impl));
  return *this;
}

Kernel& Kernel::native(std::string api, hcr_kernel_fn fn, void* user_data) {
  auto& k = checked(s_);
  check_api(k, api, "a native");
  if (fn == nullptr)
    throw Error(ErrorCode::invalid_argument, "kernel '" + k.name + "': null native function");
  auto impl = std::make_unique<detail::KernelImpl>();
  impl->kind = HCR_IMPL_NATIVE_FUNCTION;
  impl->api = std::move(api);
  impl->fn = fn;
  impl->user_data = user_data;
  add_impl(k, std::move(impl));
  return *this;
}

Kernel& Kernel::source(std::string api, std::string text, std::string build_options,
                       std::string entry) {
  auto& k = checked(s_);
  check_api(k, api, "a source");
  if (text.empty())
    throw Error(ErrorCode::invalid_argument, "kernel '" + k.name + "': empty source");
  auto impl = std::make_unique<detail::KernelImpl>();
  impl->kind = HCR_IMPL_SOURCE;
  impl->api = std::move(api);
  impl->source = std::move(text);
  impl->build_options = std::move(build_options);
  impl->entry = std::move(entry);
  add_impl(k, std::move(impl));
  return *this;
}

Kernel& Kernel::binary(std::string api, std::string path, std::string build_options,
                       std::string entry) {
  auto& k = checked(s_);
  check_api(k, api, "a binary");
  if (path.empty())
    throw Error(ErrorCode::invalid_argument, "kernel '" + k.name + "': empty binary path");
  auto impl = std::make_unique<detail::KernelImpl>();
  impl->kind = HCR_IMPL_BINARY;
  impl->api = std::move(api);
  impl->binary_path = std::move(path);
  impl->build_options = std::move(build_options);
  impl->entry = std::move(entry);
  add_impl(k, std::move(impl));
  return *this;
}

}  // namespace hcr
