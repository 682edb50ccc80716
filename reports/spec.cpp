// spec: see spec.hpp. Parsing first reads every key with a Reader (types, unknown keys), then checks the
// cross references between runs, quantities and figures, so one pass reports every problem.
#include "spec.hpp"

#include <cmath>
#include <filesystem>
#include <functional>
#include <set>

namespace tp::report {

namespace fs = std::filesystem;

const char* figure_kind_name(FigureKind k) {
  static const char* const names[] = {"breakdown", "memory", "timeline", "sweep", "scaling", "pareto"};
  return names[(int)k];
}

const RunSpec* Spec::find(const std::string& id) const {
  for (const RunSpec& r : runs)
    if (r.id == id) return &r;
  return nullptr;
}

namespace {

std::string idx(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

bool valid_pointer(const std::string& p) {
  if (p.empty()) return false;
  try {
    json::json_pointer jp(p);
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

std::string read_pointer(Reader& r, const std::string& key, Issues& is) {
  std::string p = r.req_str(key);
  if (r.has(key) && r.get(key)->is_string() && !valid_pointer(p))
    is.add_got(r.at(key), "a JSON pointer such as \"/step_time_s\" (\"/\"-separated keys)", p);
  return p;
}

const json* req_array(Reader& r, const std::string& key, Issues& is, bool required) {
  const json* v = r.get(key);
  if (!v) {
    if (required && r.ok()) is.add(r.at(key), "missing; expected a non-empty array");
    return nullptr;
  }
  if (!v->is_array() || v->empty()) {
    is.add_got(r.at(key), "a non-empty array", *v);
    return nullptr;
  }
  return v;
}

Sweep read_sweep(const json& v, const std::string& path, Issues& is) {
  Sweep s;
  Reader r(v, path, is);
  s.pointer = read_pointer(r, "pointer", is);
  if (const json* vals = req_array(r, "values", is, true)) s.values.assign(vals->begin(), vals->end());
  bool numeric = !s.values.empty();
  for (const json& x : s.values) numeric = numeric && x.is_number();
  if (const json* xs = r.get("x")) {
    if (!xs->is_array()) {
      is.add_got(r.at("x"), "an array of numbers, one per value", *xs);
    } else if (xs->size() != s.values.size() && !s.values.empty()) {
      is.add(r.at("x"), "expected " + std::to_string(s.values.size()) + " numbers (one per value), got " +
                            std::to_string(xs->size()));
    } else {
      for (size_t i = 0; i < xs->size(); ++i) {
        if ((*xs)[i].is_number() && std::isfinite((*xs)[i].get<double>())) s.x.push_back((*xs)[i].get<double>());
        else is.add_got(idx(r.at("x"), i), "a number", (*xs)[i]);
      }
    }
  } else if (numeric) {
    for (const json& x : s.values) s.x.push_back(x.get<double>());
  } else if (!s.values.empty()) {
    is.add(r.at("x"), "missing; expected numbers, one per value (the values are not all numbers)");
  }
  s.x_label = r.opt_str("x_label", s.pointer);
  r.finish({"pointer", "values", "x", "x_label"});
  return s;
}

Quantity read_quantity(const json& v, const std::string& path, Issues& is, int depth) {
  Quantity q;
  q.path = path;
  Reader r(v, path, is);
  if (!r.ok()) return q;
  int forms = (int)r.has("run") + (int)r.has("max_fit") + (int)r.has("ratio") + (int)r.has("value");
  if (forms != 1) {
    is.add(path, std::string(forms ? "more than one" : "none") +
                     " of the forms; expected exactly one of {\"run\", \"metric\", \"at\"?}, {\"max_fit\"}, "
                     "{\"ratio\": [q1, q2]}, {\"value\"}");
    return q;
  }
  if (r.has("run")) {
    q.kind = Quantity::from_run;
    q.run = r.req_str("run");
    q.metric = read_pointer(r, "metric", is);
    q.at = (int)r.opt_int("at", -1, 0, 1 << 30);
    r.finish({"run", "metric", "at"});
  } else if (r.has("max_fit")) {
    q.kind = Quantity::max_fit;
    q.run = r.req_str("max_fit");
    r.finish({"max_fit"});
  } else if (r.has("ratio")) {
    q.kind = Quantity::ratio;
    const json* a = r.get("ratio");
    if (!a->is_array() || a->size() != 2) is.add_got(r.at("ratio"), "an array of two quantities [numerator, denominator]", *a);
    else if (depth > 8) is.add(r.at("ratio"), "nested too deeply (at most 8 ratios)");
    else
      for (size_t i = 0; i < 2; ++i) q.parts.push_back(read_quantity((*a)[i], idx(r.at("ratio"), i), is, depth + 1));
    r.finish({"ratio"});
  } else {
    q.kind = Quantity::value;
    q.number = r.req_num("value", -1e300);
    r.finish({"value"});
  }
  return q;
}

Check read_check(const json& v, const std::string& path, Issues& is) {
  Check c;
  c.path = path;
  Reader r(v, path, is);
  c.name = r.req_str("name");
  if (const json* p = r.get("published")) {
    if (p->is_number() || p->is_boolean() || p->is_string()) c.published = *p;
    else is.add_got(r.at("published"), "a number, a boolean or a string", *p);
  }
  c.unit = r.opt_str("unit", "");
  if (const json* o = r.get("ours")) c.ours = read_quantity(*o, r.at("ours"), is, 0);
  else if (r.ok()) is.add(r.at("ours"), "missing; expected a quantity such as {\"run\": ID, \"metric\": \"/step_time_s\"}");
  if (const json* b = r.get("reproduced_if")) {
    Reader br(*b, r.at("reproduced_if"), is);
    if (br.has("min")) c.min = br.req_num("min", -1e300);
    if (br.has("max")) c.max = br.req_num("max", -1e300);
    if (const json* e = br.get("equals")) {
      if (e->is_boolean() || e->is_number()) c.equals = *e;
      else is.add_got(br.at("equals"), "true, false or a number", *e);
      if (c.min || c.max) is.add(br.at("equals"), "give either equals or min / max, not both");
    }
    if (br.ok() && !br.has("min") && !br.has("max") && !br.has("equals"))
      is.add(r.at("reproduced_if"), "expected at least one of min, max, equals");
    if (c.min && c.max && *c.min > *c.max) is.add(r.at("reproduced_if"), "min must be <= max");
    br.finish({"min", "max", "equals"});
  } else if (r.ok()) {
    is.add(r.at("reproduced_if"), "missing; expected {\"min\"?, \"max\"?} or {\"equals\"}");
  }
  c.assumption = r.opt_str("assumption", "");
  r.finish({"name", "published", "unit", "ours", "reproduced_if", "assumption"});
  return c;
}

FigureSpec read_figure(const json& v, const std::string& path, Issues& is) {
  FigureSpec f;
  f.path = path;
  Reader r(v, path, is);
  static const std::vector<std::string> kinds = {"breakdown", "memory", "timeline", "sweep", "scaling", "pareto"};
  f.kind = (FigureKind)r.req_enum("kind", kinds);
  if (!r.ok() || !r.has("kind") || !r.get("kind")->is_string()) return f;
  if (f.kind == FigureKind::breakdown || f.kind == FigureKind::memory) {
    if (const json* a = req_array(r, "runs", is, true))
      for (size_t i = 0; i < a->size(); ++i) {
        if ((*a)[i].is_string()) f.runs.push_back((*a)[i].get<std::string>());
        else is.add_got(idx(r.at("runs"), i), "a run id (string)", (*a)[i]);
      }
    r.finish({"kind", "runs"});
  } else if (f.kind == FigureKind::sweep) {
    f.run = r.req_str("run");
    f.metric = read_pointer(r, "metric", is);
    r.finish({"kind", "run", "metric"});
  } else {
    f.run = r.req_str("run");
    r.finish({"kind", "run"});
  }
  return f;
}

// Cross references: ids exist and have the kind / sweep the use needs.
void check_refs(const Spec& s, Issues& is) {
  auto run_of = [&](const std::string& id, const std::string& at) -> const RunSpec* {
    const RunSpec* r = s.find(id);
    if (!r && !id.empty()) is.add_got(at, "the id of a run in $.runs", id);
    return r;
  };
  std::function<void(const Quantity&)> quantity = [&](const Quantity& q) {
    if (q.kind == Quantity::ratio) {
      for (const Quantity& p : q.parts) quantity(p);
    } else if (q.kind == Quantity::from_run) {
      const RunSpec* r = run_of(q.run, q.path + ".run");
      if (!r) return;
      if (r->sweep && q.at < 0)
        is.add(q.path + ".at", "missing; run \"" + r->id + "\" is a sweep: give the point's index (0 to " +
                                   std::to_string(r->points() - 1) + ")");
      if (!r->sweep && q.at >= 0) is.add(q.path + ".at", "only for sweep runs; run \"" + r->id + "\" has no sweep");
      if (r->sweep && q.at >= (int)r->points())
        is.add(q.path + ".at", "must be < the sweep's " + std::to_string(r->points()) + " values, got " +
                                   std::to_string(q.at));
    } else if (q.kind == Quantity::max_fit) {
      const RunSpec* r = run_of(q.run, q.path + ".max_fit");
      if (r && (!r->sweep || r->kind != RunKind::simulate))
        is.add(q.path + ".max_fit", "needs a simulate run with a sweep; \"" + r->id + "\" is not one");
    }
  };
  for (const Check& c : s.checks) quantity(c.ours);
  for (const FigureSpec& f : s.figures) {
    for (size_t i = 0; i < f.runs.size(); ++i) run_of(f.runs[i], idx(f.path + ".runs", i));
    if (f.kind == FigureKind::breakdown || f.kind == FigureKind::memory) continue;
    const RunSpec* r = run_of(f.run, f.path + ".run");
    if (!r) continue;
    if (f.kind == FigureKind::sweep && !r->sweep)
      is.add(f.path + ".run", "a sweep figure needs a run with a sweep; \"" + r->id + "\" has none");
    if (f.kind != FigureKind::sweep && r->sweep)
      is.add(f.path + ".run", std::string("a ") + figure_kind_name(f.kind) + " figure needs a run without a sweep");
    if ((f.kind == FigureKind::scaling || f.kind == FigureKind::pareto) && r->kind != RunKind::plan)
      is.add(f.path + ".run", std::string("a ") + figure_kind_name(f.kind) + " figure needs a run of kind \"plan\"");
  }
}

}  // namespace

Spec spec_from_json(const json& j, const std::string& base_dir, const std::string& where) {
  Issues is;
  Spec s;
  s.file = where;
  s.base_dir = base_dir;
  Reader r(j, "$", is);
  s.title = r.req_str("title");
  s.claim = r.opt_str("claim", "");
  s.source = r.opt_str("source", "");
  s.about = r.opt_str("about", "");
  std::set<std::string> ids;
  if (const json* runs = req_array(r, "runs", is, true)) {
    for (size_t i = 0; i < runs->size(); ++i) {
      RunSpec rs;
      rs.path = idx("$.runs", i);
      Reader rr((*runs)[i], rs.path, is);
      rs.id = rr.req_str("id");
      if (rr.has("id") && rr.get("id")->is_string()) {
        if (rs.id.empty()) is.add(rr.at("id"), "must not be empty");
        else if (!ids.insert(rs.id).second) is.add_got(rr.at("id"), "a unique run id", rs.id);
      }
      rs.kind = (RunKind)rr.req_enum("kind", {"simulate", "plan"});
      rs.scenario = rr.req_str("scenario");
      if (!rs.scenario.empty()) {
        fs::path p(rs.scenario);
        rs.scenario_file = (p.is_absolute() ? p : fs::path(base_dir) / p).lexically_normal().string();
        std::error_code ec;
        if (!fs::is_regular_file(rs.scenario_file, ec))
          is.add_got(rr.at("scenario"), "a scenario file (relative to the spec), but " + rs.scenario_file +
                                            " is not a readable file", rs.scenario);
      }
      if (const json* o = rr.get("overrides")) {
        if (o->is_object()) rs.overrides = *o;
        else is.add_got(rr.at("overrides"), "an object (a JSON merge patch of the scenario)", *o);
      }
      if (const json* sw = rr.get("sweep")) rs.sweep = read_sweep(*sw, rr.at("sweep"), is);
      rr.finish({"id", "kind", "scenario", "overrides", "sweep"});
      s.runs.push_back(std::move(rs));
    }
  }
  if (const json* cs = req_array(r, "checks", is, false))
    for (size_t i = 0; i < cs->size(); ++i) s.checks.push_back(read_check((*cs)[i], idx("$.checks", i), is));
  if (const json* fs_ = req_array(r, "figures", is, false))
    for (size_t i = 0; i < fs_->size(); ++i) s.figures.push_back(read_figure((*fs_)[i], idx("$.figures", i), is));
  r.finish({"title", "claim", "source", "about", "runs", "checks", "figures"});
  if (r.ok()) check_refs(s, is);
  if (!is.empty()) {
    for (auto& m : is.messages) m = where + ": " + m;
    throw InputError(is.messages);
  }
  return s;
}

Spec read_spec(const std::string& file) {
  Issues is;
  json j = parse_json_file(file, file, is);
  if (!is.empty()) throw InputError(is.messages);
  fs::path base = fs::path(file).parent_path();
  return spec_from_json(j, base.empty() ? std::string(".") : base.string(), file);
}

json point_scenario_json(const Spec& spec, const RunSpec& r, size_t point) {
  Issues is;
  json j = parse_json_file(r.scenario_file, r.scenario_file, is);
  if (!is.empty()) throw InputError(is.messages);
  if (!r.overrides.is_null()) j.merge_patch(r.overrides);
  if (r.sweep) {
    try {
      j[json::json_pointer(r.sweep->pointer)] = r.sweep->values.at(point);
    } catch (const json::exception& e) {
      throw InputError({spec.file + ": " + r.path + ".sweep.pointer: cannot place a value at " + r.sweep->pointer +
                        " in " + r.scenario + ": " + e.what()});
    }
  }
  return j;
}

}  // namespace tp::report
