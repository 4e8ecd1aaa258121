// NVRTC compilation of CUDA C++ source kernels, with an in-memory and an on-disk cache.
#include "nvrtc_cache.hpp"

#include "cuda_check.hpp"
#include "cuda_libs.hpp"
#include "safe_file.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#ifndef HCR_CUDA_TOOLKIT_INCLUDE_DIR
#define HCR_CUDA_TOOLKIT_INCLUDE_DIR ""
#endif

namespace fs = std::filesystem;

namespace hcr::cuda {
namespace {

constexpr char kMagic[] = "hcr-nvrtc-cache 1\n";

// The toolkit headers (cuda_fp16.h, cuda_bf16.h...) for sources that include them: the toolkit
// the plugin was built with, or one named by the environment.
std::vector<std::string> include_dirs() {
  std::vector<std::string> dirs;
  std::error_code ec;
  auto add = [&](const std::string& d) {
    if (d.empty() || !fs::is_directory(d, ec)) return;
    if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
  };
  add(HCR_CUDA_TOOLKIT_INCLUDE_DIR);
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(env); v && *v) add(std::string(v) + "/include");
  return dirs;
}

// The architecture NVRTC compiles for: the device's own (a cubin) when NVRTC knows it, otherwise
// the newest virtual architecture it knows that the device can run (PTX the driver compiles).
std::string pick_target(const NvrtcLib& lib, int cc_major, int cc_minor) {
  const int want = cc_major * 10 + cc_minor;
  int n = 0;
  std::vector<int> archs;
  if (lib.num_supported_archs(&n) == NVRTC_SUCCESS && n > 0) {
    archs.resize(static_cast<size_t>(n));
    if (lib.supported_archs(archs.data()) != NVRTC_SUCCESS) archs.clear();
  }
  if (archs.empty() || std::find(archs.begin(), archs.end(), want) != archs.end())
    return "sm_" + std::to_string(want);
  int best = 0;
  for (int a : archs)
    if (a <= want) best = std::max(best, a);
  if (best == 0)
    throw sdk::Error(HCR_ERROR_UNSUPPORTED,
                     "NVRTC " + std::to_string(lib.major) + "." + std::to_string(lib.minor) +
                         " cannot compile for sm_" + std::to_string(want) +
                         " (its oldest architecture is sm_" +
                         std::to_string(*std::min_element(archs.begin(), archs.end())) + ")");
  return "compute_" + std::to_string(best);
}

std::string program_log(const NvrtcLib& lib, nvrtcProgram prog) {
  size_t size = 0;
  if (lib.get_program_log_size(prog, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string log(size, '\0');
  if (lib.get_program_log(prog, log.data()) != NVRTC_SUCCESS) return {};
  log.resize(std::strlen(log.c_str()));
  while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.pop_back();
  return log;
}

// Destroys the program on every path out of compile().
struct ProgramGuard {
  const NvrtcLib& lib;
  nvrtcProgram prog = nullptr;
  ~ProgramGuard() {
    if (prog != nullptr) lib.destroy_program(&prog);
  }
};

CompiledProgram compile(const NvrtcLib& lib, const std::string& kernel_name,
                        const std::string& source, const std::vector<std::string>& options,
                        const std::string& entry, const std::string& target) {
  ProgramGuard g{lib};
  const std::string file = kernel_name + ".cu";
  HCR_NVRTC_CHECK(lib.create_program(&g.prog, source.c_str(), file.c_str(), 0, nullptr, nullptr));
  // A name expression finds the entry whether it is extern "C", mangled C++ or a template
  // instance ("scale<float>"): the user names it as written in the source.
  HCR_NVRTC_CHECK(lib.add_name_expression(g.prog, entry.c_str()));
  std::vector<const char*> argv;
  for (auto& o : options) argv.push_back(o.c_str());
  nvrtcResult r = lib.compile_program(g.prog, static_cast<int>(argv.size()), argv.data());
  std::string log = program_log(lib, g.prog);
  if (r != NVRTC_SUCCESS) {
    std::string opts;
    for (auto& o : options) opts += " " + o;
    throw sdk::Error(HCR_ERROR_BACKEND, "NVRTC could not compile kernel '" + kernel_name +
                                            "' for " + target + " (" + error_text(r) +
                                            "; options:" + opts + "):\n" +
                                            (log.empty() ? "(no log)" : log));
  }
  CompiledProgram p;
  p.target = target;
  const char* lowered = nullptr;
  HCR_NVRTC_CHECK(lib.get_lowered_name(g.prog, entry.c_str(), &lowered));
  p.lowered = lowered ? lowered : entry;
  size_t size = 0;
  if (target.rfind("sm_", 0) == 0) {
    HCR_NVRTC_CHECK(lib.get_cubin_size(g.prog, &size));
    p.image.resize(size);
    HCR_NVRTC_CHECK(lib.get_cubin(g.prog, p.image.data()));
  } else {
    HCR_NVRTC_CHECK(lib.get_ptx_size(g.prog, &size));
    p.image.resize(size);  // includes the terminating NUL the loader needs
    HCR_NVRTC_CHECK(lib.get_ptx(g.prog, p.image.data()));
  }
  if (!log.empty()) p.origin = log;  // warnings; the caller logs them
  return p;
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool get_u64(const std::string& in, size_t& pos, uint64_t& v) {
  if (in.size() - pos < 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(in[pos + i])} << (8 * i);
  pos += 8;
  return true;
}

bool get_blob(const std::string& in, size_t& pos, std::string& out) {
  uint64_t n = 0;
  if (!get_u64(in, pos, n) || in.size() - pos < n) return false;
  out.assign(in, pos, n);
  pos += n;
  return true;
}

}  // namespace

std::vector<std::string> split_options(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false, have = false;
  for (char c : text) {
    if (c == '"') {
      quoted = !quoted;
      have = true;
    } else if (!quoted && (c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
      if (have) out.push_back(cur);
      cur.clear();
      have = false;
    } else {
      cur.push_back(c);
      have = true;
    }
  }
  if (have) out.push_back(cur);
  return out;
}

std::string NvrtcCache::key_hash(const std::string& key) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

NvrtcCache::NvrtcCache(fs::path dir, const sdk::Host& host) : dir_(std::move(dir)), host_(host) {}

std::optional<files::TrustedDir> NvrtcCache::open_dir(const fs::path& d, bool create) const {
  try {
    if (create) return files::TrustedDir::make(d);
    return files::TrustedDir::open(d);
  } catch (const files::FileError& e) {
    // Another user able to write here could plant a cubin we would run: said once per directory
    // and reason.
    const std::string message =
        "kernel cache " + d.string() + " not used (kernels are compiled each run): " + e.what();
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      first = refused_.insert(message).second;
    }
    if (first) host_.warn(message);
    return std::nullopt;
  }
}

std::shared_ptr<const CompiledProgram> NvrtcCache::read_file(const files::TrustedDir& dir,
                                                             const std::string& name,
                                                             const std::string& key) const {
  std::optional<std::string> data;
  try {
    data = dir.read(name, kMaxEntryBytes);
  } catch (const files::FileError& e) {  // not a regular file of ours: compiled anew, replaced
    host_.debug("kernel cache entry not used: " + std::string(e.what()));
    return nullptr;
  }
  if (!data) return nullptr;
  const size_t magic = sizeof kMagic - 1;
  if (data->size() < magic || data->compare(0, magic, kMagic) != 0) return nullptr;
  size_t pos = magic;
  std::string stored_key;
  auto p = std::make_shared<CompiledProgram>();
  if (!get_blob(*data, pos, stored_key) || stored_key != key || !get_blob(*data, pos, p->target) ||
      !get_blob(*data, pos, p->lowered) || !get_blob(*data, pos, p->image) || pos != data->size() ||
      p->image.empty())
    return nullptr;
  p->origin = dir.file(name).string();
  return p;
}

void NvrtcCache::write_file(const fs::path& d, const std::string& name, const std::string& key,
                            const CompiledProgram& p) const {
  std::optional<files::TrustedDir> dir = open_dir(d, /*create=*/true);
  if (!dir) return;
  std::string data = kMagic;
  for (const std::string* s : {&key, &p.target, &p.lowered, &p.image}) {
    put_u64(data, s->size());
    data += *s;
  }
  try {
    dir->write(name, data, 0600);  // atomic: readers see the old file or the whole new one
  } catch (const files::FileError& e) {
    host_.debug(std::string("cannot write a kernel cache file: ") + e.what());
  }
}

std::shared_ptr<const CompiledProgram> NvrtcCache::get(const std::string& kernel_name,
                                                       const std::string& source,
                                                       const std::string& build_options,
                                                       const std::string& entry, int cc_major,
                                                       int cc_minor) {
  const NvrtcLib& lib = nvrtc();
  if (!lib.ok)
    throw sdk::Error(HCR_ERROR_UNSUPPORTED, "CUDA source kernels need NVRTC: " + lib.error);
  const std::string target = pick_target(lib, cc_major, cc_minor);

  std::vector<std::string> options = {"--gpu-architecture=" + target, "--std=c++17"};
  for (const std::string& d : include_dirs()) options.push_back("--include-path=" + d);
  for (std::string& o : split_options(build_options)) options.push_back(std::move(o));

  // Everything that changes the output, each part length-prefixed so no two keys run together.
  std::string key;
  auto part = [&](const std::string& s) { key += std::to_string(s.size()) + ":" + s + "\n"; };
  part("nvrtc " + std::to_string(lib.major) + "." + std::to_string(lib.minor));
  part(target);
  for (auto& o : options) part(o);
  part(entry);
  part(source);
  const std::string hash = key_hash(key);

  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = memory_.find(hash);
    if (it != memory_.end() && it->second.first == key) return it->second.second;
  }

  const fs::path target_dir = dir_.empty() ? fs::path() : dir_ / target;
  const std::string name = hash + ".bin";
  const fs::path file = target_dir.empty() ? fs::path() : target_dir / name;
  std::shared_ptr<const CompiledProgram> program;
  if (!file.empty())
    if (std::optional<files::TrustedDir> dir = open_dir(target_dir, /*create=*/false)) {
      program = read_file(*dir, name, key);
      if (program)
        host_.debug("kernel '" + kernel_name + "' for " + target + " read from cache " +
                    file.string());
    }
  if (!program) {
    auto t0 = std::chrono::steady_clock::now();
    auto compiled = std::make_shared<CompiledProgram>(
        compile(lib, kernel_name, source, options, entry, target));
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!compiled->origin.empty())
      host_.debug("NVRTC messages for kernel '" + kernel_name + "':\n" + compiled->origin);
    compiled->origin = "compiled";
    char took[32];
    std::snprintf(took, sizeof took, "%.0f ms", ms);
    host_.debug("kernel '" + kernel_name + "' compiled for " + target + " in " + took +
                (file.empty() ? "" : ", cached in " + file.string()));
    if (!file.empty()) write_file(target_dir, name, key, *compiled);
    program = std::move(compiled);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  memory_[hash] = {key, program};
  return program;
}

}  // namespace hcr::cuda
