// A stub backend for loader and runtime tests. It records every ABI call it receives, one line per
// call, in the file named by its `call_log` option (as the Khronos ICD loader's test vendor does),
// and offers:
//   options: devices (count, default 1), concurrency (default 2), call_log (path),
//            fail_init (true: plugin_create fails), name_prefix (device names)
//   kernels: built-in "noop" and "fail" (always fails), and host functions.
// Launches run inline on the calling thread, so completion arrives before launch returns.
#include <hcr/sdk/backend.hpp>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>

namespace {

using hcr::sdk::Error;

struct StubKernel {
  std::string name;
  hcr_kernel_fn fn;
  void* user_data;
};

class Stub final : public hcr::sdk::Backend {
 public:
  explicit Stub(const hcr::sdk::CreateContext& ctx) : Backend(ctx) {
    devices_ = static_cast<size_t>(ctx.options.get_int("devices", 1));
    concurrency_ = static_cast<uint32_t>(ctx.options.get_int("concurrency", 2));
    log_path_ = ctx.options.get("call_log", "");
    prefix_ = ctx.options.get("name_prefix", "stub");
    bool fail = ctx.options.get_bool("fail_init", false);
    ctx.options.check_all_used();
    record("create");
    if (fail) throw Error(HCR_ERROR_BACKEND, "stub asked to fail its init (fail_init = true)");
  }
  ~Stub() override { record("destroy"); }

  size_t device_count() override {
    record("device_count");
    return devices_;
  }
  void device_info(size_t d, hcr::sdk::DeviceInfo& info) override {
    record("device_info " + std::to_string(d));
    info.name = prefix_ + std::to_string(d);
    info.arch = "stub-arch";
    info.kind = HCR_DEVICE_ACCELERATOR;
    info.flags = HCR_DEVICE_HOST_MEMORY;
    info.memory_bytes = 1ull << 30;
    info.compute_units = 4;
    info.concurrency = concurrency_;
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
    hcr_error_t* err = nullptr;
    if (k->name == "fail" && k->fn == nullptr) {
      err = hcr::sdk::make_error(HCR_ERROR_BACKEND, "stub kernel 'fail' failed as asked");
    } else if (k->fn != nullptr) {
      hcr_exec_context_t ctx = hcr::sdk::exec_context(a);
      err = hcr::sdk::run_host_function(k->fn, k->user_data, ctx);
    }
    hcr::sdk::complete(a.done, a.done_user_data, err, 1e-6);
  }
  void synchronize(size_t d) override { record("synchronize " + std::to_string(d)); }

 private:
  void record(const std::string& line) {
    if (log_path_.empty()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    std::ofstream(log_path_, std::ios::app) << line << "\n";
  }
  size_t devices_ = 1;
  uint32_t concurrency_ = 2;
  std::string log_path_, prefix_;
  std::mutex mutex_;
};

}  // namespace

HCR_SDK_PLUGIN(Stub, "stub", "1.0-test")
