// The engine's main loop for two K-major matrices (a row holds its reduction elements contiguously, as a
// channels-last tensor's positions hold their channels) brought in by bulk tensor copies from a warp of their
// own. The block is the configuration's warpgroups (the consumers) and one more warp (the producer, its
// first lane issuing every copy); the consumers never wait at a block-wide barrier inside the loop: a stage's
// `full` barrier says its bytes have landed, its `empty` barrier that every consumer warp is done reading it,
// and only the producer waits on `empty`, so a slow warp delays the refill of one stage, not its neighbours'
// instructions. A stage's matrix instructions stay in flight while the next stage's are issued (wgmma.h with
// wgmma_overlap), and that stage is released once they are done.
//
// A stage is one box of 64 reduction elements (128 bytes, one swizzle row) by BM rows of A and one by BN rows
// of B: the bytes lie in shared memory as wgmma.h's K-major tiles do (rows of 128 bytes, 16-byte units
// swizzled by row % 8), which is how the copy engine writes a 128-byte-swizzled box. Rows and reduction
// elements past the tensors' edges arrive as zeros.
//
// The op is a class with c_row, c_col and store_pair as igemm_rows.h's. The maps are (reduction, rows,
// images) tensors; z_a and z_b name the image of each the block reads.
// Needs prelude.h, mma.h, igemm.h, wgmma.h (wgmma_a_k_major, wgmma_b_k_major, wgmma_overlap), igemm_rows.h
// and tma.h.
#pragma once

namespace kf_igemm {

constexpr int PRODUCER_THREADS = 32;  // the warp that issues the copies, after the consumers' warpgroups

// The block's tile (m0, n0) over `tiles` stages of 64 reduction elements. Every thread of the block (consumers
// and producer) calls it; the consumers store the tile through the op afterwards.
template <class Cfg, class Op>
__device__ __forceinline__ void run_kmajor_tma(const Op& op, const kf_tensor_map& map_a, int z_a,
                                               const kf_tensor_map& map_b, int z_b, typename Cfg::T* smem_ptr,
                                               int m0, int n0, int tiles) {
  using T = typename Cfg::T;
  static_assert(Cfg::SLICES == 1 && !Cfg::A_RMAJOR && !Cfg::B_RMAJOR, "one pipeline of K-major tiles");
  static_assert(Cfg::BK == Cfg::ROW && Cfg::BM <= 256 && Cfg::BN <= 256,
                "a stage: a box of one swizzle row of reduction elements by at most 256 rows, for each operand");
  constexpr int CONSUMER_WARPS = Cfg::THREADS / kf_mma::LANES;
  constexpr int STAGE_BYTES = Cfg::STAGE * (int)sizeof(T);
  const unsigned long long base = reinterpret_cast<unsigned long long>(smem_ptr);
  T* const aligned = reinterpret_cast<T*>((base + Cfg::SMEM_ALIGN - 1) / Cfg::SMEM_ALIGN * Cfg::SMEM_ALIGN);
  const kf_mma::Smem<T> smem = kf_mma::smem(aligned);
  kf_tma::Bar* const full = reinterpret_cast<kf_tma::Bar*>(aligned + Cfg::STAGES * Cfg::STAGE);
  kf_tma::Bar* const empty = full + Cfg::STAGES;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::STAGES; ++s) {
      kf_tma::init(&full[s], 1);
      kf_tma::init(&empty[s], CONSUMER_WARPS);
    }
    kf_tma::publish_inits();
  }
  __syncthreads();

  using Acc = typename kf_mma::FragC<T>::Acc;
  kf_mma::FragC<T> acc[Cfg::FM][Cfg::FN];
  int wm = 0, wn = 0;
  if (threadIdx.x >= Cfg::THREADS) {
    if (threadIdx.x == Cfg::THREADS) {  // the producer's first lane
      for (int t = 0; t < tiles; ++t) {
        const int slot = t % Cfg::STAGES;
        if (t >= Cfg::STAGES) kf_tma::wait(&empty[slot], (t / Cfg::STAGES - 1) % 2);  // its last readers are done
        const kf_mma::Smem<T> s = smem + slot * Cfg::STAGE;
        kf_tma::arrive_expecting(&full[slot], STAGE_BYTES);
        kf_tma::load_box(s, map_a, &full[slot], t * Cfg::BK, m0, z_a);
        kf_tma::load_box(s + Cfg::A_ELEMS, map_b, &full[slot], t * Cfg::BK, n0, z_b);
      }
    }
  } else {
    Cfg::warp_origin(threadIdx.x / kf_mma::LANES, wm, wn);
    for_each_acc<Cfg>(acc, [](Acc& v, int) { v = 0; });
    for (int t = 0; t < tiles; ++t) {
      const int slot = t % Cfg::STAGES;
      kf_tma::wait(&full[slot], t / Cfg::STAGES % 2);
      Cfg::compute(smem + slot * Cfg::STAGE, acc, wm, wn);  // returns once the stage before's instructions are done
      if (t > 0 && threadIdx.x % kf_mma::LANES == 0) kf_tma::arrive(&empty[(t - 1) % Cfg::STAGES]);
    }
    Cfg::finish();  // the last stage's instructions
  }
  // Every copy has landed and every consumer is done with the pipeline before the op may stage its tile there.
  __syncthreads();
  if (threadIdx.x < Cfg::THREADS) store_tile<Cfg>(op, acc, m0, n0, wm, wn);
}

}  // namespace kf_igemm
