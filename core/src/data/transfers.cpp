// Owns copying between memory nodes through the plugins, and each copy's completion.
// A copy's end goes to the data manager (CopyLanding); plugin calls that complete asynchronously
// are never made with the lock held.
#include "transfers.hpp"

#include "ghosts.hpp"
#include "node_memory.hpp"

#include "../buffer_state.hpp"
#include "../log_internal.hpp"
#include "../plugins/plugin_loader.hpp"

#include <algorithm>
#include <chrono>
#include <sstream>

namespace hcr::detail {

// A copy handed to a plugin. Its done_user_data is a token: the Transfer's address with a 16-bit
// generation in the top bits (x86-64 and AArch64 user addresses fit in 48). Transfers are pooled,
// never freed while the data manager lives, so that a plugin answering a copy twice (or returning
// an error after its done) finds a Transfer that is no longer armed for that generation: the extra
// answer is reported, not a second completion of the copy, nor the completion of a newer one.
struct Transfers::Transfer {
  Transfers* owner;
  Copy copy;
  hcr_memory_t* src_mem;
  hcr_memory_t* dst_mem;
  uint64_t bytes;
  std::chrono::steady_clock::time_point start;
  std::atomic<uint32_t> state{0};  // generation << 1 | armed
  Transfer* next_free = nullptr;

  static constexpr unsigned kGenerationShift = 48;
  void* token() const noexcept {
    const uint64_t gen = state.load(std::memory_order_relaxed) >> 1 & 0xFFFF;
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(this) | static_cast<uintptr_t>(gen)
                                                                           << kGenerationShift);
  }
  static Transfer* of(void* token) noexcept {
    return reinterpret_cast<Transfer*>(reinterpret_cast<uintptr_t>(token) &
                                       ((uintptr_t{1} << kGenerationShift) - 1));
  }
  // The first answer for the generation the token names takes the copy; any later one gets false.
  static bool claim(Transfer* tr, void* token) noexcept {
    const auto gen =
        static_cast<uint32_t>(reinterpret_cast<uintptr_t>(token) >> kGenerationShift & 0xFFFF);
    uint32_t armed = gen << 1 | 1u;
    return tr->state.compare_exchange_strong(armed, gen << 1, std::memory_order_acq_rel);
  }
};

ErrorCode copy_error_code(const hcr_plugin_api_t* api, hcr_error_t* error) noexcept {
  return api->error_code(error) == HCR_ERROR_DEVICE_LOST ? ErrorCode::device_lost
                                                         : ErrorCode::backend;
}

Transfers::Transfers(std::mutex& mutex, Coherence& coherence, NodeMemory& memory,
                     CopyLanding& landing, DataEvents& events)
    : mutex_(mutex), coherence_(coherence), memory_(memory), landing_(landing), events_(events) {
  lanes_.reserve(NodeMemory::kMaxNodes);
  lanes_.emplace_back();  // host memory's: never used (copies go by their device's)
}

// The Transfers go with the data manager: by then no plugin may answer a copy (a runtime whose
// plugin was left running at shutdown is never destroyed).
Transfers::~Transfers() {
  for (Transfer* tr : transfers_) delete tr;
}

void Transfers::add_node() { lanes_.emplace_back(); }

Transfers::Lane& Transfers::lane(const Copy& c) noexcept {
  return c.dst != 0 ? lanes_[c.dst].in : lanes_[c.src].out;
}

uint64_t Transfers::queue_again(const Copy& c) {
  Lane& l = lane(c);
  const uint64_t ticket = ++l.seq;
  l.waiting.push({c.priority, ticket, c});
  return ticket;
}

void Transfers::issue(const Copy& c) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Lane& l = lane(c);
    Replica* r = c.ticketed() ? &coherence_.data(*c.b).replicas[c.dst] : nullptr;
    if (l.in_flight >= Lane::kDepth) {
      // At the priority its most urgent reader asked for since it was planned.
      const int priority = r != nullptr ? std::max(c.priority, r->fetch_priority) : c.priority;
      const uint64_t ticket = ++l.seq;
      if (r != nullptr) r->ticket = ticket;
      l.waiting.push({priority, ticket, c});
      return;
    }
    if (r != nullptr) r->ticket = 0;
    ++l.in_flight;
  }
  start(c);
}

void Transfers::start(const Copy& c) noexcept {
  BufferState& b = *c.b;
  // What moves: b's own data (a halo tile's interior, never its ghosts, which are its neighbours'),
  // or the edge of a neighbour's that is one of b's ghosts (ghosts.hpp), read from the neighbour's
  // replica (host memory is one for all tiles: b's host pointer places it as well), or a piece of
  // b's interior home (for its neighbours' ghosts there, or a part of its whole interior).
  const ElementRect rect = c.ghost()               ? ghost_edge(b, c.slot / 3 - 1, c.slot % 3 - 1)
                           : c.piece != Copy::kOwn ? border_piece(b, c.piece)
                                                   : own_elements(b);
  BufferState& source = c.from != nullptr ? *c.from : b;
  Transfer* tr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_transfers_ != nullptr) {
      tr = free_transfers_;
      free_transfers_ = tr->next_free;
    } else {
      transfers_.reserve(transfers_.size() + 1);
      tr = new Transfer{};
      tr->owner = this;
      transfers_.push_back(tr);
    }
    tr->copy = c;
    tr->bytes = rect.rows * rect.cols * b.elem;
    tr->start = std::chrono::steady_clock::now();
    const uint32_t gen = ((tr->state.load(std::memory_order_relaxed) >> 1) + 1) & 0xFFFF;
    tr->state.store(gen << 1 | 1u, std::memory_order_release);
    tr->src_mem = coherence_.data(source).replicas[c.src].mem;
    tr->dst_mem = coherence_.data(b).replicas[c.dst].mem;
  }
  const NodeState& dev = memory_.node(c.dst != 0 ? c.dst : c.src);  // the device that copies
  const RectPlace from = rect_place(source, c.src == 0, rect);
  const RectPlace to = rect_place(b, c.dst == 0, rect);
  hcr_copy_args_t a{};
  a.struct_size = HCR_COPY_ARGS_STRUCT_SIZE;
  a.device = dev.index;
  if (c.src == 0) {
    a.src_host = from.host;
  } else {
    a.src_memory = tr->src_mem;
    a.src_offset = from.offset;
  }
  a.src_pitch = from.pitch;
  if (c.dst == 0) {
    a.dst_host = to.host;
  } else {
    a.dst_memory = tr->dst_mem;
    a.dst_offset = to.offset;
  }
  a.dst_pitch = to.pitch;
  a.width = rect.cols * b.elem;
  a.rows = rect.rows;
  a.done = &Transfers::on_copy_done;
  void* token = tr->token();
  a.done_user_data = token;
  if (hcr_error_t* err = dev.plugin->api->copy(dev.plugin->handle, &a)) {
    if (Transfer::claim(tr, token)) copy_done(tr, err);
    else copy_answered_twice(tr, err, /*returned=*/true);
  }
}

void Transfers::copy_answered_twice(Transfer* tr, hcr_error_t* error, bool returned) noexcept {
  // tr may carry a newer copy by now (read under the lock that start() writes it under): the
  // device named is then the one most likely at fault.
  Copy c{};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    c = tr->copy;
  }
  const NodeState& dev = memory_.node(c.dst != 0 ? c.dst : c.src);
  if (error != nullptr) dev.plugin->api->error_destroy(error);
  const uint64_t n = events_.protocol_error(dev.device);
  std::ostringstream msg;
  msg << "plugin '" << dev.plugin->name << "' "
      << (returned ? "returned an error from copy after calling done for it"
                   : "called done for a copy that had been answered already")
      << " (device '" << dev.name << "'): ignored";
  if (n == 1) {
    msg << "; further ones are counted in stats().devices[" << dev.device << "].protocol_errors";
    log::write(LogLevel::error, msg.str());
  } else if (log::enabled(LogLevel::debug)) {
    log::write(LogLevel::debug, msg.str());
  }
}

void Transfers::on_copy_done(void* user, hcr_error_t* error, const hcr_completion_info_t* info) {
  Transfer* tr = Transfer::of(user);
  if (!Transfer::claim(tr, user)) {
    tr->owner->copy_answered_twice(tr, error, /*returned=*/false);
    return;
  }
  if (error == nullptr) {
    double seconds =
        info != nullptr && info->struct_size >= HCR_COMPLETION_INFO_STRUCT_SIZE_1_0 &&
                info->device_seconds >= 0
            ? info->device_seconds
            : std::chrono::duration<double>(std::chrono::steady_clock::now() - tr->start).count();
    tr->owner->events_.transferred(
        {tr->copy.src, tr->copy.dst, tr->bytes, seconds,
         std::chrono::duration_cast<std::chrono::nanoseconds>(tr->start.time_since_epoch())
             .count()});
  }
  tr->owner->copy_done(tr, error);
}

void Transfers::copy_done(Transfer* tr, hcr_error_t* error) noexcept {
  const Copy c = tr->copy;  // by value: the lane is found after tr is gone
  BufferState& b = *c.b;
  std::exception_ptr failure;
  const NodeState* lost = nullptr;  // the device that did the copy, when it said it is gone
  std::string failed;               // what the failure says
  if (error != nullptr) {
    const NodeState& dev = memory_.node(c.dst != 0 ? c.dst : c.src);
    if (copy_error_code(dev.plugin->api, error) == ErrorCode::device_lost) lost = &dev;
    std::string msg = take_error(dev.plugin->api, error);
    // The tasks waiting on the copy learn which device failed it (the engine charges that
    // device, not theirs); a device that is gone is retired below.
    failed = (c.ghost()       ? "copying a ghost edge of the " + describe(b) + " from '"
              : c.edge_home() ? "copying an edge of the " + describe(b) + " home from '"
                              : "copying a " + shape_of(b) + " buffer from '") +
             memory_.node(c.src).name + "' to '" + memory_.node(c.dst).name + "' failed: " + msg;
    failure = std::make_exception_ptr(CopyError(failed, dev.device, lost != nullptr));
    HCR_LOG(warn, failed);
  }
  CopyLanding::After after;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure) count_link(c.src, c.dst, tr->bytes);
    landing_.landed(c, failure, after);
  }
  for (BufferState* h : after.drop) release(h);
  release(&b);  // the copy's references
  if (c.from != nullptr) release(c.from);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tr->next_free = free_transfers_;
    free_transfers_ = tr;
  }
  bool next = false;
  Copy queued{};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Lane& l = lane(c);
    while (!l.waiting.empty()) {  // the lane's slot passes to its most urgent waiting copy
      const Lane::Waiting w = l.waiting.top();
      l.waiting.pop();
      if (w.copy.ticketed()) {
        Replica& r = coherence_.data(*w.copy.b).replicas[w.copy.dst];
        if (r.ticket != w.seq) continue;  // moved up since: its other entry stands
        r.ticket = 0;
      }
      queued = w.copy;
      next = true;
      break;
    }
    if (!next) --l.in_flight;
  }
  if (next) start(queued);
  // Retired before its waiting tasks are placed again, so that none goes back to it.
  if (lost != nullptr) events_.device_lost(lost->device, failed);
  for (const Copy& m : after.more) issue(m);
  for (TaskNode* t : after.ready) events_.data_ready(t);
  for (TaskNode* t : after.retry) events_.retry_acquire(t);
}

void Transfers::drain() noexcept {
  // A lane starts its next copy from the completion of the one before, so one synchronize may
  // return while the lane still holds copies: until every lane is empty and idle.
  for (;;) {
    for (uint32_t n = 1; n < memory_.count(); ++n) {
      const NodeState& dev = memory_.node(n);
      if (dev.abandoned) continue;  // set before shutdown began: read without the lock
      if (hcr_error_t* e = dev.plugin->api->synchronize(dev.plugin->handle, dev.index))
        HCR_LOG(warn, "synchronize '" << dev.name << "': " << take_error(dev.plugin->api, e));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    bool idle = true;
    for (uint32_t n = 1; n < memory_.count() && idle; ++n) {
      const Lanes& l = lanes_[n];
      idle = memory_.node(n).abandoned || (l.in.in_flight == 0 && l.out.in_flight == 0 &&
                                           l.in.waiting.empty() && l.out.waiting.empty());
    }
    if (idle) return;
  }
}

void Transfers::count_link(uint32_t from, uint32_t to, uint64_t bytes) {
  auto& [total, copies] = links_[{from, to}];
  total += bytes;
  copies += 1;
}

void Transfers::links(DataCounters& c) const {
  for (const auto& [link, counts] : links_)
    c.links.push_back({link.first, link.second, counts.first, counts.second});
}

}  // namespace hcr::detail
