// A stub backend for loader, runtime and data tests. It records every ABI call it receives, one
// line per call, in the file named by its `call_log` option (as the Khronos ICD loader's test
// vendor does), and offers:
//   options: devices (count, default 1), concurrency (default 2), call_log (path),
//            fail_init (true: plugin_create fails), name_prefix (device names),
//            own_memory (true: devices have their own memory — host RAM behind mem_alloc — and
//            arguments arrive as allocations), memory (bytes per device with own memory; default
//            1 GiB), async (true: copies and launches complete on the stub's own thread, in
//            order; default: inline, before the call returns), misbehave (breaks the launch and
//            copy protocol, for the runtime's defences: "done_twice" calls each launch's and
//            copy's done twice; "error_after_done" calls done, then returns an error from the call)
//   kernels: built-in "noop" and "fail" (always fails), and host functions.
#include <hcr/sdk/backend.hpp>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using hcr::sdk::Error;

struct StubKernel {
  std::string name;
  hcr_kernel_fn fn;
  void* user_data;
};

struct StubMemory {
  size_t device;
  uint64_t bytes;
  std::vector<std::byte> data;
};

class Stub final : public hcr::sdk::Backend {
 public:
  explicit Stub(const hcr::sdk::CreateContext& ctx) : Backend(ctx) {
    devices_ = static_cast<size_t>(ctx.options.get_int("devices", 1));
    concurrency_ = static_cast<uint32_t>(ctx.options.get_int("concurrency", 2));
    log_path_ = ctx.options.get("call_log", "");
    prefix_ = ctx.options.get("name_prefix", "stub");
    own_memory_ = ctx.options.get_bool("own_memory", false);
    memory_ = static_cast<uint64_t>(ctx.options.get_int("memory", 1ll << 30));
    async_ = ctx.options.get_bool("async", false);
    misbehave_ = ctx.options.get("misbehave", "");
    if (!misbehave_.empty() && misbehave_ != "done_twice" && misbehave_ != "error_after_done")
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "misbehave = '" + misbehave_ + "': expected done_twice or error_after_done");
    bool fail = ctx.options.get_bool("fail_init", false);
    ctx.options.check_all_used();
    used_.assign(devices_, 0);
    record("create");
    if (fail) throw Error(HCR_ERROR_BACKEND, "stub asked to fail its init (fail_init = true)");
    if (async_) worker_ = std::thread([this] { work(); });
  }
  ~Stub() override {
    if (async_) {
      {
        std::lock_guard<std::mutex> lock(queue_mutex_);
        stop_ = true;
      }
      queue_cv_.notify_all();
      worker_.join();
    }
    record("destroy");
  }

  size_t device_count() override {
    record("device_count");
    return devices_;
  }
  void device_info(size_t d, hcr::sdk::DeviceInfo& info) override {
    record("device_info " + std::to_string(d));
    info.name = prefix_ + std::to_string(d);
    info.arch = "stub-arch";
    info.kind = HCR_DEVICE_ACCELERATOR;
    info.flags = own_memory_ ? 0u : HCR_DEVICE_HOST_MEMORY;
    info.memory_bytes = own_memory_ ? memory_ : 1ull << 30;
    info.compute_units = 4;
    info.concurrency = concurrency_;
  }

  hcr_memory_t* mem_alloc(size_t device, uint64_t bytes) override {
    if (!own_memory_) throw Error(HCR_ERROR_UNSUPPORTED, "stub devices use host memory");
    std::lock_guard<std::mutex> lock(mutex_);
    if (used_[device] + bytes > memory_)
      throw Error(HCR_ERROR_OUT_OF_MEMORY, "stub device " + std::to_string(device) + ": " +
                                               std::to_string(bytes) + " bytes do not fit");
    used_[device] += bytes;
    auto* m = new StubMemory{device, bytes, std::vector<std::byte>(bytes)};
    return reinterpret_cast<hcr_memory_t*>(m);
  }
  void mem_free(size_t device, hcr_memory_t* memory) noexcept override {
    auto* m = reinterpret_cast<StubMemory*>(memory);
    std::lock_guard<std::mutex> lock(mutex_);
    used_[device] -= m->bytes;
    delete m;
  }
  void copy(const hcr_copy_args_t& a) override {
    auto* src_mem = reinterpret_cast<StubMemory*>(a.src_memory);
    auto* dst_mem = reinterpret_cast<StubMemory*>(a.dst_memory);
    const std::byte* src =
        src_mem ? src_mem->data.data() + a.src_offset : static_cast<const std::byte*>(a.src_host);
    std::byte* dst =
        dst_mem ? dst_mem->data.data() + a.dst_offset : static_cast<std::byte*>(a.dst_host);
    if (src == nullptr || dst == nullptr)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "copy end missing");
    if (src_mem && a.src_offset + (a.rows - 1) * a.src_pitch + a.width > src_mem->bytes)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "copy reads past the source allocation");
    if (dst_mem && a.dst_offset + (a.rows - 1) * a.dst_pitch + a.width > dst_mem->bytes)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "copy writes past the destination allocation");
    const bool twice = misbehave_ == "done_twice";
    auto answered = std::make_shared<std::promise<void>>();
    auto run = [a, src, dst, twice, answered] {
      for (uint64_t r = 0; r < a.rows; ++r)
        std::memcpy(dst + r * a.dst_pitch, src + r * a.src_pitch, a.width);
      hcr::sdk::complete(a.done, a.done_user_data, nullptr);
      if (twice) hcr::sdk::complete(a.done, a.done_user_data, nullptr);
      answered->set_value();
    };
    submit(std::move(run));
    if (misbehave_ == "error_after_done") {
      answered->get_future().wait();
      throw Error(HCR_ERROR_BACKEND, "stub: an error after done, as asked (misbehave)");
    }
  }

  hcr_kernel_t* kernel_get(size_t d, const hcr_kernel_desc_t& desc) override {
    std::string name = desc.name;
    record("kernel_get " + std::to_string(d) + " " + name + " kind=" + std::to_string(desc.kind));
    if (desc.kind == HCR_IMPL_BUILTIN) {
      if (name != "noop" && name != "fail")
        throw Error(HCR_ERROR_NOT_FOUND, "stub has no built-in '" + name + "'");
      return reinterpret_cast<hcr_kernel_t*>(new StubKernel{name, nullptr, nullptr});
    }
    if (desc.kind == HCR_IMPL_HOST_FUNCTION)
      return reinterpret_cast<hcr_kernel_t*>(new StubKernel{name, desc.fn, desc.user_data});
    throw Error(HCR_ERROR_UNSUPPORTED, "stub runs built-ins and host functions only");
  }
  void kernel_release(hcr_kernel_t* k) noexcept override {
    auto* sk = reinterpret_cast<StubKernel*>(k);
    record("kernel_release " + sk->name);
    delete sk;
  }
  void launch(const hcr_launch_args_t& a) override {
    auto* k = reinterpret_cast<StubKernel*>(a.kernel);
    record("launch " + std::to_string(a.device) + " " + k->name);
    // Own memory: kernels see host pointers into the allocations (the host owns `a.args` until
    // done, so a private copy with `host` filled in is kept for the run).
    auto args = std::make_shared<std::vector<hcr_arg_t>>(a.args, a.args + a.num_args);
    for (hcr_arg_t& x : *args)
      if (x.memory != nullptr)
        x.host = reinterpret_cast<StubMemory*>(x.memory)->data.data() + x.offset;
    const bool twice = misbehave_ == "done_twice";
    auto answered = std::make_shared<std::promise<void>>();
    auto run = [a, k, args, twice, answered] {
      hcr_error_t* err = nullptr;
      if (k->name == "fail" && k->fn == nullptr) {
        err = hcr::sdk::make_error(HCR_ERROR_BACKEND, "stub kernel 'fail' failed as asked");
      } else if (k->fn != nullptr) {
        hcr_exec_context_t ctx = hcr::sdk::exec_context(a);
        ctx.args = args->data();
        err = hcr::sdk::run_host_function(k->fn, k->user_data, ctx);
      }
      hcr::sdk::complete(a.done, a.done_user_data, err, 1e-6);
      if (twice)  // the same answer again (`args` is the stub's own copy: still alive)
        hcr::sdk::complete(a.done, a.done_user_data,
                           err ? hcr::sdk::make_error(HCR_ERROR_BACKEND, "again") : nullptr, 1e-6);
      answered->set_value();
    };
    submit(std::move(run));
    if (misbehave_ == "error_after_done") {
      answered->get_future().wait();  // done was called (here, or on the stub's thread)
      throw Error(HCR_ERROR_BACKEND, "stub: an error after done, as asked (misbehave)");
    }
  }
  void synchronize(size_t d) override {
    record("synchronize " + std::to_string(d));
    if (!async_) return;
    std::unique_lock<std::mutex> lock(queue_mutex_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }

 private:
  void submit(std::function<void()> f) {
    if (!async_) {
      f();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      queue_.push_back(std::move(f));
    }
    queue_cv_.notify_one();
  }
  void work() {
    std::unique_lock<std::mutex> lock(queue_mutex_);
    for (;;) {
      queue_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto f = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      f();  // never under our lock: done() calls back into us
      lock.lock();
      busy_ = false;
      if (queue_.empty()) idle_cv_.notify_all();
    }
  }
  void record(const std::string& line) {
    if (log_path_.empty()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    std::ofstream(log_path_, std::ios::app) << line << "\n";
  }

  size_t devices_ = 1;
  uint32_t concurrency_ = 2;
  std::string log_path_, prefix_;
  bool own_memory_ = false, async_ = false;
  std::string misbehave_;
  uint64_t memory_ = 0;
  std::vector<uint64_t> used_;
  std::mutex mutex_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false, busy_ = false;
  std::thread worker_;
};

}  // namespace

HCR_SDK_PLUGIN(Stub, "stub", "1.0-test")
