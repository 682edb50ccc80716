// backend_cpu: the CPU backend's table (exec/backends/backend.hpp) — host memory from the C++ heap (device and
// "pinned" memory are the same), memcpy copies, synchronous trivial streams and events, and the ops of exec/backends/cpu/.
// Invariants: the table is a constant built once; nothing in it holds state, so any number of threads and
// other backends may use it at once.
#include <cstring>
#include <new>

#include "exec/backends/backend.hpp"
#include "exec/backends/cpu/ops_cpu.hpp"

namespace tp::exec {
namespace {

// The C++ heap, exactly as std::allocator gets it (so `validate`'s tracked heap, exec/prof/prof.cpp, counts every
// tensor as before the backend existed); aligned for any scalar type.
void* cpu_alloc(size_t bytes) { return bytes == 0 ? nullptr : ::operator new(bytes, std::nothrow); }
void cpu_free(void* p) { ::operator delete(p); }
void cpu_copy(void* dst, const void* src, size_t bytes, CopyKind, Stream) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}
Stream cpu_stream_create() { return Stream{}; }
void cpu_stream_noop(Stream) {}
Event cpu_event_create() { return Event{}; }
void cpu_event_destroy(Event) {}
void cpu_event_record(Event, Stream) {}
void cpu_stream_wait(Stream, Event) {}
void cpu_sync() {}

template <class T>
OpTable<T> cpu_ops() {
  namespace c = ops::cpu;
  OpTable<T> t{};
  t.matmul = &c::matmul<T>;
  t.matmul16 = &c::matmul16<T>;
  t.add_bias = &c::add_bias<T>;
  t.linear_fwd = &composed_linear_fwd<cpu_backend, T>;
  t.bias_bwd = &c::bias_bwd<T>;
  t.add = &c::add<T>;
  t.accumulate = &c::accumulate<T>;
  t.scale = &c::scale<T>;
  t.fill = &c::fill<T>;
  t.copy = &c::copy<T>;
  t.copy_rows = &c::copy_rows<T>;
  t.pack_bf16 = &c::pack_bf16<T>;
  t.unpack_bf16 = &c::unpack_bf16<T>;
  t.layernorm_fwd = &c::layernorm_fwd<T>;
  t.layernorm_fwd16 = &c::layernorm_fwd16<T>;
  t.layernorm_bwd = &c::layernorm_bwd<T>;
  t.layernorm_bwd16 = &c::layernorm_bwd16<T>;
  t.ln_shard_sum = &c::ln_shard_sum<T>;
  t.ln_shard_sqdev = &c::ln_shard_sqdev<T>;
  t.ln_shard_apply = &c::ln_shard_apply<T>;
  t.ln_shard_bwd_sums = &c::ln_shard_bwd_sums<T>;
  t.ln_shard_bwd_apply = &c::ln_shard_bwd_apply<T>;
  t.gelu_fwd = &c::gelu_fwd<T>;
  t.gelu_fwd16 = &c::gelu_fwd16<T>;
  t.gelu_bwd = &c::gelu_bwd<T>;
  t.gelu_bwd_set = &c::gelu_bwd_set<T>;
  t.gelu_bwd_bias16 = &c::gelu_bwd_bias16<T>;
  t.swiglu_fwd = &c::swiglu_fwd<T>;
  t.swiglu_bwd = &c::swiglu_bwd<T>;
  t.swiglu_bwd_set = &c::swiglu_bwd_set<T>;
  t.attention_fwd = &c::attention_fwd<T>;
  t.attention_bwd = &c::attention_bwd<T>;
  t.attention_fwd_kv = &c::attention_fwd_kv<T>;
  t.attention_bwd_kv = &c::attention_bwd_kv<T>;
  t.flash_attention_fwd = &c::flash_attention_fwd<T>;
  t.flash_attention_bwd = &c::flash_attention_bwd<T>;
  t.flash_attention_fwd16 = &c::flash_attention_fwd16<T>;
  t.flash_attention_bwd16 = &c::flash_attention_bwd16<T>;
  t.cross_entropy_fwd = &c::cross_entropy_fwd<T>;
  t.cross_entropy_bwd = &c::cross_entropy_bwd<T>;
  t.row_max = &c::row_max<T>;
  t.max_combine = &c::max_combine<T>;
  t.ce_shard_exp = &c::ce_shard_exp<T>;
  t.ce_shard_finish = &c::ce_shard_finish<T>;
  t.ce_shard_target_grad = &c::ce_shard_target_grad<T>;
  t.embedding_fwd = &c::embedding_fwd<T>;
  t.embedding_bwd = &c::embedding_bwd<T>;
  t.embedding_shard_fwd = &c::embedding_shard_fwd<T>;
  t.embedding_shard_bwd = &c::embedding_shard_bwd<T>;
  t.add_positions = &c::add_positions<T>;
  t.positions_bwd = &c::positions_bwd<T>;
  t.adamw = &c::adamw<T>;
  t.sum_squares = &c::sum_squares<T>;
  t.fp8_quantize = &c::fp8_quantize<T>;
  t.moe_route = &c::moe_route<T>;
  t.moe_route_bwd = &c::moe_route_bwd<T>;
  t.moe_dispatch = &c::moe_dispatch<T>;
  t.moe_dispatch_bwd = &c::moe_dispatch_bwd<T>;
  t.moe_combine = &c::moe_combine<T>;
  t.moe_combine_bwd = &c::moe_combine_bwd<T>;
  return t;
}

Backend make_cpu_backend() {
  Backend b;
  b.name = "cpu";
  b.host_accessible = true;
  b.alloc = &cpu_alloc;
  b.free = &cpu_free;
  b.alloc_pinned = &cpu_alloc;
  b.free_pinned = &cpu_free;
  b.copy = &cpu_copy;
  b.stream_create = &cpu_stream_create;
  b.stream_destroy = &cpu_stream_noop;
  b.stream_sync = &cpu_stream_noop;
  b.event_create = &cpu_event_create;
  b.event_destroy = &cpu_event_destroy;
  b.event_record = &cpu_event_record;
  b.stream_wait = &cpu_stream_wait;
  b.sync = &cpu_sync;
  b.set_bf16_gemm = &ops::cpu::set_bf16_gemm;
  b.f32 = cpu_ops<float>();
  b.f64 = cpu_ops<double>();
  return b;
}

}  // namespace

const Backend& cpu_backend() {
  static const Backend b = make_cpu_backend();
  return b;
}

}  // namespace tp::exec
