// Program cache files: "HCRCLPRG", format version, key, binary size, SHA-256 of the binary, then
// the binary. Everything a reader needs to tell a good entry from a damaged one.
#include "program_cache.hpp"

#include "sha256.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>

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

ProgramCache::Entry ProgramCache::load(const std::string& key) const noexcept {
  Entry e;
  if (!enabled() || key.size() != kKeySize) return e;
  try {
    const fs::path path = file(key);
    std::error_code ec;
    if (!fs::exists(path, ec)) return e;
    std::ifstream in(path, std::ios::binary);
    std::vector<unsigned char> data((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
    e.status = Status::corrupt;
    if (!in.good() && !in.eof()) {
      e.why = "unreadable";
      return e;
    }
    if (data.size() < kHeaderSize || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0) {
      e.why = "not an hcr program cache file";
      return e;
    }
    const unsigned char* p = data.data() + sizeof kMagic;
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
  std::error_code ec;
  if (!fs::exists(dir_, ec)) {
    fs::create_directories(dir_, ec);
    if (ec) return "cannot create '" + dir_.string() + "': " + ec.message();
    fs::permissions(dir_, fs::perms::owner_all, ec);  // binaries we run: ours alone
  }

  std::string header(kMagic, sizeof kMagic);
  put_le(header, kVersion, 4);
  header += key;
  put_le(header, binary.size(), 8);
  auto digest = Sha256().update(binary.data(), binary.size()).digest();
  header.append(reinterpret_cast<const char*>(digest.data()), digest.size());

  // A name no other writer uses: this process, and a counter within it.
  static std::atomic<uint64_t> counter{0};
  const fs::path final_path = file(key);
  const fs::path tmp = dir_ / (key + ".tmp." + std::to_string(::getpid()) + "." +
                               std::to_string(counter.fetch_add(1)));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(binary.data()),
              static_cast<std::streamsize>(binary.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      return "cannot write '" + tmp.string() + "'";
    }
  }
  fs::rename(tmp, final_path, ec);
  if (ec) {
    std::error_code ignore;
    fs::remove(tmp, ignore);
    return "cannot rename '" + tmp.string() + "' to '" + final_path.string() + "': " + ec.message();
  }
  return {};
}

}  // namespace hcr::opencl
