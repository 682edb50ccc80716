// k_elementwise_ops: the element-wise ops of exec/backends/ops.def (add, scale, fill, copies, bf16 packing, GELU,
// SwiGLU, AdamW, the fp8 cast, the sum of squares) bridged onto the kernels of k_elementwise.hpp, k_fp8.hpp and
// k_reduce.hpp once, for every backend that launches kernels: the emu backend compiles it with g++ for the CPU block
// emulator, the CUDA library with nvcc, so the bridge the emulator checks in CI is the bridge a GPU runs. A backend
// gives a runner (k_runner.hpp); NAME_op takes the runner, then exactly the op's arguments.
// Invariants: every argument is checked (R::check) before any kernel; an empty op launches nothing; the sum of
// squares' scratch is the result [1] then the per-block partials, the result read back; the fp8 cast's amax stays in
// the caller's device memory.
#pragma once
#include <cstddef>
#include <cstdint>

#include "exec/kernels/k_bridge.hpp"
#include "exec/kernels/k_fused.hpp"
#include "exec/kernels/k_runner.hpp"

namespace tp::kernels {

template <class R, class T>
void add_op(const R& r, T* y, const T* a, const T* b, long n) {
  r.run("add", {{"n", n}}, [&] {
    r.check("add", "y", y, bytes_of<T>(n));
    r.check("add", "a", a, bytes_of<T>(n));
    r.check("add", "b", b, bytes_of<T>(n));
    if (n > 0) add(r.launch(), y, a, b, n);
  });
}
template <class R, class T>
void accumulate_op(const R& r, T* y, const T* x, long n) {
  r.run("accumulate", {{"n", n}}, [&] {
    r.check("accumulate", "y", y, bytes_of<T>(n));
    r.check("accumulate", "x", x, bytes_of<T>(n));
    if (n > 0) accumulate(r.launch(), y, x, n);
  });
}
template <class R, class T>
void scale_op(const R& r, T* y, const T* x, T s, long n) {
  r.run("scale", {{"n", n}}, [&] {
    r.check("scale", "y", y, bytes_of<T>(n));
    r.check("scale", "x", x, bytes_of<T>(n));
    if (n > 0) scale(r.launch(), y, x, s, n);
  });
}
template <class R, class T>
void fill_op(const R& r, T* y, T value, long n) {
  r.run("fill", {{"n", n}}, [&] {
    r.check("fill", "y", y, bytes_of<T>(n));
    if (n > 0) fill(r.launch(), y, value, n);
  });
}
template <class R, class T>
void copy_op(const R& r, T* dst, const T* src, long n) {
  r.run("copy", {{"n", n}}, [&] {
    r.check("copy", "dst", dst, bytes_of<T>(n));
    r.check("copy", "src", src, bytes_of<T>(n));
    if (n > 0) copy(r.launch(), dst, src, n);
  });
}
template <class R, class T>
void copy_rows_op(const R& r, T* dst, long dst_stride, const T* src, long src_stride, long rows, long cols) {
  r.run("copy_rows", {{"dst_stride", dst_stride}, {"src_stride", src_stride}, {"rows", rows}, {"cols", cols}}, [&] {
    if (rows <= 0 || cols <= 0) return;
    r.check("copy_rows", "dst", dst, bytes_of<T>((rows - 1) * dst_stride + cols));
    r.check("copy_rows", "src", src, bytes_of<T>((rows - 1) * src_stride + cols));
    r.launch()(CopyRows<T>{dst, src, dst_stride, src_stride, rows, cols}, flat_dim(r.launch(), rows * cols));
  });
}
template <class R, class T>
void pack_bf16_op(const R& r, uint16_t* y, const T* x, long n) {
  r.run("pack_bf16", {{"n", n}}, [&] {
    r.check("pack_bf16", "y", y, bytes_of<uint16_t>(n));
    r.check("pack_bf16", "x", x, bytes_of<T>(n));
    if (n > 0) pack_bf16(r.launch(), reinterpret_cast<bf16*>(y), x, n);
  });
}
template <class R, class T>
void unpack_bf16_op(const R& r, T* y, const uint16_t* x, long n) {
  r.run("unpack_bf16", {{"n", n}}, [&] {
    r.check("unpack_bf16", "y", y, bytes_of<T>(n));
    r.check("unpack_bf16", "x", x, bytes_of<uint16_t>(n));
    if (n > 0) copy(r.launch(), y, reinterpret_cast<const bf16*>(x), n);
  });
}

template <class R, class T>
void gelu_fwd_op(const R& r, T* y, const T* x, long n) {
  r.run("gelu_fwd", {{"n", n}}, [&] {
    r.check("gelu_fwd", "y", y, bytes_of<T>(n));
    r.check("gelu_fwd", "x", x, bytes_of<T>(n));
    if (n > 0) gelu_fwd(r.launch(), y, x, n);
  });
}
template <class R, class T>
void gelu_fwd16_op(const R& r, uint16_t* y16, uint16_t* x16, const T* x, long n) {
  r.run("gelu_fwd16", {{"n", n}}, [&] {
    r.check("gelu_fwd16", "y16", y16, bytes_of<uint16_t>(n));
    r.check("gelu_fwd16", "x16", x16, bytes_of<uint16_t>(n));
    r.check("gelu_fwd16", "x", x, bytes_of<T>(n));
    if (n > 0) gelu_fwd16(r.launch(), reinterpret_cast<bf16*>(y16), reinterpret_cast<bf16*>(x16), x, n);
  });
}
// gelu_bwd (accumulating) and gelu_bwd_set (overwriting): the same checks.
template <bool kSet, class R, class T>
void gelu_bwd_any(const R& r, T* dx, const T* x, const T* dy, long n) {
  const char* op = kSet ? "gelu_bwd_set" : "gelu_bwd";
  r.run(op, {{"n", n}}, [&] {
    r.check(op, "dx", dx, bytes_of<T>(n));
    r.check(op, "x", x, bytes_of<T>(n));
    r.check(op, "dy", dy, bytes_of<T>(n));
    if (n <= 0) return;
    if (kSet) gelu_bwd_set(r.launch(), dx, x, dy, n);
    else gelu_bwd(r.launch(), dx, x, dy, n);
  });
}
template <class R, class T>
void gelu_bwd_op(const R& r, T* dx, const T* x, const T* dy, long n) {
  gelu_bwd_any<false>(r, dx, x, dy, n);
}
template <class R, class T>
void gelu_bwd_set_op(const R& r, T* dx, const T* x, const T* dy, long n) {
  gelu_bwd_any<true>(r, dx, x, dy, n);
}
template <class R, class T>
void gelu_bwd_bias16_op(const R& r, uint16_t* dx16, T* db, const uint16_t* x16, const T* dy, long N, long F) {
  const char* op = "gelu_bwd_bias16";
  r.run(op, {{"N", N}, {"F", F}}, [&] {
    r.check(op, "dx16", dx16, bytes_of<uint16_t>(N * F));
    check_opt(r, op, "db", db, bytes_of<T>(F));
    r.check(op, "x16", x16, bytes_of<uint16_t>(N * F));
    r.check(op, "dy", dy, bytes_of<T>(N * F));
    if (N <= 0 || F <= 0) return;
    gelu_bwd_bias16(r.launch(), reinterpret_cast<bf16*>(dx16), db, reinterpret_cast<const bf16*>(x16), dy, N, F,
                    column_scratch_of<T>(r, N, F));
  });
}

template <class R, class T>
void swiglu_fwd_op(const R& r, T* y, const T* gate_up, long N, long F) {
  r.run("swiglu_fwd", {{"N", N}, {"F", F}}, [&] {
    r.check("swiglu_fwd", "y", y, bytes_of<T>(N * F));
    r.check("swiglu_fwd", "gate_up", gate_up, bytes_of<T>(2 * N * F));
    if (N * F > 0) swiglu_fwd(r.launch(), y, gate_up, N, F);
  });
}
// swiglu_bwd (accumulating) and swiglu_bwd_set (overwriting): the same checks.
template <bool kSet, class R, class T>
void swiglu_bwd_any(const R& r, T* dgate_up, const T* gate_up, const T* dy, long N, long F) {
  const char* op = kSet ? "swiglu_bwd_set" : "swiglu_bwd";
  r.run(op, {{"N", N}, {"F", F}}, [&] {
    r.check(op, "dgate_up", dgate_up, bytes_of<T>(2 * N * F));
    r.check(op, "gate_up", gate_up, bytes_of<T>(2 * N * F));
    r.check(op, "dy", dy, bytes_of<T>(N * F));
    if (N * F <= 0) return;
    if (kSet) swiglu_bwd_set(r.launch(), dgate_up, gate_up, dy, N, F);
    else swiglu_bwd(r.launch(), dgate_up, gate_up, dy, N, F);
  });
}
template <class R, class T>
void swiglu_bwd_op(const R& r, T* dgate_up, const T* gate_up, const T* dy, long N, long F) {
  swiglu_bwd_any<false>(r, dgate_up, gate_up, dy, N, F);
}
template <class R, class T>
void swiglu_bwd_set_op(const R& r, T* dgate_up, const T* gate_up, const T* dy, long N, long F) {
  swiglu_bwd_any<true>(r, dgate_up, gate_up, dy, N, F);
}

template <class R, class T>
void adamw_op(const R& r, T* p, const T* g, T* m, T* v, long n, T lr, T b1, T b2, T eps, T wd, long t, T gscale) {
  r.run("adamw", {{"n", n}, {"t", t}}, [&] {
    r.check("adamw", "p", p, bytes_of<T>(n));
    r.check("adamw", "g", g, bytes_of<T>(n));
    r.check("adamw", "m", m, bytes_of<T>(n));
    r.check("adamw", "v", v, bytes_of<T>(n));
    if (n > 0) adamw(r.launch(), p, g, m, v, static_cast<T*>(nullptr), n, lr, b1, b2, eps, wd, t, gscale);
  });
}

// The per-block partials then the total, in double, read back.
template <class R, class T>
double sum_squares_op(const R& r, const T* x, long n) {
  double total = 0;
  r.run("sum_squares", {{"n", n}}, [&] {
    r.check("sum_squares", "x", x, bytes_of<T>(n));
    if (n <= 0) return;
    double* s = static_cast<double*>(r.scratch(sizeof(double) * (size_t(r.launch().max_grid) + 1)));
    sum_squares(r.launch(), s, s + 1, x, n);
    total = r.read_back(s);
  });
  return total;
}
// The cast, and with amax the block maxima then their max into amax[0], on the device (no read-back).
template <class R, class T>
void fp8_quantize_op(const R& r, T* y, const T* x, long n, const T* scale, int format, T* amax) {
  r.run("fp8_quantize", {{"n", n}, {"format", format}}, [&] {
    r.check("fp8_quantize", "y", y, bytes_of<T>(n));
    r.check("fp8_quantize", "x", x, bytes_of<T>(n));
    r.check("fp8_quantize", "scale", scale, sizeof(T));
    check_opt(r, "fp8_quantize", "amax", amax, sizeof(T));
    if (n <= 0) return;
    double* s = amax ? static_cast<double*>(r.scratch(sizeof(double) * size_t(r.launch().max_grid))) : nullptr;
    fp8_quantize(r.launch(), amax, s, y, x, n, scale, format);
  });
}

}  // namespace tp::kernels
