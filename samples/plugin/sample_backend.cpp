// A sample backend: one "accelerator" that works in host memory and offers one kernel of its own,
// "sample_scale" (x *= factor, f32), plus host functions. Written with the SDK from the installed
// hcr package; nothing from hcr's source tree.
#include <hcr/sdk/backend.hpp>

#include <string>

namespace {

using hcr::sdk::Error;

struct Kernel {
  bool builtin;
  hcr_kernel_fn fn;
  void* user_data;
};

class SampleBackend final : public hcr::sdk::Backend {
 public:
  explicit SampleBackend(const hcr::sdk::CreateContext& ctx) : Backend(ctx) {
    label_ = ctx.options.get("label", "sample accelerator");  // [[backend]] label = "..."
    ctx.options.check_all_used();
    host().info("sample backend ready: " + label_);
  }

  size_t device_count() override { return 1; }

  void device_info(size_t, hcr::sdk::DeviceInfo& info) override {
    info.name = label_;
    info.arch = "sample-v1";
    info.kind = HCR_DEVICE_ACCELERATOR;
    info.flags = HCR_DEVICE_HOST_MEMORY;
    info.memory_bytes = 1ull << 30;
    info.compute_units = 1;
    info.concurrency = 1;
  }

  hcr_kernel_t* kernel_get(size_t, const hcr_kernel_desc_t& desc) override {
    if (desc.kind == HCR_IMPL_BUILTIN) {
      if (std::string(desc.name) != "sample_scale")
        throw Error(HCR_ERROR_NOT_FOUND, "no built-in '" + std::string(desc.name) + "'");
      return reinterpret_cast<hcr_kernel_t*>(new Kernel{true, nullptr, nullptr});
    }
    if (desc.kind == HCR_IMPL_HOST_FUNCTION)
      return reinterpret_cast<hcr_kernel_t*>(new Kernel{false, desc.fn, desc.user_data});
    throw Error(HCR_ERROR_UNSUPPORTED, "the sample runs its built-in and host functions");
  }

  void kernel_release(hcr_kernel_t* k) noexcept override { delete reinterpret_cast<Kernel*>(k); }

  // Runs synchronously: completion is reported before launch returns, which the ABI allows.
  void launch(const hcr_launch_args_t& a) override {
    auto* k = reinterpret_cast<Kernel*>(a.kernel);
    hcr_error_t* err = nullptr;
    if (k->builtin) {
      err = hcr::sdk::guard([&] { scale(a); });
    } else {
      hcr_exec_context_t ctx = hcr::sdk::exec_context(a);
      err = hcr::sdk::run_host_function(k->fn, k->user_data, ctx);
    }
    hcr::sdk::complete(a.done, a.done_user_data, err);
  }

  void synchronize(size_t) override {}

 private:
  static void scale(const hcr_launch_args_t& a) {
    if (a.num_args != 1 || a.args[0].dtype != HCR_DTYPE_F32)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "sample_scale takes one f32 buffer");
    if (a.params_size != sizeof(float))
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "sample_scale takes one float parameter");
    float factor = *static_cast<const float*>(a.params);
    const hcr_arg_t& x = a.args[0];
    auto* p = static_cast<float*>(x.host);
    for (uint64_t r = 0; r < x.rows; ++r)
      for (uint64_t c = 0; c < x.cols; ++c) p[r * x.ld + c] *= factor;
  }

  std::string label_;
};

}  // namespace

HCR_SDK_PLUGIN(SampleBackend, "sample", "1.0")
