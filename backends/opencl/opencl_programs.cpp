// Building and loading OpenCL programs: a source program's key is a SHA-256 over everything that
// changes its binary; a build is looked up in the device's programs, then in the on-disk cache
// (rebuilt from source, with a warning, when an entry is damaged, untrusted or rejected by the
// driver), then made and stored. Prebuilt binaries are read with hcr::files' size cap.
#include "opencl_programs.hpp"

#include "cl_error.hpp"
#include "cl_info.hpp"
#include "safe_file.hpp"
#include "sha256.hpp"

#include <chrono>
#include <mutex>
#include <vector>

namespace hcr::opencl {
namespace {

using sdk::Error;

// A program binary named by the application or the configuration: a regular file (a FIFO or a
// device is refused unopened) of at most the program cache's largest entry.
std::vector<unsigned char> read_file(const std::filesystem::path& path, const std::string& what) {
  std::string text;
  try {
    text = files::read_file(path, ProgramCache::kMaxEntryBytes);
  } catch (const files::FileError& e) {
    throw Error(HCR_ERROR_BACKEND, what + ": cannot read the program binary: " + e.what());
  }
  if (text.empty()) throw Error(HCR_ERROR_BACKEND, what + ": '" + path.string() + "' is empty");
  return std::vector<unsigned char>(text.begin(), text.end());
}

// Builds `program` for `d`; on failure throws HCR_ERROR_BACKEND with the compiler's log.
void build(Device& d, cl_program program, const std::string& options, const std::string& what) {
  cl_int err = clBuildProgram(program, 1, &d.id, options.c_str(), nullptr, nullptr);
  if (err == CL_SUCCESS) return;
  std::string log = build_log(program, d.id);
  throw Error(HCR_ERROR_BACKEND,
              "building " + what + " for OpenCL device '" + d.name +
                  "' failed: " + cl_error_text("clBuildProgram", err) +
                  (log.empty() ? std::string(" (no build log)") : "; build log:\n" + log));
}

Program create_from_binary(Device& d, const std::vector<unsigned char>& bin) {
  const unsigned char* ptr = bin.data();
  const size_t size = bin.size();
  cl_int status = CL_SUCCESS;
  Program p(cl_create("clCreateProgramWithBinary", [&](cl_int* e) {
    return clCreateProgramWithBinary(d.context, 1, &d.id, &size, &ptr, &status, e);
  }));
  if (status != CL_SUCCESS) throw_cl(status, "clCreateProgramWithBinary (binary status)");
  return p;
}

// The cache key: everything that changes the compiled binary.
std::string cache_key(const Device& d, const Platform& p, const std::string& source,
                      const std::string& options) {
  return Sha256()
      .field("hcr-opencl-program-1")
      .field(source)
      .field(options)
      .field(d.name)
      .field(d.vendor)
      .field(d.version)
      .field(d.driver)
      .field(p.name)
      .field(p.version)
      .hex();
}

}  // namespace

// Source programs are built with -cl-kernel-arg-info: the program then keeps each argument's name
// and type (a cached binary too, where it is rebuilt with the same options), so that a launch that
// does not fit names them (kernel_args.hpp). Part of the program cache key, as every option is.
std::string with_arg_info(std::string options) {
  if (options.find("-cl-kernel-arg-info") == std::string::npos)
    options += options.empty() ? "-cl-kernel-arg-info" : " -cl-kernel-arg-info";
  return options;
}

Programs::Programs(const std::filesystem::path& cache_dir, const sdk::Host& host)
    : host_(host), cache_(cache_dir) {
  // Cached binaries are loaded and run: a directory another user owns or may write into could
  // feed us their code (the loader refuses world-writable plugin directories likewise). Checked
  // here once for the warning, and again by every load and store.
  if (std::string why = cache_.check(); !why.empty()) {
    host_.warn("opencl: cache_dir '" + cache_.dir().string() +
               "' not used (program cache disabled): " + why);
    cache_ = ProgramCache();
  }
}

Programs::~Programs() {
  if (cache_hits_ + cache_misses_ > 0)
    host_.debug("opencl: program cache: " + std::to_string(cache_hits_.load()) + " hit(s), " +
                std::to_string(cache_misses_.load()) + " build(s) from source");
}

Program Programs::from_source(Device& d, const Platform& p, const std::string& source,
                              const std::string& options, const std::string& what) {
  const std::string key = cache_key(d, p, source, options);
  std::lock_guard<std::mutex> lock(d.build_mutex);
  if (auto it = d.programs.find(key); it != d.programs.end()) return it->second;

  auto entry = cache_.load(key);
  if (entry.status == ProgramCache::Status::corrupt) {
    host_.warn("opencl: corrupt program cache entry '" + cache_.file(key).string() + "' (" +
               entry.why + "): rebuilding " + what + " from source");
  } else if (entry.status == ProgramCache::Status::refused) {
    host_.warn("opencl: program cache entry not used (" + entry.why + "): rebuilding " + what +
               " from source");
  } else if (entry.status == ProgramCache::Status::hit) {
    try {
      Program program = create_from_binary(d, entry.binary);
      build(d, program.get(), options, what + " (cached binary)");
      host_.debug("opencl: program cache hit: " + what + " on '" + d.name + "' from '" +
                  cache_.file(key).string() + "'");
      ++cache_hits_;
      d.programs.emplace(key, program);
      return program;
    } catch (const Error& e) {
      host_.warn("opencl: program cache entry '" + cache_.file(key).string() +
                 "' rejected by the driver (" + e.what() + "): rebuilding " + what +
                 " from source");
    }
  }

  const char* text = source.c_str();
  const size_t length = source.size();
  Program program(cl_create("clCreateProgramWithSource", [&](cl_int* e) {
    return clCreateProgramWithSource(d.context, 1, &text, &length, e);
  }));
  const auto t0 = std::chrono::steady_clock::now();
  build(d, program.get(), options, what);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++cache_misses_;
  std::string stored = "not cached (cache_dir = \"\")";
  if (cache_.enabled()) {
    std::string err;
    try {
      err = cache_.store(key, program_binary(program.get()));
    } catch (const Error& e) {
      err = e.what();
    }
    if (err.empty()) {
      stored = "stored in '" + cache_.file(key).string() + "'";
    } else {
      host_.warn("opencl: cannot cache the binary of " + what + ": " + err);
      stored = "not cached";
    }
  }
  host_.debug("opencl: program cache miss: built " + what + " on '" + d.name + "' from source in " +
              std::to_string(secs) + " s; " + stored);
  d.programs.emplace(key, program);
  return program;
}

Program Programs::from_binary(Device& d, const std::filesystem::path& path,
                              const std::string& options, const std::string& what) {
  const std::string key = "binary:" + path.string() + "\n" + options;
  std::lock_guard<std::mutex> lock(d.build_mutex);
  if (auto it = d.programs.find(key); it != d.programs.end()) return it->second;
  const auto bin = read_file(path, what);
  Program p;
  try {
    p = create_from_binary(d, bin);
  } catch (const Error& e) {
    throw Error(HCR_ERROR_BACKEND, what + ": '" + path.string() +
                                       "' is not a program binary for OpenCL device '" + d.name +
                                       "': " + e.what());
  }
  build(d, p.get(), options, what + " ('" + path.string() + "')");
  d.programs.emplace(key, p);
  return p;
}

}  // namespace hcr::opencl
