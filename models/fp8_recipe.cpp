// fp8_recipe: reading a GPU's fp8 recipe costs. See fp8_recipe.hpp.
#include "fp8_recipe.hpp"

#include "limits.hpp"

namespace tp {

namespace {
// A GPU that lists no recipes costs every one as the fp8 curve as fitted, 3 bytes per element cast.
const std::vector<Fp8RecipeCost>& implicit_costs() {
  static const std::vector<Fp8RecipeCost> v = [] {
    std::vector<Fp8RecipeCost> out;
    for (const std::string& n : kFp8Recipes) out.push_back({n, 1, 3});
    return out;
  }();
  return v;
}
}  // namespace

std::vector<Fp8RecipeCost> read_fp8_recipes(const json& v, const std::string& path, Issues& is) {
  std::vector<Fp8RecipeCost> out;
  if (!v.is_object() || v.empty()) {
    is.add_got(path, "an object {RECIPE: {gemm_efficiency_scale, cast_bytes_per_element}, ...}", v);
    return out;
  }
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string at = path + "." + it.key();
    bool known = false;
    for (const std::string& n : kFp8Recipes) known = known || n == it.key();
    if (!known) {
      std::string names;
      for (const std::string& n : kFp8Recipes) names += (names.empty() ? "\"" : ", \"") + n + "\"";
      is.add(at, "unknown fp8 recipe; expected one of " + names);
      continue;
    }
    Reader r(it.value(), at, is);
    if (!r.ok()) continue;
    Fp8RecipeCost c;
    c.name = it.key();
    r.opt_str("about", "");
    c.gemm_efficiency_scale = r.req_num("gemm_efficiency_scale", lim::fp8_gemm_scale);
    c.cast_bytes_per_element = r.req_num("cast_bytes_per_element", lim::fp8_cast_bytes);
    r.finish({"about", "gemm_efficiency_scale", "cast_bytes_per_element"});
    out.push_back(c);
  }
  return out;
}

json fp8_recipes_to_json(const std::vector<Fp8RecipeCost>& recipes) {
  json j = json::object();
  for (const Fp8RecipeCost& c : recipes)
    j[c.name] = {{"gemm_efficiency_scale", c.gemm_efficiency_scale}, {"cast_bytes_per_element", c.cast_bytes_per_element}};
  return j;
}

const Fp8RecipeCost* find_fp8_recipe(const std::vector<Fp8RecipeCost>& recipes, const std::string& name) {
  for (const Fp8RecipeCost& c : recipes.empty() ? implicit_costs() : recipes)
    if (c.name == name) return &c;
  return nullptr;
}

std::string fp8_recipe_names(const std::vector<Fp8RecipeCost>& recipes) {
  std::string s;
  for (const Fp8RecipeCost& c : recipes.empty() ? implicit_costs() : recipes) s += (s.empty() ? "\"" : ", \"") + c.name + "\"";
  return s;
}

}  // namespace tp
