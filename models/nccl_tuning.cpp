// nccl_tuning: reading NCCL's tuning constants (catalog entry or a cluster's override). See nccl_tuning.hpp.
#include "nccl_tuning.hpp"

#include <cmath>

#include "catalog.hpp"

namespace tp {

const char* nccl_algo_name(NcclAlgo a) {
  static const char* const names[kNcclAlgos] = {"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree"};
  return names[(int)a];
}

const char* nccl_proto_name(NcclProto p) {
  static const char* const names[kNcclProtos] = {"LL", "LL128", "Simple"};
  return names[(int)p];
}

NcclArch nccl_arch_of(double cc) {
  return cc >= 10 ? NcclArch::blackwell : cc >= 9 ? NcclArch::hopper : cc >= 8 ? NcclArch::ampere : NcclArch::volta;
}

namespace {

constexpr double kMaxTuningValue = lim::nccl_tuning.hi;  // us or GB/s: anything larger is not a tuning constant

// A JSON array of `n` numbers in [0, kMaxTuningValue] into out[0..n); false (reported) otherwise.
bool read_row(const json& v, const std::string& path, double* out, size_t n, Issues& is) {
  if (!v.is_array() || v.size() != n) {
    is.add_got(path, "an array of " + std::to_string(n) + " numbers", v);
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    const json& x = v[i];
    if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() < 0 || x.get<double>() > kMaxTuningValue) {
      is.add_got(path + "[" + std::to_string(i) + "]", "a number in [0, 1e6]", x);
      return false;
    }
    out[i] = x.get<double>();
  }
  return true;
}

// rows x cols table (an array of rows) into a row-major C array.
void read_table(Reader& r, const std::string& key, double* out, size_t rows, size_t cols) {
  const json* v = r.get(key);
  if (!v) return;
  if (!v->is_array() || v->size() != rows) {
    r.issues->add_got(r.at(key), "an array of " + std::to_string(rows) + " rows of " + std::to_string(cols) + " numbers", *v);
    return;
  }
  double tmp[64];
  for (size_t i = 0; i < rows; ++i)
    if (read_row((*v)[i], r.at(key) + "[" + std::to_string(i) + "]", tmp, cols, *r.issues))
      for (size_t j = 0; j < cols; ++j) out[i * cols + j] = tmp[j];
}

// A flat array of n numbers.
void read_flat(Reader& r, const std::string& key, double* out, size_t n) {
  if (const json* v = r.get(key)) {
    double tmp[64];
    if (read_row(*v, r.at(key), tmp, n, *r.issues))
      for (size_t i = 0; i < n; ++i) out[i] = tmp[i];
  }
}

// Speed arrays: one descending list of positive speeds per generation.
void read_speeds(Reader& r, const std::string& key, std::vector<double>* out) {
  const json* v = r.get(key);
  if (!v) return;
  if (!v->is_array() || v->size() != (size_t)kNcclArchs) {
    r.issues->add_got(r.at(key), "an array of 4 speed lists (Volta, Ampere, Hopper, Blackwell)", *v);
    return;
  }
  for (int a = 0; a < kNcclArchs; ++a) {
    const json& row = (*v)[a];
    const std::string path = r.at(key) + "[" + std::to_string(a) + "]";
    std::vector<double> s(row.is_array() ? row.size() : 0);
    if (s.empty() || s.size() > 64 || !read_row(row, path, s.data(), s.size(), *r.issues)) {
      if (s.empty() || s.size() > 64) r.issues->add_got(path, "a non-empty list of at most 64 speeds (GB/s), descending", row);
      continue;
    }
    bool ok = s[0] > 0;
    for (size_t i = 1; i < s.size(); ++i) ok = ok && s[i] > 0 && s[i] < s[i - 1];
    if (!ok) r.issues->add_got(path, "positive speeds (GB/s) in descending order", row);
    else out[a] = s;
  }
}

}  // namespace

NcclTuning read_nccl_tuning(const json& v, const std::string& path, const NcclTuning& base, Issues& is) {
  NcclTuning t = base;
  Reader r(v, path, is);
  if (!r.ok()) return t;
  r.opt_str("about", "");
  t.version = r.opt_str("version", t.version);
  read_table(r, "base_latency_us", &t.base_latency_us[0][0], kNcclAlgos, kNcclProtos);
  if (const json* h = r.get("hw_latency_us")) {
    Reader hr(*h, r.at("hw_latency_us"), is);
    if (hr.ok()) {
      read_table(hr, "nvlink", &t.hw_latency_us[0][0][0], kNcclAlgos, kNcclProtos);
      read_table(hr, "pci", &t.hw_latency_us[1][0][0], kNcclAlgos, kNcclProtos);
      read_table(hr, "net", &t.hw_latency_us[2][0][0], kNcclAlgos, kNcclProtos);
      hr.finish({"nvlink", "pci", "net"});
    }
  }
  read_table(r, "ll_max_bw", &t.ll_max_bw[0][0], kNcclArchs, 3);
  read_table(r, "ring_ll128_channel_bw", &t.ring_ll128_channel_bw[0][0], kNcclArchs, 3);
  read_table(r, "tree_ll128_channel_bw", &t.tree_ll128_channel_bw[0][0], kNcclArchs, 3);
  read_table(r, "tree_channel_bw", &t.tree_channel_bw[0][0], kNcclArchs, 3);
  read_table(r, "nvls_tree_channel_bw", &t.nvls_tree_channel_bw[0][0], kNcclArchs, 3);
  read_flat(r, "nvls_efficiency", t.nvls_efficiency, kNcclArchs);
  read_table(r, "tree_correction", &t.tree_correction[0][0], kNcclProtos, 23);
  read_flat(r, "ring_plateau_latency_factor", t.ring_plateau_latency_factor, 2);
  t.net_overhead_us = r.opt_num("net_overhead_us", t.net_overhead_us, lim::nccl_tuning);
  t.net_latency_us = r.opt_num("net_latency_us", t.net_latency_us, lim::nccl_tuning);
  read_flat(r, "nvlink_link_bw", t.nvlink_link_bw, kNcclArchs);
  read_speeds(r, "speeds_intra", t.speeds_intra);
  read_speeds(r, "speeds_inter", t.speeds_inter);
  if (const json* f = r.get("pipeline_fill")) {
    Reader fr(*f, r.at("pipeline_fill"), is);
    if (fr.ok()) {
      fr.opt_str("about", "");
      t.fill.nvls_stage_us = fr.opt_num("nvls_stage_us", t.fill.nvls_stage_us, lim::nccl_tuning);
      t.fill.intra_hop_us = fr.opt_num("intra_hop_us", t.fill.intra_hop_us, lim::nccl_tuning);
      t.fill.net_hop_us = fr.opt_num("net_hop_us", t.fill.net_hop_us, lim::nccl_tuning);
      t.fill.saturation_us = fr.opt_num("saturation_us", t.fill.saturation_us, lim::nccl_tuning);
      fr.finish({"about", "nvls_stage_us", "intra_hop_us", "net_hop_us", "saturation_us"});
    }
  }
  t.ring_max_channels = (int)r.opt_int("ring_max_channels", t.ring_max_channels, lim::nccl_channels);
  t.nvls_max_channels = (int)r.opt_int("nvls_max_channels", t.nvls_max_channels, lim::nccl_channels);
  r.finish({"about", "version", "base_latency_us", "hw_latency_us", "ll_max_bw", "ring_ll128_channel_bw",
            "tree_ll128_channel_bw", "tree_channel_bw", "nvls_tree_channel_bw", "nvls_efficiency", "tree_correction",
            "ring_plateau_latency_factor", "net_overhead_us", "net_latency_us", "nvlink_link_bw", "speeds_intra",
            "speeds_inter", "pipeline_fill", "ring_max_channels", "nvls_max_channels"});
  return t;
}

NcclTuning nccl_tuning_version(const std::string& version) {
  std::vector<std::string> names = catalog_names("nccl");
  const std::string want = version.empty() ? names.back() : version;
  const json* e = catalog_find("nccl", want);
  if (!e) throw InputError({"NCCL tuning version \"" + want + "\" is not in the catalog; bundled: " + catalog_names_text("nccl")});
  Issues is;
  NcclTuning t = read_nccl_tuning(*e, "catalog nccl." + want, NcclTuning{}, is);
  for (int a = 0; a < kNcclArchs; ++a)
    if (t.speeds_intra[a].empty() || t.speeds_inter[a].empty()) is.add("catalog nccl." + want, "missing speeds_intra / speeds_inter");
  if (!is.empty()) throw InputError(is.messages);  // a broken catalog is a broken installation
  return t;
}

}  // namespace tp
