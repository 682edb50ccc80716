// limits: the accepted range of every numeric scenario key, in one table (issue 14: "bound every numeric key by
// a documented physical range"). Each range holds every published model, GPU and cluster with a wide margin and
// keeps the simulator's arithmetic finite and its work bounded; a value outside is bad input (exit 2, the message
// names the JSON path and the range). Speeds (FLOP/s, bytes/s) go up to 1e21, far past any hardware, so that idealised
// profiles can make a resource free (the tests' 1e18-1e20); peaks start at 1e6 FLOP/s and efficiencies at 1e-6, so
// that a time (work over speed x efficiency) stays finite: an in-range 1e-300 gave "inf days" and deadlocks (issue
// 44). docs/limits.md lists the same table (a test checks that they agree).
// Invariants: integers are exact in a double (<= 2^53); an entry's key is its JSON path without "$." (fix lists,
// delink and Hugging Face configs reuse the entry of the key they stand for).
#pragma once
#include <string>

namespace tp {

// [lo, hi] integer, [lo, hi] number, (lo, hi] number, 0 or [lo, hi] number (a peak: 0 = none)
enum class LimitKind { integer, number, open_number, zero_or_number };

struct Limit {
  const char* key;   // JSON path without "$.", e.g. "model.hidden"
  double lo, hi;
  LimitKind kind;
  const char* why;   // what the bound stands for (docs/limits.md)
};

namespace lim {
using K = LimitKind;
// model (inline objects, catalog entries and Hugging Face configs alike)
inline constexpr Limit layers{"model.layers", 1, 10000, K::integer, "largest published ~200"};
inline constexpr Limit hidden{"model.hidden", 1, 1048576, K::integer, "2^20; largest published ~25,600"};
inline constexpr Limit heads{"model.heads", 1, 65536, K::integer, "largest published ~160"};
inline constexpr Limit kv_heads{"model.kv_heads", 1, 65536, K::integer, "at most heads"};
inline constexpr Limit head_dim{"model.head_dim", 1, 65536, K::integer, "largest published 256"};
inline constexpr Limit ffn_hidden{"model.ffn_hidden", 1, 16777216, K::integer, "2^24; largest published ~100,000"};
inline constexpr Limit vocab{"model.vocab", 1, 100000000, K::integer, "largest published ~256,000"};
inline constexpr Limit model_seq_len{"model.seq_len", 1, 100000000, K::integer, "10^8 tokens"};
inline constexpr Limit sliding_window{"model.sliding_window", 1, 100000000, K::integer, "as seq_len"};
inline constexpr Limit experts{"model.moe.experts", 2, 1048576, K::integer, "largest published ~10,000"};
inline constexpr Limit top_k{"model.moe.top_k", 1, 1024, K::integer, "at most experts"};
inline constexpr Limit capacity_factor{"model.moe.capacity_factor", 0, 1000, K::open_number, "typical 1-2"};
inline constexpr Limit moe_every{"model.moe.every", 1, 10000, K::integer, "at most layers"};
inline constexpr Limit moe_ffn_hidden{"model.moe.ffn_hidden", 1, 16777216, K::integer, "as ffn_hidden"};
inline constexpr Limit shared_ffn_hidden{"model.moe.shared_ffn_hidden", 0, 16777216, K::integer, "as ffn_hidden"};
inline constexpr Limit aux_loss_coeff{"model.moe.aux_loss_coeff", 0, 100, K::number, "typical 0.001-0.01"};
inline constexpr Limit rope_theta{"model.rope_theta", 1, 1e12, K::number, "Llama 3: 500000; Qwen2: 1e6"};
inline constexpr Limit norm_eps{"model.norm_eps", 0, 1, K::open_number, "typical 1e-6 to 1e-5"};
inline constexpr Limit rope_factor{"model.rope_scaling.factor", 0, 10000, K::open_number, "Llama 3.1: 8"};
inline constexpr Limit rope_freq_factor{"model.rope_scaling.*_freq_factor", 0, 10000, K::open_number, "Llama 3.1: 1 and 4"};
inline constexpr Limit rope_original{"model.rope_scaling.original_max_position", 1, 100000000, K::integer,
                                     "Llama 3.1: 8192"};
// cluster
inline constexpr Limit nodes{"cluster.nodes", 1, 1000000, K::integer, "10^6 nodes"};
inline constexpr Limit gpus_per_node{"cluster.gpus_per_node", 1, 1024, K::integer, "NVL72 racks: 72"};
inline constexpr Limit intra_bw{"cluster.intra_node.bandwidth_bytes_per_s", 1, 1e21, K::number, "NVLink 5: 9e11"};
inline constexpr Limit intra_latency{"cluster.intra_node.latency_s", 0, 1, K::number, "microseconds"};
inline constexpr Limit nics_per_node{"cluster.inter_node.nics_per_node", 1, 1024, K::integer, "typical 8"};
inline constexpr Limit nic_bits{"cluster.inter_node.nic_bandwidth_bits_per_s", 1, 1e22, K::number, "800 Gb/s = 8e11"};
inline constexpr Limit oversubscription{"cluster.inter_node.oversubscription", 1, 1000, K::number, "1 = non-blocking"};
inline constexpr Limit nodes_per_leaf{"cluster.inter_node.nodes_per_leaf", 1, 1000000, K::integer, "as nodes"};
inline constexpr Limit inter_latency{"cluster.inter_node.latency_s", 0, 1, K::number, "microseconds"};
inline constexpr Limit host_memory{"cluster.host.memory_bytes", 0, 1e16, K::number, "10 PB; typical 2e12"};
inline constexpr Limit pcie_bw{"cluster.host.pcie_bandwidth_bytes_per_s", 1, 1e21, K::number, "PCIe 6 x16: 1.3e11"};
inline constexpr Limit cpu_cores{"cluster.host.cpu_cores", 1, 100000, K::integer, "typical 128"};
inline constexpr Limit host_mem_bw{"cluster.host.memory_bandwidth_bytes_per_s", 1, 1e21, K::number, "typical 4e11"};
inline constexpr Limit price{"cluster.price_per_gpu_hour_usd", 0, 10000, K::number, "typical 1-10"};
inline constexpr Limit cluster_power{"cluster.power_per_gpu_w", 0, 100000, K::number, "typical 300-1,500"};
inline constexpr Limit nccl_buffer{"cluster.nccl_buffer_bytes_per_communicator", 0, 1e12, K::number, "typical 1e8"};
// cluster.gpu
inline constexpr Limit matrix_flops{"cluster.gpu.matrix_flops_per_s.*", 1e6, 1e21, K::zero_or_number,
                                    "B200 fp8: 4.5e15; 0 = no such precision"};
inline constexpr Limit vector_flops{"cluster.gpu.vector_flops_per_s.*", 1e6, 1e21, K::zero_or_number, "as matrix"};
inline constexpr Limit hbm_bytes{"cluster.gpu.hbm_bytes", 1, 1e15, K::number, "B200: 1.9e11"};
inline constexpr Limit hbm_bw{"cluster.gpu.hbm_bandwidth_bytes_per_s", 1, 1e21, K::number, "B200: 8e12"};
inline constexpr Limit curve_size{"cluster.gpu.*_efficiency[i][0]", 0, 1e30, K::open_number,
                                  "FLOPs or bytes of one op; also the fabrics' efficiency curves"};
inline constexpr Limit curve_eff{"cluster.gpu.*_efficiency[i][1]", 1e-6, 1, K::number, "a fraction of peak"};
inline constexpr Limit tile_rows{"cluster.gpu.attention_tile_rows", 1, 1048576, K::integer, "typical 128"};
inline constexpr Limit sm_count{"cluster.gpu.sm_count", 1, 1048576, K::integer, "H100: 132"};
inline constexpr Limit kernel_overhead{"cluster.gpu.kernel_overhead_s", 0, 1, K::number, "microseconds"};
inline constexpr Limit graph_kernel_overhead{"cluster.gpu.graph_kernel_overhead_s", 0, 1, K::number,
                                             "microseconds; absent: kernel_overhead_s (plan.cuda_graphs)"};
inline constexpr Limit gpu_power{"cluster.gpu.power_w", 0, 100000, K::number, "typical 300-1,500"};
inline constexpr Limit compute_capability{"cluster.gpu.compute_capability", 0, 20, K::number,
                                          "H100: 9.0; 0 = not given (NCCL's Ampere tables)"};
inline constexpr Limit comm_slowdown{"cluster.gpu.compute_slowdown_under_comm", 0, 1, K::number, "a fraction; 0 = not modelled"};
inline constexpr Limit fp8_gemm_scale{"cluster.gpu.fp8_recipes.*.gemm_efficiency_scale", 0, 2, K::open_number,
                                      "1 = the fp8 curve (H100 rowwise: 0.649, fitted)"};
inline constexpr Limit fp8_cast_bytes{"cluster.gpu.fp8_recipes.*.cast_bytes_per_element", 0, 64, K::number,
                                      "delayed 3, tensorwise 5, rowwise 8"};
// cluster.nccl.tuning (models/nccl_tuning)
inline constexpr Limit nccl_tuning{"cluster.nccl.tuning.*", 0, 1e6, K::number,
                                   "us or GB/s: NCCL's own constants and the fitted pipeline fill (models/catalog/nccl.json); speed lists descending"};
inline constexpr Limit nccl_channels{"cluster.nccl.tuning.*_max_channels", 1, 64, K::integer, "NCCL's MAXCHANNELS / 2 = 32"};
inline constexpr Limit framework_bytes{"cluster.gpu.framework_memory.*_bytes", 0, 1e12, K::number, "typical 5e8"};
inline constexpr Limit fragmentation{"cluster.gpu.framework_memory.allocator_fragmentation", 0, 1, K::number,
                                     "a fraction"};
// training.framework (inline framework profiles; catalog entries alike)
inline constexpr Limit fw_max_zero_with_pp{"training.framework.can_run.max_zero_with_pp", 0, 3, K::integer, "a ZeRO stage"};
inline constexpr Limit fw_max_tp{"training.framework.can_run.max_tp", 0, 1048576, K::integer, "0: any"};
inline constexpr Limit fw_bucket{"training.framework.communication.bucket.min_params", 1, 1e13, K::number,
                                 "Megatron-LM 4e7, DeepSpeed 5e8"};
inline constexpr Limit fw_bucket_per_rank{"training.framework.communication.bucket.params_per_data_rank", 0, 1e13,
                                          K::number, "Megatron-LM 1e6"};
inline constexpr Limit fw_live_params{"training.framework.communication.zero3_live_params", 0, 1e15, K::number,
                                      "DeepSpeed 1e9; 0: two whole layers"};
inline constexpr Limit fw_best_tflops{"training.framework.best_published[].model_tflops_per_gpu", 1, 1e6, K::number,
                                      "published 150-850"};
// training
inline constexpr Limit global_batch{"training.global_batch", 1, 100000000, K::integer,
                                    "sequences; largest published ~60,000 (also delink and search.fix)"};
inline constexpr Limit seq_len{"training.seq_len", 1, 100000000, K::integer, "10^8 tokens"};
inline constexpr Limit tokens{"training.tokens", 0, 1e16, K::open_number, "~300x the largest public run (also delink)"};
inline constexpr Limit target_loss{"training.target_loss", 0, 100, K::open_number, "nats per token"};
// training.framework.fitted (trainplan fit)
inline constexpr Limit fit_scale{"training.framework.fitted.*_efficiency_scale", 0.05, 2, K::number, "1 = the catalog's curves"};
inline constexpr Limit fit_overhead{"training.framework.fitted.step_overhead_s", 0, 3600, K::number, "seconds per step"};
// training.optimizer and the run's intervals (export only; they change no cost)
inline constexpr Limit lr{"training.optimizer.lr", 0, 10, K::open_number, "typical 1e-4 to 3e-3"};
inline constexpr Limit min_lr{"training.optimizer.min_lr", 0, 10, K::number, "typical lr / 10"};
inline constexpr Limit warmup_steps{"training.optimizer.warmup_steps", 0, 1000000000, K::integer, "typical 2,000"};
inline constexpr Limit weight_decay{"training.optimizer.weight_decay", 0, 10, K::number, "typical 0.1"};
inline constexpr Limit grad_clip{"training.optimizer.grad_clip", 0, 1000000, K::number, "typical 1.0; 0 = off"};
inline constexpr Limit adam_beta{"training.optimizer.beta*", 0, 1, K::number, "typical 0.9 and 0.95"};
inline constexpr Limit adam_eps{"training.optimizer.eps", 0, 1, K::open_number, "typical 1e-8"};
inline constexpr Limit checkpoint_every{"training.checkpoint_every", 1, 1000000000, K::integer, "steps; typical 1,000"};
inline constexpr Limit log_every{"training.log_every", 1, 1000000000, K::integer, "steps; typical 10"};
// plan (also search.fix)
inline constexpr Limit dp{"plan.dp", 1, 16777216, K::integer, "2^24 GPUs"};
inline constexpr Limit tp{"plan.tp", 1, 65536, K::integer, "typical <= 64"};
inline constexpr Limit pp{"plan.pp", 1, 65536, K::integer, "at most layers (+2)"};
inline constexpr Limit virtual_stages{"plan.virtual_stages", 1, 10000, K::integer, "at most layers"};
inline constexpr Limit microbatch{"plan.microbatch", 1, 100000000, K::integer, "as global_batch"};
inline constexpr Limit zero{"plan.zero", 0, 3, K::integer, "ZeRO stages"};
inline constexpr Limit ep{"plan.ep", 1, 16777216, K::integer, "as dp"};
inline constexpr Limit cp{"plan.cp", 1, 65536, K::integer, "typical <= 32"};
inline constexpr Limit stage_layers{"plan.stage_layers[i]", 1, 10000, K::integer, "as layers"};
inline constexpr Limit first_stage_layers{"plan.first_stage_layers", 1, 10000, K::integer, "as layers"};
inline constexpr Limit last_stage_layers{"plan.last_stage_layers", 1, 10000, K::integer, "as layers"};
inline constexpr Limit recompute_layers{"plan.recompute_layers", 0, 10000, K::integer, "at most the model's layers"};
inline constexpr Limit offload_layer{"plan.offload.layers[i]", 0, 9999, K::integer, "a layer index"};
inline constexpr Limit offload_fraction{"plan.offload.fraction", 0, 1, K::open_number, "a fraction"};
inline constexpr Limit prefetch_layers{"plan.offload.prefetch_layers", 1, 10000, K::integer, "as layers"};
inline constexpr Limit prefetch_runs{"plan.offload.prefetch_runs", 0, 10000, K::integer, "as layers"};
inline constexpr Limit chunk_elements{"plan.offload.chunk_elements", 1, 1099511627776.0, K::integer, "2^40"};
inline constexpr Limit gpu_memory_fraction{"plan.offload.gpu_memory_fraction", 0, 1, K::open_number, "a fraction"};
inline constexpr Limit warmup_fraction{"plan.offload.warmup_chunk_fraction", 0, 1, K::open_number, "a fraction"};
inline constexpr Limit adam_margin{"plan.offload.hybrid_adam_margin", 0, 1, K::number, "a fraction"};
inline constexpr Limit unique_layers{"plan.delink.unique_layers", 1, 10000, K::integer, "as layers"};
// search
inline constexpr Limit max_gpus{"search.max_gpus", 1, 16777216, K::integer, "2^24 GPUs (also min_gpus, gpu_counts)"};
inline constexpr Limit search_top_k{"search.top_k", 1, 1000, K::integer, "plans listed"};
inline constexpr Limit confirm{"search.confirm", 1, 10000, K::integer, "plans simulated"};
inline constexpr Limit confirm_budget{"search.confirm_budget_s", 0, 86400, K::open_number,
                                      "estimated simulation seconds; default 300"};
inline constexpr Limit headroom{"search.memory_headroom", 0, 0.9, K::number, "a fraction of HBM (default 0.06, docs/techniques.md)"};
inline constexpr Limit batch_over_critical{"search.max_batch_over_critical", 0.001, 1000, K::number, "a ratio"};
inline constexpr Limit eth_bits{"search.compare.ethernet_nic_bits_per_s", 1e6, 1e15, K::number, "typical 1e11"};
inline constexpr Limit eth_nics{"search.compare.ethernet_nics_per_node", 1, 64, K::integer, "typical 1-8"};
}  // namespace lim

// Every entry above, in the order docs/limits.md lists them.
inline constexpr const Limit* kAllLimits[] = {
    &lim::layers, &lim::hidden, &lim::heads, &lim::kv_heads, &lim::head_dim, &lim::ffn_hidden, &lim::vocab,
    &lim::model_seq_len, &lim::sliding_window, &lim::experts, &lim::top_k, &lim::capacity_factor, &lim::moe_every,
    &lim::moe_ffn_hidden, &lim::shared_ffn_hidden, &lim::aux_loss_coeff, &lim::rope_theta, &lim::norm_eps,
    &lim::rope_factor, &lim::rope_freq_factor, &lim::rope_original, &lim::nodes, &lim::gpus_per_node, &lim::intra_bw,
    &lim::intra_latency, &lim::nics_per_node, &lim::nic_bits, &lim::oversubscription, &lim::nodes_per_leaf,
    &lim::inter_latency, &lim::host_memory, &lim::pcie_bw, &lim::cpu_cores, &lim::host_mem_bw, &lim::price,
    &lim::cluster_power, &lim::nccl_buffer, &lim::matrix_flops, &lim::vector_flops, &lim::hbm_bytes, &lim::hbm_bw,
    &lim::curve_size, &lim::curve_eff, &lim::tile_rows, &lim::sm_count, &lim::kernel_overhead, &lim::graph_kernel_overhead, &lim::gpu_power,
    &lim::compute_capability, &lim::comm_slowdown, &lim::fp8_gemm_scale, &lim::fp8_cast_bytes, &lim::nccl_tuning, &lim::nccl_channels,
    &lim::framework_bytes, &lim::fragmentation, &lim::fw_max_zero_with_pp, &lim::fw_max_tp, &lim::fw_bucket,
    &lim::fw_bucket_per_rank, &lim::fw_live_params, &lim::fw_best_tflops, &lim::fit_scale, &lim::fit_overhead, &lim::global_batch, &lim::seq_len, &lim::tokens, &lim::target_loss,
    &lim::lr, &lim::min_lr, &lim::warmup_steps, &lim::weight_decay, &lim::grad_clip, &lim::adam_beta, &lim::adam_eps,
    &lim::checkpoint_every, &lim::log_every,
    &lim::dp, &lim::tp, &lim::pp, &lim::virtual_stages, &lim::microbatch, &lim::zero, &lim::ep, &lim::cp,
    &lim::stage_layers, &lim::first_stage_layers, &lim::last_stage_layers, &lim::recompute_layers, &lim::offload_layer,
    &lim::offload_fraction, &lim::prefetch_layers, &lim::prefetch_runs, &lim::chunk_elements, &lim::gpu_memory_fraction,
    &lim::warmup_fraction, &lim::adam_margin, &lim::unique_layers, &lim::max_gpus, &lim::search_top_k, &lim::confirm, &lim::confirm_budget,
    &lim::headroom, &lim::batch_over_critical, &lim::eth_bits, &lim::eth_nics};

// "an integer in [1, 10000]", "a number in [0, 1e+15]", "a number in (0, 1]": the text messages and the docs use.
std::string limit_text(const Limit& l);
// True when x lies in the range (and is an integer where the entry says so).
bool within(const Limit& l, double x);

}  // namespace tp
