// output: the three renderings of a Result — JSON (`simulate --json`, a public interface: keys are stable),
// a human summary for the terminal, and a Chrome-trace (Perfetto) of one simulated step.
// Trace layout: one process per simulated rank (pid = 1000 + global rank, "rank N — sim"), lanes (tid)
// 0 step, 1 compute, 2 tp, 3 pp.fwd, 4 pp.bwd, 5 dp, plus a "memory" counter; op names are canonical
// (C03.fwd.mb5 chunks, L07.fwd.qkv.mb3 layer ops, pp.send.s2-s3.fwd.mb3, dp.reducescatter.c1.b0, optimizer).
// Files are written to a temporary name and renamed, so a failed run leaves no half-written output.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "models/safe_io.hpp"
#include "simulate.hpp"

namespace tp {

json result_to_json(const Result& r);
void print_summary(std::ostream& os, const Result& r);
// Compute detail: every op ("L07.fwd.qkv.mb3", TP collectives on the tp lane), one slice per layer
// ("L07.fwd.mb3"), or one per chunk pass ("C03.fwd.mb5"). Very large traces fall back to coarser detail.
enum class TraceDetail { op, layer, chunk };
json trace_to_json(const Result& r, TraceDetail detail = TraceDetail::op);
// Atomic write through a fresh temporary (models/safe_io.hpp; "-": standard output). Throws InputError saying why.
// Several outputs of one command: write_outputs_atomic (all or none).
void write_file_atomic(const std::string& path, const std::string& text);

// The units every text output uses (simulate, plan, validate): memory in GiB, time to train in days, money in
// dollars with one rounding ($1.23M, $456.7k), MFU in percent.
std::string gib_text(double bytes);       // "12.34 GiB"
std::string days_text(double seconds);    // "19.03 days"
std::string usd_text(double usd);         // "$837.2k", "$1.06M", "$2.31B"
std::string percent_text(double frac);    // "61.5%"
// MFU naming its peak: "MFU 45.1% of bf16 peak (989 TFLOP/s)"; fp8 training shows both peaks:
// "MFU 80.1% of bf16 peak (989 TFLOP/s), 40.0% of fp8 peak (1979 TFLOP/s)".
std::string mfu_text(const Result& r);
// What an answer must say beside its numbers, one line each (every output prints them): the framework profile
// ("framework megatron-core (Megatron-Core core_r0.14)"), each research technique with kResearchLabel, and a
// prediction above the best published for the GPU and framework ("beyond anything published: ...").
std::vector<std::string> result_notes(const Result& r);
// The same as JSON: {"framework": {name, version}, "research": {techniques, label}?, "beyond_published": {...}?}.
json result_notes_json(const Result& r);

}  // namespace tp
