// The implicit-GEMM engine (igemm.h) on Hopper's warpgroup MMA (wgmma, sm_90a): a configuration to{% set overlap = wgmma_overlap is defined and wgmma_overlap %}{% set a_k_major = wgmma_a_k_major is defined and wgmma_a_k_major %}{% set b_k_major = wgmma_b_k_major is defined and wgmma_b_k_major %}
// pass to kf_igemm::run in place of kf_igemm::Config. SLICES pipelines share a block's tile (see run()).
//
// Four warps (a warpgroup) issue one wgmma.mma_async m64nNk16 together: 64 rows of A by N columns of
// B, both read by the instruction straight from shared memory through descriptors, so no fragment is
// loaded by the threads. A block has WGS_M x WGS_N warpgroups, each owning 64 rows and BN / WGS_N
// columns of the block's tile. Tiles are r-major (the reduction index is the stored row, as
// channels-last tensors lie) with 16-bit elements, kept in the 128-byte-swizzled "MN-major" layout the
// instruction reads with its transpose bits set: 8 reduction rows of 128 bytes (64 elements along M or
// N) form a 1024-byte atom, the 16-byte units of row k sitting at unit ^ (k % 8) so a row's copies and
// the instruction's reads spread over all banks. Atoms follow one another along the reduction (1024
// bytes apart, the descriptor's stride offset) and then along M / N (BK * 128 bytes apart, its leading
// offset).
//
// A warp's accumulators (16 rows x BN / WGS_N columns) lie as mma.sync's 16x8 tiles side by side
// (PTX ISA, "wgmma .m64nNk16 register fragment D"), so the engine's epilogue stores them unchanged.
// Without sm_90a (the host emulator) the same layout and product are computed with plain arithmetic.
{% if a_k_major %}//
// Here A is K-major instead (wgmma_a_k_major: backward-data's output-gradient rows, K contiguous): a
// stored row is one of A's M rows holding 64 reduction elements (128 bytes) of an atom, the units of row
// m at unit ^ (m % 8); atoms follow one another along M (1024 bytes apart: the stride offset) and then
// along the reduction (BM * 128 bytes apart). The instruction reads it untransposed; an instruction's 16
// reduction elements (32 bytes) lie within one row of an atom, so the leading offset is unused.
{% endif %}{% if b_k_major %}//
// B is K-major too (wgmma_b_k_major: NGCHW tensors' channel rows, output positions contiguous), laid
// out as K-major A is with N in place of M: a stored row is one of B's columns (n) holding 64 reduction
// elements, atoms 1024 bytes apart along N, then BN * 128 bytes apart along the reduction.
{% endif %}// Needs prelude.h, mma.h and igemm.h.
#pragma once

namespace kf_wgmma {

constexpr int ROWS = 64;      // rows of A one instruction takes: a warpgroup's share of the tile
constexpr int K = 16;         // reduction depth of one instruction (16-bit operands)
constexpr int GROUP = 128;    // threads of a warpgroup
constexpr int ATOM_BYTES = 1024;

// Element offset of (reduction row k, column mn) in a swizzled tile of BK reduction rows.
template <typename T, int BK>
__device__ __forceinline__ int swizzled(int k, int mn) {
  constexpr int ROW = 128 / (int)sizeof(T), UNIT = 16 / (int)sizeof(T);
  return (mn / ROW) * (BK * ROW) + k * ROW + ((mn % ROW / UNIT) ^ (k % 8)) * UNIT + mn % UNIT;
}

#if defined(KF_WGMMA)
// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading and
// stride byte offsets (each in 16-byte units), 128-byte swizzle.
__device__ __forceinline__ unsigned long long descriptor(unsigned address, unsigned leading, unsigned stride) {
  return (unsigned long long)((address & 0x3FFFF) >> 4) | ((unsigned long long)(leading >> 4) << 16) |
         ((unsigned long long)(stride >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
{% if overlap %}__device__ __forceinline__ void wait_but_one() { asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); }
{% endif %}
// D(64 x N) += A(64 x 16) * B(16 x N), both operands MN-major (transposed) in shared memory.
template <typename T, int N>
__device__ __forceinline__ void mma_async(kf_mma::FragC<T> (&d)[N / 8], unsigned long long a, unsigned long long b);

{% macro wgmma_instruction(ctype, ptx, n, regs) %}
template <>
__device__ __forceinline__ void mma_async<{{ ctype }}, {{ n }}>(kf_mma::FragC<{{ ctype }}> (&d)[{{ n }} / 8], unsigned long long a,
                                                              unsigned long long b) {
  asm volatile(
      "{ .reg .pred p; setp.ne.b32 p, %{{ regs + 2 }}, 0; "
      "wgmma.mma_async.sync.aligned.m64n{{ n }}k16.f32.{{ ptx }}.{{ ptx }} "
      "{ {% for i in range(regs) %}%{{ i }}{{ ", " if not loop.last else "" }}{% endfor %} }, "
      "%{{ regs }}, %{{ regs + 1 }}, p, 1, 1, {% if a_k_major %}0{% else %}1{% endif %}, {% if b_k_major %}0{% else %}1{% endif %}; }"
      : {% for i in range(regs) %}"+f"(d[{{ i // 4 }}].x[{{ i % 4 }}]){{ ", " if not loop.last else "" }}{% endfor %}
      : "l"(a), "l"(b), "r"(1));
}
{% endmacro %}
{% for ctype, ptx in (("f16_t", "f16"), ("bf16_t", "bf16")) %}
{% for n, regs in ((64, 32), (128, 64), (192, 96), (256, 128)) %}
{{ wgmma_instruction(ctype, ptx, n, regs) }}
{% endfor %}
{% endfor %}
#endif

template <typename T_, int BM_, int BN_, int BK_, int WGS_M_, int WGS_N_, int SLICES_, int STAGES_, int VA_, int VB_>
struct Config {
  using T = T_;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WGS_M = WGS_M_, WGS_N = WGS_N_, STAGES = STAGES_;
  static constexpr bool A_RMAJOR = {% if a_k_major %}false{% else %}true{% endif %}, B_RMAJOR = {% if b_k_major %}false{% else %}true{% endif %};
  static constexpr int VA = VA_, VB = VB_;
  static constexpr int SLICES = SLICES_, SLICE_THREADS = WGS_M * WGS_N * GROUP;  // igemm.h run(): slices
  static constexpr int THREADS = SLICES * SLICE_THREADS;
  static constexpr int WTN = BN / WGS_N;  // a warpgroup's columns
  static constexpr int FM = 1, FN = WTN / kf_mma::N;  // a warp's 16 x WTN accumulators as mma.sync tiles
  static constexpr int ROW = 128 / (int)sizeof(T), UNIT = 16 / (int)sizeof(T);
  static constexpr int A_ELEMS = BM * BK, B_ELEMS = BN * BK, STAGE = A_ELEMS + B_ELEMS;
  static constexpr int SMEM_ALIGN = ATOM_BYTES;
  static constexpr int PIPELINES = STAGE * STAGES * SLICES * (int)sizeof(T), SUMS = (SLICES - 1) * BM * BN * 4;
  static constexpr int SHARED_BYTES = PIPELINES > SUMS ? PIPELINES : SUMS;
  static constexpr bool ASYNC_PROXY = true;
  static_assert(sizeof(T) == 2, "wgmma tiles here hold 16-bit operands");
  static_assert(BM == ROWS * WGS_M, "a warpgroup owns 64 rows");
  static_assert(WTN % ROW == 0 && WTN <= 256, "a warpgroup's columns: whole 64-element swizzle rows, at most 256");
  static_assert(BK % K == 0 && SLICE_THREADS % BK == 0, "reduction rows: whole instructions, whole threads per row");
  static_assert(UNIT % VA == 0 && UNIT % VB == 0, "a chunk lies within one 16-byte unit");
{% if a_k_major %}  static_assert(BK % ROW == 0, "K-major A: whole 128-byte swizzle rows of reduction elements");
{% endif %}{% if b_k_major %}  static_assert(BK % ROW == 0, "K-major B: whole 128-byte swizzle rows of reduction elements");
{% endif %}
  __device__ static __forceinline__ int a_at(int row, int col) { return swizzled<T, {% if a_k_major %}BM{% else %}BK{% endif %}>(row, col); }
  __device__ static __forceinline__ int b_at(int row, int col) { return swizzled<T, {% if b_k_major %}BN{% else %}BK{% endif %}>(row, col); }
  __device__ static __forceinline__ void warp_origin(int warp, int& wm, int& wn) {
    const int group = warp / (GROUP / kf_mma::LANES);
    wm = (group / WGS_N) * ROWS + (warp % (GROUP / kf_mma::LANES)) * kf_mma::M;
    wn = (group % WGS_N) * WTN;
  }

{% if overlap %}  __device__ static __forceinline__ void finish() {
#if defined(KF_WGMMA)
    wait_all();
#endif
  }
{% endif %}  __device__ static __forceinline__ void compute(kf_mma::Smem<T> s, kf_mma::FragC<T> (&acc)[FM][FN], int wm, int wn) {
    const int m_group = wm / ROWS * ROWS;
#if defined(KF_WGMMA)
    constexpr unsigned LEADING = BK * 128, STRIDE = ATOM_BYTES;
    fence();
#pragma unroll
    for (int k = 0; k < BK; k += K) {
{% if a_k_major %}      const unsigned long long a = descriptor((s + a_at(m_group, k)).addr, 16, STRIDE);  // K-major
{% else %}      const unsigned long long a = descriptor((s + a_at(k, m_group)).addr, LEADING, STRIDE);
{% endif %}{% if b_k_major %}      const unsigned long long b = descriptor((s + A_ELEMS + b_at(wn, k)).addr, 16, STRIDE);  // K-major
{% else %}      const unsigned long long b = descriptor((s + A_ELEMS + b_at(k, wn)).addr, LEADING, STRIDE);
{% endif %}      mma_async<T, WTN>(acc[0], a, b);
    }
    commit();
{% if overlap %}    wait_but_one();  // this stage's instructions run on (igemm.h run(): wgmma_overlap)
{% else %}    wait_all();
{% endif %}#elif defined(KF_MMA_SYNC)
    static_assert(sizeof(T) == 0, "wgmma instances compile for sm_90a");
#else
    (void)m_group;
    const int lane = threadIdx.x % kf_mma::LANES;
    const T* sa = s.ptr;
    const T* sb = s.ptr + A_ELEMS;
    for (int k = 0; k < BK; ++k)
      for (int j = 0; j < FN; ++j)
        for (int e = 0; e < kf_mma::C_ELEMS; ++e) {
          const int m = wm + kf_mma::c_row(kf_mma::c_row_of(e), lane);
          const int n = wn + j * kf_mma::N + kf_mma::c_col(kf_mma::c_col_of(e), lane);
          acc[0][j].x[e] += kf_to_float(sa[{% if a_k_major %}a_at(m, k){% else %}a_at(k, m){% endif %}]) * kf_to_float(sb[{% if b_k_major %}b_at(n, k){% else %}b_at(k, n){% endif %}]);
        }
#endif
  }
};

}  // namespace kf_wgmma
