// Device memory of the OpenCL plugin and the copies into, out of and between it: the allocations
// the host holds (each a cl_mem of one device's context), and 2-D copies enqueued on the devices'
// copy queues, through a host buffer between two contexts.
#pragma once

#include "cl_api.hpp"
#include "cl_handle.hpp"
#include "opencl_device.hpp"

#include <hcr/plugin.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>

namespace hcr::opencl {

/// One allocation of device memory: what an hcr_memory_t points to.
struct Memory {
  static constexpr uint64_t kMagic = 0x68637263'6c6d656dull;  // "hcrclmem"
  uint64_t magic = kMagic;
  size_t device = 0;
  uint64_t bytes = 0;
  Mem mem;
};

/// The allocations the host holds; tells them from stray pointers. Thread-safe.
class Allocations {
 public:
  Allocations() = default;
  ~Allocations() { clear(); }
  Allocations(const Allocations&) = delete;
  Allocations& operator=(const Allocations&) = delete;

  /// `bytes` of memory on `d` (device index `device`). Throws OUT_OF_MEMORY above the device's
  /// largest allocation, or the OpenCL error naming the size and the device.
  hcr_memory_t* allocate(const Device& d, size_t device, uint64_t bytes);
  /// Frees an allocation; false (and nothing freed) when `memory` is not a live one. OpenCL keeps
  /// the buffer until the commands still using it are done.
  bool release(hcr_memory_t* memory) noexcept;
  /// The live allocation `memory` is; throws INVALID_ARGUMENT starting with `what` otherwise.
  Memory* live(hcr_memory_t* memory, const std::string& what);
  /// Frees every allocation the host did not (at plugin destruction).
  void clear() noexcept;

 private:
  std::mutex mutex_;
  std::unordered_set<Memory*> live_;
};

/// Checks copy `a` (its ends, that they are live allocations and that its rows lie within them)
/// and enqueues it: on the copy queue of the direction, of the device named or of the one whose
/// context holds the memory; between two contexts in two stages through a host buffer. Completes
/// through `done`, from the device's completion thread. Throws sdk::Error when it cannot start.
void enqueue_copy(Devices& devices, Allocations& memory, const hcr_copy_args_t& a);

}  // namespace hcr::opencl
