// Device memory and copies: allocations as cl_mem buffers of the device's context, checked against
// the host's every use; 2-D copies as clEnqueue{Read,Write,Copy}BufferRect on the copy queue of
// their direction (the 1-D calls for one row), completing through the device's Completer.
#include "opencl_memory.hpp"

#include "cl_error.hpp"
#include "completion.hpp"

#include <hcr/sdk/memory.hpp>

#include <algorithm>
#include <memory>

namespace hcr::opencl {
namespace {

using sdk::Error;

// Buffer-side origin of a rectangle starting at byte `offset` with rows `pitch` apart.
void origin_of(uint64_t offset, uint64_t pitch, size_t origin[3]) {
  origin[0] = static_cast<size_t>(pitch ? offset % pitch : offset);
  origin[1] = static_cast<size_t>(pitch ? offset / pitch : 0);
  origin[2] = 0;
}

void write_rect(cl_command_queue q, cl_mem mem, uint64_t offset, uint64_t pitch, const void* host,
                uint64_t host_pitch, uint64_t width, uint64_t rows, cl_event* ev) {
  if (rows == 1) {
    HCR_CL_CHECK(clEnqueueWriteBuffer(q, mem, CL_FALSE, offset, width, host, 0, nullptr, ev));
    return;
  }
  size_t bo[3], ho[3] = {0, 0, 0};
  origin_of(offset, pitch, bo);
  const size_t region[3] = {static_cast<size_t>(width), static_cast<size_t>(rows), 1};
  HCR_CL_CHECK(clEnqueueWriteBufferRect(q, mem, CL_FALSE, bo, ho, region, pitch, 0, host_pitch, 0,
                                        host, 0, nullptr, ev));
}

void read_rect(cl_command_queue q, cl_mem mem, uint64_t offset, uint64_t pitch, void* host,
               uint64_t host_pitch, uint64_t width, uint64_t rows, cl_event* ev) {
  if (rows == 1) {
    HCR_CL_CHECK(clEnqueueReadBuffer(q, mem, CL_FALSE, offset, width, host, 0, nullptr, ev));
    return;
  }
  size_t bo[3], ho[3] = {0, 0, 0};
  origin_of(offset, pitch, bo);
  const size_t region[3] = {static_cast<size_t>(width), static_cast<size_t>(rows), 1};
  HCR_CL_CHECK(clEnqueueReadBufferRect(q, mem, CL_FALSE, bo, ho, region, pitch, 0, host_pitch, 0,
                                       host, 0, nullptr, ev));
}

void copy_rect(cl_command_queue q, cl_mem src, uint64_t src_offset, uint64_t src_pitch, cl_mem dst,
               uint64_t dst_offset, uint64_t dst_pitch, uint64_t width, uint64_t rows,
               cl_event* ev) {
  if (rows == 1) {
    HCR_CL_CHECK(clEnqueueCopyBuffer(q, src, dst, src_offset, dst_offset, width, 0, nullptr, ev));
    return;
  }
  size_t so[3], dox[3];
  origin_of(src_offset, src_pitch, so);
  origin_of(dst_offset, dst_pitch, dox);
  const size_t region[3] = {static_cast<size_t>(width), static_cast<size_t>(rows), 1};
  HCR_CL_CHECK(clEnqueueCopyBufferRect(q, src, dst, so, dox, region, src_pitch, 0, dst_pitch, 0, 0,
                                       nullptr, ev));
}

}  // namespace

hcr_memory_t* Allocations::allocate(const Device& d, size_t device, uint64_t bytes) {
  if (bytes > d.max_alloc)
    throw Error(HCR_ERROR_OUT_OF_MEMORY,
                "allocating " + std::to_string(bytes) + " bytes on '" + d.name +
                    "': above its largest allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE " +
                    std::to_string(d.max_alloc) + ")");
  // OpenCL has no empty buffers; a zero-byte allocation gets one byte.
  const size_t size = static_cast<size_t>(std::max<uint64_t>(bytes, 1));
  auto m = std::make_unique<Memory>();
  m->device = device;
  m->bytes = bytes;
  try {
    m->mem = Mem(cl_create("clCreateBuffer", [&](cl_int* e) {
      return clCreateBuffer(d.context, CL_MEM_READ_WRITE, size, nullptr, e);
    }));
  } catch (const Error& e) {
    throw Error(e.code(),
                "allocating " + std::to_string(bytes) + " bytes on '" + d.name + "': " + e.what());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  live_.insert(m.get());
  return reinterpret_cast<hcr_memory_t*>(m.release());
}

bool Allocations::release(hcr_memory_t* memory) noexcept {
  auto* m = reinterpret_cast<Memory*>(memory);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (live_.erase(m) == 0) return false;
  }
  delete m;
  return true;
}

Memory* Allocations::live(hcr_memory_t* memory, const std::string& what) {
  auto* m = reinterpret_cast<Memory*>(memory);
  std::lock_guard<std::mutex> lock(mutex_);
  if (live_.count(m) == 0 || m->magic != Memory::kMagic)
    throw Error(HCR_ERROR_INVALID_ARGUMENT,
                what + ": memory is not a live allocation of this plugin");
  return m;
}

void Allocations::clear() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Memory* m : live_) delete m;
  live_.clear();
}

void enqueue_copy(Devices& devices, Allocations& memory, const hcr_copy_args_t& a) {
  sdk::check_copy_ends(a, "an OpenCL device copies to or from its memory");
  Memory* src = a.src_memory ? memory.live(a.src_memory, "copy source") : nullptr;
  Memory* dst = a.dst_memory ? memory.live(a.dst_memory, "copy destination") : nullptr;
  if (src) sdk::check_span(src->bytes, a.src_offset, a.rows, a.src_pitch, a.width, "copy source");
  if (dst)
    sdk::check_span(dst->bytes, a.dst_offset, a.rows, a.dst_pitch, a.width, "copy destination");
  if (a.width == 0 || a.rows == 0) {  // nothing to move
    sdk::complete(a.done, a.done_user_data, nullptr);
    return;
  }

  Device& dev = devices[a.device];
  const std::string bytes = std::to_string(a.width * a.rows);
  auto op = std::make_unique<Op>();
  op->done = a.done;
  op->done_user_data = a.done_user_data;
  Ticket ticket(*dev.completer);
  cl_event ev = nullptr;
  if (src && dst && devices.platform_of(src->device) != devices.platform_of(dst->device)) {
    // Two contexts: through a host buffer, in two stages on the two devices' copy queues.
    op->what = "copy of " + bytes + " bytes from '" + devices[src->device].name + "' to '" +
               devices[dst->device].name + "'";
    op->staging.resize(static_cast<size_t>(a.width * a.rows));
    cl_command_queue q = devices[src->device].copy_out.get();
    read_rect(q, src->mem.get(), a.src_offset, a.src_pitch, op->staging.data(), a.width, a.width,
              a.rows, &ev);
    op->event = Event(ev);
    HCR_CL_CHECK(clFlush(q));
    Device* to = &devices[dst->device];
    const hcr_copy_args_t args = a;
    Mem target = dst->mem;  // a reference of our own for the second stage
    op->next = [to, target, args](Op& o) {
      cl_event e = nullptr;
      write_rect(to->copy_in.get(), target.get(), args.dst_offset, args.dst_pitch, o.staging.data(),
                 args.width, args.width, args.rows, &e);
      Event out(e);
      HCR_CL_CHECK(clFlush(to->copy_in.get()));
      return out;
    };
  } else {
    // One context: the named device's queue for the direction, unless the memory lives in
    // another context.
    const size_t owner = (dst ? dst : src)->device;
    Device& by = devices.platform_of(owner) == devices.platform_of(a.device) ? dev : devices[owner];
    cl_command_queue q = dst ? by.copy_in.get() : by.copy_out.get();
    if (src && dst) {
      op->what = "copy of " + bytes + " bytes within '" + devices[owner].name + "'";
      copy_rect(q, src->mem.get(), a.src_offset, a.src_pitch, dst->mem.get(), a.dst_offset,
                a.dst_pitch, a.width, a.rows, &ev);
    } else if (dst) {
      op->what = "copy of " + bytes + " bytes to '" + devices[owner].name + "'";
      write_rect(q, dst->mem.get(), a.dst_offset, a.dst_pitch, a.src_host, a.src_pitch, a.width,
                 a.rows, &ev);
    } else {
      op->what = "copy of " + bytes + " bytes from '" + devices[owner].name + "'";
      read_rect(q, src->mem.get(), a.src_offset, a.src_pitch, a.dst_host, a.dst_pitch, a.width,
                a.rows, &ev);
    }
    op->event = Event(ev);
    HCR_CL_CHECK(clFlush(q));
  }
  ticket.watch(std::move(op));
}

}  // namespace hcr::opencl
