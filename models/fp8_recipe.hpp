// fp8_recipe: the fp8 scaling recipes a training run can use (training.fp8_recipe) and what each costs on a GPU
// (the GPU profile's "fp8_recipes"). A recipe is how the fp8 linear layers' operands are scaled:
//  - delayed: one scale per tensor from the amax history of earlier steps (Transformer Engine DelayedScaling,
//    Megatron-LM's --fp8-recipe delayed; the cast and its amax in one pass);
//  - tensorwise: one scale per tensor from the tensor's own amax (TE Float8CurrentScaling, torchao "tensorwise"):
//    an amax pass before the cast;
//  - rowwise: one scale per row (torchao "rowwise"): row-scaled GEMMs, and the weight-gradient GEMM's operands
//    quantised again along the other axis;
//  - blockwise: 1x128 / 128x128 blocks (DeepSeek-V3; TE Float8BlockScaling);
//  - mxfp8: 1x32 blocks with power-of-two scales (OCP MX; Blackwell tensor cores).
// Each GPU lists the recipes it has costs for: the scale of its fp8 GEMM curve under the recipe and the HBM bytes
// moved per element quantised (every quantised copy the recipe makes, transposes included). A GPU that lists none
// (an inline or calibrated profile) does not tell the recipes apart: each runs at its fp8 curve with 3 bytes per
// element (read bf16, write fp8), delayed scaling's cost, on which the catalog's fp8 curves were fitted. A GPU that
// lists some refuses the others. Invariants after reading: names are kFp8Recipes', values finite, scale > 0.
#pragma once
#include <string>
#include <vector>

#include "json_check.hpp"

namespace tp {

inline const std::vector<std::string> kFp8Recipes = {"delayed", "tensorwise", "rowwise", "blockwise", "mxfp8"};
inline constexpr const char* kDefaultFp8Recipe = "delayed";

struct Fp8RecipeCost {
  std::string name;                     // one of kFp8Recipes
  double gemm_efficiency_scale = 1;     // x the GPU's fp8 GEMM efficiency under this recipe
  double cast_bytes_per_element = 3;    // HBM bytes per element quantised
};

// A GPU profile's "fp8_recipes": {NAME: {about?, gemm_efficiency_scale, cast_bytes_per_element}, ...}.
std::vector<Fp8RecipeCost> read_fp8_recipes(const json& v, const std::string& path, Issues& is);
json fp8_recipes_to_json(const std::vector<Fp8RecipeCost>& r);

// The cost of recipe `name` among a GPU's `recipes` (none listed: the fp8 curve and 3 bytes for every recipe);
// null when the GPU lists recipes and not this one.
const Fp8RecipeCost* find_fp8_recipe(const std::vector<Fp8RecipeCost>& recipes, const std::string& name);
// The recipes a GPU has costs for, as "\"a\", \"b\"".
std::string fp8_recipe_names(const std::vector<Fp8RecipeCost>& recipes);

}  // namespace tp
