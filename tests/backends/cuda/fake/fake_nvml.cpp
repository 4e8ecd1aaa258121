// A fake NVML (libnvidia-ml.so.1) for the CUDA backend's energy meter: boards whose energy counter
// and power draw the test sets through the hcr_fake_nvml_* entries, so that every figure the meter
// reports can be checked against what the "hardware" said.
//
// Its boards, in NVML's order (index 0 first): 0000:C1:00.0, a board CUDA does not see (as one
// hidden by CUDA_VISIBLE_DEVICES), then 0000:37:00.0 and 0000:17:00.0, the fake CUDA runtime's
// devices 1 and 0 (fake_cudart.cpp). A meter that matched devices by index would read the wrong
// board. Every entry but init fails with NVML_ERROR_UNINITIALIZED outside nvmlInit/nvmlShutdown,
// as the real library does; inits nest.
#include <cstdio>
#include <mutex>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

// The NVML ABI: nvmlReturn_t is a C enum, nvmlDevice_t an opaque pointer.
struct nvmlDevice_st {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  unsigned long long energy_mj = 0;  // nvmlDeviceGetTotalEnergyConsumption
  unsigned int power_mw = 0;         // nvmlDeviceGetPowerUsage
  bool energy = true, power = true;  // whether each query is supported
  bool present = true;               // found by its bus id
};
using nvmlReturn_t = int;
using nvmlDevice_t = nvmlDevice_st*;

namespace {

constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kUninitialized = 1;
constexpr nvmlReturn_t kInvalidArgument = 2;
constexpr nvmlReturn_t kNotSupported = 3;
constexpr nvmlReturn_t kNotFound = 6;
constexpr nvmlReturn_t kDriverNotLoaded = 9;

constexpr int kBoards = 3;
std::mutex g_mutex;
nvmlDevice_st g_boards[kBoards];
long g_inits = 0;  // nvmlInit calls not yet matched by nvmlShutdown
bool g_fail_init = false;

void reset_locked() {
  const unsigned buses[kBoards] = {0xC1, 0x37, 0x17};
  const unsigned long long energy[kBoards] = {9'000'000, 2'000'000, 1'000'000};
  const unsigned power[kBoards] = {300'000, 200'000, 100'000};
  for (int i = 0; i < kBoards; ++i) {
    g_boards[i] = nvmlDevice_st{};
    g_boards[i].bus = buses[i];
    g_boards[i].energy_mj = energy[i];
    g_boards[i].power_mw = power[i];
  }
  g_fail_init = false;
}

struct Init {
  Init() { reset_locked(); }
} g_init;

// "domain:bus:device.function" (NVML's own form has an 8-digit domain, CUDA's a 4-digit one; NVML
// accepts either) or "bus:device.function"; hex, either case.
bool parse(const char* text, unsigned& domain, unsigned& bus, unsigned& device,
           unsigned& function) {
  if (text == nullptr) return false;
  char tail = 0;
  if (std::sscanf(text, "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &tail) == 4)
    return true;
  domain = 0;
  return std::sscanf(text, "%x:%x.%x%c", &bus, &device, &function, &tail) == 3;
}

nvmlDevice_st* find_locked(const char* bus_id) {
  unsigned d = 0, b = 0, v = 0, f = 0;
  if (!parse(bus_id, d, b, v, f)) return nullptr;
  for (nvmlDevice_st& x : g_boards)
    if (x.domain == d && x.bus == b && x.device == v && x.function == f) return &x;
  return nullptr;
}

bool valid_locked(nvmlDevice_t h) {
  for (nvmlDevice_st& x : g_boards)
    if (&x == h) return true;
  return false;
}

}  // namespace

// ---- what the tests control ---------------------------------------------------------------------

/// Every board back to its defaults, inits allowed. The init count is left alone.
FAKE_EXPORT void hcr_fake_nvml_reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  reset_locked();
}

/// Sets a board's counter (mJ) and draw (mW). 0: no board at that bus id.
FAKE_EXPORT int hcr_fake_nvml_set(const char* bus_id, unsigned long long energy_mj,
                                  unsigned int power_mw) {
  std::lock_guard<std::mutex> lock(g_mutex);
  nvmlDevice_st* d = find_locked(bus_id);
  if (d == nullptr) return 0;
  d->energy_mj = energy_mj;
  d->power_mw = power_mw;
  return 1;
}

/// Whether a board answers the energy and power queries (else NVML_ERROR_NOT_SUPPORTED), and
/// whether it is found by its bus id at all.
FAKE_EXPORT int hcr_fake_nvml_supports(const char* bus_id, int energy, int power, int present) {
  std::lock_guard<std::mutex> lock(g_mutex);
  nvmlDevice_st* d = find_locked(bus_id);
  if (d == nullptr) return 0;
  d->energy = energy != 0;
  d->power = power != 0;
  d->present = present != 0;
  return 1;
}

/// Makes nvmlInit fail (NVML_ERROR_DRIVER_NOT_LOADED), as on a machine without the kernel module.
FAKE_EXPORT void hcr_fake_nvml_fail_init(int fail) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_fail_init = fail != 0;
}

/// nvmlInit calls not yet matched by nvmlShutdown.
FAKE_EXPORT long hcr_fake_nvml_inits() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_inits;
}

// ---- the NVML API -------------------------------------------------------------------------------

FAKE_EXPORT nvmlReturn_t nvmlInit_v2() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_fail_init) return kDriverNotLoaded;
  ++g_inits;
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlShutdown() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_inits == 0) return kUninitialized;
  --g_inits;
  return kSuccess;
}

FAKE_EXPORT const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kNotFound: return "Not Found";
    case kDriverNotLoaded: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id,
                                                          nvmlDevice_t* device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_inits == 0) return kUninitialized;
  if (device == nullptr) return kInvalidArgument;
  nvmlDevice_st* d = find_locked(bus_id);
  if (d == nullptr || !d->present) return kNotFound;
  *device = d;
  return kSuccess;
}

// By index too, as the real library has it: a meter that used it would read the wrong board.
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_inits == 0) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  *count = kBoards;
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_inits == 0) return kUninitialized;
  if (device == nullptr || index >= kBoards) return kInvalidArgument;
  *device = &g_boards[index];
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                             unsigned long long* energy) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_inits == 0) return kUninitialized;
  if (!valid_locked(device) || energy == nullptr) return kInvalidArgument;
  if (!device->energy) return kNotSupported;
  *energy = device->energy_mj;
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_inits == 0) return kUninitialized;
  if (!valid_locked(device) || power == nullptr) return kInvalidArgument;
  if (!device->power) return kNotSupported;
  *power = device->power_mw;
  return kSuccess;
}
