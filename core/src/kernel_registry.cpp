// KernelRegistry (kernel_registry.hpp).
#include "kernel_registry.hpp"

#include "builtin_check.hpp"
#include "log_internal.hpp"
#include "plugins/plugin_loader.hpp"

#include <string>

namespace hcr::detail {

Ref<KernelState> KernelRegistry::get(std::string_view name, std::shared_ptr<RuntimeCore> owner) {
  if (name.empty()) throw Error(ErrorCode::invalid_argument, "a kernel needs a name");
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = kernels_.find(name);
  if (it != kernels_.end()) return it->second;
  auto* k = new KernelState();
  k->rt = std::move(owner);
  k->name = std::string(name);
  k->id = static_cast<uint32_t>(kernels_.size());
  k->builtin = find_builtin(name);
  k->num_devices = kMaxDevices;
  k->devices = std::make_unique<KernelDevice[]>(k->num_devices);
  Ref<KernelState> ref = Ref<KernelState>::adopt(k);
  kernels_.emplace(k->name, ref);
  return ref;
}

std::string KernelRegistry::name(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [name, k] : kernels_)
    if (k->id == id) return name;
  return "?";
}

std::map<uint32_t, std::string> KernelRegistry::names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<uint32_t, std::string> out;
  for (auto& [name, k] : kernels_) out[k->id] = name;
  return out;
}

std::vector<Ref<KernelState>> KernelRegistry::all() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Ref<KernelState>> out;
  for (auto& [name, k] : kernels_) out.push_back(k);
  return out;
}

void KernelRegistry::resolve(KernelState& k) {
  if (k.resolved.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(k.mutex);
  if (k.resolved.load(std::memory_order_relaxed)) return;
  bool any = false;
  for (size_t d = 0, n = devices_.count(); d < n; ++d) {
    KernelDevice& kd = k.devices[d];
    if (kd.capability.load(std::memory_order_relaxed) == Capability::unknown) {
      DeviceState& ds = devices_[d];
      const hcr_plugin_api_t* api = ds.plugin->api;
      std::string why;
      auto try_desc = [&](const hcr_kernel_desc_t& desc) {
        hcr_kernel_get_args_t a{};
        a.struct_size = HCR_KERNEL_GET_ARGS_STRUCT_SIZE;
        a.device = ds.index;
        a.desc = &desc;
        hcr_error_t* err = api->kernel_get(ds.plugin->handle, &a);
        if (err == nullptr && a.kernel != nullptr) {
          kd.handle = a.kernel;
          return true;
        }
        if (err == nullptr) {
          why += (why.empty() ? "" : ", ") + std::string("plugin returned no kernel");
          return false;
        }
        auto code = api->error_code(err);
        std::string msg = take_error(api, err);
        if (code != HCR_ERROR_NOT_FOUND && code != HCR_ERROR_UNSUPPORTED)
          HCR_LOG(warn, "kernel '" << k.name << "' on device '" << ds.info.name << "': " << msg);
        why += (why.empty() ? "" : "; ") + msg;
        return false;
      };
      hcr_kernel_desc_t builtin{};
      builtin.struct_size = HCR_KERNEL_DESC_STRUCT_SIZE;
      builtin.name = k.name.c_str();
      builtin.kind = HCR_IMPL_BUILTIN;
      bool ok = try_desc(builtin);
      for (size_t i = 0; !ok && i < k.impls.size(); ++i) {
        const KernelImpl& im = *k.impls[i];
        hcr_kernel_desc_t desc{};
        desc.struct_size = HCR_KERNEL_DESC_STRUCT_SIZE;
        desc.name = k.name.c_str();
        desc.kind = im.kind;
        desc.api = im.api.c_str();
        desc.fn = im.fn;
        desc.user_data = im.user_data;
        desc.source = im.source.empty() ? nullptr : im.source.c_str();
        desc.source_size = im.source.size();
        desc.build_options = im.build_options.empty() ? nullptr : im.build_options.c_str();
        desc.binary_path = im.binary_path.empty() ? nullptr : im.binary_path.c_str();
        desc.entry = im.entry.empty() ? nullptr : im.entry.c_str();
        ok = try_desc(desc);
      }
      kd.why_not = ok ? std::string() : why;
      k.set_capability(d, ok ? Capability::yes : Capability::no);
      HCR_LOG(debug, "kernel '" << k.name << "' on device '" << ds.info.name
                                << "': " << (ok ? "available" : "unavailable (" + why + ")"));
    }
    any = any || kd.capability.load(std::memory_order_relaxed) == Capability::yes;
  }
  k.any_capable.store(any, std::memory_order_relaxed);
  k.resolved.store(true, std::memory_order_release);
}

void KernelRegistry::release_handles(const std::vector<bool>& stuck) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [name, k] : kernels_) {
    std::lock_guard<std::mutex> klock(k->mutex);
    for (size_t d = 0, n = devices_.count(); d < n; ++d) {
      if (stuck[d]) continue;  // a stuck launch may still use the handle: it stays
      KernelDevice& kd = k->devices[d];
      if (kd.handle) devices_[d].plugin->api->kernel_release(devices_[d].plugin->handle, kd.handle);
      kd.handle = nullptr;
      k->set_capability(d, Capability::no);
    }
  }
}

void KernelRegistry::clear() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  kernels_.clear();
}

}  // namespace hcr::detail
