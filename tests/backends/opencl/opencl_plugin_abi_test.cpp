// The OpenCL backend at the plugin ABI, loaded with dlopen like the runtime would: zero devices
// without failing, 2-D copies in, out and within device memory at offsets and pitches, copy and
// launch errors, `done` handlers that call straight back into the plugin, synchronize and
// destruction waiting for everything, profiled durations, sub-buffers for argument offsets, which
// kernel kinds are refused with which code, and the BLAS built-ins on CLBlast (gemm with
// transposes, syrk, trsm) against a double-precision reference at odd sizes in every
// trans/uplo/side/diag combination, f64 where the device has it.
#include <hcr/plugin.h>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using Options = std::vector<std::pair<std::string, std::string>>;

const hcr_plugin_api_t* ocl_api() {
  static const hcr_plugin_api_t* api = [] {
    void* lib = dlopen(HCR_TEST_PLUGIN_DIR "/libhcr-opencl.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return static_cast<const hcr_plugin_api_t*>(nullptr);
    auto get = reinterpret_cast<hcr_plugin_get_api_fn>(dlsym(lib, HCR_PLUGIN_ENTRY_SYMBOL));
    return get ? get() : nullptr;
  }();
  return api;
}

struct Status {
  int code = 0;
  std::string message;
};

Status take(hcr_error_t* e) {
  if (e == nullptr) return {};
  const hcr_plugin_api_t* api = ocl_api();
  Status s{static_cast<int>(api->error_code(e)), api->error_message(e)};
  api->error_destroy(e);
  return s;
}

/// One `done` callback: how often, with what.
class Done {
 public:
  static void fn(void* user, hcr_error_t* error, const hcr_completion_info_t* info) {
    auto* self = static_cast<Done*>(user);
    Status s = take(error);
    std::lock_guard<std::mutex> lock(self->mutex_);
    ++self->calls_;
    self->status_ = s;
    self->seconds_ = info ? info->device_seconds : -1;
    self->cv_.notify_all();
  }
  bool wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, std::chrono::seconds(120), [&] { return calls_ > 0; });
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }
  Status status() {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_;
  }
  double seconds() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seconds_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int calls_ = 0;
  Status status_;
  double seconds_ = -1;
};

void log_nothing(void*, hcr_log_level_t, const char*) {}

class Ocl {
 public:
  explicit Ocl(Options options) : api_(ocl_api()) {
    services_.struct_size = HCR_HOST_SERVICES_STRUCT_SIZE;
    services_.abi_major = HCR_ABI_MAJOR;
    services_.abi_minor = HCR_ABI_MINOR;
    services_.log = &log_nothing;
    services_.log_level = HCR_LOG_OFF;
    std::vector<hcr_option_t> opts;
    for (auto& [k, v] : options) opts.push_back({HCR_OPTION_STRUCT_SIZE, k.c_str(), v.c_str()});
    hcr_plugin_create_args_t a{};
    a.struct_size = HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE;
    a.services = &services_;
    a.options = opts.data();
    a.num_options = opts.size();
    a.library_path = "";
    created_ = take(api_->plugin_create(&a));
    p_ = a.plugin;
  }
  ~Ocl() { destroy(); }
  void destroy() {
    if (p_ == nullptr) return;
    for (hcr_kernel_t* k : kernels_) api_->kernel_release(p_, k);
    kernels_.clear();
    api_->plugin_destroy(p_);
    p_ = nullptr;
  }
  const Status& created() const { return created_; }
  size_t count() {
    size_t n = 0;
    EXPECT_EQ(take(api_->device_count(p_, &n)).code, 0);
    return n;
  }
  hcr_memory_t* alloc(uint64_t bytes) {
    hcr_mem_alloc_args_t a{};
    a.struct_size = HCR_MEM_ALLOC_ARGS_STRUCT_SIZE;
    a.bytes = bytes;
    Status s = take(api_->mem_alloc(p_, &a));
    EXPECT_EQ(s.code, 0) << s.message;
    return a.memory;
  }
  void free(hcr_memory_t* m) { api_->mem_free(p_, 0, m); }

  struct End {
    hcr_memory_t* memory = nullptr;
    void* host = nullptr;
    uint64_t offset = 0;
    uint64_t pitch = 0;
  };
  static hcr_copy_args_t copy_args(End src, End dst, uint64_t width, uint64_t rows, hcr_done_fn fn,
                                   void* user) {
    hcr_copy_args_t a{};
    a.struct_size = HCR_COPY_ARGS_STRUCT_SIZE;
    a.src_memory = src.memory;
    a.src_host = src.host;
    a.src_offset = src.offset;
    a.src_pitch = src.pitch;
    a.dst_memory = dst.memory;
    a.dst_host = dst.host;
    a.dst_offset = dst.offset;
    a.dst_pitch = dst.pitch;
    a.width = width;
    a.rows = rows;
    a.done = fn;
    a.done_user_data = user;
    return a;
  }
  Status copy(End src, End dst, uint64_t width, uint64_t rows, Done& done) {
    auto a = copy_args(src, dst, width, rows, &Done::fn, &done);
    return take(api_->copy(p_, &a));
  }
  void copy_sync(End src, End dst, uint64_t width, uint64_t rows) {
    Done d;
    Status s = copy(src, dst, width, rows, d);
    ASSERT_EQ(s.code, 0) << s.message;
    ASSERT_TRUE(d.wait());
    ASSERT_EQ(d.status().code, 0) << d.status().message;
  }
  std::pair<Status, hcr_kernel_t*> kernel(const hcr_kernel_desc_t& desc) {
    hcr_kernel_get_args_t a{};
    a.struct_size = HCR_KERNEL_GET_ARGS_STRUCT_SIZE;
    a.desc = &desc;
    Status s = take(api_->kernel_get(p_, &a));
    if (s.code == 0) kernels_.push_back(a.kernel);
    return {s, a.kernel};
  }
  static hcr_kernel_desc_t desc(const char* name, hcr_impl_kind_t kind, const char* api) {
    hcr_kernel_desc_t d{};
    d.struct_size = HCR_KERNEL_DESC_STRUCT_SIZE;
    d.name = name;
    d.kind = kind;
    d.api = api;
    return d;
  }
  Status launch(hcr_launch_args_t& a) {
    a.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
    return take(api_->launch(p_, &a));
  }
  Status synchronize() { return take(api_->synchronize(p_, 0)); }
  hcr_plugin_t* plugin() const { return p_; }
  const hcr_plugin_api_t* api() const { return api_; }

 private:
  const hcr_plugin_api_t* api_;
  hcr_host_services_t services_{};
  Status created_;
  hcr_plugin_t* p_ = nullptr;
  std::vector<hcr_kernel_t*> kernels_;
};

Options all_types() { return {{"device_types", "all"}, {"cache_dir", ""}}; }

/// A plugin instance with at least one device, or skip.
#define OPEN_DEVICE(name)                                      \
  ASSERT_NE(ocl_api(), nullptr) << dlerror();                  \
  Ocl name(all_types());                                       \
  ASSERT_EQ(name.created().code, 0) << name.created().message; \
  if (name.count() == 0) GTEST_SKIP() << "no OpenCL device on this machine"

hcr_arg_t arg(hcr_memory_t* m, hcr_dtype_t t, hcr_access_t access, uint64_t rows, uint64_t cols,
              uint64_t offset = 0) {
  hcr_arg_t a{};
  a.struct_size = HCR_ARG_STRUCT_SIZE;
  a.memory = m;
  a.offset = offset;
  a.dtype = t;
  a.access = access;
  a.rows = rows;
  a.cols = cols;
  a.ld = cols;
  return a;
}

TEST(OpenClPluginAbi, NoMatchingDeviceIsZeroDevicesNotAnError) {
  ASSERT_NE(ocl_api(), nullptr) << dlerror();
  Ocl p(Options{{"device", "no-such-device-xyz"}, {"cache_dir", ""}});
  ASSERT_EQ(p.created().code, 0) << p.created().message;
  EXPECT_EQ(p.count(), 0u);
  Ocl bad(Options{{"queues", "100"}});
  EXPECT_EQ(bad.created().code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(bad.created().message.find("'queues'"), std::string::npos) << bad.created().message;
}

TEST(OpenClPluginAbi, TwoDimensionalCopiesAtOffsetsAndPitches) {
  OPEN_DEVICE(p);
  // Host: 6 rows of 40 bytes; we move a 5 x 24-byte window starting at (1, 8).
  std::vector<unsigned char> host(6 * 40);
  std::iota(host.begin(), host.end(), 0);
  hcr_memory_t* a = p.alloc(16 + 5 * 32);
  hcr_memory_t* b = p.alloc(5 * 24);
  // host (pitch 40) -> a at offset 16 (pitch 32) -> b (pitch 24, dense) -> host (pitch 48)
  p.copy_sync({nullptr, host.data() + 40 + 8, 0, 40}, {a, nullptr, 16, 32}, 24, 5);
  p.copy_sync({a, nullptr, 16, 32}, {b, nullptr, 0, 24}, 24, 5);
  std::vector<unsigned char> back(5 * 48, 0xee);
  p.copy_sync({b, nullptr, 0, 24}, {nullptr, back.data(), 0, 48}, 24, 5);
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 48; ++c)
      ASSERT_EQ(back[r * 48 + c], c < 24 ? host[(r + 1) * 40 + 8 + c] : 0xee) << r << "," << c;
  // One row: the 1-D path, at an offset.
  std::vector<unsigned char> one(10);
  p.copy_sync({b, nullptr, 30, 0}, {nullptr, one.data(), 0, 0}, 10, 1);
  for (int c = 0; c < 10; ++c) ASSERT_EQ(one[c], host[(1 + 1) * 40 + 8 + 6 + c]);

  Done d;
  Status s = p.copy({nullptr, host.data(), 0, 40}, {a, nullptr, 16, 32}, 24, 6, d);
  EXPECT_EQ(s.code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("overrun the allocation"), std::string::npos) << s.message;
  s = p.copy({nullptr, host.data(), 0, 40}, {nullptr, back.data(), 0, 40}, 8, 1, d);
  EXPECT_EQ(s.code, HCR_ERROR_INVALID_ARGUMENT);
  s = p.copy({nullptr, host.data(), 0, 10}, {a, nullptr, 0, 32}, 24, 2, d);
  EXPECT_EQ(s.code, HCR_ERROR_INVALID_ARGUMENT) << "pitch below width";
  EXPECT_EQ(d.calls(), 0) << "a refused copy never calls done";
  p.free(a);
  p.free(b);
}

// Each copy's done starts the next copy from inside the handler: the plugin must call done with
// none of its locks held and from a thread where enqueueing is safe.
struct Chain {
  Ocl* p;
  hcr_memory_t* mem;
  std::vector<uint32_t>* host;
  std::atomic<int> left;
  std::atomic<int> errors{0};
  static void step(void* user, hcr_error_t* error, const hcr_completion_info_t*) {
    auto* c = static_cast<Chain*>(user);
    if (error != nullptr) {
      take(error);
      c->errors.fetch_add(1);
      return;
    }
    const int prev = c->left.fetch_sub(1);  // copies still to finish, this one included
    if (prev <= 1) return;
    const int i = prev - 2;
    auto a = Ocl::copy_args({nullptr, c->host->data() + i, 0, 0},
                            {c->mem, nullptr, static_cast<uint64_t>(i) * 4, 0}, 4, 1, &step, c);
    if (hcr_error_t* e = c->p->api()->copy(c->p->plugin(), &a)) {
      take(e);
      c->errors.fetch_add(1);
    }
  }
};

TEST(OpenClPluginAbi, DoneMayCallBackIntoThePluginAndSynchronizeWaitsForAll) {
  OPEN_DEVICE(p);
  const int n = 300;
  std::vector<uint32_t> host(n);
  std::iota(host.begin(), host.end(), 1000u);
  hcr_memory_t* mem = p.alloc(n * 4);
  Chain c{&p, mem, &host, {n}};
  auto a =
      Ocl::copy_args({nullptr, host.data() + n - 1, 0, 0},
                     {mem, nullptr, static_cast<uint64_t>(n - 1) * 4, 0}, 4, 1, &Chain::step, &c);
  ASSERT_EQ(take(p.api()->copy(p.plugin(), &a)).code, 0);
  // synchronize() returns only once the whole chain has run, each link started from a done.
  ASSERT_EQ(p.synchronize().code, 0);
  EXPECT_LE(c.left.load(), 0);
  EXPECT_EQ(c.errors.load(), 0);
  std::vector<uint32_t> back(n);
  p.copy_sync({mem, nullptr, 0, 0}, {nullptr, back.data(), 0, 0}, n * 4, 1);
  EXPECT_EQ(back, host);
  p.free(mem);
}

TEST(OpenClPluginAbi, DestructionWaitsForOutstandingOperations) {
  ASSERT_NE(ocl_api(), nullptr);
  auto p = std::make_unique<Ocl>(all_types());
  ASSERT_EQ(p->created().code, 0);
  if (p->count() == 0) GTEST_SKIP() << "no OpenCL device on this machine";
  std::vector<float> host(1 << 16, 1.0f);
  hcr_memory_t* mem = p->alloc(host.size() * 4);
  std::vector<Done> done(50);
  for (auto& d : done)
    ASSERT_EQ(
        p->copy({nullptr, host.data(), 0, 0}, {mem, nullptr, 0, 0}, host.size() * 4, 1, d).code, 0);
  p->destroy();  // without synchronize, and leaving the allocation to the plugin to free
  for (auto& d : done) EXPECT_EQ(d.calls(), 1);
}

const char* kSource = R"CL(
__kernel void scale(__global float* x, float a) { x[get_global_id(0)] *= a; }
)CL";

TEST(OpenClPluginAbi, KernelKindsAndCodes) {
  OPEN_DEVICE(p);
  auto host = Ocl::desc("h", HCR_IMPL_HOST_FUNCTION, "host");
  EXPECT_EQ(p.kernel(host).first.code, HCR_ERROR_UNSUPPORTED);
  auto native = Ocl::desc("n", HCR_IMPL_NATIVE_FUNCTION, "opencl");
  EXPECT_EQ(p.kernel(native).first.code, HCR_ERROR_UNSUPPORTED);
  auto unknown = Ocl::desc("gemm_f99", HCR_IMPL_BUILTIN, nullptr);
  EXPECT_EQ(p.kernel(unknown).first.code, HCR_ERROR_NOT_FOUND);
  auto cuda = Ocl::desc("scale", HCR_IMPL_SOURCE, "cuda");
  cuda.source = kSource;
  cuda.source_size = std::strlen(kSource);
  EXPECT_EQ(p.kernel(cuda).first.code, HCR_ERROR_UNSUPPORTED);
  auto bad = Ocl::desc("scale", HCR_IMPL_SOURCE, "opencl");
  bad.source = "__kernel void scale(__global float* x) { x[0] = nope; }";
  bad.source_size = std::strlen(bad.source);
  Status s = p.kernel(bad).first;
  EXPECT_EQ(s.code, HCR_ERROR_BACKEND);
  EXPECT_NE(s.message.find("build log"), std::string::npos) << s.message;
}

TEST(OpenClPluginAbi, ArgumentOffsetsUseSubBuffersAndMeasuredDurations) {
  OPEN_DEVICE(p);
  auto d = Ocl::desc("scale", HCR_IMPL_SOURCE, "opencl");
  d.source = kSource;
  d.source_size = std::strlen(kSource);
  auto [s, k] = p.kernel(d);
  ASSERT_EQ(s.code, 0) << s.message;
  const size_t n = 4096;
  std::vector<float> host(n, 2.0f);
  hcr_memory_t* mem = p.alloc(n * 4);
  p.copy_sync({nullptr, host.data(), 0, 0}, {mem, nullptr, 0, 0}, n * 4, 1);

  // The second half, through a sub-buffer (offset 8 KiB is aligned on every device).
  std::vector<hcr_arg_t> args = {arg(mem, HCR_DTYPE_F32, HCR_ACCESS_READ_WRITE, 1, n / 2, n * 2)};
  const float three = 3.0f;
  const uint32_t offsets[] = {0};
  Done done;
  hcr_launch_args_t a{};
  a.kernel = k;
  a.args = args.data();
  a.num_args = 1;
  a.params = &three;
  a.params_size = sizeof three;
  a.param_offsets = offsets;
  a.num_params = 1;
  a.flags = HCR_LAUNCH_MEASURE;
  a.done = &Done::fn;
  a.done_user_data = &done;
  Status ls = p.launch(a);
  ASSERT_EQ(ls.code, 0) << ls.message;
  ASSERT_TRUE(done.wait());
  ASSERT_EQ(done.status().code, 0) << done.status().message;
  EXPECT_GT(done.seconds(), 0) << "profiled duration with HCR_LAUNCH_MEASURE";
  std::vector<float> back(n);
  p.copy_sync({mem, nullptr, 0, 0}, {nullptr, back.data(), 0, 0}, n * 4, 1);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], i < n / 2 ? 2.0f : 6.0f) << i;

  // An offset no sub-buffer can start at is refused, saying why.
  args[0].offset = 4;
  args[0].cols = 8;
  Done never;
  a.done_user_data = &never;
  ls = p.launch(a);
  EXPECT_EQ(ls.code, HCR_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(ls.message.find("alignment"), std::string::npos) << ls.message;
  EXPECT_EQ(never.calls(), 0);
  p.free(mem);
}

TEST(OpenClPluginAbi, GemmReportsItsProfiledDuration) {
  OPEN_DEVICE(p);
  auto d = Ocl::desc("gemm_f32", HCR_IMPL_BUILTIN, nullptr);
  auto [s, k] = p.kernel(d);
  ASSERT_EQ(s.code, 0) << s.message;
  const size_t n = 64;
  std::vector<float> ones(n * n, 1.0f), out(n * n, 0.0f);
  hcr_memory_t* A = p.alloc(n * n * 4);
  hcr_memory_t* C = p.alloc(n * n * 4);
  p.copy_sync({nullptr, ones.data(), 0, 0}, {A, nullptr, 0, 0}, n * n * 4, 1);
  std::vector<hcr_arg_t> args = {arg(A, HCR_DTYPE_F32, HCR_ACCESS_READ, n, n),
                                 arg(A, HCR_DTYPE_F32, HCR_ACCESS_READ, n, n),
                                 arg(C, HCR_DTYPE_F32, HCR_ACCESS_READ_WRITE, n, n)};
  hcr_gemm_params_t gp{HCR_GEMM_PARAMS_STRUCT_SIZE, 2.0, 0.0};
  for (uint32_t flags : {0u, HCR_LAUNCH_MEASURE}) {
    Done done;
    hcr_launch_args_t a{};
    a.kernel = k;
    a.args = args.data();
    a.num_args = 3;
    a.params = &gp;
    a.params_size = sizeof gp;
    a.flags = flags;
    a.done = &Done::fn;
    a.done_user_data = &done;
    Status ls = p.launch(a);
    ASSERT_EQ(ls.code, 0) << ls.message;
    ASSERT_TRUE(done.wait());
    ASSERT_EQ(done.status().code, 0) << done.status().message;
    if (flags) EXPECT_GT(done.seconds(), 0);
    else EXPECT_LT(done.seconds(), 0) << "no measurement unless asked";
  }
  p.copy_sync({C, nullptr, 0, 0}, {nullptr, out.data(), 0, 0}, n * n * 4, 1);
  for (float f : out) ASSERT_EQ(f, 2.0f * n);
  p.free(A);
  p.free(C);
}

// ---- BLAS built-ins ---------------------------------------------------------------------------

const double kNaN = std::numeric_limits<double>::quiet_NaN();

size_t esize(hcr_dtype_t t) { return t == HCR_DTYPE_F64 ? 8 : 4; }
double unit(hcr_dtype_t t) {
  return t == HCR_DTYPE_F64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
}
std::string kernel_name(const char* op, hcr_dtype_t t) {
  return std::string(op) + (t == HCR_DTYPE_F64 ? "_f64" : "_f32");
}

/// A rows x cols matrix of `t` in device memory, `ld` elements between row starts, from byte
/// `offset` of its own allocation. The host keeps the image it uploaded: the padding between rows
/// and the bytes before the matrix hold a pattern that must come back unchanged.
struct Mat {
  hcr_dtype_t t = HCR_DTYPE_F32;
  uint64_t rows = 0, cols = 0, ld = 0, offset = 0;
  hcr_memory_t* mem = nullptr;
  std::vector<unsigned char> image;

  size_t at(uint64_t i, uint64_t j) const { return offset + (i * ld + j) * esize(t); }
  double operator()(uint64_t i, uint64_t j) const {
    if (t == HCR_DTYPE_F64) {
      double d;
      std::memcpy(&d, &image[at(i, j)], 8);
      return d;
    }
    float f;
    std::memcpy(&f, &image[at(i, j)], 4);
    return f;
  }
  hcr_arg_t arg(hcr_access_t access) const {
    hcr_arg_t a = ::arg(mem, t, access, rows, cols, offset);
    a.ld = ld;
    return a;
  }
};

/// Uploads value(i, j) with `pad` elements of padding per row and 40 bytes before (whole elements
/// of either type, as CLBlast's offsets are).
Mat upload(Ocl& p, hcr_dtype_t t, uint64_t rows, uint64_t cols, uint64_t pad,
           const std::function<double(uint64_t, uint64_t)>& value) {
  Mat m;
  m.t = t;
  m.rows = rows;
  m.cols = cols;
  m.ld = cols + pad;
  m.offset = 40;
  m.image.resize(m.offset + std::max<uint64_t>(rows * m.ld, 1) * esize(t));
  for (size_t i = 0; i < m.image.size(); ++i) m.image[i] = static_cast<unsigned char>(i * 37 + 11);
  for (uint64_t i = 0; i < rows; ++i)
    for (uint64_t j = 0; j < cols; ++j) {
      const double v = value(i, j);
      if (t == HCR_DTYPE_F64) {
        std::memcpy(&m.image[m.at(i, j)], &v, 8);
      } else {
        const float f = static_cast<float>(v);
        std::memcpy(&m.image[m.at(i, j)], &f, 4);
      }
    }
  m.mem = p.alloc(m.image.size());
  p.copy_sync({nullptr, m.image.data(), 0, 0}, {m.mem, nullptr, 0, 0}, m.image.size(), 1);
  return m;
}

/// The matrix as the device holds it now; the bytes around it are checked unchanged.
Mat download(Ocl& p, const Mat& m) {
  Mat out = m;
  p.copy_sync({m.mem, nullptr, 0, 0}, {nullptr, out.image.data(), 0, 0}, out.image.size(), 1);
  size_t touched = 0;
  for (size_t b = 0; b < m.offset; ++b) touched += out.image[b] != m.image[b];
  for (uint64_t i = 0; i < m.rows; ++i)
    for (uint64_t j = m.cols; j < m.ld; ++j)
      touched += std::memcmp(&out.image[m.at(i, j)], &m.image[m.at(i, j)], esize(m.t)) != 0;
  EXPECT_EQ(touched, 0u) << "bytes outside the matrix (padding between rows, before it) changed";
  return out;
}

double uniform() {
  static std::mt19937 gen(20240916);
  return std::uniform_real_distribution<double>(-1, 1)(gen);
}

/// Counts the elements outside tolerance, reporting the first few.
class Mismatches {
 public:
  void check(double got, double want, double tol, uint64_t i, uint64_t j) {
    if (std::abs(got - want) <= tol) return;
    if (count_++ < 5)
      ADD_FAILURE() << "(" << i << "," << j << ") = " << got << ", want " << want << " +- " << tol;
  }
  /// An element outside what the kernel may write: still what it was (NaN stays NaN).
  void same(double got, double before, uint64_t i, uint64_t j) {
    if (got == before || (std::isnan(got) && std::isnan(before))) return;
    if (count_++ < 5)
      ADD_FAILURE() << "(" << i << "," << j << ") = " << got << " changed from " << before;
  }
  size_t count() const { return count_; }

 private:
  size_t count_ = 0;
};

/// The plugin with every device type, and which precisions its first device offers.
class OpenClBlas : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(ocl_api(), nullptr) << dlerror();
    p_ = std::make_unique<Ocl>(all_types());
    ASSERT_EQ(p_->created().code, 0) << p_->created().message;
    if (p_->count() == 0) GTEST_SKIP() << "no OpenCL device on this machine";
  }
  void TearDown() override {
    if (p_) p_->destroy();
    if (!no_f64_.empty()) GTEST_SKIP() << "f64 cases not run: " << no_f64_;
  }
  Ocl& p() { return *p_; }
  /// The element types to test: f32, and f64 where the device offers it (else the test says why
  /// it skipped those).
  std::vector<hcr_dtype_t> types() {
    std::vector<hcr_dtype_t> out = {HCR_DTYPE_F32};
    auto d = Ocl::desc("gemm_f64", HCR_IMPL_BUILTIN, nullptr);
    auto [s, k] = p().kernel(d);
    if (s.code == 0) out.push_back(HCR_DTYPE_F64);
    else no_f64_ = s.message;
    return out;
  }
  /// Launches built-in `name` (measured) and waits: the starting call's error, else done's.
  /// Without `offsets` the parameter bytes go as one block without offsets, as a host may send.
  Status run(const std::string& name, std::vector<hcr_arg_t> args, const void* params, size_t size,
             const uint32_t* offsets = nullptr, size_t num_params = 0) {
    auto d = Ocl::desc(name.c_str(), HCR_IMPL_BUILTIN, nullptr);
    auto [s, k] = p().kernel(d);
    if (s.code != 0) return s;
    Done done;
    hcr_launch_args_t a{};
    a.kernel = k;
    a.args = args.data();
    a.num_args = args.size();
    a.params = params;
    a.params_size = size;
    a.param_offsets = offsets;
    a.num_params = num_params;
    a.flags = HCR_LAUNCH_MEASURE;
    a.done = &Done::fn;
    a.done_user_data = &done;
    Status ls = p().launch(a);
    if (ls.code != 0) return ls;
    EXPECT_TRUE(done.wait());
    EXPECT_EQ(done.calls(), 1);
    if (done.status().code == 0) {
      EXPECT_GE(done.seconds(), 0) << "profiled duration with HCR_LAUNCH_MEASURE";
    }
    return done.status();
  }
  template <class P>
  Status run(const std::string& name, std::vector<hcr_arg_t> args, const P& params) {
    return run(name, std::move(args), &params, sizeof params);
  }
  void free(Mat& m) { p().free(m.mem); }

  std::unique_ptr<Ocl> p_;
  std::string no_f64_;
};

TEST_F(OpenClBlas, GemmWithEveryTranspose) {
  for (hcr_dtype_t dt : types())
    for (auto [m, k, n] : {std::tuple<uint64_t, uint64_t, uint64_t>{1, 1, 1},
                           {7, 5, 3},
                           {33, 17, 65},
                           {65, 40, 33},
                           {5, 0, 7}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (double beta : {-0.5, 0.0}) {
            SCOPED_TRACE(kernel_name("gemm", dt) + " " + std::to_string(m) + "x" +
                         std::to_string(k) + "x" + std::to_string(n) + (ta ? " trans_a" : "") +
                         (tb ? " trans_b" : "") + " beta " + std::to_string(beta));
            const double alpha = 1.5;
            auto random = [](auto, auto) { return uniform(); };
            Mat A = upload(p(), dt, ta ? k : m, ta ? m : k, 3, random);
            Mat B = upload(p(), dt, tb ? n : k, tb ? k : n, 1, random);
            // With beta = 0, C starts as NaN: it must not be read.
            Mat C =
                upload(p(), dt, m, n, 5, [&](auto, auto) { return beta == 0 ? kNaN : uniform(); });
            hcr_gemm_params_t params{HCR_GEMM_PARAMS_STRUCT_SIZE, alpha, beta,
                                     ta ? HCR_TRANS : HCR_NO_TRANS, tb ? HCR_TRANS : HCR_NO_TRANS};
            Status s =
                run(kernel_name("gemm", dt),
                    {A.arg(HCR_ACCESS_READ), B.arg(HCR_ACCESS_READ), C.arg(HCR_ACCESS_READ_WRITE)},
                    params);
            ASSERT_EQ(s.code, 0) << s.message;
            Mat out = download(p(), C);
            Mismatches bad;
            for (uint64_t i = 0; i < m; ++i)
              for (uint64_t j = 0; j < n; ++j) {
                double want = beta == 0 ? 0 : beta * C(i, j), scale = std::abs(want);
                for (uint64_t q = 0; q < k; ++q) {
                  const double x = alpha * (ta ? A(q, i) : A(i, q)) * (tb ? B(j, q) : B(q, j));
                  want += x;
                  scale += std::abs(x);
                }
                bad.check(out(i, j), want, 2.0 * (k + 2) * unit(dt) * scale + 1e-300, i, j);
              }
            EXPECT_EQ(bad.count(), 0u);
            free(A);
            free(B);
            free(C);
          }
}

// An ABI 1.0 caller's block ends at beta: it means no transposes, whatever lies past its end.
TEST_F(OpenClBlas, GemmAcceptsTheAbi10ParameterBlock) {
  const uint64_t m = 9, k = 6, n = 5;
  Mat A = upload(p(), HCR_DTYPE_F32, m, k, 2, [](auto i, auto j) { return 1.0 + i - 0.5 * j; });
  Mat B = upload(p(), HCR_DTYPE_F32, k, n, 0, [](auto i, auto j) { return 0.25 * i + j; });
  hcr_gemm_params_t params{HCR_GEMM_PARAMS_STRUCT_SIZE_1_0, 2.0, 0.0, HCR_TRANS, HCR_TRANS};
  for (size_t size : {size_t{HCR_GEMM_PARAMS_STRUCT_SIZE_1_0}, sizeof params}) {
    SCOPED_TRACE("params_size " + std::to_string(size));
    Mat C = upload(p(), HCR_DTYPE_F32, m, n, 1, [](auto, auto) { return kNaN; });
    Status s = run("gemm_f32",
                   {A.arg(HCR_ACCESS_READ), B.arg(HCR_ACCESS_READ), C.arg(HCR_ACCESS_READ_WRITE)},
                   &params, size);
    ASSERT_EQ(s.code, 0) << s.message;
    Mat out = download(p(), C);
    Mismatches bad;
    for (uint64_t i = 0; i < m; ++i)
      for (uint64_t j = 0; j < n; ++j) {
        double want = 0;
        for (uint64_t q = 0; q < k; ++q) want += 2.0 * A(i, q) * B(q, j);
        bad.check(out(i, j), want, 1e-5 * (1 + std::abs(want)), i, j);
      }
    EXPECT_EQ(bad.count(), 0u);
    free(C);
  }
  free(A);
  free(B);
}

TEST_F(OpenClBlas, SyrkInEveryUploAndTrans) {
  for (hcr_dtype_t dt : types())
    for (auto [n, k] : {std::pair<uint64_t, uint64_t>{1, 1}, {7, 3}, {33, 65}, {65, 17}, {6, 0}})
      for (bool upper : {false, true})
        for (bool trans : {false, true})
          for (double beta : {0.75, 0.0}) {
            SCOPED_TRACE(kernel_name("syrk", dt) + " n " + std::to_string(n) + " k " +
                         std::to_string(k) + (upper ? " upper" : " lower") +
                         (trans ? " trans" : "") + " beta " + std::to_string(beta));
            const double alpha = -1.25;
            Mat A = upload(p(), dt, trans ? k : n, trans ? n : k, 2,
                           [](auto, auto) { return uniform(); });
            // The other triangle holds NaN: neither read nor written. With beta = 0 all of C is
            // NaN: not read at all.
            Mat C = upload(p(), dt, n, n, 3, [&](uint64_t i, uint64_t j) {
              const bool in = upper ? i <= j : i >= j;
              return in && beta != 0 ? uniform() : kNaN;
            });
            hcr_syrk_params_t params{HCR_SYRK_PARAMS_STRUCT_SIZE, alpha, beta,
                                     upper ? HCR_UPPER : HCR_LOWER,
                                     trans ? HCR_TRANS : HCR_NO_TRANS};
            Status s = run(kernel_name("syrk", dt),
                           {A.arg(HCR_ACCESS_READ), C.arg(HCR_ACCESS_READ_WRITE)}, params);
            ASSERT_EQ(s.code, 0) << s.message;
            Mat out = download(p(), C);
            Mismatches bad;
            for (uint64_t i = 0; i < n; ++i)
              for (uint64_t j = 0; j < n; ++j) {
                if (upper ? i > j : i < j) {
                  bad.same(out(i, j), C(i, j), i, j);
                  continue;
                }
                double want = beta == 0 ? 0 : beta * C(i, j), scale = std::abs(want);
                for (uint64_t q = 0; q < k; ++q) {
                  const double x = alpha * (trans ? A(q, i) * A(q, j) : A(i, q) * A(j, q));
                  want += x;
                  scale += std::abs(x);
                }
                bad.check(out(i, j), want, 2.0 * (k + 2) * unit(dt) * scale + 1e-300, i, j);
              }
            EXPECT_EQ(bad.count(), 0u);
            free(A);
            free(C);
          }
}

TEST_F(OpenClBlas, TrsmInEverySideUploTransAndDiag) {
  for (hcr_dtype_t dt : types())
    for (auto [m, n] : {std::pair<uint64_t, uint64_t>{1, 1}, {5, 7}, {33, 17}, {4, 0}})
      for (bool right : {false, true})
        for (bool upper : {false, true})
          for (bool trans : {false, true})
            for (bool unit_diag : {false, true}) {
              SCOPED_TRACE(kernel_name("trsm", dt) + " " + std::to_string(m) + "x" +
                           std::to_string(n) + (right ? " right" : " left") +
                           (upper ? " upper" : " lower") + (trans ? " trans" : "") +
                           (unit_diag ? " unit" : " non-unit"));
              const uint64_t order = right ? n : m;
              const double alpha = 0.5;
              // A dominant diagonal keeps the solve well conditioned. What trsm must not read is
              // NaN: the other triangle, and the diagonal when it is taken as unit.
              Mat A = upload(p(), dt, order, order, 1, [&](uint64_t i, uint64_t j) {
                if (i == j) return unit_diag ? kNaN : (order + 1.0 + uniform()) * (i % 2 ? -1 : 1);
                return (upper ? i < j : i > j) ? uniform() : kNaN;
              });
              Mat B = upload(p(), dt, m, n, 2, [](auto, auto) { return uniform(); });
              hcr_trsm_params_t params{
                  HCR_TRSM_PARAMS_STRUCT_SIZE,      alpha,
                  right ? HCR_RIGHT : HCR_LEFT,     upper ? HCR_UPPER : HCR_LOWER,
                  trans ? HCR_TRANS : HCR_NO_TRANS, unit_diag ? HCR_UNIT : HCR_NON_UNIT};
              Status s = run(kernel_name("trsm", dt),
                             {A.arg(HCR_ACCESS_READ), B.arg(HCR_ACCESS_READ_WRITE)}, params);
              ASSERT_EQ(s.code, 0) << s.message;
              Mat X = download(p(), B);
              auto opa = [&](uint64_t i, uint64_t j) {
                const uint64_t r = trans ? j : i, c = trans ? i : j;
                if (r == c) return unit_diag ? 1.0 : A(r, c);
                return (upper ? r < c : r > c) ? A(r, c) : 0.0;
              };
              // The residual: op(A) X (left) or X op(A) (right) against alpha B.
              Mismatches bad;
              for (uint64_t i = 0; i < m; ++i)
                for (uint64_t j = 0; j < n; ++j) {
                  double lhs = 0, scale = std::abs(alpha * B(i, j));
                  for (uint64_t q = 0; q < order; ++q) {
                    const double x = right ? X(i, q) * opa(q, j) : opa(i, q) * X(q, j);
                    lhs += x;
                    scale += std::abs(x);
                  }
                  bad.check(lhs, alpha * B(i, j), 8.0 * (order + 2) * unit(dt) * scale, i, j);
                }
              EXPECT_EQ(bad.count(), 0u);
              free(A);
              free(B);
            }
}

// CLBlast has no LAPACK: the factorizations are declined with NOT_FOUND (the runtime then never
// places them here), the BLAS built-ins offered.
TEST_F(OpenClBlas, FactorizationsAreDeclinedAndTheRestOffered) {
  for (const char* name : {"potrf_f32", "potrf_f64", "getrf_nopiv_f32", "getrf_nopiv_f64"}) {
    auto d = Ocl::desc(name, HCR_IMPL_BUILTIN, nullptr);
    Status s = p().kernel(d).first;
    EXPECT_EQ(s.code, HCR_ERROR_NOT_FOUND) << name;
    EXPECT_NE(s.message.find("CLBlast has no LAPACK"), std::string::npos) << s.message;
  }
  for (hcr_dtype_t dt : types())
    for (const char* op : {"gemm", "syrk", "trsm"}) {
      const std::string name = kernel_name(op, dt);
      auto d = Ocl::desc(name.c_str(), HCR_IMPL_BUILTIN, nullptr);
      EXPECT_EQ(p().kernel(d).first.code, 0) << name;
    }
  for (const char* name : {"syrk_f16", "trsm_i32", "gemm_bf16", "herk_f32"}) {
    auto d = Ocl::desc(name, HCR_IMPL_BUILTIN, nullptr);
    EXPECT_EQ(p().kernel(d).first.code, HCR_ERROR_NOT_FOUND) << name;
  }
}

TEST_F(OpenClBlas, MistakesAreRefusedNamingThem) {
  Mat A = upload(p(), HCR_DTYPE_F32, 4, 4, 0, [](auto i, auto j) { return i == j ? 2.0 : 0.0; });
  Mat B = upload(p(), HCR_DTYPE_F32, 4, 6, 0, [](auto, auto) { return 1.0; });
  Mat R = upload(p(), HCR_DTYPE_F32, 3, 4, 0, [](auto, auto) { return 1.0; });
  auto expect = [](const Status& s, const std::string& text) {
    EXPECT_EQ(s.code, HCR_ERROR_INVALID_ARGUMENT) << s.message;
    EXPECT_NE(s.message.find(text), std::string::npos) << s.message;
  };
  const hcr_arg_t a = A.arg(HCR_ACCESS_READ), b = B.arg(HCR_ACCESS_READ_WRITE),
                  r = R.arg(HCR_ACCESS_READ_WRITE);
  hcr_gemm_params_t g{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0, 2, HCR_NO_TRANS};
  expect(run("gemm_f32", {a, a, A.arg(HCR_ACCESS_READ_WRITE)}, g),
         "gemm_f32 parameter trans_a = 2: must be HCR_NO_TRANS (0) or HCR_TRANS (1)");
  g = {HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0, HCR_NO_TRANS, HCR_TRANS};
  expect(run("gemm_f32", {a, b, r}, g), "A is 4x4, B is 4x6, C is 3x4 (need op(A) m x k, "
                                        "op(B) k x n, C m x n, B transposed)");
  g.struct_size = 8;
  expect(run("gemm_f32", {a, a, A.arg(HCR_ACCESS_READ_WRITE)}, g),
         "gemm_f32 parameters: struct_size = 8 in a block of 32 bytes, expected an "
         "hcr_gemm_params_t of at least 24 bytes");
  hcr_syrk_params_t s{HCR_SYRK_PARAMS_STRUCT_SIZE, 1, 0, HCR_LOWER, HCR_NO_TRANS};
  expect(run("syrk_f32", {b, r}, s), "syrk_f32 shapes do not match: A is 4x6, C is 3x4");
  expect(run("syrk_f32", {a}, s), "syrk_f32 takes 2 buffers (A, C), got 1");
  s.uplo = 5;
  expect(run("syrk_f32", {a, A.arg(HCR_ACCESS_READ_WRITE)}, s),
         "syrk_f32 parameter uplo = 5: must be HCR_LOWER (0) or HCR_UPPER (1)");
  expect(run("syrk_f32", {a, A.arg(HCR_ACCESS_READ_WRITE)}, &s, 24),
         "syrk_f32 parameters: 24 bytes, expected an hcr_syrk_params_t of at least 32 bytes");
  hcr_trsm_params_t t{
      HCR_TRSM_PARAMS_STRUCT_SIZE, 1, HCR_RIGHT, HCR_LOWER, HCR_NO_TRANS, HCR_NON_UNIT};
  expect(run("trsm_f32", {a, b}, t),
         "trsm_f32 shapes do not match: A is 4x4, B is 4x6 (A must be square with B's columns as "
         "its order: side is right)");
  t.side = HCR_LEFT;
  t.diag = -1;
  expect(run("trsm_f32", {a, b}, t), "trsm_f32 parameter diag = -1");
  t.diag = HCR_UNIT;
  EXPECT_EQ(run("trsm_f32", {a, b}, t).code, 0) << "a left solve with a 4x4 A fits a 4x6 B";
  expect(run("trsm_f32", {a, r}, t), "trsm_f32 shapes do not match: A is 4x4, B is 3x4");
  Mat D = upload(p(), HCR_DTYPE_F64, 4, 4, 0, [](auto, auto) { return 1.0; });
  expect(run("trsm_f32", {D.arg(HCR_ACCESS_READ), b}, t),
         "trsm_f32 argument 0 (A, 4x4) is not an f32 matrix");
  // A parameter after the block was ignored without a word (the runtime refuses such a task at
  // submit; a host calling the plugin directly is told here).
  struct {
    hcr_gemm_params_t block;
    double extra;
  } two{{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0, HCR_NO_TRANS, HCR_NO_TRANS}, 5};
  const uint32_t offsets[] = {0, static_cast<uint32_t>(offsetof(decltype(two), extra))};
  expect(run("gemm_f32", {a, a, A.arg(HCR_ACCESS_READ_WRITE)}, &two, sizeof two, offsets, 2),
         "gemm_f32 takes one parameter, an hcr_gemm_params_t; got 2");
  expect(run("trsm_f32", {a, b}, &two, sizeof two, offsets, 2),
         "trsm_f32 takes one parameter, an hcr_trsm_params_t; got 2");
  Mat C = upload(p(), HCR_DTYPE_F32, 4, 4, 0, [](auto, auto) { return 0.0; });
  const Status alone = run("gemm_f32", {a, a, C.arg(HCR_ACCESS_READ_WRITE)}, &two.block,
                           sizeof two.block, offsets, 1);
  EXPECT_EQ(alone.code, 0) << "the block alone, with its offset: " << alone.message;
  free(C);
  free(D);
  free(A);
  free(B);
  free(R);
}

}  // namespace
