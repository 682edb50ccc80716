// k_elementwise: the element-wise kernels — fill, copy (with a type conversion), residual add, accumulate,
// scale, bias add, GELU (tanh) and SwiGLU forward / backward, and the AdamW step — each a functor with a
// TP_HD body over a grid-stride loop, and the op function that launches it through a launcher L
// (emu::Launcher or the CUDA one: `launch(kernel, Dim)`, members `block` and `max_grid`).
// Contracts are exec/backends/ops.hpp's: forwards overwrite; backwards accumulate (+=) unless named *_set (overwrite,
// output may alias an input: each element is read before it is written, by the same thread). Storage T is
// float, double or bf16; arithmetic is in acc_t<T> (fp32 for bf16).
#pragma once
#include <cmath>

#include "exec/kernels/kcommon.hpp"

namespace tp::kernels {

// Grid-stride loop over [0, n) for the calling thread.
#define TP_GRID_LOOP(c, i, n)                                                                 \
  for (long i = long((c).bid()) * long((c).bdim()) + long((c).tid()); i < long(n); \
       i += long((c).gdim()) * long((c).bdim()))

template <class T>
struct Fill {
  static constexpr const char* kName = "fill";
  T* y;
  acc_t<T> v;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, n) y[i] = st<T>(v);
  }
};

// Whether the conversion X -> Y of bf16 storage goes four elements per thread (convert4): float <-> bf16.
template <class Y, class X>
inline constexpr bool kConvert4 = (std::is_same_v<Y, float> && std::is_same_v<X, bf16>) ||
                                  (std::is_same_v<Y, bf16> && std::is_same_v<X, float>);
// y[n] = x converted (st<Y>(ld(x)): float -> bf16 rounds to nearest even, bf16 -> float is exact) in groups of four,
// one vector load and one vector store each (ld4 / st4), the last n % 4 one by one; false, and nothing done, when a
// view is off its vector boundary (4 elements' bytes), for the caller's element loop.
template <class Ctx, class Y, class X>
TP_HD bool convert4(Ctx& c, Y* y, const X* x, long n) {
  if (!aligned_to(x, 4 * sizeof(X)) || !aligned_to(y, 4 * sizeof(Y))) return false;
  const long n4 = n / 4;
  TP_GRID_LOOP(c, i, n4) st4(y + 4 * i, ld4(x + 4 * i));
  TP_GRID_LOOP(c, i, n - 4 * n4) y[4 * n4 + i] = st<Y>(ld(x[4 * n4 + i]));
  return true;
}

// y = x converted to Y (float -> bf16 rounds to nearest even).
template <class Y, class X>
struct Copy {
  static constexpr const char* kName = "copy";
  Y* y;
  const X* x;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    if constexpr (kConvert4<Y, X>)
      if (convert4(c, y, x, n)) return;
    TP_GRID_LOOP(c, i, n) y[i] = st<Y>(ld(x[i]));
  }
};

template <class T>
struct Add {
  static constexpr const char* kName = "add";
  T* y;
  const T* a;
  const T* b;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, n) y[i] = st<T>(ld(a[i]) + ld(b[i]));
  }
};

template <class T>
struct Accumulate {
  static constexpr const char* kName = "accumulate";
  T* y;
  const T* x;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, n) y[i] = st<T>(ld(y[i]) + ld(x[i]));
  }
};

template <class T>
struct Scale {
  static constexpr const char* kName = "scale";
  T* y;
  const T* x;
  acc_t<T> s;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, n) y[i] = st<T>(s * ld(x[i]));
  }
};

// y[N, C] = x[N, C] + b[C]; y may be x.
template <class T>
struct AddBias {
  static constexpr const char* kName = "add_bias";
  T* y;
  const T* x;
  const T* b;
  long N, C;
  const T* r = nullptr;  // (may be null) added after the bias, as add would: y = (x + b) + r (a residual)
  TP_HD TP_INLINE T one(long i) const {
    const T t = st<T>(ld(x[i]) + ld(b[i % C]));
    return r ? st<T>(ld(t) + ld(r[i])) : t;
  }
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    if constexpr (std::is_same_v<T, float>) {  // four columns of a row per thread when the views allow
      if (C % 4 == 0 && aligned_to(x, 16) && aligned_to(y, 16) && aligned_to(b, 16) && (!r || aligned_to(r, 16))) {
        TP_GRID_LOOP(c, i, N * C / 4) {
          const F4 v = ld4(x + 4 * i), w = ld4(b + (4 * i) % C);
          F4 t{v.x + w.x, v.y + w.y, v.z + w.z, v.w + w.w};
          if (r) {
            const F4 u = ld4(r + 4 * i);
            t = F4{t.x + u.x, t.y + u.y, t.z + u.z, t.w + u.w};
          }
          st4(y + 4 * i, t);
        }
        return;
      }
    }
    TP_GRID_LOOP(c, i, N * C) y[i] = one(i);
  }
};

// GELU, tanh approximation: u = sqrt(2/pi) (x + 0.044715 x^3), gelu = 0.5 x (1 + tanh u).
template <class A>
TP_HD TP_INLINE A gelu_value(A x) {
  const A u = A(0.7978845608028653558798921198687637) * (x + A(0.044715) * x * x * x);
  return A(0.5) * x * (A(1) + k_tanh(u));
}
template <class A>
TP_HD TP_INLINE A gelu_grad(A x) {
  const A s = A(0.7978845608028653558798921198687637), a = A(0.044715);
  const A th = k_tanh(s * (x + a * x * x * x));
  return A(0.5) * (A(1) + th) + A(0.5) * x * (A(1) - th * th) * s * (A(1) + A(3) * a * x * x);
}

template <class T>
struct GeluFwd {
  static constexpr const char* kName = "gelu_fwd";
  T* y;
  const T* x;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, n) y[i] = st<T>(gelu_value(ld(x[i])));
  }
};

// dx += gelu'(x) dy, or (kSet) dx = gelu'(x) dy with dx possibly x or dy (x stored as bf16: k_fused.hpp's
// gelu_bwd_bias16).
template <class T, bool kSet>
struct GeluBwd {
  static constexpr const char* kName = kSet ? "gelu_bwd_set" : "gelu_bwd";
  T* dx;
  const T* x;
  const T* dy;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, n) {
      const acc_t<T> g = gelu_grad(acc_t<T>(ld(x[i]))) * ld(dy[i]);
      dx[i] = st<T>(kSet ? g : ld(dx[i]) + g);
    }
  }
};

// y[N, F] = silu(gate) * up, gate_up [N, 2F] = [gate | up].
template <class T>
struct SwigluFwd {
  static constexpr const char* kName = "swiglu_fwd";
  T* y;
  const T* gate_up;
  long N, F;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    using A = acc_t<T>;
    TP_GRID_LOOP(c, i, N * F) {
      const long r = i / F, f = i % F;
      const A g = ld(gate_up[r * 2 * F + f]), u = ld(gate_up[r * 2 * F + F + f]);
      y[i] = st<T>(g / (A(1) + k_exp(-g)) * u);
    }
  }
};

// dgate += dy u sig(g) (1 + g (1 - sig(g))), dup += dy silu(g); kSet overwrites (dgate_up may be gate_up).
template <class T, bool kSet>
struct SwigluBwd {
  static constexpr const char* kName = kSet ? "swiglu_bwd_set" : "swiglu_bwd";
  T* dgate_up;
  const T* gate_up;
  const T* dy;
  long N, F;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    using A = acc_t<T>;
    TP_GRID_LOOP(c, i, N * F) {
      const long r = i / F, f = i % F, ig = r * 2 * F + f, iu = ig + F;
      const A g = ld(gate_up[ig]), u = ld(gate_up[iu]), d = ld(dy[i]);
      const A sig = A(1) / (A(1) + k_exp(-g));
      const A dg = d * u * sig * (A(1) + g * (A(1) - sig)), du = d * g * sig;
      dgate_up[ig] = st<T>(kSet ? dg : ld(dgate_up[ig]) + dg);
      dgate_up[iu] = st<T>(kSet ? du : ld(dgate_up[iu]) + du);
    }
  }
};

// AdamW's update of element i (the one formula of the AdamW kernels: AdamW here, AdamWMulti in k_multi.hpp):
// g' = gs g; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2; p -= lr (m c1 / (sqrt(v c2) + eps) + wd p).
template <class P, class G, class A>
TP_HD TP_INLINE void adamw_at(long i, P* p, const G* g, P* m, P* v, G* p_copy, A lr, A b1, A b2, A eps, A wd, A c1,
                              A c2, A gs) {
  const A gi = gs * A(ld(g[i]));
  const A mi = b1 * ld(m[i]) + (A(1) - b1) * gi;
  const A vi = b2 * ld(v[i]) + (A(1) - b2) * gi * gi;
  m[i] = st<P>(mi);
  v[i] = st<P>(vi);
  const A pi = ld(p[i]);
  const A np = pi - lr * ((mi * c1) / (k_sqrt(vi * c2) + eps) + wd * pi);
  p[i] = st<P>(np);
  if (p_copy) p_copy[i] = st<G>(np);
}

// AdamW on parameters P (fp32 master weights, or double) with gradients G; m, v of type P. c1, c2 are the
// bias corrections 1 / (1 - b^t). When p_copy is not null it receives the updated parameters in G (the bf16
// working copy of mixed precision).
template <class P, class G>
struct AdamW {
  static constexpr const char* kName = "adamw";
  P* p;
  const G* g;
  P* m;
  P* v;
  G* p_copy;
  long n;
  acc_t<P> lr, b1, b2, eps, wd, c1, c2;
  acc_t<P> gs;  // the gradient's scale (the clip): g' = gs g, the product Scale computes
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, n) adamw_at(i, p, g, m, v, p_copy, lr, b1, b2, eps, wd, c1, c2, gs);
  }
};

// ---- op functions: one launch each, grid capped at launch.max_grid ----

template <class L>
TP_INLINE Dim flat_dim(const L& launch, long n) {
  return Dim{blocks_for(n, launch.block, launch.max_grid), launch.block, 0};
}
template <class L, class T>
void fill(const L& launch, T* y, acc_t<T> v, long n) {
  launch(Fill<T>{y, v, n}, flat_dim(launch, n));
}
template <class L, class Y, class X>
void copy(const L& launch, Y* y, const X* x, long n) {
  launch(Copy<Y, X>{y, x, n}, flat_dim(launch, kConvert4<Y, X> ? (n + 3) / 4 : n));
}
template <class L, class T>
void add(const L& launch, T* y, const T* a, const T* b, long n) {
  launch(Add<T>{y, a, b, n}, flat_dim(launch, n));
}
template <class L, class T>
void accumulate(const L& launch, T* y, const T* x, long n) {
  launch(Accumulate<T>{y, x, n}, flat_dim(launch, n));
}
template <class L, class T>
void scale(const L& launch, T* y, const T* x, acc_t<T> s, long n) {
  launch(Scale<T>{y, x, s, n}, flat_dim(launch, n));
}
template <class L, class T>
void add_bias(const L& launch, T* y, const T* x, const T* b, long N, long C, const T* r = nullptr) {
  launch(AddBias<T>{y, x, b, N, C, r}, flat_dim(launch, std::is_same_v<T, float> && C % 4 == 0 ? N * C / 4 : N * C));
}
template <class L, class T>
void gelu_fwd(const L& launch, T* y, const T* x, long n) {
  launch(GeluFwd<T>{y, x, n}, flat_dim(launch, n));
}
template <class L, class T>
void gelu_bwd(const L& launch, T* dx, const T* x, const T* dy, long n) {
  launch(GeluBwd<T, false>{dx, x, dy, n}, flat_dim(launch, n));
}
template <class L, class T>
void gelu_bwd_set(const L& launch, T* dx, const T* x, const T* dy, long n) {
  launch(GeluBwd<T, true>{dx, x, dy, n}, flat_dim(launch, n));
}
template <class L, class T>
void swiglu_fwd(const L& launch, T* y, const T* gate_up, long N, long F) {
  launch(SwigluFwd<T>{y, gate_up, N, F}, flat_dim(launch, N * F));
}
template <class L, class T>
void swiglu_bwd(const L& launch, T* dgate_up, const T* gate_up, const T* dy, long N, long F) {
  launch(SwigluBwd<T, false>{dgate_up, gate_up, dy, N, F}, flat_dim(launch, N * F));
}
template <class L, class T>
void swiglu_bwd_set(const L& launch, T* dgate_up, const T* gate_up, const T* dy, long N, long F) {
  launch(SwigluBwd<T, true>{dgate_up, gate_up, dy, N, F}, flat_dim(launch, N * F));
}
// Step t >= 1 on the gradient gscale g; the bias corrections are computed here in double, as the CPU backend does.
template <class L, class P, class G>
void adamw(const L& launch, P* p, const G* g, P* m, P* v, G* p_copy, long n, double lr, double b1, double b2,
           double eps, double wd, long t, double gscale) {
  using A = acc_t<P>;
  const A c1 = A(1.0 / (1.0 - std::pow(b1, double(t)))), c2 = A(1.0 / (1.0 - std::pow(b2, double(t))));
  launch(AdamW<P, G>{p, g, m, v, p_copy, n, A(lr), A(b1), A(b2), A(eps), A(wd), c1, c2, A(gscale)},
         flat_dim(launch, n));
}

}  // namespace tp::kernels
