// cudnn_sdpa: libtrainplan_cudnn.so, cuDNN's fused attention (SDPA) for the CUDA backend's bf16-storage flash
// attention, through the cudnn-frontend graph API (header-only; cudnn_sdpa.h has the C ABI and the layouts).
// Each shape gets a forward graph (O and the log-sum-exp Stats) and a backward graph (dQ, dK, dV from Q, K, V, O,
// dO, Stats), both causal bottom-right, bf16 in and out, fp32 inside, built once (heuristics mode A, the first
// plan that builds) and cached; q, k and v are read through their strides in place (the fused QKV rows), and the
// gradients written the same way. Host code only; every entry catches everything and returns a status.
// Invariants: one cuDNN handle per process, bound to the stream passed to the first prepare (the backend's one
// stream); graphs are keyed by the whole shape, strides included.
#include "exec/kernels/cuda/cudnn_sdpa.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

namespace {

namespace fe = cudnn_frontend;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

struct Graphs {
  std::shared_ptr<fe::graph::Graph> fwd, bwd;
  size_t workspace_bytes = 0;
  std::string refused;  // non-empty: cuDNN refused this shape (why)
};

struct Lib {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
  std::map<std::tuple<long, long, long, long, long, long, long, long, float>, Graphs> graphs;
};
Lib& lib() {
  static Lib l;
  return l;
}

auto key(const tp_sdpa_shape& s) { return std::make_tuple(s.B, s.Tq, s.Tk, s.H, s.Hkv, s.D, s.ldq, s.ldkv, s.scale); }

void say(char* why, size_t n, const std::string& m) {
  if (why && n) std::snprintf(why, n, "%s", m.c_str());
}

// q-side tensor [B, H, Tq, D] read through row stride ldq; kv-side [B, Hkv, Tk, D] through ldkv; O / dO contiguous
// [B, Tq, H, D]; Stats [B, H, Tq, 1].
std::shared_ptr<fe::graph::Tensor_attributes> qside(fe::graph::Graph& g, const char* name, int64_t uid,
                                                    const tp_sdpa_shape& s, long ld) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({s.B, s.H, s.Tq, s.D})
                      .set_stride({s.Tq * ld, s.D, ld, 1}));
}
std::shared_ptr<fe::graph::Tensor_attributes> kvside(fe::graph::Graph& g, const char* name, int64_t uid,
                                                     const tp_sdpa_shape& s) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({s.B, s.Hkv, s.Tk, s.D})
                      .set_stride({s.Tk * s.ldkv, s.D, s.ldkv, 1}));
}
void as_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, int64_t uid, const tp_sdpa_shape& s, bool kv,
               long ld) {
  const long T = kv ? s.Tk : s.Tq, heads = kv ? s.Hkv : s.H;
  t->set_output(true).set_uid(uid).set_dim({s.B, heads, T, s.D}).set_stride({T * ld, s.D, ld, 1});
}
std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// validate -> operation graph -> heuristics A -> support check -> plans; "" when it built, else cuDNN's message.
std::string build(fe::graph::Graph& g, cudnnHandle_t h, size_t& ws) {
  auto e = g.validate();
  if (e.is_good()) e = g.build_operation_graph(h);
  if (e.is_good()) e = g.create_execution_plans({fe::HeurMode_t::A});
  if (e.is_good()) e = g.check_support(h);
  if (e.is_good()) e = g.build_plans(h);
  int64_t bytes = 0;
  if (e.is_good()) e = g.get_workspace_size(bytes);
  if (e.is_bad()) return e.get_message().empty() ? "cuDNN refused the graph" : e.get_message();
  ws = std::max(ws, size_t(bytes));
  return "";
}

Graphs make_graphs(const tp_sdpa_shape& s, cudnnHandle_t h) {
  Graphs r;
  const long HD = s.H * s.D;
  {
    auto g = new_graph();
    auto q = qside(*g, "Q", kQ, s, s.ldq);
    auto k = kvside(*g, "K", kK, s);
    auto v = kvside(*g, "V", kV, s);
    auto o = fe::graph::SDPA_attributes().set_name("tp_sdpa_fwd").set_generate_stats(true).set_attn_scale(s.scale);
    o.set_causal_mask_bottom_right(true);
    auto [O, stats] = g->sdpa(q, k, v, o);
    as_output(O, kO, s, false, HD);
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({s.B, s.H, s.Tq, 1})
        .set_stride({s.H * s.Tq, s.Tq, 1, 1});
    r.refused = build(*g, h, r.workspace_bytes);
    r.fwd = g;
  }
  if (!r.refused.empty()) return r;
  {
    auto g = new_graph();
    auto q = qside(*g, "Q", kQ, s, s.ldq);
    auto k = kvside(*g, "K", kK, s);
    auto v = kvside(*g, "V", kV, s);
    auto O = qside(*g, "O", kO, s, HD);
    auto dO = qside(*g, "dO", kdO, s, HD);
    auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("Stats").set_uid(kStats)
                               .set_dim({s.B, s.H, s.Tq, 1}).set_stride({s.H * s.Tq, s.Tq, 1, 1})
                               .set_data_type(fe::DataType_t::FLOAT));
    auto o = fe::graph::SDPA_backward_attributes().set_name("tp_sdpa_bwd").set_attn_scale(s.scale);
    o.set_causal_mask_bottom_right(true);
    auto [dQ, dK, dV] = g->sdpa_backward(q, k, v, O, dO, stats, o);
    as_output(dQ, kdQ, s, false, s.ldq);
    as_output(dK, kdK, s, true, s.ldkv);
    as_output(dV, kdV, s, true, s.ldkv);
    const std::string why = build(*g, h, r.workspace_bytes);
    if (!why.empty()) r.refused = "backward: " + why;
    r.bwd = g;
  }
  return r;
}

// The shape's graphs, built on first use (status and why as the C ABI's).
int find(const tp_sdpa_shape& s, Graphs*& out, char* why, size_t n) {
  Lib& l = lib();
  std::lock_guard<std::mutex> lock(l.mu);
  if (!l.handle) {
    say(why, n, "cuDNN handle not created (tp_sdpa_prepare first)");
    return TP_SDPA_ERROR;
  }
  auto it = l.graphs.find(key(s));
  if (it == l.graphs.end()) it = l.graphs.emplace(key(s), make_graphs(s, l.handle)).first;
  out = &it->second;
  if (!out->refused.empty()) {
    say(why, n, out->refused);
    return TP_SDPA_REFUSED;
  }
  return TP_SDPA_OK;
}

int run(fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack, void* ws, char* why, size_t n) {
  auto e = g.execute(lib().handle, pack, ws);
  if (e.is_bad()) {
    say(why, n, "cuDNN execute: " + e.get_message());
    return TP_SDPA_ERROR;
  }
  return TP_SDPA_OK;
}

template <class Body>
int guarded(char* why, size_t n, Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    say(why, n, std::string("cuDNN: ") + e.what());
  } catch (...) {
    say(why, n, "cuDNN: unknown exception");
  }
  return TP_SDPA_ERROR;
}

}  // namespace

extern "C" {

TP_SDPA_API int tp_sdpa_abi_version(void) { return TP_SDPA_ABI_VERSION; }

TP_SDPA_API void tp_sdpa_version(char* out, size_t out_size) {
  const size_t v = cudnnGetVersion();
  say(out, out_size, "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                         std::to_string(v % 100) + " (frontend " + std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
                         std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
                         std::to_string(CUDNN_FRONTEND_PATCH_VERSION) + ")");
}

TP_SDPA_API int tp_sdpa_prepare(const tp_sdpa_shape* s, void* stream, size_t* workspace_bytes, char* why,
                                size_t why_size) {
  return guarded(why, why_size, [&] {
    {
      Lib& l = lib();
      std::lock_guard<std::mutex> lock(l.mu);
      if (!l.handle) {
        cudnnHandle_t h = nullptr;
        if (const cudnnStatus_t st = cudnnCreate(&h); st != CUDNN_STATUS_SUCCESS) {
          say(why, why_size, std::string("cudnnCreate: ") + cudnnGetErrorString(st));
          return TP_SDPA_ERROR;
        }
        cudnnSetStream(h, static_cast<cudaStream_t>(stream));
        l.handle = h;
      }
    }
    Graphs* g = nullptr;
    const int st = find(*s, g, why, why_size);
    if (st == TP_SDPA_OK && workspace_bytes) *workspace_bytes = g->workspace_bytes;
    return st;
  });
}

TP_SDPA_API int tp_sdpa_fwd(const tp_sdpa_shape* s, void* out16, float* lse, const void* q16, const void* k16,
                            const void* v16, void* workspace, char* why, size_t why_size) {
  return guarded(why, why_size, [&] {
    Graphs* g = nullptr;
    if (const int st = find(*s, g, why, why_size); st != TP_SDPA_OK) return st;
    std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(q16)}, {kK, const_cast<void*>(k16)},
                                               {kV, const_cast<void*>(v16)}, {kO, out16}, {kStats, lse}};
    return run(*g->fwd, pack, workspace, why, why_size);
  });
}

TP_SDPA_API int tp_sdpa_bwd(const tp_sdpa_shape* s, void* dq16, void* dk16, void* dv16, const void* dout16,
                            const void* out16, const float* lse, const void* q16, const void* k16, const void* v16,
                            void* workspace, char* why, size_t why_size) {
  return guarded(why, why_size, [&] {
    Graphs* g = nullptr;
    if (const int st = find(*s, g, why, why_size); st != TP_SDPA_OK) return st;
    auto in = [](const void* p) { return const_cast<void*>(p); };
    std::unordered_map<int64_t, void*> pack = {{kQ, in(q16)},     {kK, in(k16)},    {kV, in(v16)},
                                               {kO, in(out16)},   {kdO, in(dout16)}, {kStats, in(lse)},
                                               {kdQ, dq16},       {kdK, dk16},      {kdV, dv16}};
    return run(*g->bwd, pack, workspace, why, why_size);
  });
}

}  // extern "C"
