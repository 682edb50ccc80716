// hardware: GPU JSON reading and efficiency-curve interpolation. See hardware.hpp.
#include "hardware.hpp"

#include <algorithm>
#include <cmath>

namespace tp {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
    case Precision::fp8: return "fp8";
  }
  return "?";
}

int precision_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }

Precision tensor_precision(Precision training) { return training == Precision::fp8 ? Precision::bf16 : training; }

double Curve::at(double x) const {
  if (points.empty()) return 1.0;
  if (x <= points.front().first) return points.front().second;
  if (x >= points.back().first) return points.back().second;
  double lx = std::log10(x);
  for (size_t i = 1; i < points.size(); ++i) {
    if (x <= points[i].first) {
      double x0 = std::log10(points[i - 1].first), x1 = std::log10(points[i].first);
      double t = (lx - x0) / (x1 - x0);
      return points[i - 1].second + t * (points[i].second - points[i - 1].second);
    }
  }
  return points.back().second;
}

double Gpu::attention_kernel_head_dim(double dh) const {
  if (attention_head_dims.empty()) return dh;
  for (double d : attention_head_dims)
    if (d >= dh) return d;
  const double top = attention_head_dims.back();
  return std::ceil(dh / top) * top;
}

const char* attn_bwd_grid_name(AttnBwdGrid g) { return g == AttnBwdGrid::heads ? "heads" : "key_tiles"; }

double Gpu::attention_backward_occupancy(double bh) const {
  if (attention_backward_grid != AttnBwdGrid::heads || bh <= 0) return 1.0;
  const double sms = std::max(1.0, sm_count);
  return bh / (std::ceil(bh / sms) * sms);
}

static AttnBwdGrid read_bwd_grid(Reader& r) {
  std::string v = r.opt_str("attention_backward_grid", "key_tiles");
  if (v == "heads") return AttnBwdGrid::heads;
  if (v != "key_tiles") r.issues->add(r.at("attention_backward_grid"), "\"" + v + "\": expected \"key_tiles\" or \"heads\"");
  return AttnBwdGrid::key_tiles;
}

// "attention_head_dims": a non-empty ascending array of integers in [1, 1024].
static json head_dims_json(const std::vector<double>& dims) {
  json j = json::array();
  for (double d : dims) j.push_back((long long)d);
  return j;
}

static std::vector<double> read_head_dims(const json& v, const std::string& path, Issues& is) {
  std::vector<double> out;
  const char* want = "a non-empty array of increasing head dims (integers in [1, 1024])";
  if (!v.is_array() || v.empty()) { is.add_got(path, want, v); return out; }
  for (const json& e : v) {
    const double d = e.is_number() ? e.get<double>() : -1;
    if (d < 1 || d > 1024 || d != std::floor(d) || (!out.empty() && d <= out.back())) {
      is.add_got(path, want, v);
      return {};
    }
    out.push_back(d);
  }
  return out;
}

Curve read_curve(const json& v, const std::string& path, Issues& issues) {
  Curve c;
  const std::string want = "an array of [size in (0, 1e+30], efficiency in (0, 1]] pairs with increasing sizes";
  if (!v.is_array() || v.empty()) { issues.add_got(path, want, v); return c; }
  for (size_t i = 0; i < v.size(); ++i) {
    const json& p = v[i];
    std::string pi = path + "[" + std::to_string(i) + "]";
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number()) {
      issues.add_got(pi, "a pair [size, efficiency]", p);
      continue;
    }
    double x = p[0].get<double>(), e = p[1].get<double>();
    if (!within(lim::curve_size, x)) { issues.add_got(pi + "[0]", "a size in (0, 1e+30]", p[0]); continue; }
    if (!within(lim::curve_eff, e)) { issues.add_got(pi + "[1]", "an efficiency: " + limit_text(lim::curve_eff), p[1]); continue; }
    if (!c.points.empty() && x <= c.points.back().first) {
      issues.add_got(pi + "[0]", "a size larger than the previous point's", p[0]);
      continue;
    }
    c.points.push_back({x, e});
  }
  return c;
}

json curve_to_json(const Curve& c) {
  json a = json::array();
  for (auto& p : c.points) a.push_back({p.first, p.second});
  return a;
}

// {"fp32", "fp16", "bf16"} of FLOP/s, plus an optional "fp8" (0 when absent) where `fp8` allows it.
static void read_by_precision(Reader& r, const std::string& key, double out[kPrecisions], bool fp8) {
  const json* v = r.get(key);
  if (!v) {
    r.issues->add(r.at(key), std::string("missing; expected an object {\"fp32\", \"fp16\", \"bf16\"") +
                                 (fp8 ? ", \"fp8\"?" : "") + "} of FLOP/s");
    return;
  }
  Reader p(*v, r.at(key), *r.issues);
  if (!p.ok()) return;
  const Limit& l = fp8 ? lim::matrix_flops : lim::vector_flops;
  out[0] = p.req_num("fp32", l);
  out[1] = p.req_num("fp16", l);
  out[2] = p.req_num("bf16", l);
  if (fp8) out[3] = p.opt_num("fp8", 0, l);
  if (fp8) p.finish({"fp32", "fp16", "bf16", "fp8"});
  else p.finish({"fp32", "fp16", "bf16"});
}

static KernelProfile read_kernel_profile(const json& v, const std::string& name, const std::string& path, Issues& is) {
  KernelProfile k;
  k.name = name;
  Reader r(v, path, is);
  if (!r.ok()) return k;
  r.opt_str("about", "");
  const char* keys[] = {"matrix_efficiency", "fp8_matrix_efficiency", "attention_efficiency", "memory_efficiency"};
  Curve* curves[] = {&k.matrix_efficiency, &k.fp8_matrix_efficiency, &k.attention_efficiency, &k.memory_efficiency};
  bool any = false;
  for (int i = 0; i < 4; ++i)
    if (const json* c = r.get(keys[i])) { *curves[i] = read_curve(*c, r.at(keys[i]), is); any = true; }
  if (const json* h = r.get("attention_head_dims")) { k.attention_head_dims = read_head_dims(*h, r.at("attention_head_dims"), is); any = true; }
  if (r.has("attention_backward_grid")) { k.attention_backward_grid = read_bwd_grid(r); k.has_backward_grid = any = true; }
  if (!any) is.add(path, "a kernel profile needs at least one of matrix_efficiency, fp8_matrix_efficiency, "
                         "attention_efficiency, memory_efficiency, attention_head_dims or attention_backward_grid");
  r.finish({"about", "matrix_efficiency", "fp8_matrix_efficiency", "attention_efficiency", "memory_efficiency",
            "attention_head_dims", "attention_backward_grid"});
  return k;
}

const KernelProfile* find_kernel_profile(const Gpu& g, const std::string& name) {
  for (const KernelProfile& k : g.kernel_profiles)
    if (k.name == name) return &k;
  return nullptr;
}

void apply_kernel_profile(Gpu& g, const KernelProfile& k) {
  if (!k.matrix_efficiency.points.empty()) g.matrix_efficiency = k.matrix_efficiency;
  if (!k.fp8_matrix_efficiency.points.empty()) g.fp8_matrix_efficiency = k.fp8_matrix_efficiency;
  if (!k.attention_efficiency.points.empty()) g.attention_efficiency = k.attention_efficiency;
  if (!k.memory_efficiency.points.empty()) g.memory_efficiency = k.memory_efficiency;
  if (!k.attention_head_dims.empty()) g.attention_head_dims = k.attention_head_dims;
  if (k.has_backward_grid) g.attention_backward_grid = k.attention_backward_grid;
}

Gpu read_gpu(const json& v, const std::string& path, Issues& issues) {
  Gpu g;
  Reader r(v, path, issues);
  if (!r.ok()) return g;
  g.name = r.opt_str("name", "");
  r.opt_str("about", "");
  read_by_precision(r, "matrix_flops_per_s", g.matrix_flops_per_s, true);
  read_by_precision(r, "vector_flops_per_s", g.vector_flops_per_s, false);
  g.hbm_bytes = r.req_num("hbm_bytes", lim::hbm_bytes);
  g.hbm_bandwidth_bytes_per_s = r.req_num("hbm_bandwidth_bytes_per_s", lim::hbm_bw);
  if (const json* c = r.get("matrix_efficiency")) g.matrix_efficiency = read_curve(*c, r.at("matrix_efficiency"), issues);
  else issues.add(r.at("matrix_efficiency"), "missing; expected an efficiency curve [[flops, efficiency], ...]");
  if (const json* c = r.get("memory_efficiency")) g.memory_efficiency = read_curve(*c, r.at("memory_efficiency"), issues);
  else issues.add(r.at("memory_efficiency"), "missing; expected an efficiency curve [[bytes, efficiency], ...]");
  if (const json* c = r.get("attention_efficiency")) g.attention_efficiency = read_curve(*c, r.at("attention_efficiency"), issues);
  if (const json* c = r.get("fp8_matrix_efficiency")) g.fp8_matrix_efficiency = read_curve(*c, r.at("fp8_matrix_efficiency"), issues);
  g.attention_tile_rows = (double)r.opt_int("attention_tile_rows", 128, lim::tile_rows);
  g.sm_count = (double)r.opt_int("sm_count", 1, lim::sm_count);
  g.compute_capability = r.opt_num("compute_capability", 0, lim::compute_capability);
  g.compute_slowdown_under_comm = r.opt_num("compute_slowdown_under_comm", 0, lim::comm_slowdown);
  if (const json* h = r.get("attention_head_dims")) g.attention_head_dims = read_head_dims(*h, r.at("attention_head_dims"), issues);
  g.attention_backward_grid = read_bwd_grid(r);
  g.kernel_overhead_s = r.opt_num("kernel_overhead_s", 0, lim::kernel_overhead);
  if (r.has("graph_kernel_overhead_s")) g.graph_kernel_overhead_s = r.opt_num("graph_kernel_overhead_s", 0, lim::graph_kernel_overhead);
  g.power_w = r.opt_num("power_w", 0, lim::gpu_power);
  if (const json* f = r.get("framework_memory")) {
    Reader fr(*f, r.at("framework_memory"), issues);
    if (fr.ok()) {
      g.framework.cuda_context_bytes = fr.opt_num("cuda_context_bytes", 0, lim::framework_bytes);
      g.framework.cublas_workspace_bytes = fr.opt_num("cublas_workspace_bytes", 0, lim::framework_bytes);
      g.framework.allocator_fragmentation = fr.opt_num("allocator_fragmentation", 0, lim::fragmentation);
      fr.opt_str("about", "");
      fr.finish({"about", "cuda_context_bytes", "cublas_workspace_bytes", "allocator_fragmentation"});
    }
  }
  if (const json* kp = r.get("kernel_profiles")) {
    if (!kp->is_object() || kp->empty()) {
      issues.add_got(r.at("kernel_profiles"), "an object {NAME: {about, attention_efficiency, ...}, ...}", *kp);
    } else {
      for (auto it = kp->begin(); it != kp->end(); ++it)
        g.kernel_profiles.push_back(read_kernel_profile(it.value(), it.key(), r.at("kernel_profiles") + "." + it.key(), issues));
    }
  }
  if (const json* fr = r.get("fp8_recipes")) g.fp8_recipes = read_fp8_recipes(*fr, r.at("fp8_recipes"), issues);
  if (g.matrix_flops_per_s[0] <= 0 && g.matrix_flops_per_s[1] <= 0 && g.matrix_flops_per_s[2] <= 0 && r.has("matrix_flops_per_s"))
    issues.add(r.at("matrix_flops_per_s"), "at least one precision needs a peak > 0");
  r.finish({"name", "about", "matrix_flops_per_s", "vector_flops_per_s", "hbm_bytes", "hbm_bandwidth_bytes_per_s",
            "matrix_efficiency", "memory_efficiency", "attention_efficiency", "fp8_matrix_efficiency",
            "attention_tile_rows", "sm_count", "compute_capability", "compute_slowdown_under_comm", "attention_head_dims", "attention_backward_grid", "kernel_overhead_s", "graph_kernel_overhead_s", "power_w", "framework_memory",
            "kernel_profiles", "fp8_recipes"});
  return g;
}

static json by_precision(const double v[kPrecisions]) {
  json j = {{"fp32", v[0]}, {"fp16", v[1]}, {"bf16", v[2]}};
  if (v[3] > 0) j["fp8"] = v[3];  // optional key: absent reads as 0
  return j;
}

json gpu_to_json(const Gpu& g) {
  json j = {{"name", g.name},
          {"matrix_flops_per_s", by_precision(g.matrix_flops_per_s)},
          {"vector_flops_per_s", by_precision(g.vector_flops_per_s)},
          {"hbm_bytes", g.hbm_bytes},
          {"hbm_bandwidth_bytes_per_s", g.hbm_bandwidth_bytes_per_s},
          {"matrix_efficiency", curve_to_json(g.matrix_efficiency)},
          {"memory_efficiency", curve_to_json(g.memory_efficiency)},
          {"kernel_overhead_s", g.kernel_overhead_s},
          {"power_w", g.power_w}};
  // Optional keys, written only when they differ from their defaults (round trip; older outputs unchanged).
  if (!g.attention_efficiency.points.empty()) j["attention_efficiency"] = curve_to_json(g.attention_efficiency);
  if (g.graph_kernel_overhead_s >= 0) j["graph_kernel_overhead_s"] = g.graph_kernel_overhead_s;
  if (!g.fp8_matrix_efficiency.points.empty()) j["fp8_matrix_efficiency"] = curve_to_json(g.fp8_matrix_efficiency);
  if (g.attention_tile_rows != 128) j["attention_tile_rows"] = g.attention_tile_rows;
  if (g.sm_count != 1) j["sm_count"] = g.sm_count;
  if (g.compute_capability > 0) j["compute_capability"] = g.compute_capability;
  if (g.compute_slowdown_under_comm > 0) j["compute_slowdown_under_comm"] = g.compute_slowdown_under_comm;
  if (!g.attention_head_dims.empty()) j["attention_head_dims"] = head_dims_json(g.attention_head_dims);
  if (g.attention_backward_grid != AttnBwdGrid::key_tiles) j["attention_backward_grid"] = attn_bwd_grid_name(g.attention_backward_grid);
  const FrameworkMemory& f = g.framework;
  if (f.cuda_context_bytes > 0 || f.cublas_workspace_bytes > 0 || f.allocator_fragmentation > 0)
    j["framework_memory"] = {{"cuda_context_bytes", f.cuda_context_bytes}, {"cublas_workspace_bytes", f.cublas_workspace_bytes},
                             {"allocator_fragmentation", f.allocator_fragmentation}};
  if (!g.kernel_profiles.empty()) {
    json kp = json::object();
    for (const KernelProfile& k : g.kernel_profiles) {
      json e = json::object();
      if (!k.matrix_efficiency.points.empty()) e["matrix_efficiency"] = curve_to_json(k.matrix_efficiency);
      if (!k.fp8_matrix_efficiency.points.empty()) e["fp8_matrix_efficiency"] = curve_to_json(k.fp8_matrix_efficiency);
      if (!k.attention_efficiency.points.empty()) e["attention_efficiency"] = curve_to_json(k.attention_efficiency);
      if (!k.memory_efficiency.points.empty()) e["memory_efficiency"] = curve_to_json(k.memory_efficiency);
      if (!k.attention_head_dims.empty()) e["attention_head_dims"] = head_dims_json(k.attention_head_dims);
      if (k.has_backward_grid) e["attention_backward_grid"] = attn_bwd_grid_name(k.attention_backward_grid);
      kp[k.name] = e;
    }
    j["kernel_profiles"] = kp;
  }
  if (!g.fp8_recipes.empty()) j["fp8_recipes"] = fp8_recipes_to_json(g.fp8_recipes);
  return j;
}

}  // namespace tp
