// The engine's main loop with the operands brought in by bulk tensor copies (tma.h) instead of the threads'
// cp.async chunks (igemm_rows.h): one thread issues a stage's boxes, the copy engine moves them, and no other
// thread spends an instruction on loading. Each stage has two barriers: `full` completes when its bytes have
// landed, `empty` when every warp is done reading it. The loads run STAGES stages ahead of the matrix
// instructions; a stage is refilled once its readers are through, without a block-wide barrier per stage.
// A stage's matrix instructions stay in flight while the next stage's are issued (the configuration's
// compute waits for the stage before only: wgmma.h's wgmma_overlap); measured, it moved nothing against the
// threads' copies (bench/NOTES.md 80).
//
// The op's matrices are r-major rows (a channels-last layer's rows of K and C), so a box is BK reduction rows
// by 64 columns: one swizzle slab of wgmma.h's r-major tiles, which the copy engine writes in that layout.
// The op is a class with c_row, c_col and store_pair as igemm_rows.h's, and the maps:
//   map_a: A's tensor with dims (M columns, rows, groups); map_b likewise for B (N columns)
// Needs prelude.h, mma.h, igemm.h, wgmma.h, igemm_rows.h and tma.h.
#pragma once

namespace kf_igemm {

// The block's tile (m0, n0) of group `group` over reduction rows [r_begin, r_begin + tiles * BK) of the two
// maps' tensors (rows past the tensors' end are zeros).
template <class Cfg, class Op>
__device__ __forceinline__ void run_rows_tma(const Op& op, const kf_tensor_map& map_a, const kf_tensor_map& map_b,
                                             typename Cfg::T* smem_ptr, int m0, int n0, int group, int r_begin,
                                             int tiles) {
  using T = typename Cfg::T;
  static_assert(Cfg::SLICES == 1 && Cfg::A_RMAJOR && Cfg::B_RMAJOR, "one pipeline of r-major tiles");
  static_assert(Cfg::ROW == 64 && Cfg::BK <= 256, "a box: 64 columns (128 bytes) by at most 256 rows");
  constexpr int WARPS = Cfg::THREADS / kf_mma::LANES;
  constexpr int STAGE_BYTES = Cfg::STAGE * (int)sizeof(T);
  const unsigned long long base = reinterpret_cast<unsigned long long>(smem_ptr);
  T* const aligned = reinterpret_cast<T*>((base + Cfg::SMEM_ALIGN - 1) / Cfg::SMEM_ALIGN * Cfg::SMEM_ALIGN);
  const kf_mma::Smem<T> smem = kf_mma::smem(aligned);
  kf_tma::Bar* const full = reinterpret_cast<kf_tma::Bar*>(aligned + Cfg::STAGES * Cfg::STAGE);
  kf_tma::Bar* const empty = full + Cfg::STAGES;
  const bool issuer = threadIdx.x == 0;
  if (issuer) {
    for (int s = 0; s < Cfg::STAGES; ++s) {
      kf_tma::init(&full[s], 1);
      kf_tma::init(&empty[s], WARPS);
    }
    kf_tma::publish_inits();
  }
  __syncthreads();

  const auto issue = [&](int t) {
    const int slot = t % Cfg::STAGES, r = r_begin + t * Cfg::BK;
    const kf_mma::Smem<T> s = smem + slot * Cfg::STAGE;
    kf_tma::arrive_expecting(&full[slot], STAGE_BYTES);
#pragma unroll
    for (int j = 0; j < Cfg::BM / Cfg::ROW; ++j)
      kf_tma::load_box(s + Cfg::a_at(0, j * Cfg::ROW), map_a, &full[slot], m0 + j * Cfg::ROW, r, group);
#pragma unroll
    for (int j = 0; j < Cfg::BN / Cfg::ROW; ++j)
      kf_tma::load_box(s + Cfg::A_ELEMS + Cfg::b_at(0, j * Cfg::ROW), map_b, &full[slot], n0 + j * Cfg::ROW, r, group);
  };
  if (issuer)
    for (int t = 0; t < Cfg::STAGES && t < tiles; ++t) issue(t);

  int wm, wn;
  Cfg::warp_origin(threadIdx.x / kf_mma::LANES, wm, wn);
  using Acc = typename kf_mma::FragC<T>::Acc;
  kf_mma::FragC<T> acc[Cfg::FM][Cfg::FN];
  for_each_acc<Cfg>(acc, [](Acc& v, int) { v = 0; });
  for (int t = 0; t < tiles; ++t) {
    const int slot = t % Cfg::STAGES, parity = t / Cfg::STAGES % 2;
    kf_tma::wait(&full[slot], parity);
    // This stage's instructions are left running; compute returns once the stage before's are done
    // (wgmma.h with wgmma_overlap), so that stage is free: refill it.
    Cfg::compute(smem + slot * Cfg::STAGE, acc, wm, wn);
    const int before = t - 1;
    if (before < 0) continue;
    if (threadIdx.x % kf_mma::LANES == 0) kf_tma::arrive(&empty[before % Cfg::STAGES]);
    if (issuer && before + Cfg::STAGES < tiles) {
      kf_tma::wait(&empty[before % Cfg::STAGES], before / Cfg::STAGES % 2);
      issue(before + Cfg::STAGES);
    }
  }
  Cfg::finish();  // the last stage's instructions
  // Every warp is done with the pipeline (and every copy has landed) before the op may stage its tile there.
  __syncthreads();
  store_tile<Cfg>(op, acc, m0, n0, wm, wn);
}

}  // namespace kf_igemm
