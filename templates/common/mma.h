// Matrix instructions, one vocabulary for every target: a warp multiplies an M x K tile of A by a
// K x N tile of B into an M x N fp32 accumulator tile. Fragments live in registers; the layout of
// their elements across lanes is each implementation's own, so engines only use:
//   kf_mma::M, N, K_OF<T>, LANES, C_ELEMS  tile shape (K per operand type), lanes per warp, accumulator
//                                               elements per lane
//   Smem<T>, smem(T*)                           a place in shared memory (offset by + elements)
//   load_a<A_RMAJOR>(FragA<T>&, Smem<T>, ld, m, k)   A(m..m+M, k..k+K) from a shared tile
//   load_b<B_RMAJOR>(FragB<T>&, Smem<T>, ld, n, k)   B(k..k+K, n..n+N) from a shared tile
//   mma<T>(FragC<T>&, FragA<T>, FragB<T>)       C += A * B (FragC<T>::Acc: float, or int for int8)
//   c_row / c_col, c_row_of / c_col_of          where accumulator element e of a lane sits in the tile
// A shared tile is "r-major" when the reduction index is its row (element (m, k) at k * ld + m),
// otherwise element (m, k) is at m * ld + k; likewise B with n. Both orientations are served, so a
// tile is stored the way global memory is contiguous and never transposed on the way in.
//
// Implementations: mma.sync (NVIDIA sm_80+): m16n8k16 with ldmatrix for 16-bit operands (fp32
// accumulation); m16n8k32 on int8 operands (int32 accumulation) and on fp16 ones rounded to fp8 (sm_89+,
// f16_as_fp8 below, fp32 accumulation); and for fp32 operands m16n8k8 on TF32
// three times (a = hi + lo, each rounded to TF32; C += lo*hi + hi*lo + hi*hi), which keeps fp32
// accuracy; and a portable implementation with the same lane layouts in plain arithmetic (any compiler,
// the host emulator), which also documents them. mfma.h is the AMD implementation. Needs prelude.h;
// T (the operand storage type) decides the instruction, FragC<T>::Acc the accumulator type.
#pragma once

namespace kf_mma {

constexpr int M = 16, N = 8, C_ELEMS = 4, LANES = 32;
template <typename T> constexpr int K_OF = 16;  // reduction depth of one instruction
template <> constexpr int K_OF<float> = 8;
template <> constexpr int K_OF<int8_t> = 32;

// fp16 operands that the instructions take as fp8: A (the output-gradient) rounded to e5m2, B (the
// input) to e4m3, both while their fragments are loaded, so tiles stay fp16 in shared memory.
struct f16_as_fp8 { unsigned short bits; };
template <> constexpr int K_OF<f16_as_fp8> = 32;

// Accumulator element e of a lane sits at row c_row(c_row_of(e), lane) and column c_col(c_col_of(e), lane)
// of the tile; a lane's elements span C_ROWS rows and C_COLS columns. Here rows lane/4 and lane/4 + 8,
// columns 2*(lane%4) and +1 (PTX ISA, "Matrix Fragments for mma.m16n8k16": c0, c1 on the first row, c2,
// c3 eight rows below).
constexpr int C_ROWS = 2, C_COLS = 2;
__device__ __forceinline__ int c_row_of(int e) { return e / 2; }
__device__ __forceinline__ int c_col_of(int e) { return e % 2; }
__device__ __forceinline__ int c_row(int i, int lane) { return lane / 4 + 8 * i; }
__device__ __forceinline__ int c_col(int i, int lane) { return 2 * (lane % 4) + i; }

template <typename T> struct FragC { using Acc = float; Acc x[C_ELEMS]; };
template <> struct FragC<int8_t> { using Acc = int; Acc x[C_ELEMS]; };

#if defined(KF_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define KF_MMA_SYNC 1

template <typename T> struct FragA { uint32_t x[4]; };  // 16-bit pairs or int8 quads, ldmatrix's layout
template <typename T> struct FragB { uint32_t x[2]; };
template <> struct FragA<float> { uint32_t hi[4], lo[4]; };  // TF32 halves of fp32 values
template <> struct FragB<float> { uint32_t hi[2], lo[2]; };

__device__ __forceinline__ unsigned shared_address(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// A place in shared memory: on this path a 32-bit shared-window address, converted from a generic
// pointer once per kernel, so fragment and copy addresses are plain integer offsets from it.
template <typename T> struct Smem {
  unsigned addr;
  __device__ __forceinline__ Smem operator+(int elements) const { return {addr + (unsigned)(elements * (int)sizeof(T))}; }
};
template <typename T> __device__ __forceinline__ Smem<T> smem(T* p) { return {shared_address(p)}; }

// A: four 8x8 matrices of 16-bit units, (rows 0-7 / 8-15) x (first / second 16 bytes of k) in the
// order of the a0..a3 registers. A lane gives the address of one stored row: for [m][k] storage a row
// is an m; for r-major storage it is a k and .trans turns the matrix round. In [m][k] storage the same
// loads give int8's m16n8k32 fragments (a lane's four bytes of k are one 16-bit pair of pairs).
template <bool R_MAJOR, typename T>
__device__ __forceinline__ void load_a(FragA<T>& f, Smem<T> s, int ld, int m, int k) {
  constexpr int K16 = 16 / (int)sizeof(T);  // elements in 16 bytes of k
  const int lane = threadIdx.x % LANES, q = lane / 8, i = lane % 8;
  const int mm = m + 8 * (q % 2), kk = k + K16 * (q / 2);
  if constexpr (R_MAJOR) {
    static_assert(sizeof(T) == 2, "ldmatrix.trans moves 16-bit elements");
    const unsigned a = (s + ((kk + i) * ld + mm)).addr;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 { %0,%1,%2,%3}, [%4];"
                 : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3]) : "r"(a));
  } else {
    const unsigned a = (s + ((mm + i) * ld + kk)).addr;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 { %0,%1,%2,%3}, [%4];"
                 : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3]) : "r"(a));
  }
}

// B: two 8x8 matrices, k 0-7 and 8-15 of eight columns (lanes 16-31 repeat the addresses of 0-15).
template <bool R_MAJOR, typename T>
__device__ __forceinline__ void load_b(FragB<T>& f, Smem<T> s, int ld, int n, int k) {
  constexpr int K16 = 16 / (int)sizeof(T);
  const int lane = threadIdx.x % LANES, q = (lane / 8) % 2, i = lane % 8;
  if constexpr (R_MAJOR) {
    static_assert(sizeof(T) == 2, "ldmatrix.trans moves 16-bit elements");
    const unsigned a = (s + ((k + 8 * q + i) * ld + n)).addr;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 { %0,%1}, [%2];" : "=r"(f.x[0]), "=r"(f.x[1]) : "r"(a));
  } else {
    const unsigned a = (s + ((n + i) * ld + k + K16 * q)).addr;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 { %0,%1}, [%2];" : "=r"(f.x[0]), "=r"(f.x[1]) : "r"(a));
  }
}

{% if mma_rows is defined and mma_rows %}// Rendered for templates that set mma_rows:
//   load_a_rows(FragA<T>&, row)   A(m, k..k+K) from row(m), a place the caller picks per row (16-bit
//                                 operands; a row of zeros for rows outside the data)
//   fill_b(FragB<T>&, value)      B(k, n) = value(k, n), built in registers (16-bit operands)
// A gathered row by row: the lane gives the address of its matrix's row (as load_a for [m][k] storage),
// taken from row(m) for the tile row m it serves; row(m) holds k = 0..15 contiguous, 16-byte aligned.
template <typename T, typename RowOf>
__device__ __forceinline__ void load_a_rows(FragA<T>& f, RowOf row) {
  static_assert(sizeof(T) == 2, "ldmatrix moves 16-bit elements");
  const int lane = threadIdx.x % LANES, q = lane / 8;
  const unsigned a = (row(8 * (q % 2) + lane % 8) + 8 * (q / 2)).addr;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 { %0,%1,%2,%3}, [%4];"
               : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3]) : "r"(a));
}

// B from values in registers: b0, b1 at (k 2 * (lane % 4) + 0/1, n lane / 4), b2, b3 at k + 8.
template <typename T, typename ValueOf>
__device__ __forceinline__ void fill_b(FragB<T>& f, ValueOf value) {
  static_assert(sizeof(T) == 2, "16-bit operands");
  const int lane = threadIdx.x % LANES, n = lane / 4, k = 2 * (lane % 4);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const T pair[2] = {value(k + 8 * r, n), value(k + 8 * r + 1, n)};
    f.x[r] = *reinterpret_cast<const uint32_t*>(pair);
  }
}

{% endif %}// fp32: an element and its TF32 split (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32: a0..a3 at
// (row lane/4, col lane%4), (row + 8, col), (row, col + 4), (row + 8, col + 4); b0, b1 at (k lane%4,
// n lane/4) and k + 4), loaded one by one: ldmatrix moves 16-bit elements only.
__device__ __forceinline__ void split_tf32(float v, uint32_t& hi, uint32_t& lo) {
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(v));
  const float rest = v - __uint_as_float(hi);
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(rest));
}

__device__ __forceinline__ float lds(unsigned addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
  return v;
}

template <bool R_MAJOR>
__device__ __forceinline__ void load_a(FragA<float>& f, Smem<float> s, int ld, int m, int k) {
  const int lane = threadIdx.x % LANES, row = m + lane / 4, col = k + lane % 4;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int mm = row + 8 * (e % 2), kk = col + 4 * (e / 2);
    split_tf32(lds((s + (R_MAJOR ? kk * ld + mm : mm * ld + kk)).addr), f.hi[e], f.lo[e]);
  }
}

template <bool R_MAJOR>
__device__ __forceinline__ void load_b(FragB<float>& f, Smem<float> s, int ld, int n, int k) {
  const int lane = threadIdx.x % LANES, nn = n + lane / 4;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int kk = k + lane % 4 + 4 * e;
    split_tf32(lds((s + (R_MAJOR ? kk * ld + nn : nn * ld + kk)).addr), f.hi[e], f.lo[e]);
  }
}

// int8 in r-major tiles: a lane's four bytes of k lie on four stored rows, which ldmatrix (16-bit
// units) cannot gather; they are read one by one (PTX ISA, "Matrix Fragments for mma.m16n8k32", .s8:
// a0..a3 at (row lane/4, k 4*(lane%4) + 0..3), row + 8, k + 16, both; b0, b1 at (k 4*(lane%4) + 0..3,
// n lane/4) and k + 16).
__device__ __forceinline__ uint32_t lds_quad(Smem<int8_t> s, int ld) {
  uint32_t v = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    unsigned b;
    asm volatile("ld.shared.u8 %0, [%1];" : "=r"(b) : "r"((s + j * ld).addr));
    v |= b << (8 * j);
  }
  return v;
}

template <bool R_MAJOR>
__device__ __forceinline__ void load_a(FragA<int8_t>& f, Smem<int8_t> s, int ld, int m, int k) {
  if constexpr (!R_MAJOR) {
    load_a<false, int8_t>(f, s, ld, m, k);  // [m][k]: ldmatrix, as above
  } else {
    const int lane = threadIdx.x % LANES, row = m + lane / 4, col = k + 4 * (lane % 4);
#pragma unroll
    for (int r = 0; r < 4; ++r) f.x[r] = lds_quad(s + ((col + 16 * (r / 2)) * ld + row + 8 * (r % 2)), ld);
  }
}

template <bool R_MAJOR>
__device__ __forceinline__ void load_b(FragB<int8_t>& f, Smem<int8_t> s, int ld, int n, int k) {
  if constexpr (!R_MAJOR) {
    load_b<false, int8_t>(f, s, ld, n, k);
  } else {
    const int lane = threadIdx.x % LANES, col = n + lane / 4, row = k + 4 * (lane % 4);
#pragma unroll
    for (int r = 0; r < 2; ++r) f.x[r] = lds_quad(s + ((row + 16 * r) * ld + col), ld);
  }
}

// fp8 from fp16: the m16n8k32 fragment of a lane is two m16n8k16 fp16 fragments (k and k + 16) rounded
// pairwise. The instruction's k of a lane's four bytes, 4 * (lane % 4) + 0..3, then stand for the
// tile's k 2 * (lane % 4) + {0, 1, 8, 9} (the fp16 fragment's registers 0 and 2): the same order in A
// and B, so the sum is the tile's.
__device__ __forceinline__ uint32_t e5m2x4(uint32_t lo, uint32_t hi) {
  unsigned short a, b;
  asm("cvt.rn.satfinite.e5m2x2.f16x2 %0, %1;" : "=h"(a) : "r"(lo));
  asm("cvt.rn.satfinite.e5m2x2.f16x2 %0, %1;" : "=h"(b) : "r"(hi));
  return (uint32_t)a | ((uint32_t)b << 16);
}

__device__ __forceinline__ uint32_t e4m3x4(uint32_t lo, uint32_t hi) {
  unsigned short a, b;
  asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(a) : "r"(lo));
  asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(b) : "r"(hi));
  return (uint32_t)a | ((uint32_t)b << 16);
}

template <bool R_MAJOR>
__device__ __forceinline__ void load_a(FragA<f16_as_fp8>& f, Smem<f16_as_fp8> s, int ld, int m, int k) {
  FragA<f16_t> lo, hi;
  load_a<R_MAJOR, f16_t>(lo, Smem<f16_t>{s.addr}, ld, m, k);
  load_a<R_MAJOR, f16_t>(hi, Smem<f16_t>{s.addr}, ld, m, k + 16);
  f.x[0] = e5m2x4(lo.x[0], lo.x[2]);  // row lane / 4
  f.x[1] = e5m2x4(lo.x[1], lo.x[3]);  // row lane / 4 + 8
  f.x[2] = e5m2x4(hi.x[0], hi.x[2]);
  f.x[3] = e5m2x4(hi.x[1], hi.x[3]);
}

template <bool R_MAJOR>
__device__ __forceinline__ void load_b(FragB<f16_as_fp8>& f, Smem<f16_as_fp8> s, int ld, int n, int k) {
  FragB<f16_t> lo, hi;
  load_b<R_MAJOR, f16_t>(lo, Smem<f16_t>{s.addr}, ld, n, k);
  load_b<R_MAJOR, f16_t>(hi, Smem<f16_t>{s.addr}, ld, n, k + 16);
  f.x[0] = e4m3x4(lo.x[0], lo.x[1]);
  f.x[1] = e4m3x4(hi.x[0], hi.x[1]);
}

template <typename T> __device__ __forceinline__ void mma(FragC<T>& c, const FragA<T>& a, const FragB<T>& b);

// One mma.sync per operand type: shape, PTX types (D.A.B.C) and the accumulators' register class.
{% macro mma_sync(ctype, shape, types, reg) %}
template <> __device__ __forceinline__ void mma<{{ ctype }}>(FragC<{{ ctype }}>& c, const FragA<{{ ctype }}>& a,
                                                          const FragB<{{ ctype }}>& b) {
  asm volatile("mma.sync.aligned.{{ shape }}.row.col.{{ types }} { %0,%1,%2,%3}, { %4,%5,%6,%7}, { %8,%9}, { %0,%1,%2,%3};"
               : "+{{ reg }}"(c.x[0]), "+{{ reg }}"(c.x[1]), "+{{ reg }}"(c.x[2]), "+{{ reg }}"(c.x[3])
               : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
}
{% endmacro %}
{% for ctype, shape, types, reg in (("f16_t", "m16n8k16", "f32.f16.f16.f32", "f"),
                                    ("bf16_t", "m16n8k16", "f32.bf16.bf16.f32", "f"),
                                    ("int8_t", "m16n8k32", "s32.s8.s8.s32", "r"),
                                    ("f16_as_fp8", "m16n8k32", "f32.e5m2.e4m3.f32", "f")) %}
{{ mma_sync(ctype, shape, types, reg) }}
{% endfor %}

__device__ __forceinline__ void mma_tf32(FragC<float>& c, const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 { %0,%1,%2,%3}, { %4,%5,%6,%7}, { %8,%9}, { %0,%1,%2,%3};"
               : "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Small products first, so the large one lands on a sum that already holds them.
template <> __device__ __forceinline__ void mma<float>(FragC<float>& c, const FragA<float>& a, const FragB<float>& b) {
  mma_tf32(c, a.lo, b.hi);
  mma_tf32(c, a.hi, b.lo);
  mma_tf32(c, a.hi, b.hi);
}

#else  // portable: the lane layout of mma.sync m16n8k16, in fp32 arithmetic

// A place in shared memory: a pointer here.
template <typename T> struct Smem {
  T* ptr;
  __device__ __forceinline__ Smem operator+(int elements) const { return {ptr + elements}; }
};
template <typename T> __device__ __forceinline__ Smem<T> smem(T* p) { return {p}; }

// A lane keeps the two rows of A and the two columns of B its accumulator elements need, whole, as
// accumulator values.
template <typename T> struct FragA { typename FragC<T>::Acc v[2][K_OF<T>]; };
template <typename T> struct FragB { typename FragC<T>::Acc v[2][K_OF<T>]; };

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(f16_t x) { return kf_to_float(x); }
__device__ __forceinline__ float widen(bf16_t x) { return kf_to_float(x); }
__device__ __forceinline__ int widen(int8_t x) { return (int)x; }

// x rounded to a float format of `mant` mantissa bits, smallest normal exponent `emin` and largest
// finite value `max` (saturating), to nearest, ties to even: the instruction's view of fp8 operands.
__device__ __forceinline__ float round_to_format(float x, int mant, int emin, float max) {
  const float a = x < 0 ? -x : x;
  int e = (int)((__float_as_uint(a) >> 23) & 0xff) - 127;
  e = e < emin ? emin : e;
  const float step = __uint_as_float((unsigned)(e - mant + 127) << 23);  // 2^(e - mant)
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding and taking it away rounds to an integer
  float q = ((a / step + magic) - magic) * step;
  q = q > max ? max : q;
  return x < 0 ? -q : q;
}

__device__ __forceinline__ float fp16_of(f16_as_fp8 x) { return kf_to_float(__builtin_bit_cast(f16_t, x.bits)); }
template <typename T> __device__ __forceinline__ auto widen_a(T x) { return widen(x); }
template <typename T> __device__ __forceinline__ auto widen_b(T x) { return widen(x); }
__device__ __forceinline__ float widen_a(f16_as_fp8 x) { return round_to_format(fp16_of(x), 2, -14, 57344.0f); }  // e5m2
__device__ __forceinline__ float widen_b(f16_as_fp8 x) { return round_to_format(fp16_of(x), 3, -6, 448.0f); }  // e4m3

template <bool R_MAJOR, typename T>
__device__ __forceinline__ void load_a(FragA<T>& f, Smem<T> sm, int ld, int m, int k) {
  constexpr int K = K_OF<T>;
  const T* s = sm.ptr;
  const int lane = threadIdx.x % LANES;
  for (int h = 0; h < 2; ++h) {
    const int mm = m + lane / 4 + 8 * h;
    for (int kk = 0; kk < K; ++kk) f.v[h][kk] = widen_a(R_MAJOR ? s[(k + kk) * ld + mm] : s[mm * ld + k + kk]);
  }
}

template <bool R_MAJOR, typename T>
__device__ __forceinline__ void load_b(FragB<T>& f, Smem<T> sm, int ld, int n, int k) {
  constexpr int K = K_OF<T>;
  const T* s = sm.ptr;
  const int lane = threadIdx.x % LANES;
  for (int h = 0; h < 2; ++h) {
    const int nn = n + 2 * (lane % 4) + h;
    for (int kk = 0; kk < K; ++kk) f.v[h][kk] = widen_b(R_MAJOR ? s[(k + kk) * ld + nn] : s[nn * ld + k + kk]);
  }
}

{% if mma_rows is defined and mma_rows %}template <typename T, typename RowOf>
__device__ __forceinline__ void load_a_rows(FragA<T>& f, RowOf row) {
  const int lane = threadIdx.x % LANES;
  for (int h = 0; h < 2; ++h) {
    const T* r = row(lane / 4 + 8 * h).ptr;
    for (int kk = 0; kk < K_OF<T>; ++kk) f.v[h][kk] = widen_a(r[kk]);
  }
}

template <typename T, typename ValueOf>
__device__ __forceinline__ void fill_b(FragB<T>& f, ValueOf value) {
  const int lane = threadIdx.x % LANES;
  for (int h = 0; h < 2; ++h)
    for (int kk = 0; kk < K_OF<T>; ++kk) f.v[h][kk] = widen_b(value(kk, 2 * (lane % 4) + h));
}

{% endif %}template <typename T> __device__ __forceinline__ void mma(FragC<T>& c, const FragA<T>& a, const FragB<T>& b) {
  for (int e = 0; e < C_ELEMS; ++e) {
    typename FragC<T>::Acc sum = 0;
    for (int kk = 0; kk < K_OF<T>; ++kk) sum += a.v[e / 2][kk] * b.v[e % 2][kk];
    c.x[e] += sum;
  }
}

#endif

}  // namespace kf_mma
