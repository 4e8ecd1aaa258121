/// \file data.hpp
/// Data movement statistics: what crossed which link, replica hits and misses, evictions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hcr {

/// A memory node: host memory (id 0) or one device's own memory.
struct MemoryNode {
  uint32_t id = 0;
  std::string name;             ///< "host" or the device's name
  uint64_t limit = 0;           ///< bytes hcr may keep there (0 for host memory: unlimited)
  uint64_t used = 0;            ///< bytes allocated there now (device nodes: replicas and scratch)
  uint64_t scratch = 0;         ///< bytes of scratch blocks there, held by tasks or pooled
  uint64_t scratch_pooled = 0;  ///< of those, free blocks kept for reuse
};

/// Bytes moved from one memory node to another.
struct LinkCounters {
  uint32_t from = 0;
  uint32_t to = 0;
  uint64_t bytes = 0;
  uint64_t transfers = 0;
};

struct DataCounters {
  std::vector<MemoryNode> nodes;
  std::vector<LinkCounters> links;  ///< only links that carried data
  uint64_t hits = 0;                ///< a task found its input already valid where it ran
  uint64_t misses = 0;              ///< a task's input had to be copied in
  uint64_t evictions = 0;           ///< replicas dropped to make room
  uint64_t writebacks = 0;  ///< evictions that had to copy the only valid replica home first
  uint64_t scratch_allocations = 0;  ///< scratch blocks allocated (Task::scratch), every node
  uint64_t scratch_reuses = 0;       ///< scratch blocks a task got from a node's pool instead
  uint64_t bytes_moved() const {
    uint64_t b = 0;
    for (auto& l : links) b += l.bytes;
    return b;
  }
};

}  // namespace hcr
