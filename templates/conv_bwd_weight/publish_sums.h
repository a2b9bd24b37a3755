{# The end of a depthwise backward-weight walk (dwl, dwv): a block's per-tap sums of CB groups, thread tid
   holding groups (tid % CV) * VEC on, met and stored through the split-K store. The including kernel defines
   TAPS, FX, VEC, CV, CB, THREADS, MAX_WARPS, RT (taps a round of the shared staging), REDUCE, TW and ACC;
   `red` holds RT * MAX_WARPS * CB accumulators. Whitespace-controlled: renders only the function. -#}
// The block's sums met and stored: the thread tiles of a warp fold by shuffles, then each round stages
// RT taps of every warp in shared memory and the block's threads sum and store them.
__device__ __forceinline__ void publish(ACC (&acc)[TAPS][VEC], const kf_conv_args& a, const kf_epilogue& ep,
                                        int split_stride, int g0, ACC* red) {
  const int tid = threadIdx.x, wlane = tid % warpSize, warp = tid / warpSize;
  const int warps = (THREADS + warpSize - 1) / warpSize;
#pragma unroll
  for (int f = 0; f < TAPS; ++f)
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      for (int o = CV; o < warpSize; o <<= 1) acc[f][j] += kf_shfl_xor(acc[f][j], o);
#pragma unroll
  for (int f0 = 0; f0 < TAPS; f0 += RT) {
    if (wlane < CV) {
#pragma unroll
      for (int t = 0; t < RT; ++t)
        if (f0 + t < TAPS) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) red[(t * MAX_WARPS + warp) * CB + wlane * VEC + j] = acc[f0 + t][j];
        }
    }
    __syncthreads();
    for (int i = tid; i < RT * CB; i += THREADS) {
      const int t = i / CB, c = i % CB, f = f0 + t, g = g0 + c;
      if (f < TAPS && g < a.G) {
        ACC s = 0;
        for (int w = 0; w < warps; ++w) s += red[(t * MAX_WARPS + w) * CB + c];
        kf_splitk_store<REDUCE, TW, ACC>(a.wei, kf_wei_offset(a, g, 0, 0, 0, f / FX, f % FX), s, blockIdx.y,
                                         split_stride, ep);
      }
    }
    __syncthreads();
  }
}
