// What the earliest-finish policies (dmda, dmdas, peft) share in their decisions: each device's
// load as a decision reads it, the word a placed task keeps, a decision.
#pragma once

#include <hcr/sched.hpp>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>

namespace hcr::sched {

// What a placed task keeps in its policy word: predicted execution and copy-in time (in
// microseconds, 30 bits each: up to 17 minutes), and whether it is a calibration task — with, under
// peft, which of its exploration slots it holds (the kernel's or the architecture's).
constexpr uint64_t kExploreBit = uint64_t{1} << 63;
constexpr uint64_t kKernelProbeBit = uint64_t{1} << 62;
constexpr uint64_t kArchProbeBit = uint64_t{1} << 61;
constexpr uint64_t kProbeBits = kExploreBit | kKernelProbeBit | kArchProbeBit;
constexpr uint64_t kField = (uint64_t{1} << 30) - 1;
inline uint64_t placed_word(double exec, double xfer, uint64_t explore_bits) {
  // Clamped before the conversion: a prediction beyond 2^64 us (a regression far outside the
  // sizes measured, a model file's huge figures) would make it undefined. nan counts as 0.
  auto us = [](double s) {
    return static_cast<uint64_t>(std::min(static_cast<double>(kField), std::max(0.0, s) * 1e6));
  };
  return us(exec) | (us(xfer) << 30) | (explore_bits & kProbeBits);
}
inline int64_t exec_ns(uint64_t w) { return static_cast<int64_t>(w & kField) * 1000; }
inline int64_t xfer_ns(uint64_t w) { return static_cast<int64_t>((w >> 30) & kField) * 1000; }

// Room for memory nodes that join after attach (hot-plug), and so at most this many nodes.
constexpr uint32_t kSpareNodes = 8;
constexpr size_t kNodeSlots = kMaxDevices + kSpareNodes;

/// What a decision reads of every device, packed densely (a decision over 64 devices touches 16
/// cache lines rather than a few per device).
struct DeviceLoad {
  std::atomic<int64_t> pending_ns{0};       ///< predicted work placed here, not finished
  std::atomic<int> lowest_queued{INT_MAX};  ///< the lowest priority queued (queues by priority)
  uint16_t node = 0, slots = 1;
};
static_assert(sizeof(DeviceLoad) == 16);

/// Where a task goes, with its predicted execution and copies there (seconds).
struct Choice {
  DeviceId device = kAnyDevice;
  double exec = 0, xfer = 0;
};

/// Whether a (kernel, architecture) pair is explored on purpose, and which slot the exploration
/// takes besides the pair's own: none, the pair's alone, the kernel's (one exploration of a kernel
/// measured nowhere at a time) or the architecture's (one at a time per architecture).
enum class Probe : uint8_t { none, pair, kernel, arch };

}  // namespace hcr::sched
