// k_fp8: rounding to the low-precision formats. bf16_round: a GEMM operand under training.precision "bf16"
// (every backend's GEMMs round their operands with it or, on CUDA, with the same rule in __float2bfloat16_rn).
// The fp8 cast of Transformer Engine's linear layers, emulated in the storage type: y = fp8(x * s) / s,
// fp8 being E4M3 (forward: activations and weights) or E5M2 (backward: output gradients), and the absolute
// maximum of x, which the delayed-scaling recipe (exec/model/fp8.hpp) turns into the next step's scale.
// fp8_round is the one rounding rule (the CPU backend calls it too): round to nearest even on the format's
// mantissa, subnormals below its smallest normal, saturation to +-max (CUDA's __NV_SATFINITE, as TE casts).
// E4M3 ("fn": no infinities): max 448, 3 mantissa bits, smallest normal 2^-6. E5M2: max 57344, 2 bits, 2^-14.
// Invariants: the result of each element depends on that element and the scale only (layout-invariant); the
// amax is a max, exact in any order; y may be x (each element is read, then written, by one thread).
#pragma once
#include <cmath>

#include "exec/kernels/kcommon.hpp"
#include "exec/kernels/k_elementwise.hpp"
#include "exec/kernels/k_reduce.hpp"

namespace tp::kernels {

enum Fp8Format : int { kFp8E4M3 = 0, kFp8E5M2 = 1 };

TP_HD TP_INLINE double fp8_max(int format) { return format == kFp8E4M3 ? 448.0 : 57344.0; }
// A format's layout, the one place fp8_round, fp8_bits and fp8_value take it from: mantissa and exponent bits, the
// exponent bias and the smallest normal exponent (1 - bias).
struct Fp8Layout {
  int mbits, ebits, bias, emin;
};
TP_HD TP_INLINE Fp8Layout fp8_layout(int format) {
  return format == kFp8E4M3 ? Fp8Layout{3, 4, 7, -6} : Fp8Layout{2, 5, 15, -14};
}

TP_HD TP_INLINE float k_rint(float x) { return ::rintf(x); }
TP_HD TP_INLINE double k_rint(double x) { return ::rint(x); }
TP_HD TP_INLINE int k_ilogb(float x) { return ::ilogbf(x); }
TP_HD TP_INLINE int k_ilogb(double x) { return ::ilogb(x); }
TP_HD TP_INLINE float k_ldexp(float x, int e) { return ::ldexpf(x, e); }
TP_HD TP_INLINE double k_ldexp(double x, int e) { return ::ldexp(x, e); }

// v rounded to the nearest value of the fp8 format (ties to even), saturated to +-max; NaN stays NaN.
template <class A>
TP_HD TP_INLINE A fp8_round(A v, int format) {
  const A maxv = A(fp8_max(format));
  const Fp8Layout fl = fp8_layout(format);
  const int mbits = fl.mbits, emin = fl.emin;
  const A a = v < A(0) ? -v : v;
  if (!(a == a) || a == A(0)) return v;
  if (a >= maxv) return v < A(0) ? -maxv : maxv;
  int e = k_ilogb(a);  // a in [2^e, 2^(e+1))
  if (e < emin) e = emin;  // subnormals share the smallest normal's quantum
  const int q = e - mbits;  // the quantum is 2^q: a / 2^q and its product back are exact
  A r = k_ldexp(k_rint(k_ldexp(a, -q)), q);
  if (r > maxv) r = maxv;  // a just below max rounded up past it: saturate
  return v < A(0) ? -r : r;
}

// The fp8 bits (OCP FP8, as CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2 hold them: sign, exponent biased by 7 / 15, 3 / 2
// mantissa bits; E4M3 NaN 0x7f, no infinities) of fp8_round(v, format): the byte an fp8 GEMM reads for the value the
// emulation computes with. NaN encodes as the format's NaN (0x7f, E5M2's too: S.11111.11).
template <class A>
TP_HD TP_INLINE uint8_t fp8_bits(A v, int format) {
  const A r = fp8_round(v, format);
  if (!(r == r)) return uint8_t(0x7f);
  const Fp8Layout fl = fp8_layout(format);
  const int mbits = fl.mbits, emin = fl.emin, bias = fl.bias;
  const uint8_t sign = r < A(0) ? uint8_t(0x80) : uint8_t(0);
  const A a = r < A(0) ? -r : r;
  if (a == A(0)) return sign;
  int e = k_ilogb(a);
  if (e < emin) return uint8_t(sign | uint8_t(k_ldexp(a, mbits - emin)));  // subnormal: a / 2^(emin - mbits)
  const int mant = int(k_ldexp(a, mbits - e)) - (1 << mbits);               // a / 2^(e - mbits) - 2^mbits, exact
  return uint8_t(sign | uint8_t((e + bias) << mbits) | uint8_t(mant));
}
// The value of fp8 bits b (fp8_bits' inverse on the format's finite values; NaN for its NaN codes).
TP_HD TP_INLINE double fp8_value(uint8_t b, int format) {
  const Fp8Layout fl = fp8_layout(format);
  const int mbits = fl.mbits, ebits = fl.ebits, bias = fl.bias;
  const int ef = (b >> mbits) & ((1 << ebits) - 1), mant = b & ((1 << mbits) - 1);
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (format == kFp8E4M3 ? (ef == 15 && mant == 7) : ef == 31) return mant == 0 ? sign * HUGE_VAL : NAN;
  if (ef == 0) return sign * k_ldexp(double(mant), 1 - bias - mbits);
  return sign * k_ldexp(double(mant + (1 << mbits)), ef - bias - mbits);
}

// v rounded to the nearest bfloat16 (8 significant bits, float's exponent range; ties to even; past bf16's
// largest finite value: infinity; NaN stays NaN). Float: the bit rule of to_bf16 (kcommon.hpp); double: the
// same rule on the value itself, so a double that is a float rounds exactly as that float does.
TP_HD TP_INLINE float bf16_round(float v) { return to_float(to_bf16(v)); }
TP_HD TP_INLINE double bf16_round(double v) {
  const double a = v < 0 ? -v : v;
  if (!(a == a) || a == 0 || a > 1.7976931348623157e308) return v;
  int e = k_ilogb(a);
  if (e < -126) e = -126;  // bf16's subnormals share its smallest normal's quantum, 2^-133
  const int q = e - 7;
  double r = k_ldexp(k_rint(k_ldexp(a, -q)), q);
  if (r > 3.3895313892515355e38) r = HUGE_VAL;  // above bf16's largest finite value (2^128 - 2^120)
  return v < 0 ? -r : r;
}

// v as bf16 bits, rounded by bf16_round: pack_bf16's rule for every storage type (float: to_bf16 itself).
TP_HD TP_INLINE bf16 bf16_of(float v) { return to_bf16(v); }
TP_HD TP_INLINE bf16 bf16_of(double v) { return to_bf16(float(bf16_round(v))); }  // (a bf16 value: exact in float)

// bf16 storage: y[i] = x[i] rounded by bf16_round (a double directly, not through float), as bf16 bits.
template <class T>
struct PackBf16 {
  static constexpr const char* kName = "pack_bf16";
  bf16* y;
  const T* x;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    if constexpr (kConvert4<bf16, T>)  // float: bf16_round is to_bf16's rounding, the conversion itself
      if (convert4(c, y, x, n)) return;
    TP_GRID_LOOP(c, i, n) y[i] = bf16_of(ld(x[i]));
  }
};

// The fp8 GEMM's operand copy (cuBLASLt's fp8 kernels read bytes, in its "TN" layout): y as a row-major [rows, cols]
// byte matrix = fp8_bits(x * s) of x [rows, cols] (row stride `stride`), or with `transpose` y [cols, rows] = its
// transpose; s = scale[0], read from device memory when the kernel runs.
// For x an fp8_quantize output with the same scale (q / s, q on the grid) the byte is q's: x s is within a few float
// ulps of q, which rounds back to q (the grid's steps are 2^-3 of a value at least).
template <class T>
struct Fp8Pack {
  static constexpr const char* kName = "fp8_pack";
  using A = acc_t<T>;
  uint8_t* y;
  const T* x;
  long rows, cols, stride;  // (stride: x's row stride)
  const T* scale;
  int format;
  bool transpose;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    const A s = A(ld(scale[0]));
    TP_GRID_LOOP(c, i, rows * cols) {  // (i: the output's element, so the writes are consecutive)
      const long r = transpose ? i % rows : i / cols, col = transpose ? i / rows : i % cols;
      y[i] = fp8_bits(A(ld(x[r * stride + col])) * s, format);
    }
  }
};

// y[i] = fp8_round(x[i] * s) / s, s = scale[0]; partial[bid] = max |x[i]| over the block's share (in double; partial
// null: no max).
template <class T>
struct Fp8QuantizePartial {
  static constexpr const char* kName = "fp8_quantize";
  using A = acc_t<T>;
  T* y;
  const T* x;
  const T* scale;
  long n;
  int format;
  double* partial;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    const A s = A(ld(scale[0]));
    double m = 0;
    for (long i = long(c.bid()) * c.bdim() + c.tid(); i < n; i += long(c.gdim()) * c.bdim()) {
      const A v = ld(x[i]);
      const double av = double(v < A(0) ? -v : v);
      m = av > m ? av : m;
      y[i] = st<T>(fp8_round(v * s, format) / s);
    }
    if (!partial) return;  // (the same for the whole block)
    m = block_max(c, m, c.template shared<double>());
    if (c.tid() == 0) partial[c.bid()] = m;
  }
};
// amax[0] = max(amax[0], max of in[0, n)) (one block; in: Fp8QuantizePartial's partials, each a value of T, so the
// result is exact in T): the cast's amax kept in device memory, no read-back.
template <class T>
struct AmaxInto {
  static constexpr const char* kName = "fp8_amax";
  T* amax;
  const double* in;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    double m = 0;
    for (long i = c.tid(); i < n; i += c.bdim()) m = k_max(m, in[i]);
    m = block_max(c, m, c.template shared<double>());
    if (c.tid() == 0 && m > double(ld(amax[0]))) amax[0] = st<T>(acc_t<T>(m));
  }
};

template <class L, class T>
void fp8_pack(const L& launch, uint8_t* y, const T* x, long rows, long cols, long stride, const T* scale, int format,
              bool transpose) {
  launch(Fp8Pack<T>{y, x, rows, cols, stride, scale, format, transpose}, flat_dim(launch, rows * cols));
}
// y[n] = x[n] as bf16 (PackBf16); the way back is copy<L, T, bf16> (k_elementwise.hpp), exact.
template <class L, class T>
void pack_bf16(const L& launch, bf16* y, const T* x, long n) {
  launch(PackBf16<T>{y, x, n}, flat_dim(launch, kConvert4<bf16, T> ? (n + 3) / 4 : n));
}

// y[n] = fp8(x * s) / s in `format`, s = scale[0] (device memory); amax (null: none) [0] = max(amax[0], max |x|).
// scratch holds launch.max_grid doubles (unused without amax).
template <class L, class T>
void fp8_quantize(const L& launch, T* amax, double* scratch, T* y, const T* x, long n, const T* scale, int format) {
  const unsigned grid = blocks_for(n, launch.block, launch.max_grid);
  const unsigned smem = amax ? unsigned(kReduceSlots * sizeof(double)) : 0;
  launch(Fp8QuantizePartial<T>{y, x, scale, n, format, amax ? scratch : nullptr}, Dim{grid, launch.block, smem});
  if (amax) launch(AmaxInto<T>{amax, scratch, long(grid)}, Dim{1, launch.block, smem});
}

}  // namespace tp::kernels
