// Reductions: reduce accesses become private copies at task building, and the copies are folded
// into their buffer by combine tasks before its next access of another mode (reductions.hpp).
#include "reductions.hpp"

#include <hcr/error.hpp>
#include <hcr/kernel.hpp>
#include <hcr/task.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace hcr::detail {

namespace {

const char* op_name(Reduction op) noexcept {
  switch (op) {
    case Reduction::sum: return "sum";
    case Reduction::min: return "min";
    case Reduction::max: return "max";
  }
  return "?";
}

// The built-in combine of `op` over T: destination (argument 0) op= every source (arguments 1...).
template <class T>
CpuFunction combine_fn(Reduction op) {
  auto each = [](TaskContext& ctx, auto f) {
    MatrixView<T> into = ctx.arg<T>(0);
    for (size_t i = 1; i < ctx.num_args(); ++i) {
      MatrixView<T> from = ctx.arg<T>(i);
      for (size_t r = 0; r < into.rows; ++r) {
        T* d = &into(r, 0);
        const T* s = &from(r, 0);
        for (size_t c = 0; c < into.cols; ++c) d[c] = f(d[c], s[c]);
      }
    }
  };
  switch (op) {
    case Reduction::sum:
      return [each](TaskContext& ctx) { each(ctx, [](T a, T b) { return a + b; }); };
    case Reduction::min:
      return [each](TaskContext& ctx) { each(ctx, [](T a, T b) { return b < a ? b : a; }); };
    case Reduction::max:
      return [each](TaskContext& ctx) { each(ctx, [](T a, T b) { return a < b ? b : a; }); };
  }
  return {};
}

template <class T>
T identity_of(Reduction op) {
  constexpr bool fp = std::numeric_limits<T>::has_infinity;
  switch (op) {
    case Reduction::sum: return T(0);
    case Reduction::min:
      return fp ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
    case Reduction::max:
      return fp ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
  }
  return T(0);
}

struct Builtin {
  CpuFunction combine;
  std::array<std::byte, 8> identity{};
};

template <class T>
Builtin builtin_of(Reduction op) {
  Builtin b{combine_fn<T>(op), {}};
  const T id = identity_of<T>(op);
  std::memcpy(b.identity.data(), &id, sizeof(T));
  return b;
}

}  // namespace

ReductionState& Reductions::state_of(BufferState& b) {
  if (ReductionState* s = b.reduction.load(std::memory_order_acquire)) return *s;
  auto fresh = std::make_unique<ReductionState>();
  ReductionState* expected = nullptr;
  if (b.reduction.compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel))
    return *fresh.release();
  return *expected;
}

void Reductions::declare(BufferState& b, Reduction op) {
  Builtin builtin;
  switch (b.dtype) {
    case DType::f32: builtin = builtin_of<float>(op); break;
    case DType::f64: builtin = builtin_of<double>(op); break;
    case DType::i32: builtin = builtin_of<int32_t>(op); break;
    case DType::i64: builtin = builtin_of<int64_t>(op); break;
    default:
      throw Error(ErrorCode::invalid_argument,
                  std::string("set_reduction(Reduction::") + op_name(op) + ") of a " + describe(b) +
                      ": the built-in reductions take f32, f64, i32 or i64 elements; declare "
                      "identity and combine kernels for others");
  }
  const std::string name =
      std::string("hcr_reduce_") + op_name(op) + "_" + std::string(dtype_name(b.dtype));
  Ref<KernelState> k = stages_.kernel(name);
  {
    // Made once per runtime, on the first buffer that declares it.
    std::lock_guard<std::mutex> lock(mutex_);
    bool bare;
    {
      std::lock_guard<std::mutex> klock(k->mutex);
      bare = k->impls.empty();
    }
    if (bare) Kernel(k).cpu(std::move(builtin.combine));
  }
  combine_reductions(b);  // what was contributed under the reduction declared before
  ReductionState& s = state_of(b);
  std::lock_guard<std::mutex> lock(s.mutex);
  s.identity_kernel = {};
  s.combine = std::move(k);
  s.arity = kBuiltinArity;
  s.identity = builtin.identity;
  s.zero_identity = std::all_of(s.identity.begin(), s.identity.end(),
                                [](std::byte x) { return x == std::byte{0}; });
}

void Reductions::declare(BufferState& b, KernelState* identity, KernelState* combine) {
  for (auto [k, what] : {std::pair{identity, "identity"}, {combine, "combine"}}) {
    if (k == nullptr)
      throw Error(ErrorCode::invalid_argument, "set_reduction of a " + describe(b) + ": the " +
                                                   what + " kernel is an empty Kernel handle");
    if (k->rt != b.rt)
      throw Error(ErrorCode::invalid_argument, "set_reduction of a " + describe(b) + ": the " +
                                                   what + " kernel '" + k->name +
                                                   "' belongs to another runtime");
  }
  combine_reductions(b);
  ReductionState& s = state_of(b);
  std::lock_guard<std::mutex> lock(s.mutex);
  s.identity_kernel = Ref<KernelState>::share(identity);
  s.combine = Ref<KernelState>::share(combine);
  s.arity = 2;
}

void task_add_reduce(TaskNode* t, BufferState* b) {
  ReductionState* s = b->reduction.load(std::memory_order_acquire);
  bool declared = s != nullptr;
  bool fill = false, zero = false;
  std::array<std::byte, 8> identity{};
  if (declared) {
    std::lock_guard<std::mutex> lock(s->mutex);
    declared = static_cast<bool>(s->combine);
    fill = !s->identity_kernel;
    zero = fill && s->zero_identity;
    identity = s->identity;
  }
  if (!declared)
    throw Error(ErrorCode::invalid_argument,
                "Task::reduce: argument " + std::to_string(t->args.size()) + " (a " + describe(*b) +
                    ") has no reduction: declare one first with Buffer::set_reduction "
                    "(hcr::Reduction::sum, min or max, or identity and combine kernels)");
  // Contiguous whatever `b` is (a tile of a wider matrix too): the combine reads both views.
  Ref<BufferState> copy = make_owned_buffer(b->rt, b->dtype, b->rows, b->cols, zero);
  if (fill && !zero)
    for (size_t i = 0, n = b->rows * b->cols; i < n; ++i)
      std::memcpy(copy->host + i * b->elem, identity.data(), b->elem);
  t->reduces.reserve(t->reduces.size() + 1);
  t->args.reserve(t->args.size() + 1);
  retain(b);
  t->reduces.push_back({b, copy.get()});
  t->args.push_back({copy.detach(), Access::read_write});
}

void Reductions::join(TaskNode& t) {
  for (size_t i = 0; i < t.reduces.size(); ++i) {
    BufferState& b = *t.reduces[i].target;
    if (b.detached.load(std::memory_order_acquire))
      throw Error(ErrorCode::invalid_argument,
                  "Runtime::submit: the reduce argument (a " + describe(b) +
                      ") no longer exists: the buffer was unpartitioned");
    b.lock.lock();
    const bool partitioned = b.partitioned;
    b.lock.unlock();
    if (partitioned)
      throw Error(ErrorCode::invalid_argument, "Runtime::submit: the reduce argument (a " +
                                                   describe(b) +
                                                   ") is partitioned: use its tiles, or "
                                                   "unpartition it first");
    for (size_t j = 0; j < i; ++j)
      if (t.reduces[j].target == &b)
        throw Error(ErrorCode::invalid_argument, "Runtime::submit: kernel '" + t.kernel->name +
                                                     "' reduces into the " + describe(b) +
                                                     " twice: one reduce argument per buffer");
    for (const ArgRec& a : t.args)
      if (a.buffer == &b)
        throw Error(ErrorCode::invalid_argument,
                    "Runtime::submit: kernel '" + t.kernel->name + "' reduces into the " +
                        describe(b) + " and also has it as " + access_name(a.access) +
                        " argument: a task sees the buffer's value or contributes to it, not both");
  }
  for (const ReduceRec& r : t.reduces) {
    ReductionState& s = *r.target->reduction.load(std::memory_order_acquire);
    Ref<KernelState> identity;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      identity = s.identity_kernel;
    }
    if (identity) {  // written before the task updates it: it waits for this one
      TaskNode* init = task_create(identity.get());
      task_add_arg(init, r.copy, Access::write);
      stages_.resolve(*identity);
      stages_.submit_made(init);
    }
    contribute(*r.target, Ref<BufferState>::share(r.copy));
  }
}

void Reductions::contribute(BufferState& target, Ref<BufferState> copy) {
  ReductionState& s = *target.reduction.load(std::memory_order_acquire);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.copies.push_back(std::move(copy));
    s.pending.store(true, std::memory_order_release);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!s.listed) {
    s.listed = true;
    listed_.push_back(Ref<BufferState>::share(&target));
  }
}

void Reductions::submit_combine(KernelState* k, BufferState* into,
                                std::span<BufferState* const> from) {
  TaskNode* t = task_create(k);
  task_add_arg(t, into, Access::read_write);
  for (BufferState* f : from) task_add_arg(t, f, Access::read);
  stages_.resolve(*k);
  stages_.submit_made(t);
}

// A tree rather than a chain: the combines of one level run at once, on whichever devices hold
// the copies, and only log_arity(n) of them stand between the last contribution and the value.
// Each folds up to arity - 1 sources into its first copy (the user's combine takes one source, the
// built-ins 15: 64 contributions take 4 combines, then one into the buffer); the last level folds
// what remains into the buffer.
void Reductions::combine(BufferState& b) {
  ReductionState* s = b.reduction.load(std::memory_order_acquire);
  if (s == nullptr) return;
  std::vector<Ref<BufferState>> copies;
  Ref<KernelState> k;
  size_t arity;
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    copies.swap(s->copies);
    s->pending.store(false, std::memory_order_release);
    k = s->combine;
    arity = s->arity;
  }
  if (copies.empty() || !k) return;
  std::vector<BufferState*> level;
  level.reserve(copies.size());
  for (auto& c : copies) level.push_back(c.get());
  while (level.size() >= arity) {
    std::vector<BufferState*> next;
    for (size_t i = 0; i < level.size(); i += arity) {
      const size_t end = std::min(level.size(), i + arity);
      if (end - i > 1)
        submit_combine(k.get(), level[i], std::span(level).subspan(i + 1, end - i - 1));
      next.push_back(level[i]);
    }
    level.swap(next);
  }
  submit_combine(k.get(), &b, level);
}

void Reductions::combine_all() {
  std::vector<Ref<BufferState>> listed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    listed.swap(listed_);
    for (auto& b : listed) b->reduction.load(std::memory_order_acquire)->listed = false;
  }
  for (auto& b : listed) combine(*b);
}

}  // namespace hcr::detail
