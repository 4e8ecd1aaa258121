// The learned cost model: what each kernel costs on each device architecture, per size footprint,
// and what each copy costs between memory nodes.
//
// Execution (per kernel, architecture, footprint): a window of the most recent samples; the
// estimate is their median and the spread their MAD (scaled to a standard deviation), so one
// timing spike moves nothing. Old samples leave the window (decay), and a run of samples that all
// disagree with the estimate in the same direction is taken as a change of regime: the window
// restarts from them, so the model follows a device that became slower or faster within a few
// tasks. Across footprints of one (kernel, architecture), a power law t = a * n^b + c in the
// footprint's size n is fitted to the cells' estimates, and predicts sizes never measured.
//
// A model holds at most kMaxCellsPerKernel footprints of one (kernel, architecture) and
// kMaxCellsPerArch of one architecture (one file): beyond them the least recently updated cells
// go, in memory, when a file is loaded and when one is saved. An application whose sizes keep
// changing (every run another problem size, a sweep) would otherwise grow its files without end,
// and every start parses them whole.
//
// Thread safety: every member may be called concurrently.
#pragma once

#include <hcr/detail/spin_lock.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hcr::sched {

/// The longest duration (seconds, some 31 years) a model file may hold: beyond it the file is
/// corrupt, and sums of predictions stay finite.
inline constexpr double kMaxFileSeconds = 1e9;

/// The most footprints (cells) a model keeps of one (kernel, architecture): the regression over
/// sizes needs a handful, a tiled algorithm makes a few per problem size (full and edge tiles),
/// and the cells kept are the most recently updated, so the sizes a run uses stay measured.
inline constexpr size_t kMaxCellsPerKernel = 128;
/// The most cells a model keeps of one architecture, all kernels together: one file's worth,
/// some 0.4 MiB of text (0.8 MiB with energy), which loads in well under 0.1 s.
inline constexpr size_t kMaxCellsPerArch = 1024;
/// How much of a model file's text is parsed: a file of the caps above is far below it. A larger
/// one (written before the caps, or by hand) is read up to its last cell boundary before this
/// bound, with a warning; the next save rewrites it within the caps.
inline constexpr size_t kMaxModelParseBytes = size_t{2} << 20;

/// A prediction with what it rests on.
struct Prediction {
  enum class Source { none, estimate, regression, history };
  double seconds = 0;
  double spread = 0;     ///< standard deviation, seconds
  uint32_t samples = 0;  ///< measurements behind it
  Source source = Source::none;
  bool known() const noexcept { return source != Source::none; }
};

/// Robust statistics of the recent samples of one cell.
class History {
 public:
  static constexpr size_t kWindow = 16;
  /// Consecutive samples beyond kOutlier spreads on the same side that mean a new regime.
  static constexpr int kShift = 3;
  static constexpr double kOutlier = 4.0;

  void add(double seconds);
  /// Whether add() keeps `seconds` (a duration a model file may hold).
  static bool accepts(double seconds) noexcept {
    return seconds >= 0 && seconds <= kMaxFileSeconds;
  }
  double estimate() const noexcept { return median_; }
  double spread() const noexcept { return spread_; }
  uint32_t count() const noexcept { return count_; }  ///< every sample ever, for reports
  size_t size() const noexcept { return n_; }
  std::vector<double> samples() const;  ///< the window, oldest first
  void restore(const std::vector<double>& samples, uint32_t count);

 private:
  void recompute();
  std::array<double, kWindow> ring_{};
  size_t n_ = 0, head_ = 0;
  uint32_t count_ = 0;
  int streak_ = 0;               // + above, - below the estimate
  std::vector<double> pending_;  // the streak's samples
  double median_ = 0, spread_ = 0;
};

/// t = a * n^b + c.
struct PowerLaw {
  double a = 0, b = 1, c = 0;
  double rel_error = 0;  ///< typical relative residual of the fit
  bool valid = false;
  double operator()(double n) const;
};

/// Weighted fit of (size, seconds, weight) points; needs two distinct sizes (then c = 0), three
/// for the offset c.
PowerLaw fit_power_law(const std::vector<std::array<double, 3>>& points);

/// The cost model's file format: one versioned TOML file per architecture (model_toml.cpp), and
/// how a save merges into the file another process left. CostModel learns; this writes and reads.
struct ModelFile {
  /// One cell as a save sees it: its window and, apart, the
  /// samples recorded since the last save that completed (those not yet in any file).
  struct SavedCell {
    std::string kernel;
    uint64_t footprint = 0;
    double size = 0;
    std::vector<double> samples;  ///< the window, oldest first
    uint32_t count = 0;           ///< every sample ever
    int64_t updated = 0;          ///< its last sample, microseconds since 1970 (0: unknown)
    std::vector<double> fresh;    ///< the latest of the samples not yet saved, oldest first
    uint32_t fresh_count = 0;     ///< how many there are (`fresh` keeps the last kFreshKept)
    /// The same for energy (joules per launch), where measured.
    std::vector<double> joules;
    uint32_t joules_count = 0;
    std::vector<double> joules_fresh;
    uint32_t joules_fresh_count = 0;
  };
  static constexpr size_t kFreshKept = 2 * History::kWindow;
  /// The text of `arch`'s file once `cells` are saved into it, `on_disk` being its text now
  /// (another process may have saved since this one loaded; nullopt: no file). The file's cells
  /// stay, with the fresh samples of `cells` added to them (never the samples this model loaded:
  /// they are in the file already); cells the file lacks are written as `cells` has them. An
  /// `on_disk` that is not a model of `arch` of this version is replaced, and `why` (if given)
  /// says what was wrong with it, naming `origin`.
  static std::string merged_text(const std::string& arch, const std::vector<SavedCell>& cells,
                                 std::optional<std::string_view> on_disk, const std::string& origin,
                                 std::string* why = nullptr);
  /// The file name save() gives an architecture's model.
  static std::string file_name(const std::string& arch);
  /// The architecture a model file's text says it holds; nullopt when it cannot be read as one.
  static std::optional<std::string> arch_of(std::string_view text);

  static constexpr int kFormatVersion = 1;
  static constexpr const char* kFormat = "hcr-cost-model";
};

class CostModel {
 public:
  CostModel() = default;
  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;

  /// Records a measured duration.
  void record(const std::string& kernel, const std::string& arch, uint64_t footprint, double size,
              double seconds);
  /// What the model knows for that cell: its history, else the size regression.
  Prediction predict(const std::string& kernel, const std::string& arch, uint64_t footprint,
                     double size) const;
  /// Samples recorded for a (kernel, architecture), all footprints together.
  uint32_t samples(const std::string& kernel, const std::string& arch) const;

  /// The hot path: a handle to one (kernel, architecture) pair, stable for the model's lifetime.
  struct Pair;
  Pair* pair(const std::string& kernel, const std::string& arch);
  Prediction predict(Pair& p, uint64_t footprint, double size) const;
  void record(Pair& p, uint64_t footprint, double size, double seconds);
  uint32_t samples(const Pair& p) const noexcept;
  /// Energy, learned like time: joules a launch used above the device's idle draw
  /// (Prediction::seconds holds the joules).
  Prediction predict_energy(Pair& p, uint64_t footprint, double size) const;
  void record_energy(Pair& p, uint64_t footprint, double size, double joules);

  /// One row per cell, for reports and plots.
  struct Row {
    std::string kernel, arch;
    uint64_t footprint = 0;
    double size = 0;
    double estimate = 0, spread = 0;
    uint32_t samples = 0;
    PowerLaw fit;       ///< of the row's (kernel, arch)
    double joules = 0;  ///< energy per launch above idle (robust estimate)
    uint32_t joules_samples = 0;
  };
  std::vector<Row> rows() const;

  /// Saves under `dir` (a trusted directory, created if missing; model_store.cpp): each
  /// architecture with samples recorded since the last save, or without a file yet, is merged
  /// into its file as other processes left it (see merged_text), under the directory's lock.
  /// Returns the files written; throws files::FileError (or std::runtime_error) naming the file.
  std::vector<std::filesystem::path> save(const std::filesystem::path& dir);
  /// What a save from nothing writes: one file's text per architecture (keyed by architecture).
  std::map<std::string, std::string> save_text() const;
  /// Reads every model file under `dir` (a trusted directory; model_store.cpp); a file that is
  /// not a model of this version, or that cannot be trusted, is skipped with a message in
  /// `warnings` naming it.
  void load(const std::filesystem::path& dir, std::vector<std::string>& warnings);
  /// Loads one file (throws std::runtime_error naming the file and what is wrong).
  void load_file(const std::filesystem::path& file);
  /// Loads one file's text; `origin` names it in messages. Throws std::runtime_error naming
  /// `origin` and what is wrong; a text that does not load changes nothing. Of a text beyond
  /// kMaxModelParseBytes only the cells before that bound are read, and of more cells than the
  /// caps (kMaxCellsPerKernel, kMaxCellsPerArch) only the most recently updated are kept: each
  /// said in `warnings` (if given), naming `origin`; the next save rewrites that architecture's
  /// file.
  void load_text(std::string_view text, const std::string& origin,
                 std::vector<std::string>* warnings = nullptr);
  /// Whether the file of `arch` must be written at the next save even without new samples (it
  /// was loaded truncated or over the caps).
  bool needs_rewrite(const std::string& arch) const;

  /// Saving beside other processes: every cell with samples, by architecture, in file order
  /// (kernel, footprint), as ModelFile::merged_text takes them.
  using SavedCell = ModelFile::SavedCell;
  std::map<std::string, std::vector<SavedCell>> snapshot() const;
  /// The fresh samples of `cells` (from snapshot()) are in `arch`'s file now: the next save adds
  /// only the samples recorded since.
  void mark_saved(const std::string& arch, const std::vector<SavedCell>& cells);

 private:
  struct Cell {
    double size = 0;
    int64_t updated = 0;  // its last sample (or the file's stamp), microseconds since 1970
    History history;
    std::vector<double> fresh;  // the last kFreshKept samples not yet saved
    uint32_t fresh_count = 0;   // samples not yet saved
    History energy;             // joules, likewise
    std::vector<double> energy_fresh;
    uint32_t energy_fresh_count = 0;
  };
  // Cells of one architecture, all kernels: counted against kMaxCellsPerArch.
  struct ArchState {
    std::atomic<size_t> cells{0};
    bool rewrite = false;  // loaded truncated or over the caps (guarded by mutex_)
  };
  Pair* find_or_add(const std::string& kernel, const std::string& arch);
  // The cell of `footprint`, made if missing (caller holds p.lock); `added` says which. Beyond
  // kMaxCellsPerKernel the pair's least recently updated other cell goes.
  Cell& cell_of(Pair& p, uint64_t footprint, bool& added);
  // Keeps the architecture within kMaxCellsPerArch (caller holds no lock).
  void trim(const std::string& arch);
  // A Cell::updated for a sample recorded now: the time, but later than every stamp given or
  // loaded before, so that the least recently updated cell is well defined however fast samples
  // come (and a file from a clock ahead of ours cannot make new samples look old).
  int64_t stamp() noexcept;
  std::atomic<int64_t> clock_{0};
  // The two quantities a cell learns, each with its own history, fresh samples and fit: durations
  // (record, predict) and energy (record_energy, predict_energy) go through the same code.
  enum class Quantity { time, energy };
  void record_quantity(Pair& p, uint64_t footprint, double size, double x, Quantity q);
  Prediction predict_quantity(Pair& p, uint64_t footprint, double size, Quantity q) const;
  static void refit(Pair& p);
  static void fresh_fits(Pair& p);  // refit when samples came since (caller holds p.lock)

  mutable std::mutex mutex_;  // guards the maps (pairs are added rarely)
  std::map<std::pair<std::string, std::string>, std::unique_ptr<Pair>> pairs_;
  std::map<std::string, std::unique_ptr<ArchState>> archs_;

 public:
  struct Pair {
    std::string kernel, arch;
    mutable detail::SpinLock lock;  // guards cells and fit
    std::map<uint64_t, Cell> cells;
    PowerLaw fit;
    PowerLaw energy_fit;  // joules over sizes
    // Samples came since the fits were made: they are made again when next read (fresh_fits).
    bool fits_stale = false;
    std::atomic<uint32_t> total{0};
    std::atomic<uint32_t> exploring{0};  // calibration tasks in flight (policies' bookkeeping)
    ArchState* arch_state = nullptr;     // its architecture's, owned by the model
  };
};

/// Copy costs between memory nodes: latency + bytes / bandwidth, fitted to what copies took.
class LinkModel {
 public:
  /// Declared figures (a device's link to host memory); measurements replace them.
  void declare(uint32_t from, uint32_t to, double latency, double bandwidth);
  void record(uint32_t from, uint32_t to, uint64_t bytes, double seconds);
  /// Seconds to copy `bytes` (0 bytes: 0). Unknown link: `fallback_bandwidth`, no latency.
  double predict(uint32_t from, uint32_t to, uint64_t bytes) const;
  struct Link {
    double latency = 0, bandwidth = 0;  // bytes/s; 0: unknown
    uint32_t samples = 0;
  };
  Link link(uint32_t from, uint32_t to) const;
  void resize(uint32_t nodes);
  double fallback_bandwidth = 10e9;

  /// Persistence: links named by their memory nodes (a node's name is its devices' architecture,
  /// "host" for host memory), as a versioned TOML file.
  struct NamedLink {
    std::string from, to;
    double latency = 0, bandwidth = 0;  // seconds, bytes/s
  };
  /// The measured links between the nodes `names` (indexed by memory node).
  std::vector<NamedLink> measured(const std::vector<std::string>& names) const;
  /// Declares each link between the nodes of those names (measurements still replace them).
  void declare(const std::vector<NamedLink>& links, const std::vector<std::string>& names);
  /// The links of a file (`on_disk`) updated with `measured`: a link of the same pair of names
  /// is replaced (the latest measurement wins), others are added. Links between nodes this run
  /// does not have stay as they were.
  static std::vector<NamedLink> merge(std::vector<NamedLink> on_disk,
                                      const std::vector<NamedLink>& measured);
  /// A link file's text.
  static std::string format(const std::vector<NamedLink>& links);
  /// Reads a link file's text; `origin` names it in messages. Throws std::runtime_error naming
  /// `origin` and what is wrong.
  static std::vector<NamedLink> parse(std::string_view text, const std::string& origin);
  static constexpr int kFormatVersion = 1;
  static constexpr const char* kFormat = "hcr-link-model";

 private:
  struct Fit {
    Link link;
    // Decayed least-squares sums of (bytes, seconds).
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    // What predict() reads without the lock (it runs for every device on every decision).
    std::atomic<double> latency{0}, seconds_per_byte{0};
  };
  void publish(Fit& f);
  mutable std::mutex mutex_;
  uint32_t nodes_ = 0;
  std::unique_ptr<Fit[]> fits_;  // [from * nodes + to]; resize() only before use
};

// ---- model directory (model_store.cpp) --------------------------------------------------------
// The files of a model directory (`[scheduler] model_dir`, one per host): an execution model file
// per architecture and `links.toml`, shared by every process of the host that learns costs. Each
// save merges into what is on disk under the directory's lock, so that processes saving at once
// neither corrupt a file nor lose each other's samples, and the models and links of devices
// absent from this run stay. The directory must be trusted (support/files/safe_file.hpp):
// otherwise learned costs are neither loaded nor saved, with a warning.

/// The largest model or link file read at all: a larger one is skipped with a warning. Of a model
/// file only the first kMaxModelParseBytes are parsed.
inline constexpr size_t kMaxModelFileBytes = size_t{64} << 20;
/// The link model's file in a model directory.
inline constexpr const char* kLinkFileName = "links.toml";
/// The lock file that serialises saves into a model directory.
inline constexpr const char* kLockFileName = ".lock";

/// Loads the models of `dir` into `model` and its links between the nodes named `node_names`
/// into `links` (as declared figures: measurements replace them). An untrusted directory and
/// every file that cannot be used are left out with a warning in the log. Nothing is created.
void load_models(const std::string& dir, CostModel& model, LinkModel& links,
                 const std::vector<std::string>& node_names) noexcept;

/// Saves `model` (CostModel::save) and the links measured between the nodes `node_names` (merged
/// into `links.toml`: LinkModel::merge) under `dir`, in one hold of the directory's lock. A
/// failure is a warning in the log, the files staying as they were; with nothing learned, nothing
/// is written (not even the directory).
void save_models(const std::string& dir, CostModel& model, const LinkModel& links,
                 const std::vector<std::string>& node_names) noexcept;

}  // namespace hcr::sched
