// hcr::mpi's Cluster: registration, the version record every rank keeps alike, the inference of
// each task's sends and receives, and the progress thread that makes every MPI call.
#include "cluster_impl.hpp"

#include <hcr/log.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>

namespace hcr::mpi {

using hcr::detail::BufferState;

// ---- Task --------------------------------------------------------------------------------------

Task& Task::arg(BufferState* b, Access mode) {
  if (b == nullptr) hcr::detail::null_buffer();
  if (mode == Access::reduce)  // its private copies and combines are one process's
    throw Error(ErrorCode::unsupported,
                "hcr::mpi::Task: argument " + std::to_string(nargs_) +
                    " is a reduce access: reductions across ranks are not supported (reduce "
                    "through a local hcr::Task, or gather the partial results)");
  if (nargs_ < kArgs) args_[nargs_] = {b, mode};
  else more_args_.push_back({b, mode});
  ++nargs_;
  return *this;
}

Task& Task::param_bytes(const void* data, size_t size, size_t align) {
  if (align == 0 || (align & (align - 1)) != 0 || align > 16)
    throw Error(ErrorCode::invalid_argument, "hcr::mpi::Task::param: alignment " +
                                                 std::to_string(align) +
                                                 " is not a power of two up to 16");
  const size_t offset = (nbytes_ + align - 1) / align * align;
  const bool inline_fits =
      more_params_.empty() && nparams_ < kParams && offset + size <= kParamBytes;
  if (!inline_fits && more_params_.empty()) {  // from here on everything lives in the vectors
    more_bytes_.assign(bytes_.begin(), bytes_.begin() + static_cast<ptrdiff_t>(nbytes_));
    more_params_.assign(params_.begin(), params_.begin() + static_cast<ptrdiff_t>(nparams_));
  }
  if (inline_fits) {
    std::memcpy(bytes_.data() + offset, data, size);
    params_[nparams_] = {static_cast<uint32_t>(offset), static_cast<uint32_t>(size),
                         static_cast<uint32_t>(align)};
  } else {
    more_bytes_.resize(offset + size);
    std::memcpy(more_bytes_.data() + offset, data, size);
    more_params_.push_back(
        {static_cast<uint32_t>(offset), static_cast<uint32_t>(size), static_cast<uint32_t>(align)});
  }
  ++nparams_;
  nbytes_ = offset + size;
  return *this;
}

// ---- Cluster -----------------------------------------------------------------------------------

Cluster::Cluster(Runtime& rt, MPI_Comm comm, Options options)
    : impl_(std::make_unique<detail::ClusterImpl>(rt, comm, options)) {}

namespace {

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

// Cluster::wait_all, and the destructor's (which checks the ranks' agreement only when this rank
// registered or submitted something since the last check).
void wait_all_of(detail::ClusterImpl& impl, bool only_if_new) {
  impl.flush();
  impl.rt_.wait_all();
  impl.wait_settled();
  const std::exception_ptr differ = impl.check_agreement(only_if_new);
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> g(impl.mutex_);
    e = std::exchange(impl.first_error_, nullptr);
  }
  // The ranks' calls differ: that is what to fix, whatever failed on this rank because of it.
  if (differ && e)
    throw Error(ErrorCode::invalid_argument,
                what_of(differ) + " On this rank that left: " + what_of(e));
  if (differ) std::rethrow_exception(differ);
  if (e) std::rethrow_exception(e);
}

}  // namespace

Cluster::~Cluster() {
  try {
    wait_all_of(*impl_, /*only_if_new=*/true);
  } catch (const std::exception& e) {
    log::write(LogLevel::error, std::string("hcr::mpi::Cluster ends after an error: ") + e.what());
  }
  impl_->stop();
}

int Cluster::rank() const noexcept { return impl_->rank_; }
int Cluster::size() const noexcept { return impl_->size_; }
Runtime& Cluster::runtime() const noexcept { return impl_->rt_; }

uint64_t Cluster::distribute(BufferState* b, int owner) { return impl_->distribute(b, owner); }

int Cluster::owner(const BufferState* b) const {
  return impl_->entries_[impl_->lookup(b, "Cluster::owner")].owner;
}

int Cluster::owner_1d(size_t i, size_t j, size_t rows, size_t cols, bool by_rows) const noexcept {
  const size_t k = by_rows ? i + j * rows : i * cols + j;
  return static_cast<int>(k % static_cast<size_t>(impl_->size_));
}

void Cluster::check_grid(int p, int q) const {
  if (p < 1 || q < 1 || static_cast<int64_t>(p) * q > impl_->size_)
    throw Error(ErrorCode::invalid_argument,
                "Cluster::distribute_2d: a " + std::to_string(p) + "x" + std::to_string(q) +
                    " grid of ranks does not fit the " + std::to_string(impl_->size_) + " ranks");
}

Event Cluster::submit(Task& task) { return impl_->submit(task); }
void Cluster::flush() { impl_->flush(); }

void Cluster::wait_all() { wait_all_of(*impl_, /*only_if_new=*/false); }

Stats Cluster::stats() const {
  Stats s;
  {
    std::lock_guard<std::mutex> g(impl_->stats_mutex_);
    s = impl_->stats_;
  }
  s.tasks_run = impl_->tasks_run_.load(std::memory_order_relaxed);
  s.tasks_skipped = impl_->tasks_skipped_.load(std::memory_order_relaxed);
  return s;
}

namespace detail {

namespace {
std::string mpi_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(len));
}
// One step of the running hashes the ranks compare at wait_all (check_agreement): a few
// instructions per registration and per task argument, order-sensitive.
inline uint64_t mix(uint64_t h, uint64_t v) noexcept {
  h = (h ^ v) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 31);
}
}  // namespace

ClusterImpl::ClusterImpl(Runtime& rt, MPI_Comm comm, Options options) : rt_(rt), options_(options) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    throw Error(ErrorCode::unsupported,
                "hcr::mpi::Cluster: MPI is not initialised (call MPI_Init_thread first)");
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_SERIALIZED) {
    const char* name = level == MPI_THREAD_FUNNELED ? "MPI_THREAD_FUNNELED" : "MPI_THREAD_SINGLE";
    throw Error(ErrorCode::unsupported,
                std::string("hcr::mpi::Cluster: MPI was initialised with ") + name +
                    "; the layer's progress thread makes every MPI call, which needs "
                    "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (MPI_Init_thread)");
  }
  if (options_.tag_space != 0 && options_.tag_space < 2)
    throw Error(ErrorCode::invalid_argument,
                "hcr::mpi::Options::tag_space " + std::to_string(options_.tag_space) +
                    ": the layer needs two tags (0 for headers, 1 for payloads)");
  if (options_.max_sends_in_flight == 0)
    throw Error(ErrorCode::invalid_argument,
                "hcr::mpi::Options::max_sends_in_flight 0: at least one send must be allowed");
  if (options_.timeout.count() <= 0)
    throw Error(ErrorCode::invalid_argument, "hcr::mpi::Options::timeout " +
                                                 std::to_string(options_.timeout.count()) +
                                                 " ms: must be positive");
  // Our own communicator: its messages never match the application's, and its errors return
  // (MPI_ERRORS_RETURN) so that they fail accesses instead of aborting the job.
  int rc = MPI_Comm_dup(comm, &comm_);
  if (rc != MPI_SUCCESS)
    throw Error(ErrorCode::communication,
                "hcr::mpi::Cluster: MPI_Comm_dup failed: " + mpi_text(rc));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // The two tags must exist: the standard guarantees 32767, an emulated space at least 2.
  int* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found);
  if (found && ub != nullptr && *ub < kDataTag) {
    MPI_Comm_free(&comm_);
    throw Error(ErrorCode::unsupported,
                "hcr::mpi::Cluster: MPI_TAG_UB is " + std::to_string(*ub) + ", below 1");
  }
  stats_.peers.resize(static_cast<size_t>(size_));
  fifo_.resize(static_cast<size_t>(size_));
  thread_ = std::thread([this] { progress(); });
}

ClusterImpl::~ClusterImpl() { stop(); }

void ClusterImpl::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> g(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  MPI_Comm_free(&comm_);
  for (Entry& e : entries_) hcr::detail::release(e.buf);
  entries_.clear();
}

uint64_t ClusterImpl::distribute(BufferState* b, int owner) {
  if (b == nullptr) hcr::detail::null_buffer();
  if (owner < 0 || owner >= size_)
    throw Error(ErrorCode::invalid_argument, "Cluster::distribute: owner rank " +
                                                 std::to_string(owner) + " outside the " +
                                                 std::to_string(size_) + " ranks");
  if (index_.count(b))
    throw Error(ErrorCode::invalid_argument,
                "Cluster::distribute: the buffer is registered already (as buffer " +
                    std::to_string(entries_[index_[b]].id) + ")");
  auto shape = hcr::detail::buffer_shape(b);
  Entry e;
  e.elem = dtype_size(shape.dtype);
  e.rows = shape.rows;
  e.cols = shape.cols;
  e.ld = shape.ld;
  e.bytes = shape.rows * shape.cols * e.elem;
  if (e.rows > static_cast<size_t>(INT32_MAX) || e.cols * e.elem > static_cast<size_t>(INT32_MAX) ||
      (e.rows > 1 && e.ld != e.cols && e.ld * e.elem > static_cast<size_t>(INT32_MAX)) ||
      e.bytes > static_cast<size_t>(INT32_MAX))
    throw Error(ErrorCode::unsupported,
                "Cluster::distribute: a " + std::to_string(e.bytes) +
                    "-byte buffer: one message carries at most 2^31-1 bytes; partition it");
  hcr::detail::retain(b);
  e.buf = b;
  e.id = entries_.size();
  e.owner = owner;
  e.writer = owner;
  e.holders.assign(static_cast<size_t>(size_), 0);
  e.holders[static_cast<size_t>(owner)] = 1;
  registered_hash_ = mix(
      mix(mix(registered_hash_, static_cast<uint64_t>(owner)), (uint64_t{e.rows} << 32) | e.cols),
      e.elem);
  index_.emplace(b, static_cast<uint32_t>(entries_.size()));
  entries_.push_back(std::move(e));
  return entries_.back().id;
}

uint32_t ClusterImpl::lookup(const BufferState* b, const char* what) const {
  auto it = index_.find(b);
  if (it == index_.end()) {
    auto shape = hcr::detail::buffer_shape(b);
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": a " + std::to_string(shape.rows) + "x" +
                    std::to_string(shape.cols) + " " + std::string(dtype_name(shape.dtype)) +
                    " buffer that was never distributed (Cluster::distribute)");
  }
  return it->second;
}

// Every rank runs this for every task, in the same order, and so keeps the same record.
Event ClusterImpl::submit(Task& task) {
  const size_t n = task.nargs_;
  if (n > Task::kArgs + task.more_args_.size()) hcr::detail::null_buffer();  // (cannot happen)
  auto arg_at = [&](size_t i) -> const Task::Arg& {
    return i < Task::kArgs ? task.args_[i] : task.more_args_[i - Task::kArgs];
  };
  // Entries of the arguments, without allocating (a skipped task must stay cheap).
  constexpr size_t kInline = 16;
  uint32_t inline_idx[kInline];
  std::vector<uint32_t> more_idx;
  if (n > kInline) more_idx.resize(n);
  uint32_t* idx = n > kInline ? more_idx.data() : inline_idx;
  for (size_t i = 0; i < n; ++i) idx[i] = lookup(arg_at(i).buffer, "Cluster::submit");

  int exec = task.rank_;
  if (exec >= size_)
    throw Error(ErrorCode::invalid_argument, "Cluster::submit: on_rank(" + std::to_string(exec) +
                                                 ") outside the " + std::to_string(size_) +
                                                 " ranks");
  if (exec < 0) {
    // The owner of what it writes; several owners: the one that moves the fewest bytes (inputs
    // it lacks, plus written data that must later go home to another owner); ties: lowest rank.
    uint64_t best_cost = UINT64_MAX;
    for (size_t i = 0; i < n; ++i) {
      if (!writes(arg_at(i).access)) continue;
      const int r = entries_[idx[i]].owner;
      uint64_t cost = 0;
      for (size_t k = 0; k < n; ++k) {
        const Entry& e = entries_[idx[k]];
        if (reads(arg_at(k).access) && !e.holders[static_cast<size_t>(r)]) cost += e.bytes;
        if (writes(arg_at(k).access) && e.owner != r) cost += e.bytes;
      }
      if (cost < best_cost || (cost == best_cost && r < exec)) {
        best_cost = cost;
        exec = r;
      }
    }
    if (exec < 0) exec = n > 0 ? entries_[idx[0]].owner : 0;  // reads only: the first's owner
  }
  // What the ranks compare at wait_all: where each task runs, and what it accesses how.
  uint64_t h = mix(submitted_hash_, static_cast<uint64_t>(exec));
  for (size_t i = 0; i < n; ++i)
    h = mix(h, (uint64_t{idx[i]} << 2) | static_cast<uint64_t>(arg_at(i).access));
  submitted_hash_ = h;

  // Inputs the executor lacks come from the rank that wrote their latest version.
  for (size_t i = 0; i < n; ++i) {
    if (!reads(arg_at(i).access)) continue;
    Entry& e = entries_[idx[i]];
    if (e.holders[static_cast<size_t>(exec)]) continue;
    transfer(idx[i], e.writer, exec);
  }
  Event event;
  if (exec == rank_) {
    hcr::Task t(task.kernel_);
    for (size_t i = 0; i < n; ++i) t.arg(arg_at(i).buffer, arg_at(i).access);
    const bool spilled = !task.more_params_.empty();
    const std::byte* bytes = spilled ? task.more_bytes_.data() : task.bytes_.data();
    for (size_t p = 0; p < task.nparams_; ++p) {
      const Task::Param& q = spilled ? task.more_params_[p] : task.params_[p];
      t.param_bytes(bytes + q.offset, q.size, q.align);
    }
    if (task.priority_ != 0) t.priority(task.priority_);
    if (task.device_ >= 0) t.on(static_cast<uint32_t>(task.device_));
    event = rt_.submit(t);
  }
  for (size_t i = 0; i < n; ++i) {
    if (!writes(arg_at(i).access)) continue;
    Entry& e = entries_[idx[i]];
    // A buffer written twice by one task is one new version.
    if (e.writer == exec && e.holders[static_cast<size_t>(exec)] && e.written_by_task == seq_)
      continue;
    ++e.version;
    e.writer = exec;
    std::fill(e.holders.begin(), e.holders.end(), 0);
    e.holders[static_cast<size_t>(exec)] = 1;
    e.written_by_task = seq_;
  }
  ++seq_;
  if (exec == rank_) ++run_since_;
  (exec == rank_ ? tasks_run_ : tasks_skipped_).fetch_add(1, std::memory_order_relaxed);
  return event;
}

void ClusterImpl::flush() {
  for (uint32_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (!e.holders[static_cast<size_t>(e.owner)]) transfer(i, e.writer, e.owner);
  }
}

// ---- the ranks' agreement ----------------------------------------------------------------------
// Ranks whose calls differ (a buffer registered with another owner, a task placed elsewhere) would
// each run what they take for their own work, and the job would end as if nothing were wrong: a
// task run twice, or never. Each wait_all compares every rank's running hashes of what it
// registered and submitted (a few instructions per task, no allocation), in one small all-gather.

std::exception_ptr ClusterImpl::check_agreement(bool only_if_new) {
  if (agreement_failed_) return agreement_failed_;
  if (!disagreement_.empty())
    return std::make_exception_ptr(Error(ErrorCode::invalid_argument, disagreement_));
  const uint64_t registered = entries_.size();
  if (only_if_new && registered == agreed_registered_ && seq_ == agreed_submitted_) return nullptr;
  const uint64_t check = ++checks_;
  auto failed = [&](const std::string& why) {
    const std::string where =
        "hcr::mpi rank " + std::to_string(rank_) + ": wait_all #" + std::to_string(check) + ": ";
    agreement_failed_ = std::make_exception_ptr(Error(
        ErrorCode::communication, where + "the check that every rank made the same calls " + why));
    return agreement_failed_;
  };
  auto a = std::make_unique<Agreement>();
  a->mine = {registered, registered_hash_, seq_, submitted_hash_, run_since_};
  a->all.resize(Agreement::kFields * static_cast<size_t>(size_));
  if (size_ > 1 && !exchange(a.get(), 1)) {
    a.release();  // MPI may still write into it
    return failed("did not complete within " + std::to_string(2 * options_.timeout.count()) +
                  " ms (twice Options::timeout): a rank has not reached wait_all. Does one "
                  "compute longer than that, or did the ranks make different calls?");
  }
  if (size_ == 1) a->all = a->mine;
  if (a->error != MPI_SUCCESS) return failed("failed: " + mpi_text(a->error));
  auto field = [&](int r, int f) {
    return a->all[static_cast<size_t>(r) * Agreement::kFields + static_cast<size_t>(f)];
  };
  bool same = true;
  for (int r = 1; r < size_; ++r)
    for (int f : {Agreement::kRegistered, Agreement::kRegisteredHash, Agreement::kSubmitted,
                  Agreement::kSubmittedHash})
      same = same && field(r, f) == field(0, f);
  if (same) {
    agreed_registered_ = registered;
    agreed_submitted_ = seq_;
    run_since_ = 0;
    return nullptr;
  }
  // They differ (every rank knows it now): each sends what it registered since the last check, to
  // name the first buffer whose owner or shape differs.
  constexpr uint64_t kMaxCompared = uint64_t{1} << 16;  // per rank: Iallgatherv counts are ints
  auto b = std::make_unique<Agreement>();
  b->counts.resize(static_cast<size_t>(size_));
  b->displs.resize(static_cast<size_t>(size_));
  size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    const uint64_t since = field(r, Agreement::kRegistered) - agreed_registered_;
    b->counts[static_cast<size_t>(r)] = static_cast<int>(2 * std::min(since, kMaxCompared));
    b->displs[static_cast<size_t>(r)] = static_cast<int>(total);
    total += static_cast<size_t>(b->counts[static_cast<size_t>(r)]);
  }
  for (uint64_t id = agreed_registered_;
       id < registered &&
       b->mine.size() < static_cast<size_t>(b->counts[static_cast<size_t>(rank_)]);
       ++id) {
    const Entry& e = entries_[id];
    b->mine.push_back(static_cast<uint64_t>(e.owner) | (uint64_t{e.elem} << 32));
    b->mine.push_back((uint64_t{e.rows} << 32) | e.cols);
  }
  b->all.resize(total);
  Agreement* detail = b.get();
  if (!exchange(b.get(), 2)) {
    b.release();
    detail = nullptr;
  } else if (b->error != MPI_SUCCESS) {
    detail = nullptr;
  }
  disagreement_ = describe_disagreement(*a, detail);
  return std::make_exception_ptr(Error(ErrorCode::invalid_argument, disagreement_));
}

bool ClusterImpl::exchange(Agreement* a, int phase) {
  std::unique_lock<std::mutex> lock(mutex_);
  a->phase = phase;
  agreement_ = a;
  cv_.notify_all();  // the progress thread posts it
  // A rank reaches wait_all when its work is done, which includes failing a transfer that never
  // completes (Options::timeout after it could): the others wait for it twice that long.
  if (!agreement_cv_.wait_for(lock, 2 * options_.timeout, [&] { return a->done || stop_; }))
    return false;  // abandoned: agreement_ stays, so that nothing else is posted after it
  agreement_ = nullptr;
  return a->done;
}

namespace {
// "V on ranks 0, 2; W on rank 1": the ranks grouped by a value of theirs, shown by `show`.
template <class T, class Show>
std::string by_value(const std::vector<T>& values, Show show) {
  std::map<T, std::vector<size_t>> groups;
  for (size_t r = 0; r < values.size(); ++r) groups[values[r]].push_back(r);
  std::string out;
  for (auto& [value, ranks] : groups) {
    if (!out.empty()) out += "; ";
    out += show(value) + (ranks.size() == 1 ? " on rank " : " on ranks ");
    for (size_t i = 0; i < ranks.size(); ++i)
      out += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return out;
}
}  // namespace

std::string ClusterImpl::describe_disagreement(const Agreement& a, const Agreement* b) const {
  const size_t ranks = static_cast<size_t>(size_);
  auto values = [&](int f) {
    std::vector<uint64_t> v(ranks);
    for (size_t r = 0; r < ranks; ++r)
      v[r] = a.all[r * Agreement::kFields + static_cast<size_t>(f)];
    return v;
  };
  auto number = [](uint64_t v) { return std::to_string(v); };
  auto differ = [](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& x) { return x != v[0]; });
  };
  std::string out =
      "hcr::mpi rank " + std::to_string(rank_) + ": the ranks' calls differ (found by";
  out += " wait_all #" + std::to_string(checks_) + "; every rank must register the same buffers";
  out += " with the same owners and submit the same tasks, in the same order).";
  const std::vector<uint64_t> registered = values(Agreement::kRegistered),
                              submitted = values(Agreement::kSubmitted),
                              run = values(Agreement::kRun);
  if (differ(registered))
    out += " Buffers registered in all: " + by_value(registered, number) + ".";
  bool buffer_named = false;
  if (b != nullptr) {
    size_t common = SIZE_MAX;
    for (size_t r = 0; r < ranks; ++r)
      common = std::min(common, static_cast<size_t>(b->counts[r]) / 2);
    for (size_t i = 0; i < common && !buffer_named; ++i) {
      std::vector<uint64_t> owner(ranks);
      std::vector<std::string> shape(ranks);
      for (size_t r = 0; r < ranks; ++r) {
        const size_t at = static_cast<size_t>(b->displs[r]) + 2 * i;
        owner[r] = b->all[at] & 0xffffffffu;
        shape[r] = std::to_string(b->all[at + 1] >> 32) + "x" +
                   std::to_string(b->all[at + 1] & 0xffffffffu) + " of " +
                   std::to_string(b->all[at] >> 32) + "-byte elements";
      }
      if (!differ(owner) && !differ(shape)) continue;
      buffer_named = true;
      const uint64_t id = agreed_registered_ + i;
      out += " Buffer " + std::to_string(id);
      if (id < entries_.size()) {
        const Entry& e = entries_[id];
        out += " (" + std::to_string(e.rows) + "x" + std::to_string(e.cols) + " " +
               std::string(dtype_name(hcr::detail::buffer_shape(e.buf).dtype)) + " here)";
      }
      if (differ(owner))
        out += ": its owner is " +
               by_value(owner, [](uint64_t o) { return "rank " + std::to_string(o); });
      if (differ(shape))
        out += std::string(differ(owner) ? "; " : ": ") + "its shape is " +
               by_value(shape, [](const std::string& text) { return text; });
      out += ".";
    }
  }
  const uint64_t first = agreed_submitted_;
  if (differ(submitted)) {
    out += " Tasks submitted in all: " + by_value(submitted, number) + ".";
  } else {
    const uint64_t since = submitted[0] - first;
    if (since > 0 && !buffer_named && differ(values(Agreement::kSubmittedHash)))
      out += " Task" + std::string(since == 1 ? " " : "s ") + std::to_string(first) +
             (since == 1 ? "" : " to " + std::to_string(submitted[0] - 1)) +
             " (by submission order): the ranks run them elsewhere or give them other arguments "
             "(on_rank, buffers or access modes differ).";
    const uint64_t ran = std::accumulate(run.begin(), run.end(), uint64_t{0});
    if (ran != since)
      out += " Tasks run since " +
             (checks_ > 1 ? "wait_all #" + std::to_string(checks_ - 1) : "the Cluster began") +
             ": " + by_value(run, number) + " (" + std::to_string(ran) + " in all, for " +
             std::to_string(since) + " submitted): " +
             (ran > since ? "tasks ran on more than one rank." : "tasks ran on no rank.");
  }
  return out;
}

// Rank `from` sends entry i's latest version to `to`; every rank records that `to` holds it.
void ClusterImpl::transfer(uint32_t i, int from, int to) {
  Entry& e = entries_[i];
  e.holders[static_cast<size_t>(to)] = 1;
  if (rank_ != from && rank_ != to) return;
  auto* op = new Op;
  {
    std::lock_guard<std::mutex> g(mutex_);
    ++unsettled_;
  }
  op->cl = this;
  op->entry = i;
  op->version = e.version;
  op->id = e.id;
  op->owner = e.owner;
  op->dtype = hcr::detail::buffer_shape(e.buf).dtype;
  op->rows = e.rows;
  op->cols = e.cols;
  op->ld = e.ld;
  op->elem = e.elem;
  op->bytes = e.bytes;
  if (rank_ == from) {
    op->kind = Op::send;
    op->peer = to;
    op->header[0] = e.id;
    op->header[1] = e.version;
    op->header[2] = e.bytes;
    op->header[3] = 0;
    hcr::detail::buffer_acquire_async(e.buf, Access::read, &ClusterImpl::on_grant, op);
  } else {
    op->kind = Op::recv;
    op->peer = from;
    push(op, Event_::registered);  // before the grant, which may come at once
    hcr::detail::buffer_acquire_async(e.buf, Access::write, &ClusterImpl::on_grant, op);
  }
}

void ClusterImpl::on_grant(void* user, void* data, hcr::detail::TaskNode* token,
                           std::exception_ptr error) {
  auto* op = static_cast<Op*>(user);
  op->data = data;
  op->token = token;
  op->grant_error = std::move(error);
  op->cl->push(op, Event_::granted);
}

void ClusterImpl::push(Op* op, Event_ what) {
  {
    std::lock_guard<std::mutex> g(mutex_);
    inbox_.push_back({op, what});
  }
  cv_.notify_one();
}

void ClusterImpl::settle(Op* op) {
  if (op->settled) return;
  op->settled = true;
  bool none;
  {
    std::lock_guard<std::mutex> g(mutex_);
    none = --unsettled_ == 0;
  }
  if (none) settled_cv_.notify_all();
}

void ClusterImpl::wait_settled() {
  std::unique_lock<std::mutex> lock(mutex_);
  settled_cv_.wait(lock, [&] { return unsettled_ == 0 || stop_; });
}

void ClusterImpl::note_error(std::exception_ptr e) {
  std::lock_guard<std::mutex> g(mutex_);
  if (!first_error_) first_error_ = std::move(e);
}

// ---- the progress thread ----------------------------------------------------------------------

void ClusterImpl::progress() {
  using namespace std::chrono;
  constexpr microseconds kMinBackoff{10}, kMaxBackoff{1000};
  microseconds backoff = kMinBackoff;
  std::vector<std::pair<Op*, Event_>> events;
  for (;;) {
    events.clear();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (stop_) break;
      events.swap(inbox_);
    }
    for (auto& [op, what] : events) {
      if (what == Event_::registered) on_registered(op);
      else if (op->kind == Op::send) on_send_granted(op);
      else on_recv_granted(op);
    }
    post_agreement();
    start_sends();
    post_header_recv();
    const bool progressed = test_requests();
    check_timeouts();
    // Nothing outstanding (a send that just completed may have made room for a queued one):
    // sleep until asked for more.
    const auto asked = [&] {  // (mutex_ held)
      return stop_ || !inbox_.empty() || (agreement_ != nullptr && !agreement_->posted);
    };
    if (reqs_.empty() && send_q_.empty() && !any_parked()) {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, asked);
      backoff = kMinBackoff;
      continue;
    }
    if (progressed || !events.empty()) {
      backoff = kMinBackoff;
      continue;
    }
    // Waiting on MPI: poll with a backoff, waking early for new work.
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, backoff, asked);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  shutdown_requests();
}

// The agreement check the submitting thread asked for (check_agreement): one all-gather on the
// layer's communicator, completed with the other requests.
void ClusterImpl::post_agreement() {
  Agreement* a;
  {
    std::lock_guard<std::mutex> g(mutex_);
    a = agreement_;
    if (a == nullptr || a->posted) return;
    a->posted = true;
  }
  MPI_Request r;
  const int rc =
      a->phase == 1
          ? MPI_Iallgather(a->mine.data(), static_cast<int>(a->mine.size()), MPI_UINT64_T,
                           a->all.data(), static_cast<int>(a->mine.size()), MPI_UINT64_T, comm_, &r)
          : MPI_Iallgatherv(a->mine.data(), static_cast<int>(a->mine.size()), MPI_UINT64_T,
                            a->all.data(), a->counts.data(), a->displs.data(), MPI_UINT64_T, comm_,
                            &r);
  if (rc != MPI_SUCCESS) {
    {
      std::lock_guard<std::mutex> g(mutex_);
      a->done = true;
      a->error = rc;
    }
    agreement_cv_.notify_all();
    return;
  }
  add_request(r, Pending::agreement, nullptr, nullptr, a);
}

void ClusterImpl::on_registered(Op* op) {
  const Key key{op->peer, op->id, op->version};
  auto it = unmatched_.find(key);
  if (it == unmatched_.end()) {
    expected_.emplace(key, op);
    return;
  }
  Arrival* a = it->second;  // its header came first
  unmatched_.erase(it);
  a->op = op;
  op->arrival = a;
  if (a->state == Arrival::received) finish_arrival(op);
}

void ClusterImpl::on_recv_granted(Op* op) {
  op->granted = true;
  op->since = std::chrono::steady_clock::now();
  if (op->failed) {  // failed while it waited for its grant (no header can come any more)
    if (hcr::detail::TaskNode* token = std::exchange(op->token, nullptr))
      hcr::detail::buffer_release_async(token, op->failure);
    maybe_delete(op);
    return;
  }
  // A write access is not failed by earlier writers; should it be, the data is still consumed.
  if (op->grant_error) {
    op->discard = true;
    settle(op);
  } else {
    waiting_.push_back(op);
  }
  if (Arrival* a = op->arrival) {
    if (a->state == Arrival::queued) pump_fifo(op->peer);
    else if (a->state == Arrival::received) finish_arrival(op);
  }
}

// The receive's data (or its sender's failure) is in and the receive is granted: it ends.
void ClusterImpl::finish_arrival(Op* op) {
  Arrival* a = op->arrival;
  if (!op->granted || a == nullptr || a->state != Arrival::received) return;
  const bool usable = !op->failed && !op->discard;
  if (a->sender_failed) {
    if (usable) fail(op, a->failure);
  } else if (a->direct) {
    if (usable) complete_recv(op);
  } else if (usable && a->bytes != op->bytes) {
    // A rank whose calls differ from ours (not SPMD): said, rather than memory corrupted.
    fail(op, error_for(op, "rank " + std::to_string(a->src) + " sent " + std::to_string(a->bytes) +
                               " bytes for it instead of " + std::to_string(op->bytes) +
                               " (the ranks registered different "
                               "buffers)"));
  } else if (usable) {  // from the temporary into the (possibly strided) replica
    auto* dst = static_cast<std::byte*>(op->data);
    const size_t row = op->cols * op->elem;
    for (size_t r = 0; r < op->rows; ++r)
      std::memcpy(dst + r * op->ld * op->elem, a->temp + r * row, row);
    complete_recv(op);
  }
  std::free(a->temp);
  const bool freed = a->early;
  if (a->early) early_bytes_ -= a->bytes;
  delete a;
  op->arrival = nullptr;
  op->mpi_done = true;
  maybe_delete(op);
  if (freed)
    for (int s = 0; s < size_; ++s) pump_fifo(s);  // memory freed: parked payloads may go
}

void ClusterImpl::complete_recv(Op* op) {
  op->done = true;
  settle(op);
  if (hcr::detail::TaskNode* token = std::exchange(op->token, nullptr))
    hcr::detail::buffer_release_async(token, nullptr);
}

void ClusterImpl::fail(Op* op, std::exception_ptr e) {
  if (op->failed) return;
  note_error(e);
  op->failed = true;
  op->done = true;
  op->failure = e;
  settle(op);
  // Before its grant the token is not ours to read (the grant writes it): on_recv_granted
  // releases it with `failure` then.
  if (!op->granted) return;
  if (hcr::detail::TaskNode* token = std::exchange(op->token, nullptr))
    hcr::detail::buffer_release_async(token, e);
}

void ClusterImpl::maybe_delete(Op* op) {
  if (op->kind == Op::recv) {
    if (!(op->done || op->discard) || !op->mpi_done) return;
    std::erase(waiting_, op);
  } else if (op->reqs != 0) {
    return;
  }
  settle(op);
  delete op;
}

void ClusterImpl::on_send_granted(Op* op) {
  op->granted = true;
  if (op->grant_error) {
    // The data's writer failed here: the receiver is told (a header flagged failed, then the
    // failure's text in place of the payload).
    op->header[3] = 1;
    try {
      std::rethrow_exception(op->grant_error);
    } catch (const std::exception& x) {
      op->failure_text = x.what();
    } catch (...) {
      op->failure_text = "unknown error";
    }
    op->header[2] = op->failure_text.size();
  }
  send_q_.push_back(op);
}

void ClusterImpl::start_sends() {
  while (!send_q_.empty() && sends_in_flight_ < options_.max_sends_in_flight) {
    Op* op = send_q_.front();
    send_q_.pop_front();
    op->since = std::chrono::steady_clock::now();
    MPI_Request r;
    int rc = MPI_Isend(op->header, 4, MPI_UINT64_T, op->peer, kHeaderTag, comm_, &r);
    if (rc != MPI_SUCCESS) {
      fail(op, error_for(op, "MPI_Isend of a header to rank " + std::to_string(op->peer) +
                                 " failed: " + mpi_text(rc)));
      maybe_delete(op);
      continue;
    }
    add_request(r, Pending::send_header, op, nullptr);
    ++op->reqs;
    if (op->header[3] != 0)
      rc = MPI_Isend(op->failure_text.data(), static_cast<int>(op->failure_text.size()), MPI_BYTE,
                     op->peer, kDataTag, comm_, &r);
    else if (op->contiguous())
      rc =
          MPI_Isend(op->data, static_cast<int>(op->bytes), MPI_BYTE, op->peer, kDataTag, comm_, &r);
    else rc = MPI_Isend(op->data, 1, type_of(op), op->peer, kDataTag, comm_, &r);
    if (rc != MPI_SUCCESS) {
      fail(op, error_for(op, "MPI_Isend to rank " + std::to_string(op->peer) +
                                 " failed: " + mpi_text(rc)));
      continue;  // deleted when its header's send completes
    }
    add_request(r, Pending::send_payload, op, nullptr);
    ++op->reqs;
    ++sends_in_flight_;
  }
}

MPI_Datatype ClusterImpl::type_of(const Op* op) {
  auto [it, fresh] = types_.try_emplace(op->entry, MPI_DATATYPE_NULL);
  if (fresh) {
    MPI_Type_vector(static_cast<int>(op->rows), static_cast<int>(op->cols * op->elem),
                    static_cast<int>(op->ld * op->elem), MPI_BYTE, &it->second);
    MPI_Type_commit(&it->second);
  }
  return it->second;
}

void ClusterImpl::post_header_recv() {
  if (header_posted_ || expected_.empty()) return;
  MPI_Request r;
  int rc = MPI_Irecv(header_in_, 4, MPI_UINT64_T, MPI_ANY_SOURCE, kHeaderTag, comm_, &r);
  if (rc != MPI_SUCCESS) {
    fail_expected("MPI_Irecv of a header failed: " + mpi_text(rc));
    return;
  }
  header_posted_ = true;
  add_request(r, Pending::header, nullptr, nullptr);
}

// Nothing can be received any more: every receive waiting for a header fails.
void ClusterImpl::fail_expected(const std::string& why) {
  for (auto& [key, op] : expected_)
    fail(op, error_for(op, "waiting for rank " + std::to_string(op->peer) + ": " + why));
}

void ClusterImpl::on_header(int src) {
  header_posted_ = false;
  auto* a = new Arrival;
  a->src = src;
  a->id = header_in_[0];
  a->version = header_in_[1];
  a->bytes = header_in_[2];
  a->sender_failed = header_in_[3] != 0;
  const Key key{src, a->id, a->version};
  auto it = expected_.find(key);
  if (it != expected_.end()) {
    a->op = it->second;
    a->op->arrival = a;
    expected_.erase(it);
  } else {
    unmatched_.emplace(key, a);
  }
  fifo_[static_cast<size_t>(src)].push_back(a);
  pump_fifo(src);
}

// Posts the payload receives of `src` in the order of its headers (MPI keeps one source's
// messages of one tag in order, so the k-th payload is the k-th header's).
void ClusterImpl::pump_fifo(int src) {
  auto& q = fifo_[static_cast<size_t>(src)];
  while (!q.empty()) {
    Arrival* a = q.front();
    Op* op = a->op;
    int rc;
    MPI_Request r;
    if (a->sender_failed) {  // a failure's text, or bytes that fit nothing here: always taken
      a->temp = static_cast<std::byte*>(std::malloc(a->bytes + 1));
      rc = MPI_Irecv(a->temp, static_cast<int>(a->bytes), MPI_BYTE, src, kDataTag, comm_, &r);
    } else if (op != nullptr && op->granted && !op->failed && !op->discard &&
               a->bytes == op->bytes) {
      a->direct = true;
      if (op->contiguous())
        rc = MPI_Irecv(op->data, static_cast<int>(op->bytes), MPI_BYTE, src, kDataTag, comm_, &r);
      else rc = MPI_Irecv(op->data, 1, type_of(op), src, kDataTag, comm_, &r);
    } else if (const bool fits =
                   early_bytes_ == 0 || early_bytes_ + a->bytes <= options_.early_arrival_cap;
               fits || must_let_in(q)) {
      a->temp = static_cast<std::byte*>(std::malloc(std::max<size_t>(a->bytes, 1)));
      a->early = true;
      early_bytes_ += a->bytes;
      {
        std::lock_guard<std::mutex> g(stats_mutex_);
        ++stats_.early_arrivals;
        if (!fits) ++stats_.over_cap;
        stats_.early_bytes_peak = std::max<uint64_t>(stats_.early_bytes_peak, early_bytes_);
      }
      rc = MPI_Irecv(a->temp, static_cast<int>(a->bytes), MPI_BYTE, src, kDataTag, comm_, &r);
    } else {
      if (!a->parked) {
        a->parked = true;
        a->parked_since = std::chrono::steady_clock::now();
      }
      return;  // parked: until memory frees, its receive is granted, or must_let_in
    }
    q.pop_front();
    a->state = Arrival::receiving;
    if (rc != MPI_SUCCESS) {
      payload_done(a, rc);
      continue;
    }
    add_request(r, Pending::payload, nullptr, a);
  }
}

// Whether the parked payload at the head of `q` must come in over the cap: a receive behind it
// (MPI gives one source's payloads in order) is ready and would otherwise wait for it, perhaps
// forever (the head's own receive may wait for that one's data); or it has waited its grace.
bool ClusterImpl::must_let_in(const std::deque<Arrival*>& q) const {
  const Arrival* head = q.front();
  if (!head->parked) return false;
  const auto waited = std::chrono::steady_clock::now() - head->parked_since;
  if (waited >= options_.early_arrival_grace) return true;
  // Only from the periodic pass, after a while: the head's own receive is often granted a moment
  // after one behind it (grants come from several threads), and then it goes straight in.
  if (!periodic_ || waited < std::chrono::milliseconds(10)) return false;
  for (size_t i = 1; i < q.size(); ++i) {
    const Op* op = q[i]->op;
    if (op != nullptr && op->granted && !op->failed && !op->discard) return true;
  }
  return false;
}

bool ClusterImpl::any_parked() const {
  for (const auto& q : fifo_)
    if (!q.empty()) return true;
  return false;
}

// A payload (or a failure's text) is in, or its receive failed with `err`.
void ClusterImpl::payload_done(Arrival* a, int err) {
  a->state = Arrival::received;
  if (err != MPI_SUCCESS) {
    a->sender_failed = true;
    a->direct = false;
    a->failure = std::make_exception_ptr(Error(
        ErrorCode::communication, "hcr::mpi rank " + std::to_string(rank_) + ": receiving buffer " +
                                      std::to_string(a->id) + " from rank " +
                                      std::to_string(a->src) + " failed: " + mpi_text(err)));
  } else if (a->sender_failed && !a->failure) {
    std::string text(reinterpret_cast<const char*>(a->temp), a->bytes);
    a->failure = std::make_exception_ptr(Error(
        ErrorCode::communication, "hcr::mpi: rank " + std::to_string(a->src) +
                                      " could not send buffer " + std::to_string(a->id) +
                                      " (version " + std::to_string(a->version) + "): " + text));
  } else if (!a->sender_failed) {
    std::lock_guard<std::mutex> g(stats_mutex_);
    auto& p = stats_.peers[static_cast<size_t>(a->src)];
    p.bytes_received += a->bytes;
    ++p.messages_received;
  }
  if (a->op != nullptr) finish_arrival(a->op);
  // else: its receive is not registered yet; it waits in unmatched_
}

void ClusterImpl::add_request(MPI_Request r, Pending::What what, Op* op, Arrival* a,
                              Agreement* agreement) {
  reqs_.push_back(r);
  pending_.push_back({what, op, a, agreement});
}

bool ClusterImpl::test_requests() {
  if (reqs_.empty()) return false;
  int count = 0;
  done_idx_.resize(reqs_.size());
  statuses_.resize(reqs_.size());
  const int rc = MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &count,
                              done_idx_.data(), statuses_.data());
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    // Nothing can be told apart: every request of ours fails.
    count = static_cast<int>(reqs_.size());
    for (size_t i = 0; i < reqs_.size(); ++i) {
      done_idx_[i] = static_cast<int>(i);
      statuses_[i].MPI_ERROR = rc;
      statuses_[i].MPI_SOURCE = MPI_ANY_SOURCE;
    }
  }
  if (count == MPI_UNDEFINED || count == 0) return false;
  // Handled after their removal from the arrays: a handler may post new requests.
  done_.clear();
  for (int k = 0; k < count; ++k) {
    const size_t i = static_cast<size_t>(done_idx_[static_cast<size_t>(k)]);
    MPI_Status st = statuses_[static_cast<size_t>(k)];
    if (rc == MPI_SUCCESS) st.MPI_ERROR = MPI_SUCCESS;
    done_.push_back({pending_[i], st});
    pending_[i].what = Pending::none;
  }
  size_t w = 0;
  for (size_t i = 0; i < reqs_.size(); ++i)
    if (pending_[i].what != Pending::none) {
      reqs_[w] = reqs_[i];
      pending_[w] = pending_[i];
      ++w;
    }
  reqs_.resize(w);
  pending_.resize(w);
  auto done = std::move(done_);
  for (auto& [p, st] : done) complete(p, st);
  done_ = std::move(done);
  return true;
}

void ClusterImpl::complete(const Pending& p, const MPI_Status& st) {
  const int err = st.MPI_ERROR;
  switch (p.what) {
    case Pending::header:
      if (err != MPI_SUCCESS) {
        header_posted_ = false;
        fail_expected("receiving a header failed: " + mpi_text(err));
        return;
      }
      on_header(st.MPI_SOURCE);
      return;
    case Pending::payload: payload_done(p.arrival, err); return;
    case Pending::agreement: {
      std::lock_guard<std::mutex> g(mutex_);
      p.check->done = true;
      p.check->error = err;
    }
      agreement_cv_.notify_all();
      return;
    case Pending::send_header:
    case Pending::send_payload: {
      Op* op = p.op;
      --op->reqs;
      if (err != MPI_SUCCESS)
        fail(op, error_for(op, "sending to rank " + std::to_string(op->peer) +
                                   " failed: " + mpi_text(err)));
      if (p.what == Pending::send_payload) {
        --sends_in_flight_;
        if (!op->failed && op->header[3] == 0) {
          {
            std::lock_guard<std::mutex> g(stats_mutex_);
            auto& peer = stats_.peers[static_cast<size_t>(op->peer)];
            peer.bytes_sent += op->header[2];
            ++peer.messages_sent;
          }
          op->done = true;
          if (hcr::detail::TaskNode* token = std::exchange(op->token, nullptr))
            hcr::detail::buffer_release_async(token, nullptr);
        }
      }
      maybe_delete(op);
      return;
    }
    case Pending::none: return;
  }
}

std::exception_ptr ClusterImpl::error_for(const Op* op, const std::string& what) const {
  return std::make_exception_ptr(
      Error(ErrorCode::communication,
            "hcr::mpi rank " + std::to_string(rank_) + ": buffer " + std::to_string(op->id) + " (" +
                std::to_string(op->rows) + "x" + std::to_string(op->cols) + " " +
                std::string(dtype_name(op->dtype)) + ", owner rank " + std::to_string(op->owner) +
                ", version " + std::to_string(op->version) + "): " + what));
}

void ClusterImpl::check_timeouts() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_timeout_check_) return;
  next_timeout_check_ = now + std::chrono::milliseconds(10);
  periodic_ = true;  // parked payloads that must come in now (must_let_in)
  for (int src = 0; src < size_; ++src) pump_fifo(src);
  periodic_ = false;
  const auto limit = options_.timeout;
  const std::string ms = std::to_string(limit.count()) + " ms";
  // A granted receive still without its data: its header has not come, or its payload is parked.
  for (size_t i = 0; i < waiting_.size(); ++i) {
    Op* op = waiting_[i];
    const bool stalled = !op->failed && !op->done &&
                         (op->arrival == nullptr || op->arrival->state == Arrival::queued);
    if (stalled && now - op->since > limit) {
      const std::string state =
          op->arrival == nullptr ? "its header never came: did that rank submit the same tasks?"
                                 : "its header came, its payload waits in line (" +
                                       std::to_string(fifo_[static_cast<size_t>(op->peer)].size()) +
                                       " from that rank; " + std::to_string(early_bytes_) +
                                       " bytes held for early arrivals)";
      fail(op, error_for(op, "no data from rank " + std::to_string(op->peer) + " within " + ms +
                                 " (" + state + ")"));
    }
  }
  for (const Pending& p : pending_)
    if (p.what == Pending::send_payload && !p.op->failed && now - p.op->since > limit)
      fail(p.op,
           error_for(p.op, "rank " + std::to_string(p.op->peer) + " did not take it within " + ms));
}

void ClusterImpl::shutdown_requests() {
  // An agreement check abandoned after its timeout is left to MPI as it is: a collective may be
  // neither cancelled nor freed (its Agreement is never freed either).
  {
    size_t w = 0;
    for (size_t i = 0; i < reqs_.size(); ++i)
      if (pending_[i].what != Pending::agreement) {
        reqs_[w] = reqs_[i];
        pending_[w] = pending_[i];
        ++w;
      }
    reqs_.resize(w);
    pending_.resize(w);
  }
  // Requests left after failures: receives are cancelled; all are waited for a while, then
  // left to MPI.
  for (size_t i = 0; i < reqs_.size(); ++i)
    if (pending_[i].what == Pending::header || pending_[i].what == Pending::payload)
      MPI_Cancel(&reqs_[i]);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!reqs_.empty() && std::chrono::steady_clock::now() < until) {
    int flag = 0;
    MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE);
    if (flag) reqs_.clear();
    else std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  for (MPI_Request& r : reqs_)
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  reqs_.clear();
  for (auto& [entry, type] : types_) MPI_Type_free(&type);
  types_.clear();
  // What is left (only after failures) is freed; accesses still held end failed.
  std::unordered_set<Op*> ops;
  std::unordered_set<Arrival*> arrivals;
  for (const Pending& p : pending_) {
    if (p.op) ops.insert(p.op);
    if (p.arrival) arrivals.insert(p.arrival);
  }
  pending_.clear();
  for (auto& [key, op] : expected_) ops.insert(op);
  for (Op* op : waiting_) ops.insert(op);
  for (Op* op : send_q_) ops.insert(op);
  for (auto& q : fifo_)
    for (Arrival* a : q) arrivals.insert(a);
  for (auto& [key, a] : unmatched_) arrivals.insert(a);
  {
    std::lock_guard<std::mutex> g(mutex_);
    for (auto& [op, what] : inbox_) ops.insert(op);
    inbox_.clear();
  }
  for (Op* op : ops)
    if (op->arrival) arrivals.insert(op->arrival);
  auto ended = std::make_exception_ptr(Error(
      ErrorCode::communication,
      "hcr::mpi rank " + std::to_string(rank_) + ": the Cluster ended before the transfer did"));
  for (Op* op : ops) {
    if (hcr::detail::TaskNode* token = std::exchange(op->token, nullptr))
      hcr::detail::buffer_release_async(token, ended);
    settle(op);
    delete op;
  }
  for (Arrival* a : arrivals) {
    std::free(a->temp);
    delete a;
  }
  expected_.clear();
  waiting_.clear();
  send_q_.clear();
  unmatched_.clear();
  for (auto& q : fifo_) q.clear();
}

}  // namespace detail
}  // namespace hcr::mpi
