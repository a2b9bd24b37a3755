// The matrix-instruction vocabulary of mma.h (see there) on AMD CDNA's MFMA: a wavefront of 64 lanes
// multiplies a 16 x K tile of A by a K x 16 tile of B into a 16 x 16 fp32 accumulator tile with one
// single-block instruction: v_mfma_f32_16x16x16f16, v_mfma_f32_16x16x16bf16_1k (gfx90a and newer) and
// v_mfma_f32_16x16x4f32 (full fp32, no split needed). A template includes this header in place of
// mma.h; igemm.h then runs unchanged, with 64-lane "warps".
//
// Lane layouts (AMD Instinct ISA, "Matrix fused-multiply-add" dependency tables; the same for the three
// instructions, with KL = K / 4 reduction values per lane): lane l holds
//   A(l % 16, KL * (l / 16) + i) and B(KL * (l / 16) + i, l % 16) for i < KL, and
//   C(4 * (l / 16) + e, l % 16) for e < 4.
// Fragments are loaded from shared memory with plain reads in both tile orientations, the same code on
// the GPU and in the host emulator. On a CDNA GPU `mma` is the builtin; elsewhere (the host emulator)
// the wavefront's fragments are exchanged through shared memory and multiplied by that layout, so the
// emulator checks the loads and the accumulator layout the instruction relies on. Needs prelude.h.
#pragma once

#if defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define KF_MFMA 1
#elif defined(__HIP_DEVICE_COMPILE__) || defined(__CUDA_ARCH__)
#error "mfma.h needs an AMD CDNA target (gfx908, gfx90a, gfx94x)"
#endif

namespace kf_mma {

constexpr int M = 16, N = 16, C_ELEMS = 4, LANES = 64;
template <typename T> constexpr int K_OF = 16;  // 16-bit operands
template <> constexpr int K_OF<float> = 4;
template <typename T> constexpr int K_PER_LANE = K_OF<T> / 4;

// Accumulator element e of a lane: row 4 * (lane / 16) + e, column lane % 16.
constexpr int C_ROWS = 4, C_COLS = 1;
__device__ __forceinline__ int c_row_of(int e) { return e; }
__device__ __forceinline__ int c_col_of(int) { return 0; }
__device__ __forceinline__ int c_row(int i, int lane) { return 4 * (lane / 16) + i; }
__device__ __forceinline__ int c_col(int, int lane) { return lane % 16; }

template <typename T> struct FragC { using Acc = float; Acc x[C_ELEMS]; };
template <typename T> struct FragA { T v[K_PER_LANE<T>]; };
template <typename T> struct FragB { T v[K_PER_LANE<T>]; };

// A place in shared memory (LDS): a pointer.
template <typename T> struct Smem {
  T* ptr;
  __device__ __forceinline__ Smem operator+(int elements) const { return {ptr + elements}; }
};
template <typename T> __device__ __forceinline__ Smem<T> smem(T* p) { return {p}; }

template <bool R_MAJOR, typename T>
__device__ __forceinline__ void load_a(FragA<T>& f, Smem<T> s, int ld, int m, int k) {
  const int lane = threadIdx.x % LANES, mm = m + lane % 16, k0 = k + K_PER_LANE<T> * (lane / 16);
#pragma unroll
  for (int i = 0; i < K_PER_LANE<T>; ++i) f.v[i] = s.ptr[R_MAJOR ? (k0 + i) * ld + mm : mm * ld + k0 + i];
}

template <bool R_MAJOR, typename T>
__device__ __forceinline__ void load_b(FragB<T>& f, Smem<T> s, int ld, int n, int k) {
  const int lane = threadIdx.x % LANES, nn = n + lane % 16, k0 = k + K_PER_LANE<T> * (lane / 16);
#pragma unroll
  for (int i = 0; i < K_PER_LANE<T>; ++i) f.v[i] = s.ptr[R_MAJOR ? (k0 + i) * ld + nn : nn * ld + k0 + i];
}

#if defined(KF_MFMA)

typedef float kf_float4 __attribute__((ext_vector_type(4)));
typedef _Float16 kf_half4 __attribute__((ext_vector_type(4)));
typedef short kf_short4 __attribute__((ext_vector_type(4)));

template <typename T> __device__ __forceinline__ kf_float4 to_vector(const FragC<T>& c) { return {c.x[0], c.x[1], c.x[2], c.x[3]}; }
template <typename T> __device__ __forceinline__ void from_vector(FragC<T>& c, kf_float4 v) {
#pragma unroll
  for (int e = 0; e < C_ELEMS; ++e) c.x[e] = v[e];
}

// Four 16-bit values as the instruction's operand: their bits, unchanged.
template <typename T> __device__ __forceinline__ kf_short4 bits4(const T (&v)[4]) {
  kf_short4 r;
#pragma unroll
  for (int i = 0; i < 4; ++i) r[i] = __builtin_bit_cast(short, v[i]);
  return r;
}

template <typename T> __device__ __forceinline__ void mma(FragC<T>& c, const FragA<T>& a, const FragB<T>& b);

template <> __device__ __forceinline__ void mma<f16_t>(FragC<f16_t>& c, const FragA<f16_t>& a, const FragB<f16_t>& b) {
  const kf_half4 x = __builtin_bit_cast(kf_half4, bits4(a.v)), y = __builtin_bit_cast(kf_half4, bits4(b.v));
  from_vector(c, __builtin_amdgcn_mfma_f32_16x16x16f16(x, y, to_vector(c), 0, 0, 0));
}

// bf16 with K = 16 (the _1k instructions) needs gfx90a or newer: gfx908 has no definition to call.
#if !defined(__gfx908__)
template <> __device__ __forceinline__ void mma<bf16_t>(FragC<bf16_t>& c, const FragA<bf16_t>& a, const FragB<bf16_t>& b) {
  from_vector(c, __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(bits4(a.v), bits4(b.v), to_vector(c), 0, 0, 0));
}
#endif

template <> __device__ __forceinline__ void mma<float>(FragC<float>& c, const FragA<float>& a, const FragB<float>& b) {
  from_vector(c, __builtin_amdgcn_mfma_f32_16x16x4f32(a.v[0], b.v[0], to_vector(c), 0, 0, 0));
}

#else  // host emulator: the wavefront's product by the instruction's lane layout

// Every lane's fragments, by wavefront (at most 1024 threads a block): A(i, k) is value k % KL of lane
// i + 16 * (k / KL), B(k, j) that of lane j + 16 * (k / KL).
__shared__ float kf_mfma_exchange[1024 / LANES][LANES][2][4];

template <typename T> __device__ __forceinline__ void mma(FragC<T>& c, const FragA<T>& a, const FragB<T>& b) {
  constexpr int KL = K_PER_LANE<T>;
  const int lane = threadIdx.x % LANES;
  float (*x)[2][4] = kf_mfma_exchange[threadIdx.x / LANES];
  for (int i = 0; i < KL; ++i) {
    x[lane][0][i] = kf_to_float(a.v[i]);
    x[lane][1][i] = kf_to_float(b.v[i]);
  }
  __syncthreads();  // every lane of the block calls mma the same number of times
  for (int e = 0; e < C_ELEMS; ++e) {
    // The instruction's own layout, spelled out apart from c_row / c_col, which this checks.
    const int row = 4 * (lane / 16) + e, col = lane % 16;
    float sum = 0.0f;
    for (int k = 0; k < K_OF<T>; ++k) sum += x[row + 16 * (k / KL)][0][k % KL] * x[col + 16 * (k / KL)][1][k % KL];
    c.x[e] += sum;
  }
  __syncthreads();  // the exchange is reused by the next call
}

#endif

}  // namespace kf_mma
