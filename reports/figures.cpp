// figures: see figures.hpp. Category names match svg::category_colour, so a category keeps its colour in
// every figure (compute is always blue, the bubble always grey, DP communication always green).
#include "figures.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "sim/program.hpp"

namespace tp::report {

using svg::Unit;

namespace {

const json* ptr(const json& j, const std::string& p) {
  try {
    json::json_pointer jp(p);
    return j.contains(jp) ? &j.at(jp) : nullptr;
  } catch (const json::exception&) {
    return nullptr;
  }
}

double num_at(const json& j, const std::string& p, double dflt = NAN) {
  const json* v = ptr(j, p);
  if (!v) return dflt;
  if (v->is_number()) return v->get<double>();
  if (v->is_boolean()) return v->get<bool>() ? 1 : 0;
  return dflt;
}

bool pow2(double x) { return x >= 1 && std::floor(x) == x && ((long long)x & ((long long)x - 1)) == 0; }

// Log x when the values are positive and span a factor of 16 or more; base 2 when all are powers of two.
void choose_x_scale(svg::LineChart& c, const std::vector<double>& x) {
  if (x.empty()) return;
  double mn = *std::min_element(x.begin(), x.end()), mx = *std::max_element(x.begin(), x.end());
  c.log_x = mn > 0 && mx / mn >= 16;
  c.base2_x = c.log_x && std::all_of(x.begin(), x.end(), pow2);
}

struct Cat { const char* key; const char* label; };
const Cat kBreakdown[] = {{"compute", "compute"},
                          {"recompute", "recompute"},
                          {"bubble", "pipeline bubble"},
                          {"tp_comm_exposed", "TP comm (exposed)"},
                          {"pp_comm_exposed", "PP comm (exposed)"},
                          {"dp_comm_exposed", "DP comm (exposed)"},
                          {"ep_comm_exposed", "EP all-to-all (exposed)"},
                          {"optimizer", "optimizer"},
                          {"offload_stall", "offload stall"},
                          {"comm_slowdown", "compute slowed by comm"}};
const Cat kMemory[] = {{"weights", "weights"},
                       {"gradients", "gradients"},
                       {"optimizer", "optimizer state"},
                       {"activations", "activations"},
                       {"buffers", "buffers"}};

// Categories: the known keys in their order, then any other key found in the bars (sorted).
template <size_t N>
void categories(svg::BarChart& c, const Labelled& bars, const Cat (&known)[N], const std::string& obj) {
  for (const Cat& k : known) {
    c.categories.push_back(k.key);
    c.category_labels.push_back(k.label);
  }
  for (const auto& [label, res] : bars) {
    const json* o = ptr(res, obj);
    if (!o || !o->is_object()) continue;
    for (auto it = o->begin(); it != o->end(); ++it)
      if (std::find(c.categories.begin(), c.categories.end(), it.key()) == c.categories.end()) {
        c.categories.push_back(it.key());
        c.category_labels.push_back(it.key());
      }
  }
  for (const auto& [label, res] : bars) {
    svg::Bar b;
    b.label = label;
    for (const std::string& k : c.categories) b.values.push_back(std::max(0.0, num_at(res, obj + "/" + k, 0)));
    c.bars.push_back(std::move(b));
  }
}

}  // namespace

std::string breakdown_svg(const Labelled& bars, const std::string& title) {
  svg::BarChart c;
  c.title = title;
  c.value_label = "step time";
  c.unit = Unit::seconds;
  categories(c, bars, kBreakdown, "/breakdown_s");
  return svg::bar_chart(c);
}

std::string memory_svg(const Labelled& bars, const std::string& title) {
  svg::BarChart c;
  c.title = title;
  c.value_label = "peak memory per GPU";
  c.unit = Unit::bytes;
  c.horizontal = bars.size() > 6;
  c.marker_label = "GPU memory capacity";
  categories(c, bars, kMemory, "/memory/breakdown_bytes");
  for (size_t i = 0; i < bars.size(); ++i) {
    const json& r = bars[i].second;
    c.bars[i].marker = num_at(r, "/memory/capacity_bytes");
    // The simulator's fits also covers host memory and offload chunks: name which one failed.
    if (num_at(r, "/memory/peak_bytes_per_gpu", 0) > c.bars[i].marker) c.bars[i].note = "does not fit";
    else if (num_at(r, "/memory/host_fits", 1) == 0) c.bars[i].note = "host RAM full";
    else if (num_at(r, "/memory/fits", 1) == 0) c.bars[i].note = "offload chunks do not fit";
  }
  return svg::bar_chart(c);
}

std::pair<Unit, std::string> metric_unit(const std::string& pointer) {
  std::vector<std::string> parts;
  std::string cur;
  for (char ch : pointer + "/") {
    if (ch == '/') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  std::string t = parts.empty() ? "value" : parts.back();
  auto ends = [&](const std::string& s) { return t.size() >= s.size() && t.compare(t.size() - s.size(), s.size(), s) == 0; };
  Unit u = Unit::count;
  std::string label = t;
  if (t.find("bytes") != std::string::npos) u = Unit::bytes;
  else if (t == "mfu") u = Unit::fraction;
  else if (ends("_usd")) { u = Unit::usd; label = t.substr(0, t.size() - 4); }
  else if (ends("_s") && !ends("per_s")) { u = Unit::seconds; label = t.substr(0, t.size() - 2); }
  if (t == "mfu") label = "MFU";
  if (t == "peak_bytes_per_gpu") label = "peak memory per gpu";
  if (t == "host_bytes_per_node") label = "host memory per node";
  for (char& ch : label) if (ch == '_') ch = ' ';
  if (parts.size() >= 2 && (label == "time" || label == "cost" || t == "gpu_hours" || t == "steps" || t == "tokens"))
    label = parts[parts.size() - 2] + " " + label;
  for (size_t p = label.find("gpu"); p != std::string::npos; p = label.find("gpu", p + 3))
    if ((p == 0 || label[p - 1] == ' ') && (p + 3 == label.size() || label[p + 3] == ' ' || label[p + 3] == '_'))
      label.replace(p, 3, "GPU");
  if (ends("per_s") && label.size() >= 6) label.replace(label.size() - 6, 6, "/s");  // "tokens per s" -> "tokens/s"
  return {u, label};
}

std::string sweep_svg(const std::vector<double>& x, const std::vector<json>& results, const std::string& metric,
                      const std::string& x_label, const std::string& title) {
  auto [unit, label] = metric_unit(metric);
  svg::LineChart c;
  c.title = title;
  c.x_label = x_label;
  c.y_label = label;
  c.y_unit = unit;
  // The simulate result the metric lives in ("" or "/best/result" for a plan run), for fits and capacities.
  const std::string base = metric.rfind("/best/result/", 0) == 0 ? "/best/result" : "";
  const std::string leaf = metric.substr(base.size());
  // A memory metric is drawn against its capacity: GPU memory for the peak, host memory for the host bytes.
  std::string cap_ptr, cap_label;
  if (leaf == "/memory/peak_bytes_per_gpu") { cap_ptr = "/memory/capacity_bytes"; cap_label = "GPU memory capacity "; }
  if (leaf == "/memory/host_bytes_per_node") { cap_ptr = "/memory/host_capacity_bytes"; cap_label = "host memory capacity per node "; }
  svg::Series s;
  s.name = label;
  double cap = NAN;
  bool same_cap = true;
  for (size_t i = 0; i < x.size() && i < results.size(); ++i) {
    double y = num_at(results[i], metric);
    if (!std::isfinite(y)) continue;
    s.x.push_back(x[i]);
    s.y.push_back(y);
    s.hollow.push_back(num_at(results[i], base + "/memory/fits", 1) == 0 ||
                       num_at(results[i], base + "/memory/host_fits", 1) == 0);
    s.point_labels.push_back(x.size() <= 12 ? svg::human(y, unit) : "");
    double ci = cap_ptr.empty() ? NAN : num_at(results[i], base + cap_ptr);
    if (std::isfinite(cap) && ci != cap) same_cap = false;
    if (!std::isfinite(cap)) cap = ci;
  }
  choose_x_scale(c, s.x);
  c.series.push_back(std::move(s));
  c.hollow_label = "does not fit in memory";
  if (std::isfinite(cap) && same_cap) c.ref_lines.push_back({cap, cap_label + svg::human(cap, Unit::bytes)});
  return svg::line_chart(c);
}

// (gpus, entry) of a plan result's list (by_gpus or pareto), ascending GPU count.
static std::vector<std::pair<double, const json*>> gpu_points(const json& plan, const char* list) {
  std::vector<std::pair<double, const json*>> v;
  const json* a = ptr(plan, std::string("/") + list);
  if (a && a->is_array())
    for (const json& e : *a)
      if (std::isfinite(num_at(e, "/gpus")) && std::isfinite(num_at(e, "/time_to_train_s")))
        v.push_back({num_at(e, "/gpus"), &e});
  std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first < b.first; });
  return v;
}

// "linear scaling from N GPUs": the scaling figure's baseline, its fewest-GPU point (empty without points).
static std::string scaling_baseline(const json& plan) {
  auto pts = gpu_points(plan, "by_gpus");
  if (pts.empty()) return "";
  return "linear scaling from " + svg::num(pts.front().first, 0) + (pts.front().first == 1 ? " GPU" : " GPUs");
}

std::string scaling_svg(const json& plan, const std::string& title) {
  svg::LineChart c;
  c.title = title;
  c.x_label = "GPUs";
  c.y_label = "time to train";
  auto pts = gpu_points(plan, "by_gpus");
  svg::Series s, ideal;
  s.name = "best plan per GPU count (simulated)";
  for (auto& [g, e] : pts) {
    s.x.push_back(g);
    s.y.push_back(num_at(*e, "/time_to_train_s"));
  }
  if (!pts.empty()) {
    ideal.name = scaling_baseline(plan);
    ideal.colour = "#777777";
    ideal.dashed = true;
    ideal.markers = false;
    for (double g : s.x) {
      ideal.x.push_back(g);
      ideal.y.push_back(s.y.front() * pts.front().first / g);
    }
  }
  choose_x_scale(c, s.x);
  if (!s.y.empty()) {
    double mn = *std::min_element(s.y.begin(), s.y.end()), mx = *std::max_element(s.y.begin(), s.y.end());
    c.log_y = mn > 0 && mx / mn > 8;
  }
  if (pts.empty()) c.note = "The planner found no plan that fits at any GPU count.";
  c.series.push_back(std::move(s));
  if (ideal.x.size() >= 2) c.series.push_back(std::move(ideal));
  return svg::line_chart(c);
}

std::string pareto_svg(const json& plan, const std::string& title) {
  svg::LineChart c;
  c.title = title;
  c.x_label = "GPUs";
  c.y_label = "time to train";
  svg::Series all, front;
  all.name = "best plan per GPU count (open markers)";
  all.colour = "#999999";
  all.lines = false;
  for (auto& [g, e] : gpu_points(plan, "by_gpus")) {
    all.x.push_back(g);
    all.y.push_back(num_at(*e, "/time_to_train_s"));
  }
  front.name = "Pareto front (labels: cost of the run)";
  front.colour = svg::kSeries[0];
  for (auto& [g, e] : gpu_points(plan, "pareto")) {
    front.x.push_back(g);
    front.y.push_back(num_at(*e, "/time_to_train_s"));
    double cost = num_at(*e, "/cost_usd");
    front.point_labels.push_back(std::isfinite(cost) ? svg::human(cost, Unit::usd) : "");
  }
  std::vector<double> xs = all.x;
  xs.insert(xs.end(), front.x.begin(), front.x.end());
  choose_x_scale(c, xs);
  std::vector<double> ys = all.y;
  ys.insert(ys.end(), front.y.begin(), front.y.end());
  if (!ys.empty()) {
    double mn = *std::min_element(ys.begin(), ys.end()), mx = *std::max_element(ys.begin(), ys.end());
    c.log_y = mn > 0 && mx / mn > 8;
  }
  if (front.x.empty()) c.note = "The planner found no plan that fits.";
  all.hollow.assign(all.x.size(), true);
  if (!all.x.empty()) c.series.push_back(std::move(all));  // drawn first, under the front
  c.series.push_back(std::move(front));
  return svg::line_chart(c);
}

svg::Gantt timeline_chart(const Result& r, const std::string& title) {
  svg::Gantt g;
  g.title = title;
  g.t_end = r.step_time_s;
  g.categories = {"fwd", "bwd", "recompute", "optimizer", "pp comm", "dp comm", "zero gather", "pcie copy", "host adam",
                  "ep comm"};
  g.category_labels = {"forward", "backward", "recompute", "optimizer", "pipeline send/recv", "DP gradient reduce / gather",
                       "ZeRO-3 parameter gather", "PCIe copy (offload)", "host CPU Adam", "expert all-to-all (MoE)"};
  enum { kFwd, kBwd, kRe, kOpt, kPp, kDp, kZero, kPcie, kHost, kEp };
  const bool moe = r.scenario.model.moe.experts > 0;
  const Program& pg = r.prog;
  const Plan& plan = r.scenario.plan;
  const int pp = plan.pp, R = pg.in.ranks;
  std::vector<int> rep(pp, -1);  // the representative simulated rank of each stage (dp = 0, tp = 0)
  for (int rk = 0; rk < R && rk < (int)pg.sim_stage.size(); ++rk) {
    int s = pg.sim_stage[rk];
    if (s >= 0 && s < pp && rep[s] < 0 && (!pg.full || pg.sim_global[rk] == rank_global(plan, 0, 0, s))) rep[s] = rk;
  }
  std::vector<int> stages;
  const int kMax = 16;
  if (pp <= kMax) {
    for (int s = 0; s < pp; ++s) stages.push_back(s);
  } else {
    for (int i = 0; i < kMax; ++i) stages.push_back((int)std::lround((double)i * (pp - 1) / (kMax - 1)));
  }
  struct LaneDef { int lane; const char* name; };
  const LaneDef kLanesShown[] = {{kLaneCompute, "compute"}, {kLanePpFwd, "pp.fwd"}, {kLanePpBwd, "pp.bwd"},
                                 {kLaneDp, "dp"},           {kLaneZero, "zero"},     {kLaneH2D, "pcie.h2d"},
                                 {kLaneD2H, "pcie.d2h"},    {kLaneHost, "host"}};
  for (int s : stages) {
    int rk = rep[s];
    if (rk < 0) continue;
    bool first = true;
    for (const LaneDef& ld : kLanesShown) {
      const std::vector<int>& order = pg.in.lane_order[(size_t)rk * kLanes + ld.lane];
      if (order.empty()) continue;
      int lane = (int)g.lanes.size();
      g.lanes.push_back({"stage " + std::to_string(s) + " " + ld.name, first});
      first = false;
      // MoE: the expert all-to-all inside each compute slice, on a lane of its own under the compute lane (its
      // share of the slice, placed at the slice's end: the simulator costs it inside the task, not as a task)
      int ep_lane = -1;
      if (moe && ld.lane == kLaneCompute) {
        ep_lane = (int)g.lanes.size();
        g.lanes.push_back({"stage " + std::to_string(s) + " ep all-to-all", false});
      }
      auto ep_share = [&](const TaskInfo& ti, double t0, double t1) {
        if (ep_lane < 0) return;
        TaskCost tc = task_cost(pg.cm, ti);
        double f = tc.duration_s > 0 ? std::clamp(tc.ep_s / tc.duration_s, 0.0, 1.0) : 0;
        if (f > 0) g.slices.push_back({ep_lane, t1 - f * (t1 - t0), t1, kEp});
      };
      for (int t : order) {
        const TaskInfo& ti = pg.info[t];
        double t0 = r.eo.start_s[t], t1 = r.eo.end_s[t];
        double tx = t < (int)r.eo.transfer_s.size() && r.eo.transfer_s[t] >= t0 ? r.eo.transfer_s[t] : t0;
        switch (ti.kind) {
          case TaskKind::fwd:
            g.slices.push_back({lane, t0, t1, kFwd, std::to_string(ti.mb)});
            ep_share(ti, t0, t1);
            break;
          case TaskKind::bwd: {
            TaskCost tc = task_cost(pg.cm, ti);
            double f = tc.duration_s > 0 ? std::clamp(tc.recompute_s / tc.duration_s, 0.0, 1.0) : 0;
            double tm = t0 + f * (t1 - t0);
            if (tm > t0) g.slices.push_back({lane, t0, tm, kRe});
            g.slices.push_back({lane, tm, t1, kBwd, std::to_string(ti.mb)});
            ep_share(ti, t0, t1);
            break;
          }
          case TaskKind::optimizer: g.slices.push_back({lane, t0, t1, kOpt}); break;
          case TaskKind::p2p_fwd:
          case TaskKind::p2p_bwd: g.slices.push_back({lane, tx, t1, kPp}); break;
          case TaskKind::zero_gather: g.slices.push_back({lane, tx, t1, kZero}); break;
          case TaskKind::h2d:
          case TaskKind::d2h: g.slices.push_back({lane, t0, t1, kPcie}); break;
          case TaskKind::host_adam: g.slices.push_back({lane, t0, t1, kHost}); break;
          default: g.slices.push_back({lane, tx, t1, kDp}); break;  // dp / embedding / shared-layer reductions
        }
      }
    }
  }
  char note[256];
  std::snprintf(note, sizeof note, "%s%d pipeline stage%s (the dp 0, tp 0 rank of each). Tensor-parallel collectives "
                "run inside the compute slices%s; communication slices show transfer time; numbers are micro-batches.",
                pp > kMax ? "Showing 16 of " : "", pp, pp == 1 ? "" : "s",
                moe ? " (the expert all-to-all's share of each is drawn on its own lane)" : "");
  g.note = note;
  return g;
}

std::string timeline_svg(const Result& r, const std::string& title) { return svg::gantt_chart(timeline_chart(r, title)); }

namespace {

std::string file_safe(const std::string& s) {
  std::string o;
  for (char ch : s) o += (std::isalnum((unsigned char)ch) || ch == '-' || ch == '_' || ch == '.') ? ch : '-';
  return o.substr(0, 48);
}

Labelled bars_of(const std::vector<std::string>& ids, const std::vector<RunOut>& runs) {
  Labelled bars;
  for (const std::string& id : ids) {
    const RunOut* r = find_run(runs, id);
    if (!r) continue;
    for (const Point& p : r->points) {
      const json* res = sim_result(p.result, r->spec->kind);
      if (!res) continue;
      std::string label = r->label();
      if (r->spec->kind == RunKind::plan) label += " (best plan)";
      if (r->spec->sweep) label += " @ " + svg::num(p.x.get<double>(), 4);
      bars.push_back({label, *res});
    }
  }
  return bars;
}

// The runs' names (their scenarios' "name"), comma-separated.
std::string join(const std::vector<std::string>& ids, const std::vector<RunOut>& runs) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    const RunOut* r = find_run(runs, ids[i]);
    s += (i ? ", " : "") + (r ? r->label() : ids[i]);
  }
  return s;
}


}  // namespace

std::vector<Figure> make_figures(const Spec& spec, const std::vector<RunOut>& runs) {
  std::vector<Figure> out;
  for (size_t i = 0; i < spec.figures.size(); ++i) {
    const FigureSpec& f = spec.figures[i];
    char nn[8];
    std::snprintf(nn, sizeof nn, "%02d", (int)(i + 1));
    Figure fig;
    fig.file = std::string("figures/") + nn + "-" + figure_kind_name(f.kind) + (f.run.empty() ? "" : "-" + file_safe(f.run)) + ".svg";
    const RunOut* r = f.run.empty() ? nullptr : find_run(runs, f.run);
    const std::string name = r ? r->label() : f.run;
    switch (f.kind) {
      case FigureKind::breakdown:
        fig.title = "Where the step time goes" + (f.runs.size() <= 2 ? ": " + join(f.runs, runs) : std::string());
        fig.svg = breakdown_svg(bars_of(f.runs, runs), fig.title);
        break;
      case FigureKind::memory:
        fig.title = "Peak memory per GPU" + (f.runs.size() <= 2 ? ": " + join(f.runs, runs) : std::string());
        fig.svg = memory_svg(bars_of(f.runs, runs), fig.title);
        break;
      case FigureKind::timeline: {
        fig.title = "One training step of " + name + ", per pipeline stage";
        std::shared_ptr<const Result> sim = r && !r->points.empty() ? r->points[0].sim : nullptr;
        if (sim) {
          fig.svg = timeline_svg(*sim, fig.title);
        } else {
          svg::Gantt g;
          g.title = fig.title;
          g.note = "No simulated plan to show (the planner found none that fits).";
          fig.svg = svg::gantt_chart(g);
        }
        break;
      }
      case FigureKind::sweep: {
        std::vector<double> x;
        std::vector<json> res;
        for (const Point& p : r->points) {  // the metric addresses the run's own result, as in quantities
          x.push_back(p.x.get<double>());
          res.push_back(p.result);
        }
        fig.title = metric_unit(f.metric).second;
        if (!fig.title.empty() && fig.title[0] >= 'a' && fig.title[0] <= 'z') fig.title[0] = (char)(fig.title[0] - 'a' + 'A');
        fig.title += " against " + r->spec->sweep->x_label + " (" + name + ")";
        fig.svg = sweep_svg(x, res, f.metric, r->spec->sweep->x_label, fig.title);
        break;
      }
      case FigureKind::scaling: {
        std::string base = scaling_baseline(r->points.at(0).result);
        fig.title = "Time to train against GPU count (" + name + ")" + (base.empty() ? "" : "; dashed: " + base);
        fig.svg = scaling_svg(r->points.at(0).result, fig.title);
        break;
      }
      case FigureKind::pareto:
        fig.title = "GPUs against time to train: the Pareto front (" + name + ")";
        fig.svg = pareto_svg(r->points.at(0).result, fig.title);
        break;
    }
    out.push_back(std::move(fig));
  }
  return out;
}

}  // namespace tp::report
