// Owns bringing device data home: eager write-through, evacuating a device, and shutdown.
// A write-through goes through host staging, so that a device lost mid-copy leaves the previous
// version intact.
#include "write_back.hpp"

#include "ghosts.hpp"
#include "node_memory.hpp"
#include "transfers.hpp"

#include "../buffer_state.hpp"
#include "../log_internal.hpp"
#include "../plugins/plugin_loader.hpp"

#include <hcr/error.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

namespace hcr::detail {

struct WriteBack::WriteThrough {
  struct Stage {
    WriteThrough* wt;
    BufferState* b;
    void* staging;
    std::chrono::steady_clock::time_point start;
  };
  WriteBack* owner;
  TaskNode* t;
  uint32_t node;
  std::atomic<int> left{1};  // copies + 1 held while starting them
  std::mutex mutex;
  std::exception_ptr error;
  std::vector<Stage> stages;
};

bool WriteBack::write_through(TaskNode* t) {
  if (!eager_ || t->data_node <= 0) return false;
  const auto n = static_cast<uint32_t>(t->data_node);
  auto* wt = new WriteThrough{this, t, n, {}, {}, {}, {}};
  for (const ArgRec& a : t->uargs)
    if (writes(a.access)) wt->stages.push_back({wt, a.buffer, nullptr, {}});
  if (wt->stages.empty()) {
    delete wt;
    return false;
  }
  wt->left.store(static_cast<int>(wt->stages.size()) + 1, std::memory_order_relaxed);
  const NodeState& dev = memory_.node(n);
  for (auto& st : wt->stages) {
    BufferState& b = *st.b;
    // Its own data only (a halo tile's interior: its ghosts are its neighbours' data).
    const ElementRect own = own_elements(b);
    const uint64_t row = own.cols * b.elem;
    st.staging = std::aligned_alloc(64, (own.rows * row + 63) / 64 * 64);
    hcr_copy_args_t c{};
    c.struct_size = HCR_COPY_ARGS_STRUCT_SIZE;
    c.device = dev.index;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      c.src_memory = coherence_.data(b).replicas[n].mem;  // pinned by the task until it commits
    }
    const RectPlace from = rect_place(b, false, own);
    c.src_offset = from.offset;
    c.src_pitch = from.pitch;
    c.dst_host = st.staging;
    c.dst_pitch = row;
    c.width = row;
    c.rows = own.rows;
    c.done = &WriteBack::on_stage_done;
    c.done_user_data = &st;
    st.start = std::chrono::steady_clock::now();
    hcr_error_t* err = st.staging ? dev.plugin->api->copy(dev.plugin->handle, &c) : nullptr;
    if (st.staging == nullptr || err != nullptr) {
      const ErrorCode code = err ? copy_error_code(dev.plugin->api, err) : ErrorCode::out_of_memory;
      const std::string msg =
          err ? take_error(dev.plugin->api, err) : std::string("no host memory to stage");
      std::lock_guard<std::mutex> g(wt->mutex);
      if (!wt->error)
        wt->error =
            std::make_exception_ptr(Error(code, "writing a " + shape_of(b) + " buffer home from '" +
                                                    dev.name + "' failed: " + msg));
      if (wt->left.fetch_sub(1, std::memory_order_acq_rel) == 1) finish_write_through(wt);
    }
  }
  if (wt->left.fetch_sub(1, std::memory_order_acq_rel) == 1) finish_write_through(wt);
  return true;
}

void WriteBack::on_stage_done(void* user, hcr_error_t* error, const hcr_completion_info_t* info) {
  auto* st = static_cast<WriteThrough::Stage*>(user);
  WriteThrough* wt = st->wt;
  WriteBack& wb = *wt->owner;
  const NodeState& dev = wb.memory_.node(wt->node);
  if (error != nullptr) {
    const ErrorCode code = copy_error_code(dev.plugin->api, error);
    std::string msg = take_error(dev.plugin->api, error);
    std::lock_guard<std::mutex> g(wt->mutex);
    if (!wt->error)
      wt->error = std::make_exception_ptr(Error(
          code,
          "writing a " + shape_of(*st->b) + " buffer home from '" + dev.name + "' failed: " + msg));
  } else {
    double seconds =
        info != nullptr && info->struct_size >= HCR_COMPLETION_INFO_STRUCT_SIZE_1_0 &&
                info->device_seconds >= 0
            ? info->device_seconds
            : std::chrono::duration<double>(std::chrono::steady_clock::now() - st->start).count();
    // (The trace shows it as long as it took, however long ago it was handed over.)
    const ElementRect own = own_elements(*st->b);
    const uint64_t bytes = own.rows * own.cols * st->b->elem;
    wb.events_.transferred({wt->node, 0, bytes, seconds, std::numeric_limits<int64_t>::min()});
    std::lock_guard<std::mutex> lock(wb.mutex_);
    wb.transfers_.count_link(wt->node, 0, bytes);
  }
  if (wt->left.fetch_sub(1, std::memory_order_acq_rel) == 1) wb.finish_write_through(wt);
}

void WriteBack::finish_write_through(WriteThrough* wt) noexcept {
  if (!wt->error) {
    // Every copy arrived: now, and only now, the host memory takes the new version. Nobody else
    // touches these buffers until the task finishes.
    for (auto& st : wt->stages) {
      BufferState& b = *st.b;
      const ElementRect own = own_elements(b);
      const RectPlace to = rect_place(b, true, own);
      const uint64_t row = own.cols * b.elem;
      for (size_t r = 0; r < own.rows; ++r)
        std::memcpy(to.host + r * to.pitch, static_cast<std::byte*>(st.staging) + r * row, row);
    }
    wt->t->written_through = true;
  }
  for (auto& st : wt->stages) std::free(st.staging);
  TaskNode* t = wt->t;
  std::exception_ptr error = wt->error;
  delete wt;
  events_.written_through(t, error);
}

bool WriteBack::evacuate(uint32_t n, double timeout_s) noexcept {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  for (;;) {
    std::vector<Copy> copies;
    size_t left = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (n == 0 || n >= memory_.count()) return true;
      NodeState& node = memory_.node(n);
      std::vector<BufferState*> resident(node.resident.begin(), node.resident.end());
      for (BufferState* b : resident) {
        BufferData& d = coherence_.data(*b);
        Replica& r = d.replicas[n];
        // Busy replicas (a copy into or out of it, a write-back on its way) are looked at again
        // once that is done: the device runs nothing, so they only get fewer.
        if (r.pins != 0 || r.fetching || r.evicting || r.copies_out != 0) continue;
        if (!r.valid || coherence_.has_other_valid(*b, n)) {
          memory_.free_replica(*b, n);
          memory_.count_eviction();
          continue;
        }
        const Replica& home = d.replicas[0];
        if (home.pins != 0 || home.fetching) continue;  // a host task holds it: next round
        r.evicting = true;  // the write-back frees it when it lands (DataManager::landed)
        coherence_.set_fetching(*b, 0, true);
        coherence_.copy_home(*b, n, true, Copy::kUrgent, copies);
      }
      left = node.resident.size();
      if (left == 0) {
        node.limit = 0;  // nothing is placed here again (the device is out of scheduling)
        return true;
      }
    }
    for (const Copy& c : copies) transfers_.issue(c);
    if (std::chrono::steady_clock::now() > deadline) {
      HCR_LOG(error, "memory of '" << memory_.node(n).name << "': " << left
                                   << " buffer(s) still resident after " << timeout_s << " s");
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void WriteBack::shutdown(std::atomic<bool>& active) noexcept {
  transfers_.drain();  // prefetches and write-backs still on their way
  std::vector<BufferState*> resident, kept;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (uint32_t n = 1; n < memory_.count(); ++n)
      for (BufferState* b : memory_.node(n).resident) resident.push_back(b);
    std::sort(resident.begin(), resident.end());
    resident.erase(std::unique(resident.begin(), resident.end()), resident.end());
    // A held buffer's hold may go as soon as its copy home lands: ours keeps it to the end.
    for (BufferState* b : resident)
      if (coherence_.data(*b).held) {
        retain(b);
        kept.push_back(b);
      }
  }
  // Bring home every buffer whose host copy is stale, then free everything. A copy that failed
  // is tried again, from wherever the data is valid, a few rounds (as a host task's would be).
  constexpr int kRetries = 8;
  for (int round = 0; round <= kRetries; ++round) {
    bool any = false;
    for (BufferState* b : resident) {
      std::vector<Copy> copies;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        const Replica& home = coherence_.data(*b).replicas[0];
        if (!home.valid && !home.fetching) coherence_.plan_fetch(*b, 0, copies);
      }
      any = any || !copies.empty();
      for (const Copy& c : copies) transfers_.issue(c);
    }
    transfers_.drain();
    if (!any) break;
  }
  std::vector<BufferState*> drop;
  std::unique_lock<std::mutex> lock(mutex_);
  for (BufferState* b : resident) {
    if (!coherence_.data(*b).replicas[0].valid)
      HCR_LOG(error, "a " << shape_of(*b) << " buffer could not be copied home at shutdown");
    for (uint32_t n = 1; n < memory_.count(); ++n) memory_.free_replica(*b, n);
    coherence_.set_valid(*b, 0, true);
    coherence_.update_hold(*b, drop);
  }
  active.store(false, std::memory_order_relaxed);
  lock.unlock();
  for (BufferState* h : drop) release(h);
  for (BufferState* b : kept) release(b);
}

}  // namespace hcr::detail
