// SHA-256 (FIPS 180-4), for the program cache's keys: a key names a compiled binary on disk, so
// two different sources must never share one; a 256-bit digest makes that a non-issue.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hcr::opencl {

class Sha256 {
 public:
  Sha256();
  /// Adds bytes. Also usable for length-prefixed fields: see field().
  Sha256& update(const void* data, size_t size);
  Sha256& update(std::string_view s) { return update(s.data(), s.size()); }
  /// Adds `s` with its length first, so that ("ab", "c") and ("a", "bc") hash differently.
  Sha256& field(std::string_view s);
  std::array<uint8_t, 32> digest();
  /// The digest as 64 lower-case hex digits.
  std::string hex();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t fill_ = 0;
  uint64_t bits_ = 0;
};

}  // namespace hcr::opencl
