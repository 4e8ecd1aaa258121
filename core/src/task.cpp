// The runtime's task records (task_create, arguments, parameters, dependencies, waiting) and
// hcr::Task's builder over them; Runtime::submit (runtime.cpp) hands a built task to the engine.
#include "buffer_state.hpp"
#include "builtin_check.hpp"
#include "contexts/context_state.hpp"
#include "kernel_state.hpp"
#include "log_internal.hpp"
#include "node_pool.hpp"
#include "runtime_core.hpp"

#include <hcr/runtime.hpp>
#include <hcr/task.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace hcr::detail {

// ---- task records -------------------------------------------------------------------------------

TaskNode* task_create(KernelState* kernel) {
  if (kernel == nullptr)
    throw Error(ErrorCode::invalid_argument,
                "Task: a task needs a valid kernel, not an empty Kernel handle");
  if (!kernel->rt->alive())  // the message is built only then: this is the submit path
    kernel->rt->check_alive("Task: kernel '" + kernel->name + "'");
  auto* t = new TaskNode;
  t->rt = kernel->rt.get();
  retain(kernel);
  t->kernel = kernel;
  return t;
}

// The same buffer twice in one task is allowed, whatever the modes (an in-place kernel given its
// input and output as one buffer): dependencies and data movement use the union of the modes, and
// every argument sees the same memory.
void task_add_arg(TaskNode* t, BufferState* b, Access mode) {
  // The checks are a few compares; messages are only built on failure (the submit path).
  auto call = [&] {
    return std::string("Task::") + access_name(mode) + ": argument " +
           std::to_string(t->args.size());
  };
  if (mode != Access::read && mode != Access::write && mode != Access::read_write &&
      mode != Access::commute && mode != Access::reduce)
    throw Error(ErrorCode::invalid_argument,
                "Task::arg: argument " + std::to_string(t->args.size()) + ": access mode " +
                    std::to_string(static_cast<int>(mode)) +
                    " is not read, write, read_write, commute or reduce");
  if (b == nullptr) throw Error(ErrorCode::invalid_argument, call() + " is an empty Buffer handle");
  if (b->rt.get() != t->rt) {
    if (!b->rt->alive())
      throw Error(ErrorCode::shutdown,
                  call() + " (a " + describe(*b) + ") belongs to a runtime that has ended");
    throw Error(ErrorCode::invalid_argument, call() + " (a " + describe(*b) +
                                                 ") belongs to another runtime than kernel '" +
                                                 t->kernel->name + "'");
  }
  if (mode == Access::reduce) return task_add_reduce(t, b);  // a private copy in its place
  retain(b);
  t->args.push_back({b, mode});
}

void task_add_scratch(TaskNode* t, DType dtype, size_t rows, size_t cols) {
  const size_t position = t->args.size() + t->scratch.size();
  auto call = [&] { return "Task::scratch: argument " + std::to_string(position); };
  const size_t esize = dtype_size(dtype);
  if (esize == 0)
    throw Error(ErrorCode::invalid_argument,
                call() + ": unknown dtype " + std::to_string(static_cast<int>(dtype)));
  uint64_t bytes = 0;
  if (rows == 0 || cols == 0 || __builtin_mul_overflow(uint64_t{rows}, uint64_t{cols}, &bytes) ||
      __builtin_mul_overflow(bytes, uint64_t{esize}, &bytes) ||
      __builtin_add_overflow(t->bytes, bytes, &t->bytes))
    throw Error(ErrorCode::invalid_argument,
                call() + ": a workspace of " + std::to_string(rows) + "x" + std::to_string(cols) +
                    " " + std::string(dtype_name(dtype)) +
                    (rows == 0 || cols == 0 ? " is empty" : " is implausibly large"));
  t->scratch.push_back({static_cast<uint32_t>(position), dtype, rows, cols, bytes, nullptr});
  t->scratch_bytes += bytes;
}

void task_add_param(TaskNode* t, const void* data, size_t size, size_t align) {
  if (t->param_offsets.size() >= 64)
    throw Error(ErrorCode::invalid_argument, "Task::param: parameter " +
                                                 std::to_string(t->param_offsets.size()) +
                                                 " is one too many (at most 64)");
  size_t off = (t->params.size() + align - 1) / align * align;
  if (off + size > 0xffff)
    throw Error(ErrorCode::invalid_argument, "Task::param: a " + std::to_string(size) +
                                                 "-byte parameter after " + std::to_string(off) +
                                                 " bytes of them exceeds 64 KiB");
  t->params.resize(off + size);
  std::memcpy(t->params.data() + off, data, size);
  t->param_offsets.push_back(static_cast<uint32_t>(off));
}

void task_set_priority(TaskNode* t, int priority) noexcept {
  t->priority = t->user_priority = priority;
}

void task_pin(TaskNode* t, uint32_t device) {
  const uint32_t n = t->rt->device_count();
  if (device >= n)
    throw Error(ErrorCode::invalid_argument,
                "Task::on: device " + std::to_string(device) + " does not exist (the runtime has " +
                    std::to_string(n) + (n == 1 ? " device)" : " devices)"));
  t->pinned = static_cast<int32_t>(device);
}

void task_set_context(TaskNode* t, ContextState* context) {
  if (context == nullptr)
    throw Error(ErrorCode::invalid_argument, "Task::in: an empty Context handle");
  if (context->rt != t->rt)
    throw Error(ErrorCode::invalid_argument,
                "Task::in: context '" + context->name + "' belongs to another runtime");
  t->context = context;
}

// An empty Event stands for work that is already done (Event::ready() is true): after() ignores
// it, so that `Event last; ... Task(k).after(last)` chains need no special first step.
void task_add_dependency(TaskNode* t, TaskNode* before) {
  if (before == nullptr) return;
  if (before->rt != t->rt)
    throw Error(ErrorCode::invalid_argument,
                std::string("Task::after: the event is of a task of another runtime") +
                    (before->kernel ? " (kernel '" + before->kernel->name + "')" : std::string()));
  if (!before->submitted)
    throw Error(ErrorCode::invalid_argument, "Task::after: a task that was never submitted");
  retain(before);
  t->after.push_back(before);
}

bool task_done(const TaskNode* t) noexcept {
  return t->state.load(std::memory_order_acquire) != kPending;
}
void task_wait(const TaskNode* t) {
  if (t->state.load(std::memory_order_acquire) == kPending && t->rt != nullptr)
    t->rt->check_wait(t);
  wait_settled(t);
}
std::exception_ptr task_error(const TaskNode* t) noexcept {
  return t->state.load(std::memory_order_acquire) == kFailed ? t->error : nullptr;
}
int task_device(const TaskNode* t) noexcept { return t->device.load(std::memory_order_relaxed); }

const void* task_param(const TaskNode* t, const hcr_exec_context_t* ctx, size_t index,
                       size_t size) {
  // A device graph's node has no task record of its own: its parameters are those its launch
  // handed it (DeviceGraph::params).
  const auto* params = t != nullptr ? t->params.data() : static_cast<const std::byte*>(ctx->params);
  const size_t params_size = t != nullptr ? t->params.size() : ctx->params_size;
  const uint32_t* offsets = t != nullptr ? t->param_offsets.data() : ctx->param_offsets;
  const size_t num_params = t != nullptr ? t->param_offsets.size() : ctx->num_params;
  if (index >= num_params)
    throw Error(ErrorCode::invalid_argument, "parameter " + std::to_string(index) +
                                                 " requested; the task has " +
                                                 std::to_string(num_params));
  const size_t off = offsets[index];
  const bool last = index + 1 == num_params;
  const size_t end = last ? params_size : offsets[index + 1];
  auto refuse = [&](const char* why) {
    throw Error(ErrorCode::invalid_argument,
                "parameter " + std::to_string(index) + " holds " + std::to_string(end - off) +
                    " bytes" + (last ? "" : " (up to the next)") + "; " + std::to_string(size) +
                    " requested" + why +
                    ": Task::param passes a value's bytes unconverted, so read it as the type it "
                    "was given as (a float given as 2.0 is a double; give 2.0f)");
  };
  if (size > end - off) refuse("");
  // What lies beyond the value read may only be the zero padding that aligns the next parameter
  // (to a power of two dividing its offset): else a double given for a float would be read as its
  // low half, 0 for 2.0, without a word.
  if (size < end - off) {
    bool padding = !last;
    for (size_t i = off + size; padding && i < end; ++i) padding = params[i] == std::byte{0};
    bool aligns = false;
    for (size_t align = 1; padding && !aligns && align <= (end & (~end + 1)); align *= 2)
      aligns = (off + size + align - 1) / align * align == end;
    if (!aligns) refuse(", and the rest is not the padding before the next parameter");
  }
  return params + off;
}

void bad_arg_type(size_t index, DType have, DType want) {
  throw Error(ErrorCode::invalid_argument, "argument " + std::to_string(index) + " holds " +
                                               std::string(dtype_name(have)) + ", not " +
                                               std::string(dtype_name(want)));
}
void bad_arg_index(size_t index, size_t count) {
  throw Error(ErrorCode::invalid_argument, "argument " + std::to_string(index) +
                                               " requested; the task has " + std::to_string(count));
}

}  // namespace hcr::detail

namespace hcr {

using detail::TaskNode;

// ---- Task -----------------------------------------------------------------------------------

Task::Task(const Kernel& kernel) : t_(detail::task_create(kernel.state())) {}
Task::Task(Task&& o) noexcept : t_(std::exchange(o.t_, nullptr)) {}
Task& Task::operator=(Task&& o) noexcept {
  if (this != &o) {
    if (t_) detail::release(t_);
    t_ = std::exchange(o.t_, nullptr);
  }
  return *this;
}
Task::~Task() {
  if (t_) detail::release(t_);
}
TaskNode* Task::node_or_throw(const char* what) const {
  if (!t_)
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": the task is empty (already submitted, or moved from)");
  return t_;
}
Task& Task::arg(detail::BufferState* b, Access mode) {
  detail::task_add_arg(node_or_throw("Task::arg"), b, mode);
  return *this;
}
// Any int is a priority: higher runs earlier, negative ones after the default 0.
Task& Task::priority(int p) {
  detail::task_set_priority(node_or_throw("Task::priority"), p);
  return *this;
}
Task& Task::after(const Event& e) {
  detail::task_add_dependency(node_or_throw("Task::after"), e.node());
  return *this;
}
Task& Task::grid(uint64_t x, uint64_t y, uint64_t z) {
  detail::TaskNode* t = node_or_throw("Task::grid");
  if (x == 0 || y == 0 || z == 0)
    throw Error(ErrorCode::invalid_argument, "Task::grid: " + std::to_string(x) + "x" +
                                                 std::to_string(y) + "x" + std::to_string(z) +
                                                 ": every dimension must be at least 1");
  t->global_size[0] = x;
  t->global_size[1] = y;
  t->global_size[2] = z;
  return *this;
}
// block(0) lets the backend choose and a 0 in y or z counts as 1 (every backend agrees). A 0 in x
// beside a y or z above 1 is contradictory, and backends read it differently (OpenCL chooses,
// CUDA takes 1 x y x z): refused.
Task& Task::block(uint32_t x, uint32_t y, uint32_t z) {
  detail::TaskNode* t = node_or_throw("Task::block");
  if (x == 0 && (y > 1 || z > 1))
    throw Error(ErrorCode::invalid_argument,
                "Task::block: " + std::to_string(x) + "x" + std::to_string(y) + "x" +
                    std::to_string(z) +
                    ": x = 0 lets the backend choose the whole block, so y "
                    "and z must be 1");
  t->local_size[0] = x;
  t->local_size[1] = y;
  t->local_size[2] = z;
  return *this;
}
Task& Task::on(uint32_t device) {
  detail::task_pin(node_or_throw("Task::on"), device);
  return *this;
}
Task& Task::in(const Context& ctx) {
  detail::task_set_context(node_or_throw("Task::in"), ctx.state());
  return *this;
}
TaskNode* Task::release() noexcept { return std::exchange(t_, nullptr); }

}  // namespace hcr
