// validate_devset: regenerates the rows of a hardware development set (data/validation/h100-dev-set.json:
// published H100 throughput of Megatron-LM, llm-foundry, NeMo and Megatron-Bridge runs) with one GPU
// profile for all rows, and reports predicted vs published iteration time per row with mean and max |error|.
// Each row carries its own model, cluster, batch, precision and plan (as published, plus its listed
// assumptions); nothing is searched for a better fit. The published quantity is turned into an iteration
// time: global batch x sequence / (tokens/s per GPU x GPUs) where tokens/s are published, else the model
// FLOPs of one iteration (Megatron-LM's formula, as its README counts them) / (model TFLOP/s per GPU x GPUs).
// A row whose cluster is smaller than its GPU count runs on the same cluster grown to enough nodes.
#pragma once
#include <string>

#include "validate_published.hpp"

namespace tp {

// `set` is the development-set JSON ({"rows": [...]}); `cluster_override`, when not empty, replaces every
// row's catalog cluster (e.g. to run the set on dgx-h200).
PublishedReport validate_devset(const json& set, const std::string& cluster_override = "");

// The scenario JSON of one row (what `simulate` would read), for inspection and tests.
// `set`, when given, resolves clusters the set describes itself (its "clusters" object).
json devset_row_scenario(const json& row, const std::string& cluster_override = "", const json* set = nullptr);

// The row's published iteration time in seconds and how it was derived.
double devset_published_step_s(const json& row, std::string* how = nullptr);

}  // namespace tp
