// The simulated backend plugin: devices declared in the [[backend]] table, each computing real
// results on the host (the built-in BLAS kernels through hcr_host_blas, user host functions) while
// holding the device for the modelled duration, with deterministic noise, slowdowns and fault
// injection. The timeline lives in sim_engine.cpp; this file turns ABI calls into timeline
// operations.
#include "host_blas.hpp"
#include "sim_config.hpp"
#include "sim_engine.hpp"
#include "sim_units.hpp"

#include <hcr/sdk/backend.hpp>
#include <hcr/sdk/memory.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <unordered_set>

namespace hcr::sim {
namespace {

using sdk::Error;

constexpr uint64_t kMemoryMagic = 0x68637273696d6d65ull;  // "hcrsimme"
constexpr uint64_t kGraphMagic = 0x68637273696d6772ull;   // "hcrsimgr"

// Streams of the deterministic random draws (see uniform()).
constexpr uint64_t kLaunchNoise = 1, kLaunchFail = 2, kLaunchHang = 3, kCopyNoise = 4,
                   kCopyFail = 5;

/// Host memory standing in for one device allocation.
struct SimMemory {
  uint64_t magic = kMemoryMagic;
  size_t device = 0;
  uint64_t bytes = 0;
  std::byte* data = nullptr;
};

struct SimKernel {
  size_t device = 0;
  std::optional<host_blas::Builtin> builtin;  // else a host function
  std::string name;
  hcr_kernel_fn fn = nullptr;
  void* user_data = nullptr;
  double speed = 0;  // flop/s for this kernel on this device (gflops * factor)
  KernelCost cost;   // host functions
};

/// A device graph (ABI 1.2): its nodes as graph_create handed them over.
struct SimGraph {
  uint64_t magic = kGraphMagic;
  size_t device = 0;
  std::vector<sdk::GraphNode> nodes;
  std::vector<uint32_t> predecessors;  // per node
  std::vector<uint32_t> roots;
  size_t num_args = 0;
};

/// One launch of a SimGraph: each node is a launch of its own (same modelled time, faults and host
/// function as launch()); a node's done releases its successors, and the last one reports the
/// graph. Lives until then.
struct GraphRun {
  const SimGraph* graph = nullptr;
  std::vector<hcr_arg_t> args;  // the launch's, in this build's layout
  hcr_done_fn done = nullptr;
  void* done_user_data = nullptr;
  uint64_t* failed_node = nullptr;
  std::mutex mutex;
  std::vector<uint32_t> waiting;  // predecessors each node still waits for
  std::vector<bool> doomed;       // a predecessor failed or was skipped: skip the node
  std::vector<double> finish;     // modelled seconds from the graph's start to the node's end
  size_t remaining = 0;           // nodes not yet run or skipped
  hcr_error_t* error = nullptr;   // the first failure's
  uint64_t first_failed = 0;
  double joules = 0;
  bool joules_known = true;
  class SimBackend* self = nullptr;
  struct NodeDone {
    GraphRun* run;
    uint32_t node;
  };
  std::vector<NodeDone> contexts;  // done_user_data of each node's launch
};

size_t dtype_size(hcr_dtype_t t) {
  switch (t) {
    case HCR_DTYPE_BYTES:
    case HCR_DTYPE_U8: return 1;
    case HCR_DTYPE_F16:
    case HCR_DTYPE_BF16: return 2;
    case HCR_DTYPE_F32:
    case HCR_DTYPE_I32: return 4;
    case HCR_DTYPE_F64:
    case HCR_DTYPE_I64: return 8;
  }
  return 0;
}

std::string shape(const hcr_arg_t& a) {
  return std::to_string(a.rows) + "x" + std::to_string(a.cols);
}

// FNV-1a: a device's random streams follow its name, not its position in the table.
uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

class SimBackend final : public sdk::Backend {
 public:
  explicit SimBackend(const sdk::CreateContext& ctx)
      : Backend(ctx), machine_(parse_machine(ctx.options)), used_(machine_.devices.size(), 0) {
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < machine_.devices.size(); ++i) {
      // Devices of the same name get distinct streams by their occurrence.
      uint64_t same = 0;
      for (size_t j = 0; j < i; ++j) same += machine_.devices[j].name == machine_.devices[i].name;
      keys.push_back(name_hash(machine_.devices[i].name) + same);
    }
    for (const DeviceConfig& c : machine_.devices)
      for (const std::string& key : c.ignored)
        host().warn("sim: option '" + key + "' has no effect: device '" + c.name +
                    "' works in host memory and has no link");
    sim_ = std::make_unique<Simulator>(machine_, std::move(keys),
                                       [this](const std::string& m) { host().warn(m); });
    if (machine_.devices.empty())
      host().info("sim: no devices: none described (a simulated device is asked for with a "
                  "[[backend.device]] table, see samples/sim_machine.toml)");
    else
      host().info("sim: " + std::to_string(machine_.devices.size()) + " device(s), seed " +
                  std::to_string(machine_.seed) + ", time_scale " +
                  std::to_string(machine_.time_scale) + (machine_.compute ? "" : ", timing only"));
  }

  // Outstanding operations end first (hung ones with a timeout), then what the host did not free
  // (allocations, kernels) goes with the plugin that owns it.
  ~SimBackend() noexcept override {
    sim_->shutdown();
    for (SimMemory* m : live_) release(m);
    for (SimKernel* k : kernels_) delete k;
    for (SimGraph* g : graphs_) delete g;
  }

  size_t device_count() override { return machine_.devices.size(); }
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

  void device_info(size_t device, sdk::DeviceInfo& info) override {
    const DeviceConfig& c = machine_.devices[device];
    info.name = c.name;
    info.arch = c.arch;
    info.kind = c.kind;
    info.flags = c.host_memory ? HCR_DEVICE_HOST_MEMORY : 0u;
    info.memory_bytes = c.memory;
    info.compute_units = c.compute_units;
    info.concurrency = c.concurrency;
    // Real-time figures: time_scale makes the whole device that much slower.
    info.peak_gflops = c.gflops / machine_.time_scale;
    // A host-memory device has no link: nothing is ever transferred to it.
    info.link_bandwidth = c.host_memory ? 0 : c.bandwidth / machine_.time_scale;
    info.link_latency = c.host_memory ? 0 : c.latency * machine_.time_scale;
  }

  // ---- memory -------------------------------------------------------------------------------

  hcr_memory_t* mem_alloc(size_t device, uint64_t bytes) override {
    const DeviceConfig& c = own_memory(device, "mem_alloc");
    check_not_lost(device, "mem_alloc");
    std::lock_guard<std::mutex> lock(memory_mutex_);
    if (bytes > c.memory - used_[device])
      throw Error(HCR_ERROR_OUT_OF_MEMORY,
                  "device '" + c.name + "': cannot allocate " + std::to_string(bytes) +
                      " bytes: " + std::to_string(used_[device]) + " of " +
                      std::to_string(c.memory) + " bytes (option memory) are in use");
    auto* data = static_cast<std::byte*>(
        ::operator new (std::max<uint64_t>(bytes, 1), std::align_val_t{64}, std::nothrow));
    if (data == nullptr)
      throw Error(HCR_ERROR_OUT_OF_MEMORY, "device '" + c.name + "': the host has no " +
                                               std::to_string(bytes) + " bytes to back it");
    auto* m = new SimMemory{kMemoryMagic, device, bytes, data};
    live_.insert(m);
    used_[device] += bytes;
    return reinterpret_cast<hcr_memory_t*>(m);
  }

  void mem_free(size_t, hcr_memory_t* memory) noexcept override {
    auto* m = reinterpret_cast<SimMemory*>(memory);
    std::lock_guard<std::mutex> lock(memory_mutex_);
    if (live_.erase(m) == 0) {
      host().warn("sim: mem_free of memory that is not a live allocation of this plugin");
      return;
    }
    used_[m->device] -= m->bytes;
    release(m);
  }

  void copy(const hcr_copy_args_t& a) override {
    const DeviceConfig& c = own_memory(a.device, "copy");
    check_not_lost(a.device, "copy");
    sdk::check_copy_ends(a, "a device engine copies to or from device memory");
    const std::byte* src = a.src_host ? static_cast<const std::byte*>(a.src_host) : nullptr;
    std::byte* dst = a.dst_host ? static_cast<std::byte*>(a.dst_host) : nullptr;
    bool from_device = false, into_device = false;  // an end in a.device's own memory
    {
      std::lock_guard<std::mutex> lock(memory_mutex_);
      if (a.src_memory) {
        SimMemory& m = live(a.src_memory, "copy source");
        sdk::check_span(m.bytes, a.src_offset, a.rows, a.src_pitch, a.width, "copy source");
        src = m.data + a.src_offset;
        from_device = m.device == a.device;
      }
      if (a.dst_memory) {
        SimMemory& m = live(a.dst_memory, "copy destination");
        sdk::check_span(m.bytes, a.dst_offset, a.rows, a.dst_pitch, a.width, "copy destination");
        dst = m.data + a.dst_offset;
        into_device = m.device == a.device;
      }
    }
    if (!from_device && !into_device)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "copy: device " + std::to_string(a.device) + " ('" + c.name +
                      "') performs it but neither end is in its memory");

    const uint64_t seq = sim_->next_copy(a.device);
    const uint64_t key = sim_->device_key(a.device);
    const double bytes = static_cast<double>(a.width) * static_cast<double>(a.rows);
    auto op = std::make_unique<Op>();
    op->device = a.device;
    // One engine per direction, as on GPUs with two copy engines: into this device (from the host
    // or a peer), and out of it (to the host, a peer, or within its own memory).
    op->engine = into_device && !from_device ? EngineKind::copy_in : EngineKind::copy_out;
    op->what = "copy #" + std::to_string(seq) + " (" + std::to_string(a.width * a.rows) + " bytes)";
    op->base = (c.latency + bytes / c.bandwidth) *
               noise_factor(c.noise, machine_.seed, key, kCopyNoise, seq);
    if (uniform(machine_.seed, key, kCopyFail, seq) < c.copy_fail_probability) {
      op->fault = HCR_ERROR_BACKEND;
      op->fault_message = "device '" + c.name + "': injected failure of " + op->what +
                          " (copy_fail_probability " + std::to_string(c.copy_fail_probability) +
                          ")";
    }
    // Timing only (compute = false) moves no bytes either: nothing computes on them, and real
    // copies into fresh pages would cost the host more than the modelled link does.
    if (machine_.compute)
      op->work = [src, dst, a](uint32_t) -> hcr_error_t* {
        for (uint64_t r = 0; r < a.rows; ++r)
          std::memmove(dst + r * a.dst_pitch, src + r * a.src_pitch, a.width);
        return nullptr;
      };
    op->done = a.done;
    op->done_user_data = a.done_user_data;
    sim_->submit(std::move(op));
  }

  // ---- kernels ------------------------------------------------------------------------------

  hcr_kernel_t* kernel_get(size_t device, const hcr_kernel_desc_t& desc) override {
    const DeviceConfig& c = machine_.devices[device];
    std::string name = desc.name;
    if (!c.offers(name)) {
      std::string list;
      for (auto& k : *c.kernels) list += (list.empty() ? "" : ", ") + k;
      throw Error(HCR_ERROR_NOT_FOUND, "device '" + c.name + "' does not offer kernel '" + name +
                                           "' (its kernels: " + (list.empty() ? "none" : list) +
                                           ")");
    }
    auto k = std::make_unique<SimKernel>();
    k->device = device;
    k->name = name;
    k->speed = c.gflops * 1e9 * c.factor(name);
    switch (desc.kind) {
      case HCR_IMPL_BUILTIN:
        k->builtin = host_blas::find(name);
        if (!k->builtin) throw Error(HCR_ERROR_NOT_FOUND, "no built-in kernel '" + name + "'");
        break;
      case HCR_IMPL_HOST_FUNCTION:
        if (desc.fn == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, "host function '" + name + "' is NULL");
        k->fn = desc.fn;
        k->user_data = desc.user_data;
        k->cost = machine_.cost(name);
        break;
      default:
        throw Error(HCR_ERROR_UNSUPPORTED,
                    "simulated devices run host functions and their built-ins, not " +
                        std::string(desc.api ? desc.api : "?") + " code");
    }
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    kernels_.insert(k.get());
    return reinterpret_cast<hcr_kernel_t*>(k.release());
  }

  void kernel_release(hcr_kernel_t* kernel) noexcept override {
    auto* k = reinterpret_cast<SimKernel*>(kernel);
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    if (kernels_.erase(k) == 0) {
      host().warn("sim: kernel_release of a kernel that is not live in this plugin");
      return;
    }
    delete k;
  }

  void launch(const hcr_launch_args_t& a) override {
    const SimKernel& k = kernel_of(a);
    const DeviceConfig& c = machine_.devices[a.device];
    check_not_lost(a.device, "launch of '" + k.name + "'");
    std::vector<hcr_arg_t> args = resolve_args(a, c);
    // A built-in's arguments and parameters are checked now, not when the work runs.
    std::optional<host_blas::Call> call = builtin_call(k, a, args);
    const double base = nominal_seconds(k, c, args, call);

    const uint64_t seq = sim_->next_launch(a.device);
    const uint64_t key = sim_->device_key(a.device);
    auto op = std::make_unique<Op>();
    op->device = a.device;
    op->engine = EngineKind::compute;
    op->what = "launch #" + std::to_string(seq) + " of '" + k.name + "'";
    op->base = base * noise_factor(c.noise, machine_.seed, key, kLaunchNoise, seq);
    if (seq >= c.fail_after) {
      op->fault = HCR_ERROR_BACKEND;
      op->fault_message = "device '" + c.name + "': injected failure of " + op->what +
                          " (fail_after " + std::to_string(c.fail_after) + ")";
    } else if (uniform(machine_.seed, key, kLaunchFail, seq) < c.fail_probability) {
      op->fault = HCR_ERROR_BACKEND;
      op->fault_message = "device '" + c.name + "': injected failure of " + op->what +
                          " (fail_probability " + std::to_string(c.fail_probability) + ")";
    }
    op->hang = uniform(machine_.seed, key, kLaunchHang, seq) < c.hang_probability;
    if (machine_.compute) {
      const SimKernel* kp = &k;  // kernels are released only after synchronize
      op->work = [a, kp, call, args = std::move(args)](uint32_t slot) {
        return run(*kp, call, a, args, slot);
      };
    }
    op->done = a.done;
    op->done_user_data = a.done_user_data;
    op->watts = c.dynamic_watts(k.name);
    sim_->submit(std::move(op));
  }

  // ---- device graphs (ABI 1.2) ----------------------------------------------------------------

  // Checked now as each node's launch would be (kernel, arguments, a built-in's parameters), so
  // that a graph the device could not run is refused before the host counts on it.
  hcr_graph_t* graph_create(sdk::GraphDesc d) override {
    check_device(d.device);
    const DeviceConfig& c = machine_.devices[d.device];
    auto g = std::make_unique<SimGraph>();
    g->device = d.device;
    g->num_args = d.num_args;
    g->nodes = std::move(d.nodes);
    g->predecessors = std::move(d.predecessors);
    g->roots = std::move(d.roots);
    for (size_t i = 0; i < g->nodes.size(); ++i) {
      const sdk::GraphNode& n = g->nodes[i];
      std::vector<hcr_arg_t> args;
      for (size_t k = 0; k < n.num_args; ++k)
        args.push_back(sdk::read_struct(sdk::GraphDesc::arg_at(d.args, n.first_arg + k)));
      const hcr_launch_args_t a = node_launch(*g, i, args.data(), nullptr);
      try {
        const SimKernel& k = kernel_of(a);
        // The host may not have placed the data on the device yet (each launch hands the memory
        // it then has): arguments without memory are checked at the launches.
        const bool placed = c.host_memory || std::all_of(args.begin(), args.end(), [](auto& x) {
                              return x.memory != nullptr || x.rows == 0 || x.cols == 0;
                            });
        builtin_call(k, a, placed ? resolve_args(a, c) : args);
      } catch (const Error& e) {
        throw Error(e.code(), "graph node " + std::to_string(i) + ": " + e.what());
      }
    }
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    graphs_.insert(g.get());
    return reinterpret_cast<hcr_graph_t*>(g.release());
  }

  void graph_launch(const hcr_graph_launch_args_t& a) override {
    const SimGraph& g = graph_of(a.graph);
    if (a.num_args != g.num_args)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "graph_launch: " + std::to_string(a.num_args) +
                                                  " arguments; the graph's nodes "
                                                  "take " +
                                                  std::to_string(g.num_args));
    check_not_lost(g.device, "graph launch");
    auto run = std::make_unique<GraphRun>();
    run->graph = &g;
    run->self = this;
    for (size_t i = 0; i < a.num_args; ++i)
      run->args.push_back(sdk::read_struct(sdk::GraphDesc::arg_at(a.args, i)));
    run->done = a.done;
    run->done_user_data = a.done_user_data;
    run->failed_node = a.failed_node;
    run->remaining = g.nodes.size();
    run->doomed.assign(g.nodes.size(), false);
    run->finish.assign(g.nodes.size(), 0);
    run->waiting = g.predecessors;
    for (uint32_t i = 0; i < g.nodes.size(); ++i) run->contexts.push_back({run.get(), i});
    if (g.nodes.empty()) {
      sdk::complete(a.done, a.done_user_data, nullptr, 0, 0);
      return;
    }
    // Roots go first; every other node is started by its last predecessor's done. From here the
    // run owns itself: the last node's done deletes it, and the host may release the graph once
    // it has reported (the roots are copied for that).
    const std::vector<uint32_t> roots = g.roots;
    GraphRun* r = run.release();
    for (uint32_t i : roots) start_node(*r, i);
  }

  void graph_release(hcr_graph_t* graph) noexcept override {
    auto* g = reinterpret_cast<SimGraph*>(graph);
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    if (graphs_.erase(g) == 0) {
      host().warn("sim: graph_release of a graph that is not live in this plugin");
      return;
    }
    g->magic = 0;
    delete g;
  }

  void synchronize(size_t device) override { sim_->synchronize(device); }

  // The power model (idle_watts, busy_watts, power.<kernel>): the idle draw since the plugin
  // started plus what each operation drew above it, in real seconds like every other figure.
  bool device_energy(size_t device, hcr_energy_reading_t& r) override {
    const DeviceConfig& c = machine_.devices[device];
    if (c.idle_watts < 0) return false;
    const double up =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    r.source = HCR_ENERGY_MODELLED;
    r.joules = c.idle_watts * up + sim_->dynamic_joules(device);
    r.idle_watts = c.idle_watts;
    r.resolution = 0;
    return true;
  }

  std::optional<double> estimate(const hcr_launch_args_t& a) override {
    if (!machine_.estimates) return std::nullopt;
    const SimKernel& k = kernel_of(a);
    std::vector<hcr_arg_t> args;
    for (size_t i = 0; i < a.num_args; ++i)
      args.push_back(sdk::read_struct(&sdk::element(a.args, i)));
    return nominal_seconds(k, machine_.devices[a.device], args, builtin_call(k, a, args)) *
           machine_.time_scale;
  }

 private:
  const SimGraph& graph_of(hcr_graph_t* graph) {
    auto* g = reinterpret_cast<SimGraph*>(graph);
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    if (graphs_.count(g) == 0 || g->magic != kGraphMagic)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "graph_launch of a graph this plugin did not create");
    return *g;
  }

  // Node i of `g` as a launch over `args` (its own arguments), reporting to `ctx`.
  static hcr_launch_args_t node_launch(const SimGraph& g, size_t i, const hcr_arg_t* args,
                                       GraphRun::NodeDone* ctx) {
    hcr_launch_args_t a = g.nodes[i].launch(g.device, args);
    a.done = &SimBackend::node_done;
    a.done_user_data = ctx;
    return a;
  }

  // Launches node i of a run; a launch refused at once (a device lost meanwhile) fails the node
  // as its done would.
  void start_node(GraphRun& r, uint32_t i) {
    const sdk::GraphNode& n = r.graph->nodes[i];
    hcr_launch_args_t a = node_launch(*r.graph, i, r.args.data() + n.first_arg, &r.contexts[i]);
    if (hcr_error_t* e = sdk::guard([&] { launch(a); })) node_done(&r.contexts[i], e, nullptr);
  }

  // A node's launch is done (or was skipped: info NULL, no error): record it, release or doom its
  // successors, and report the graph once every node is accounted for.
  static void node_done(void* user, hcr_error_t* error, const hcr_completion_info_t* info) {
    auto* ctx = static_cast<GraphRun::NodeDone*>(user);
    GraphRun& r = *ctx->run;
    SimBackend* self = r.self;
    const sdk::GraphNode& n = r.graph->nodes[ctx->node];
    std::vector<uint32_t> ready, skipped;
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(r.mutex);
      const bool failed = error != nullptr || r.doomed[ctx->node];
      if (error != nullptr) {
        if (r.error == nullptr) {
          r.error = error;
          r.first_failed = ctx->node;
        } else if (error != sdk::out_of_memory_error()) {
          delete error;
        }
      }
      double seconds = 0;
      if (info != nullptr && info->struct_size >= HCR_COMPLETION_INFO_STRUCT_SIZE) {
        seconds = std::max(info->device_seconds, 0.0);
        if (info->joules >= 0) r.joules += info->joules;
        else r.joules_known = false;
      }
      r.finish[ctx->node] += seconds;  // holds the latest predecessor's finish until now
      for (uint32_t s : n.successors) {
        r.finish[s] = std::max(r.finish[s], r.finish[ctx->node]);
        if (failed) r.doomed[s] = true;
        if (--r.waiting[s] == 0) (r.doomed[s] ? skipped : ready).push_back(s);
      }
      last = --r.remaining == 0;
    }
    for (uint32_t s : skipped) node_done(&r.contexts[s], nullptr, nullptr);
    for (uint32_t s : ready) self->start_node(r, s);
    if (!last) return;
    // Every node has been accounted for: no other thread touches the run any more.
    double span = 0;
    for (double f : r.finish) span = std::max(span, f);
    if (r.error != nullptr && r.failed_node != nullptr) *r.failed_node = r.first_failed;
    sdk::complete(r.done, r.done_user_data, r.error, span, r.joules_known ? r.joules : -1.0);
    delete &r;
  }

  const SimKernel& kernel_of(const hcr_launch_args_t& a) {
    check_device(a.device);
    return sdk::launch_kernel<const SimKernel>(a);
  }

  // A built-in kernel's launch checked against its contract (throws naming what does not fit);
  // nullopt for host functions.
  static std::optional<host_blas::Call> builtin_call(const SimKernel& k, const hcr_launch_args_t& a,
                                                     const std::vector<hcr_arg_t>& args) {
    if (!k.builtin) return std::nullopt;
    return host_blas::check(*k.builtin, args.data(), args.size(), a.params, a.params_size);
  }

  // The modelled duration before noise and slowdown: what `estimate` reports. A built-in costs its
  // flops (host_blas::Call::flops); a host function its [backend.kernel.<name>] table's.
  double nominal_seconds(const SimKernel& k, const DeviceConfig& c,
                         const std::vector<hcr_arg_t>& args,
                         const std::optional<host_blas::Call>& call) const {
    double flops = 0;
    if (call) {
      flops = call->flops();
    } else {
      double bytes = 0;
      for (const hcr_arg_t& x : args)
        bytes += static_cast<double>(x.rows) * static_cast<double>(x.cols) *
                 static_cast<double>(dtype_size(x.dtype));
      flops = k.cost.flops + k.cost.flops_per_byte * bytes;
    }
    return c.launch_overhead + flops / k.speed;
  }

  // The launch's arguments with `host` pointing at the data: the caller's pointer on a host-memory
  // device, the simulated allocation (base + offset) otherwise. Checks every argument's extent.
  std::vector<hcr_arg_t> resolve_args(const hcr_launch_args_t& a, const DeviceConfig& c) {
    std::vector<hcr_arg_t> args;
    args.reserve(a.num_args);
    std::lock_guard<std::mutex> lock(memory_mutex_);
    for (size_t i = 0; i < a.num_args; ++i) {
      hcr_arg_t x = sdk::read_struct(&a.args[i]);
      const std::string which = "argument " + std::to_string(i) + " (" + shape(x) + ")";
      size_t esize = dtype_size(x.dtype);
      if (esize == 0)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + " has unknown dtype " + std::to_string(static_cast<int>(x.dtype)));
      if (x.rows > 1 && x.ld < x.cols)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + ": ld " + std::to_string(x.ld) + " is below its columns");
      const bool empty = x.rows == 0 || x.cols == 0;
      if (c.host_memory) {
        if (x.memory != nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " is device memory, but device '" +
                                                      c.name + "' works in host memory");
        if (x.host == nullptr && !empty)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " has no host pointer");
      } else {
        if (x.memory == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      which + " is not in device memory; device '" + c.name +
                          "' has its own (stage it with mem_alloc and copy)");
        SimMemory& m = live(x.memory, which);
        if (m.device != a.device)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      which + " lives on device " + std::to_string(m.device) + ", not on device " +
                          std::to_string(a.device));
        uint64_t width = 0, pitch = 0;
        if (!sdk::mul_add(x.cols, esize, 0, width) || !sdk::mul_add(x.ld, esize, 0, pitch))
          throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " is implausibly large");
        sdk::check_span(m.bytes, x.offset, x.rows, pitch, width, which);
        x.host = m.data + x.offset;
      }
      args.push_back(x);
    }
    return args;
  }

  // Runs on a worker: the real computation behind a launch. Returns its error (NULL: success).
  // A built-in runs single-threaded: each slot is one worker, as on the CPU backend.
  static hcr_error_t* run(const SimKernel& k, const std::optional<host_blas::Call>& call,
                          hcr_launch_args_t a, const std::vector<hcr_arg_t>& args,
                          uint32_t slot) noexcept {
    if (call) return sdk::guard([&] { host_blas::run(*call, args.data(), 1); });
    a.args = args.data();  // with host pointers into the simulated memory
    return sdk::run_host_function(k.fn, k.user_data, sdk::exec_context(a, slot));
  }

  const DeviceConfig& own_memory(size_t device, const char* what) {
    check_device(device);
    const DeviceConfig& c = machine_.devices[device];
    if (c.host_memory)
      throw Error(HCR_ERROR_UNSUPPORTED, std::string(what) + ": device '" + c.name +
                                             "' works in host memory (host_memory = true)");
    return c;
  }

  void check_not_lost(size_t device, const std::string& what) {
    const DeviceConfig& c = machine_.devices[device];
    if (sim_->clock().now() >= c.lost_at)
      throw Error(HCR_ERROR_DEVICE_LOST, "device '" + c.name + "' was lost at " +
                                             format_seconds(c.lost_at) +
                                             " (modelled, lost_at): " + what + " refused");
  }

  // Under memory_mutex_.
  SimMemory& live(hcr_memory_t* memory, const std::string& what) {
    auto* m = reinterpret_cast<SimMemory*>(memory);
    if (live_.count(m) == 0 || m->magic != kMemoryMagic)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  what + ": memory is not a live allocation of this plugin");
    return *m;
  }

  static void release(SimMemory* m) noexcept {
    ::operator delete (m->data, std::align_val_t{64});
    delete m;
  }

  MachineConfig machine_;
  std::mutex memory_mutex_;
  std::unordered_set<SimMemory*> live_;
  std::vector<uint64_t> used_;
  std::mutex kernels_mutex_;
  std::unordered_set<SimKernel*> kernels_;
  std::unordered_set<SimGraph*> graphs_;  // live device graphs (kernels_mutex_)
  std::unique_ptr<Simulator> sim_;        // last: its threads stop before the rest goes
};

}  // namespace
}  // namespace hcr::sim

HCR_SDK_PLUGIN(hcr::sim::SimBackend, "sim", "0.1.0")
