// Program cache files: "HCRCLPRG", format version, key, binary size, SHA-256 of the binary, then
// the binary. Everything a reader needs to tell a good entry from a damaged one.
#include "program_cache.hpp"

#include "safe_file.hpp"
#include "sha256.hpp"

#include <cstdlib>
#include <cstring>
#include <optional>

namespace hcr::opencl {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'H', 'C', 'R', 'C', 'L', 'P', 'R', 'G'};
constexpr uint32_t kVersion = 1;
constexpr size_t kKeySize = 64;
constexpr size_t kHeaderSize = sizeof kMagic + 4 + kKeySize + 8 + 32;

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

fs::path default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/')
    return fs::path(xdg) / "hcr" / "opencl";
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0')
    return fs::path(home) / ".cache" / "hcr" / "opencl";
  return {};
}

fs::path ProgramCache::file(const std::string& key) const { return dir_ / (key + ".clbin"); }

std::string ProgramCache::check() const {
  if (!enabled()) return {};
  try {
    files::TrustedDir::open(dir_);
  } catch (const files::FileError& e) {
    return e.what();
  }
  return {};
}

ProgramCache::Entry ProgramCache::load(const std::string& key) const noexcept {
  Entry e;
  if (!enabled() || key.size() != kKeySize) return e;
  try {
    std::optional<std::string> text;
    try {
      std::optional<files::TrustedDir> dir = files::TrustedDir::open(dir_);
      if (!dir) return e;
      text = dir->read(file(key).filename().string(), kMaxEntryBytes);
    } catch (const files::FileError& ex) {
      e.status = Status::refused;
      e.why = ex.what();
      return e;
    }
    if (!text) return e;
    const std::string& data = *text;
    const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
    e.status = Status::corrupt;
    if (data.size() < kHeaderSize || std::memcmp(bytes, kMagic, sizeof kMagic) != 0) {
      e.why = "not an hcr program cache file";
      return e;
    }
    const unsigned char* p = bytes + sizeof kMagic;
    if (get_le(p, 4) != kVersion) {
      e.why = "format version " + std::to_string(get_le(p, 4)) + ", expected " +
              std::to_string(kVersion);
      return e;
    }
    p += 4;
    if (std::memcmp(p, key.data(), kKeySize) != 0) {
      e.why = "holds another key";
      return e;
    }
    p += kKeySize;
    const uint64_t size = get_le(p, 8);
    p += 8;
    if (size != data.size() - kHeaderSize) {
      e.why = "truncated: " + std::to_string(data.size() - kHeaderSize) + " of " +
              std::to_string(size) + " binary bytes";
      return e;
    }
    const unsigned char* sum = p;
    p += 32;
    auto digest = Sha256().update(p, size).digest();
    if (std::memcmp(digest.data(), sum, digest.size()) != 0) {
      e.why = "checksum mismatch";
      return e;
    }
    e.binary.assign(p, p + size);
    e.status = Status::hit;
  } catch (const std::exception& ex) {
    e.status = Status::corrupt;
    e.why = ex.what();
  }
  return e;
}

std::string ProgramCache::store(const std::string& key,
                                const std::vector<unsigned char>& binary) const {
  if (!enabled()) return {};
  if (key.size() != kKeySize) return "bad key";
  std::string data(kMagic, sizeof kMagic);
  put_le(data, kVersion, 4);
  data += key;
  put_le(data, binary.size(), 8);
  auto digest = Sha256().update(binary.data(), binary.size()).digest();
  data.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  data.append(reinterpret_cast<const char*>(binary.data()), binary.size());
  try {
    // Created (0700) with the first entry: a run that caches nothing leaves nothing behind.
    files::TrustedDir::make(dir_).write(file(key).filename().string(), data, 0600);
  } catch (const files::FileError& e) {
    return e.what();
  }
  return {};
}

}  // namespace hcr::opencl
