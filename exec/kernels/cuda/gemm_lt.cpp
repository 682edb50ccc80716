// gemm_lt: cuBLASLt GEMMs for the CUDA backend (see gemm_lt.hpp for the row-major mapping and invariants).
// A GEMM's setup (matmul descriptor, the three layouts, the heuristic's algorithm) is made on its first call
// and kept in a cache keyed by its shapes, strides, transposes, compute mode and pointer alignments
// (gemm_cache.hpp); later calls with the same key reuse it. The algorithm: the fastest of the heuristic's first 8
// on the first call's own operands (each run once, then timed twice; an accumulating GEMM on a saved copy of C,
// restored after, when C is at most 64 MiB, else the heuristic's first; TP_CUDA_GEMM_TUNE=0 always takes the
// heuristic's first, as cuBLAS does). Measured on an H200 (docs/perf/gpu.md): the GPT-2 124M TF32 step takes
// 64.2 ms tuned, 67.3 ms with the heuristic's first. Alignment: every pointer must be 4-byte aligned
// (fp32) and leading dimensions >= the stored row length; the heuristic is told each pointer's actual
// alignment (16, 8 or 4 bytes) so it never picks a kernel that needs more (the alignment is part of the key).
#include "exec/kernels/cuda/gemm_lt.hpp"

#include "exec/kernels/cuda/backend_cuda_parts.hpp"
#include "exec/kernels/cuda/gemm_cache.hpp"

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

namespace tp::cuda {
namespace {


std::string shape_text(const GemmArgs& g) {
  return std::string(g.what) + " (M " + std::to_string(g.M) + ", N " + std::to_string(g.N) + ", K " +
         std::to_string(g.K) + ", trans_a " + (g.ta ? "1" : "0") + ", trans_b " + (g.tb ? "1" : "0") + ", lda " +
         std::to_string(g.lda) + ", ldb " + std::to_string(g.ldb) + ", ldc " + std::to_string(g.ldc) +
         ", batch " + std::to_string(g.batch) + ")";
}

void check(cublasStatus_t s, const GemmArgs& g, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error("cuda " + shape_text(g) + ": " + call + " failed: " + cublasLtGetStatusName(s) + " (" +
                           cublasLtGetStatusString(s) + ")");
}


// RAII owners of the descriptors (not copyable: each is destroyed exactly once).
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  Layout() = default;
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
  ~Layout() {
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
};
struct Desc {
  cublasLtMatmulDesc_t d = nullptr;
  Desc() = default;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() {
    if (d) cublasLtMatmulDescDestroy(d);
  }
};
struct Pref {
  cublasLtMatmulPreference_t d = nullptr;
  Pref() = default;
  Pref(const Pref&) = delete;
  Pref& operator=(const Pref&) = delete;
  ~Pref() {
    if (d) cublasLtMatmulPreferenceDestroy(d);
  }
};

// One cached GEMM setup: what cublasLtMatmul needs besides the pointers, alpha and beta.
struct LtSetup {
  Desc desc;
  Layout l1, l2, lc;
  cublasLtMatmulAlgo_t algo{};
  bool none = false;  // the epilogue has no algorithm: the caller composes it
};

// Distinct GEMM shapes of a training run: a few per layer kind (forward, dgrad, wgrad; attention's batches).
constexpr size_t kCachedSetups = 256;

struct LtState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t ws_bytes = 0;
  cudaStream_t stream = nullptr;
  bool tf32 = false;
  // bf16 scratch (grow only): 0, 1 the cast copies of a GEMM's two operands; 2, 3 attention's P and dS copies
  // (lt_bf16_scratch)
  void* bf16_buf[4] = {nullptr, nullptr, nullptr, nullptr};
  size_t bf16_bytes[4] = {0, 0, 0, 0};
  int tune = 1;  // TP_CUDA_GEMM_TUNE: 0 the heuristic's first algorithm; 1 (default) the fastest of its first
                 // kTuneAlgos; 2 the same, printing each GEMM's candidates and times
  std::unique_ptr<GemmCache<LtSetup>> cache;
} g_lt;
thread_local bool t_bf16 = false;

// cuBLASLt's layout of m (already column-major, gemm_plan.hpp), batched when batch > 1.
void make_layout(Layout& l, const LtMatrix& m, int batch, const GemmArgs& g, cudaDataType_t type = CUDA_R_32F) {
  check(cublasLtMatrixLayoutCreate(&l.d, type, uint64_t(m.rows), uint64_t(m.cols), int64_t(m.ld)), g,
        "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const int32_t b = batch;
    const int64_t s = m.stride;
    check(cublasLtMatrixLayoutSetAttribute(l.d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b), g,
          "set BATCH_COUNT");
    check(cublasLtMatrixLayoutSetAttribute(l.d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s), g,
          "set STRIDED_BATCH_OFFSET");
  }
}

void validate(const GemmArgs& g) {
  const long a_cols = g.ta ? g.M : g.K, b_cols = g.tb ? g.K : g.N;
  const char* bad = nullptr;
  if (g.M < 0 || g.N < 0 || g.K < 0 || g.batch < 1) bad = "negative size or batch < 1";
  else if (g.lda < a_cols || g.ldb < b_cols || g.ldc < g.N) bad = "a leading dimension is below its row length";
  // (an operand given as its bf16 copy, read as such with bf16 operands on, needs bf16's 2-byte alignment only: a
  // MoE expert's block of a weight copy may start at an odd element)
  else if ((t_bf16 && g.A16 ? alignment(g.A16) < 2 : alignment(g.A) < 4) ||
           (t_bf16 && g.B16 ? alignment(g.B16) < 2 : alignment(g.B) < 4) || alignment(g.C) < 4)
    bad = "a pointer is not aligned to its element (4 bytes; a bf16 copy 2)";
  if (bad) throw std::runtime_error("cuda " + shape_text(g) + ": " + bad);
}

}  // namespace

void lt_init(cudaStream_t stream, size_t ws_bytes) {
  GemmArgs none;
  none.what = "cuBLASLt setup";
  check(cublasLtCreate(&g_lt.handle), none, "cublasLtCreate");
  if (ws_bytes && cudaMalloc(&g_lt.workspace, ws_bytes) != cudaSuccess) {
    cudaGetLastError();
    ws_bytes = 0;  // run without a workspace rather than fail: the heuristic then picks kernels that need none
  }
  note_device_alloc(ws_bytes);
  g_lt.ws_bytes = ws_bytes;
  g_lt.stream = stream;
  const char* tf = std::getenv("TP_CUDA_TF32");
  g_lt.tf32 = tf && std::string(tf) == "1";
  const char* tu = std::getenv("TP_CUDA_GEMM_TUNE");
  g_lt.tune = tu ? std::atoi(tu) : 1;
  g_lt.cache = std::make_unique<GemmCache<LtSetup>>(kCachedSetups);
}

void lt_shutdown() {
  if (g_lt.cache) g_lt.cache->clear();  // the descriptors first, then the handle and the workspace
  if (g_lt.workspace) cudaFree(g_lt.workspace), note_device_free(g_lt.ws_bytes);
  for (int i = 0; i < 4; ++i)
    if (g_lt.bf16_buf[i]) cudaFree(g_lt.bf16_buf[i]), note_device_free(g_lt.bf16_bytes[i]);
  if (g_lt.handle) cublasLtDestroy(g_lt.handle);
  g_lt = LtState{};
}

size_t lt_version() { return cublasLtGetVersion(); }

bool lt_bf16() { return t_bf16; }

bool lt_set_bf16(bool on) {
  const bool prev = t_bf16;
  t_bf16 = on;
  return prev;
}

namespace {

// The setup of plan p (shapes of g): descriptor, layouts and the heuristic's best algorithm for the workspace
// and the alignments in `key`.
constexpr int kTuneAlgos = 8;

// The epilogue's pointers (and the aux matrix's leading dimension) live in the descriptor: set per call.
void set_epilogue_pointers(LtSetup& s, const GemmArgs& g) {
  if (g.bias)
    check(cublasLtMatmulDescSetAttribute(s.desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias), g,
          "set BIAS_POINTER");
  if (g.gelu) {
    const int64_t ld = g.ldc;
    check(cublasLtMatmulDescSetAttribute(s.desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof g.aux),
          g, "set EPILOGUE_AUX_POINTER");
    check(cublasLtMatmulDescSetAttribute(s.desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld), g,
          "set EPILOGUE_AUX_LD");
  }
}

// fp8: the operands' dequantising factors as cuBLASLt's scale pointers (its first operand is our B).
void set_scale_pointers(LtSetup& s, const GemmArgs& g) {
  check(cublasLtMatmulDescSetAttribute(s.desc.d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.inv_b, sizeof g.inv_b), g,
        "set A_SCALE_POINTER");
  check(cublasLtMatmulDescSetAttribute(s.desc.d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.inv_a, sizeof g.inv_a), g,
        "set B_SCALE_POINTER");
}

int epilogue_of(const GemmArgs& g) { return g.gelu ? (g.bias ? 3 : 2) : (g.bias ? 1 : 0); }

// Elements a column-major matrix spans from its first (every batch item).
long span(const LtMatrix& m, int batch) { return long(batch - 1) * m.stride + (m.cols - 1) * m.ld + m.rows; }
// Bytes C spans (its layout in plan p, every batch item).
size_t c_bytes(const LtPlan& p) { return sizeof(float) * size_t(span(p.mc, p.batch)); }

// Operand i's scratch g_lt.bf16_buf[i] of at least `bytes` (grown, never shrunk).
void* operand_buf(int i, size_t bytes, const GemmArgs& g) {
  if (bytes > g_lt.bf16_bytes[i]) {
    if (g_lt.bf16_buf[i]) {  // (retired instead while a captured graph may use it)
      tp::cuda::retire_or_free(g_lt.bf16_buf[i], g_lt.bf16_bytes[i], true);
      g_lt.bf16_buf[i] = nullptr, g_lt.bf16_bytes[i] = 0;
    }
    if (cudaMalloc(&g_lt.bf16_buf[i], bytes) != cudaSuccess) {
      cudaGetLastError();
      g_lt.bf16_buf[i] = nullptr;
      throw std::runtime_error("cuda " + shape_text(g) + ": out of device memory for a bf16 operand copy of " +
                               std::to_string(bytes) + " bytes");
    }
    note_device_alloc(bytes);
    g_lt.bf16_bytes[i] = bytes;
  }
  return g_lt.bf16_buf[i];
}
// Operand i's bf16 copy: the n floats at x cast to bf16 (round to nearest even) in its scratch; the copy keeps
// x's layout (same leading dimension and batch stride, in elements).
const void* bf16_copy(int i, const float* x, long n, const GemmArgs& g) {
  void* b = operand_buf(i, size_t(n) * 2, g);
  cast_to_bf16(b, x, n);
  return b;
}
// The same values as fp32 (the bf16 copy cast back, exactly), for a GEMM that cuBLASLt has no bf16 algorithm for.
const float* rounded_f32_copy(int i, const float* x, long n, const GemmArgs& g) {
  char* b = static_cast<char*>(operand_buf(i, size_t(n) * 6, g));
  cast_to_bf16(b + size_t(n) * 4, x, n);
  cast_from_bf16(reinterpret_cast<float*>(b), b + size_t(n) * 4, n);
  return reinterpret_cast<const float*>(b);
}
// x16's bf16 values as fp32 (exactly), for the same fallback when an operand exists only as its bf16 copy.
const float* f32_of_bf16(int i, const void* x16, long n, const GemmArgs& g) {
  float* b = static_cast<float*>(operand_buf(i, size_t(n) * 4, g));
  cast_from_bf16(b, x16, n);
  return b;
}
// GEMMs that accumulate (beta != 0) are tuned on a saved copy of C, restored afterwards, when C is at most this.
constexpr size_t kTuneSaveBytes = size_t(64) << 20;

// The fastest of the heuristic's algorithms on this GEMM's own operands: each runs once to warm up, then twice
// timed with events on the stream. C is overwritten by the candidates: with beta == 0 the call that follows
// overwrites it again; with beta != 0 C is saved to a temporary buffer first and restored after.
int fastest(const LtSetup& s, const LtPlan& p, const GemmArgs& g, const cublasLtMatmulHeuristicResult_t* r, int n,
            const void* x1, const void* x2) {
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  void* saved = nullptr;
  const size_t cb = c_bytes(p);
  if (g.beta != 0.f) {
    if (cudaMalloc(&saved, cb) != cudaSuccess) {
      cudaGetLastError();
      cudaEventDestroy(e0), cudaEventDestroy(e1);
      return 0;
    }
    note_device_alloc(cb);
    tp::cuda::check(cudaMemcpyAsync(saved, p.c, cb, cudaMemcpyDeviceToDevice, g_lt.stream), "saving C before tuning");
  }
  int best = 0;
  float best_ms = 0;
  std::string log;
  for (int i = 0; i < n; ++i) {
    auto run = [&] {
      return cublasLtMatmul(g_lt.handle, s.desc.d, &g.alpha, x1, s.l1.d, x2, s.l2.d, &g.beta, p.c, s.lc.d, p.c,
                            s.lc.d, &r[i].algo, g_lt.workspace, g_lt.ws_bytes, g_lt.stream);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;
    cudaEventRecord(e0, g_lt.stream);
    const bool ok = run() == CUBLAS_STATUS_SUCCESS && run() == CUBLAS_STATUS_SUCCESS;
    cudaEventRecord(e1, g_lt.stream);
    float ms = 0;
    if (!ok || cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    char item[48];
    std::snprintf(item, sizeof item, " %d:%.1fus", i, 1e3 * double(ms) / 2);
    log.append(item);
    if (i == 0 || ms < best_ms) best = i, best_ms = ms;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (saved) {
    tp::cuda::check(cudaMemcpyAsync(p.c, saved, cb, cudaMemcpyDeviceToDevice, g_lt.stream), "restoring C after tuning");
    tp::cuda::check(cudaStreamSynchronize(g_lt.stream), "restoring C after tuning");
    cudaFree(saved);
    note_device_free(cb);
  }
  if (g_lt.tune >= 2) std::fprintf(stderr, "cuda gemm tune %s: picked %d of%s\n", shape_text(g).c_str(), best, log.c_str());
  return best;
}

std::unique_ptr<LtSetup> make_setup(const LtPlan& p, const GemmKey& key, const GemmArgs& g, const void* x1,
                                    const void* x2) {
  auto s = std::make_unique<LtSetup>();
  const cublasComputeType_t ct = key.compute == kComputeTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check(cublasLtMatmulDescCreate(&s->desc.d, ct, CUDA_R_32F), g, "cublasLtMatmulDescCreate");
  const cublasOperation_t op1 = p.trans1 ? CUBLAS_OP_T : CUBLAS_OP_N, op2 = p.trans2 ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(s->desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1), g, "set TRANSA");
  check(cublasLtMatmulDescSetAttribute(s->desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2), g, "set TRANSB");
  if (key.epilogue) {
    static const cublasLtEpilogue_t kinds[4] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                                CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS};
    const cublasLtEpilogue_t e = kinds[key.epilogue];
    check(cublasLtMatmulDescSetAttribute(s->desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), g, "set EPILOGUE");
    set_epilogue_pointers(*s, g);
  }
  const bool fp8 = key.compute >= kComputeFp8;
  if (fp8) set_scale_pointers(*s, g);  // (before the heuristic, which sees the scaled form)
  const cudaDataType_t ab = key.compute == kComputeBf16Cast ? CUDA_R_16BF : CUDA_R_32F;
  // (fp8: cuBLASLt's first operand is our B8, format fb; its second our A8, format fa)
  auto fp8_type = [](int f) { return f ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; };
  make_layout(s->l1, p.m1, p.batch, g, fp8 ? fp8_type((key.compute - kComputeFp8) / 2) : ab);
  make_layout(s->l2, p.m2, p.batch, g, fp8 ? fp8_type((key.compute - kComputeFp8) % 2) : ab);
  make_layout(s->lc, p.mc, p.batch, g);
  Pref pref;
  check(cublasLtMatmulPreferenceCreate(&pref.d), g, "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = g_lt.ws_bytes;
  check(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), g,
        "set MAX_WORKSPACE_BYTES");
  const uint32_t al[4] = {key.align1, key.align2, key.align_c, key.align_c};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    check(cublasLtMatmulPreferenceSetAttribute(pref.d, which[i], &al[i], sizeof al[i]), g, "set MIN_ALIGNMENT");
  cublasLtMatmulHeuristicResult_t res[kTuneAlgos]{};
  int found = 0;
  const int want = g_lt.tune > 0 && (g.beta == 0.f || c_bytes(p) <= kTuneSaveBytes) ? kTuneAlgos : 1;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(g_lt.handle, s->desc.d, s->l1.d, s->l2.d, s->lc.d, s->lc.d,
                                                           pref.d, want, res, &found);
  const bool fallback = key.compute == kComputeBf16Cast || fp8;  // (no algorithm: the fp32 GEMM instead)
  if (hs == CUBLAS_STATUS_NOT_SUPPORTED && fallback) found = 0;
  else check(hs, g, "cublasLtMatmulAlgoGetHeuristic");
  if (found < 1 && (key.epilogue || fallback)) {  // the caller composes or falls back
    s->none = true;
    return s;
  }
  if (found < 1) throw std::runtime_error("cuda " + shape_text(g) + ": cuBLASLt has no algorithm for this GEMM");
  s->algo = res[found > 1 ? fastest(*s, p, g, res, found, x1, x2) : 0].algo;
  return s;
}

}  // namespace

bool lt_gemm(const GemmArgs& g) {
  const int epi = epilogue_of(g);
  // cuBLASLt's epilogues want 16-byte aligned vectors, an aux leading dimension that is a multiple of 8, one
  // GEMM, alpha 1 and beta 0 (as linear_fwd asks); otherwise the caller composes them.
  if (epi && (g.batch != 1 || g.alpha != 1.f || g.beta != 0.f || (g.bias && alignment(g.bias) < 16) ||
              (g.gelu && (alignment(g.aux) < 16 || g.ldc % 8 != 0))))
    return false;
  if (g.M == 0 || g.N == 0) return true;
  validate(g);
  if (!g_lt.handle) throw std::runtime_error("cuda " + shape_text(g) + ": cuBLASLt is not initialised");
  const LtPlan p = lt_plan(g);  // Cᵀ = op(B)ᵀ op(A)ᵀ in column-major: cuBLASLt's first operand is our B
  const int compute = t_bf16 ? kComputeBf16Cast : g_lt.tf32 ? kComputeTf32 : kComputeF32;
  // bf16 operands: cuBLASLt reads the cast copies (16-byte aligned), laid out as the operands themselves
  const void* x1 = p.x1;
  const void* x2 = p.x2;
  if (compute == kComputeBf16Cast) {  // (cuBLASLt's first operand is our B)
    x1 = g.B16 ? g.B16 : bf16_copy(0, p.x1, span(p.m1, p.batch), g);
    x2 = g.A16 ? g.A16 : bf16_copy(1, p.x2, span(p.m2, p.batch), g);
  }
  const GemmKey key = gemm_key(p, alignment(x1), alignment(x2), alignment(g.C), compute, epi);
  LtSetup* s = g_lt.cache->find(key);
  if (!s) s = g_lt.cache->insert(key, make_setup(p, key, g, x1, x2));
  if (s->none && compute == kComputeBf16Cast && !epi) {
    // No bf16 algorithm for these layouts (a leading dimension, say): the same bf16 values as fp32 copies, and
    // an fp32 GEMM on them (exact products, fp32 sums: the same result, slower).
    static bool told = false;
    if (!told) std::fprintf(stderr, "note: cuda %s: cuBLASLt has no bf16 algorithm for it; GEMMs like it run in fp32 on "
                            "their bf16-rounded operands (the same result, slower)\n", shape_text(g).c_str());
    told = true;
    GemmArgs r = g;
    // (cuBLASLt's first operand is our B; an operand given only as its bf16 copy, matmul16's A16 or B16, from that copy)
    r.B = g.B16 ? f32_of_bf16(0, g.B16, span(p.m1, p.batch), g) : rounded_f32_copy(0, p.x1, span(p.m1, p.batch), g);
    r.A = g.A16 ? f32_of_bf16(1, g.A16, span(p.m2, p.batch), g) : rounded_f32_copy(1, p.x2, span(p.m2, p.batch), g);
    struct Fp32Here {  // the fp32 GEMM below, bf16 operands back on after it (also when it throws)
      Fp32Here() { t_bf16 = false; }
      ~Fp32Here() { t_bf16 = true; }
    } fp32_here;
    return lt_gemm(r);
  }
  if (s->none) return false;
  if (epi) set_epilogue_pointers(*s, g);
  check(cublasLtMatmul(g_lt.handle, s->desc.d, &g.alpha, x1, s->l1.d, x2, s->l2.d, &g.beta, p.c, s->lc.d, p.c,
                       s->lc.d, &s->algo, g_lt.workspace, g_lt.ws_bytes, g_lt.stream),
        g, "cublasLtMatmul");
  return true;
}

namespace {
// 1: this device has fp8 tensor cores and TP_CUDA_FP8_GEMM does not turn them off; 0: not; -1: not asked yet.
int g_fp8_device = -1;
bool fp8_device() {
  if (g_fp8_device < 0) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, g.device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, g.device) != cudaSuccess) {
      cudaGetLastError();
      major = minor = 0;
    }
    const char* env = std::getenv("TP_CUDA_FP8_GEMM");
    g_fp8_device = (major * 10 + minor >= 89 && !(env && std::string(env) == "0")) ? 1 : 0;
  }
  return g_fp8_device == 1;
}
// The key of an fp8 GEMM (its plan, the packed buffers' alignments, the formats).
GemmKey fp8_key(const GemmArgs& a, int fa, int fb) {
  return gemm_key(lt_plan(a), alignment(a.B), alignment(a.A), alignment(a.C), kComputeFp8 + fa + 2 * fb);
}
// The fp8 GEMMs (M, N, K, fa, fb) cuBLASLt had no algorithm for: later calls skip the packing.
std::set<std::array<long, 5>> g_fp8_none;
}  // namespace

bool lt_fp8_usable(long M, long N, long K, int fa, int fb) {
  if (!g_lt.handle || !fp8_device() || (fa == 1 && fb == 1) || M <= 0 || N <= 0 || K <= 0 || M % 16 != 0 ||
      N % 16 != 0 || K % 16 != 0)
    return false;
  return !g_fp8_none.count({M, N, K, long(fa), long(fb)});
}

bool lt_fp8_gemm(float* C, const void* A8, const void* B8, const float* inv_a, const float* inv_b, long M, long N, long K,
                 int fa, int fb, float alpha, float beta) {
  const GemmArgs a = fp8_tn_args(C, A8, B8, inv_a, inv_b, M, N, K, alpha, beta);
  if (!g_lt.handle) throw std::runtime_error("cuda " + shape_text(a) + ": cuBLASLt is not initialised");
  if (alignment(A8) < 16 || alignment(B8) < 16 || alignment(C) < 4)
    throw std::runtime_error("cuda " + shape_text(a) + ": fp8 operands must be 16-byte aligned");
  const LtPlan p = lt_plan(a);  // (TN: trans1, not trans2; gemm_plan.hpp)
  const GemmKey key = fp8_key(a, fa, fb);
  LtSetup* s = g_lt.cache->find(key);
  if (!s) s = g_lt.cache->insert(key, make_setup(p, key, a, B8, A8));
  if (s->none) {
    g_fp8_none.insert({M, N, K, long(fa), long(fb)});
    std::fprintf(stderr, "note: cuda %s (formats %d, %d): cuBLASLt has no fp8 algorithm for it; it runs as an fp32 GEMM "
                 "on the casts' values (the same result, slower)\n", shape_text(a).c_str(), fa, fb);
    return false;
  }
  set_scale_pointers(*s, a);  // (this call's: the cached setup may have another's)
  check(cublasLtMatmul(g_lt.handle, s->desc.d, &a.alpha, B8, s->l1.d, A8, s->l2.d, &a.beta, p.c, s->lc.d, p.c, s->lc.d,
                       &s->algo, g_lt.workspace, g_lt.ws_bytes, g_lt.stream),
        a, "cublasLtMatmul (fp8)");
  return true;
}

void* lt_fp8_scratch(int slot, size_t bytes) {
  GemmArgs none;
  none.what = "matmul_fp8's operand bytes";
  return operand_buf(slot, bytes, none);
}

void* lt_bf16_scratch(int slot, size_t bytes) {
  GemmArgs none;
  none.what = "attention's bf16 scratch";
  return operand_buf(2 + slot, bytes, none);
}

}  // namespace tp::cuda
