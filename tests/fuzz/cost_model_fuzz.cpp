// libFuzzer target: the cost-model files. Every input goes to both loaders, the execution model
// ("hcr-cost-model", CostModel::load_text) and the link model ("hcr-link-model",
// LinkModel::parse). A loader either accepts the text or throws std::runtime_error naming the
// origin, and a refused text changes nothing. What is accepted predicts finite, non-negative times
// and survives save -> load unchanged: the same cells, the same predictions, the same text. A save
// merging into the text as a file on disk (ModelFile::merged_text) never throws and loads back.
// Any other exception, a crash, undefined behaviour or a leak is a finding.
#include "fuzz_check.hpp"
#include "../../scheduler/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace {

using hcr::sched::CostModel;
using hcr::sched::LinkModel;
using hcr::sched::ModelFile;
using hcr::sched::Prediction;

bool finite_non_negative(double x) { return std::isfinite(x) && x >= 0; }

void check_refusal(const std::runtime_error& e, const std::string& origin) {
  std::string_view what = e.what();
  HCR_FUZZ_CHECK(what.rfind(origin, 0) == 0,
                 "the message starts with the origin: " + std::string(what));
  HCR_FUZZ_CHECK(what.size() > origin.size() + 2,
                 "the message says what is wrong: " + std::string(what));
}

bool same(const Prediction& a, const Prediction& b) {
  return a.source == b.source && a.samples == b.samples &&
         (a.seconds == b.seconds || (std::isnan(a.seconds) && std::isnan(b.seconds))) &&
         (a.spread == b.spread || (std::isnan(a.spread) && std::isnan(b.spread)));
}

void execution_model(std::string_view text) {
  const std::string origin = "fuzz.model.toml";
  CostModel a;
  try {
    a.load_text(text, origin);
  } catch (const std::runtime_error& e) {
    check_refusal(e, origin);
    HCR_FUZZ_CHECK(a.rows().empty(), "a refused file changes nothing");
    return;
  }
  auto rows = a.rows();
  for (auto& r : rows) {
    Prediction p = a.predict(r.kernel, r.arch, r.footprint, r.size);
    HCR_FUZZ_CHECK(p.source == Prediction::Source::history, "a loaded cell predicts from history");
    HCR_FUZZ_CHECK(finite_non_negative(p.seconds) && finite_non_negative(p.spread),
                   "a loaded cell predicts " + std::to_string(p.seconds) + " +- " +
                       std::to_string(p.spread) + " s");
  }
  // save -> load: the same model.
  auto texts = a.save_text();
  HCR_FUZZ_CHECK(texts.size() <= 1, "one file holds one architecture");
  CostModel b;
  for (auto& [arch, t] : texts) {
    try {
      b.load_text(t, "saved");
    } catch (const std::runtime_error& e) {
      HCR_FUZZ_CHECK(false, std::string("a saved model loads back: ") + e.what() + "\n" + t);
    }
  }
  auto rows_b = b.rows();
  HCR_FUZZ_CHECK(rows_b.size() == rows.size(), "the same cells after save -> load");
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto &x = rows[i], &y = rows_b[i];
    HCR_FUZZ_CHECK(x.kernel == y.kernel && x.arch == y.arch && x.footprint == y.footprint &&
                       x.size == y.size && x.samples == y.samples,
                   "cell " + x.kernel + "/" + x.arch + " survives save -> load");
    for (double size : {x.size, 2 * x.size + 1, 1e9})
      for (uint64_t fp : {x.footprint, ~x.footprint})
        HCR_FUZZ_CHECK(
            same(a.predict(x.kernel, x.arch, fp, size), b.predict(x.kernel, x.arch, fp, size)),
            "the same predictions after save -> load, cell " + x.kernel);
    HCR_FUZZ_CHECK(a.samples(x.kernel, x.arch) == b.samples(x.kernel, x.arch),
                   "the same sample counts after save -> load, " + x.kernel);
  }
  HCR_FUZZ_CHECK(b.save_text() == texts, "saving the reloaded model writes the same text");
}

// A save merging into the text on disk (ModelFile::merged_text, what concurrent savers do) never
// throws whatever that text is, writes a file that loads, adds this model's new sample, and keeps
// every cell of a file it accepted.
void merged_save(std::string_view text) {
  CostModel mine;
  mine.record("merge-k", "gpu", 1, 10, 0.5);
  const auto cells = mine.snapshot().at("gpu");
  std::string why, merged;
  try {
    merged = ModelFile::merged_text("gpu", cells, text, "fuzz.model.toml", &why);
  } catch (const std::exception& e) {
    HCR_FUZZ_CHECK(false, std::string("merging never throws: ") + e.what());
  }
  CostModel back;
  try {
    back.load_text(merged, "merged");
  } catch (const std::runtime_error& e) {
    HCR_FUZZ_CHECK(false, std::string("a merged model loads back: ") + e.what() + "\n" + merged);
  }
  HCR_FUZZ_CHECK(back.samples("merge-k", "gpu") >= 1, "the new sample is in the merged file");
  if (!why.empty()) return;  // the file was replaced, as it had to be
  CostModel disk;
  try {
    disk.load_text(text, "disk");
  } catch (const std::runtime_error&) {
    HCR_FUZZ_CHECK(false, "a file merged into without complaint loads on its own");
  }
  for (auto& r : disk.rows())
    HCR_FUZZ_CHECK(
        back.predict(r.kernel, r.arch, r.footprint, r.size).source == Prediction::Source::history,
        "cell " + r.kernel + " of the file survives the merge");
}

void link_model(std::string_view text) {
  const std::string origin = "fuzz-links.toml";
  std::vector<LinkModel::NamedLink> links;
  try {
    links = LinkModel::parse(text, origin);
  } catch (const std::runtime_error& e) {
    check_refusal(e, origin);
    return;
  }
  // format -> parse: the same links.
  std::string saved = LinkModel::format(links);
  std::vector<LinkModel::NamedLink> again;
  try {
    again = LinkModel::parse(saved, "saved");
  } catch (const std::runtime_error& e) {
    HCR_FUZZ_CHECK(false, std::string("a saved link model loads back: ") + e.what() + "\n" + saved);
  }
  HCR_FUZZ_CHECK(again.size() == links.size(), "the same links after format -> parse");
  for (size_t i = 0; i < links.size(); ++i)
    HCR_FUZZ_CHECK(links[i].from == again[i].from && links[i].to == again[i].to &&
                       links[i].latency == again[i].latency &&
                       links[i].bandwidth == again[i].bandwidth,
                   "link " + links[i].from + " -> " + links[i].to + " survives format -> parse");
  // Declared between nodes of those names, the links predict finite, non-negative copy times.
  std::vector<std::string> names{"host"};
  for (auto& l : links)
    for (const std::string* n : {&l.from, &l.to})
      if (names.size() < 8 && std::find(names.begin(), names.end(), *n) == names.end())
        names.push_back(*n);
  LinkModel model;
  model.resize(static_cast<uint32_t>(names.size()));
  model.declare(links, names);
  for (uint32_t f = 0; f < names.size(); ++f)
    for (uint32_t t = 0; t < names.size(); ++t)
      for (uint64_t bytes : {uint64_t{1}, uint64_t{1} << 30})
        HCR_FUZZ_CHECK(finite_non_negative(model.predict(f, t, bytes)),
                       "copy " + names[f] + " -> " + names[t] + " predicts " +
                           std::to_string(model.predict(f, t, bytes)) + " s");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  execution_model(text);
  merged_save(text);
  link_model(text);
  return 0;
}
