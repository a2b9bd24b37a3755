// The depthwise-style families' (dw, dwt, dwr) last step: sum each filter tap's partials over the block's
// position-threads and store every (lane, tap) once through the split-K store. Needs prelude.h, args.h
// and splitk.h.
//
// Block: TG threads along lanes (threadIdx.x) x TR along positions (threadIdx.y). A lane is one
// (g, k, c) with c fastest; a thread holds acc[f][q] for lane lane0 + q (VEC > 1 only when C = K = 1).
// Tap f of the F live ones is (z, y, x) of a Z x Y x X filter in row-major order. The split (REDUCE 2)
// is blockIdx.y. ep: the output epilogue, applied by the store when REDUCE is 0 (else by kf_finalize).

// Store the sum `s` of tap (z, y, x) of lane `lane`.
template <int REDUCE, typename TW, typename ACC>
__device__ __forceinline__ void dw_publish(const kf_conv_args& a, const kf_epilogue& ep, int split_stride, int lane, int z,
                                           int y, int x, ACC s) {
  const int c = lane % a.C, k = (lane / a.C) % a.K, g = lane / (a.C * a.K);
  kf_splitk_store<REDUCE, TW, ACC>(a.wei, kf_wei_offset(a, g, k, c, z, y, x), s, blockIdx.y, split_stride, ep);
}

template <int TG, int TR, int VEC, int TAPS, int REDUCE, typename TW, typename ACC>
__device__ __forceinline__ void dw_reduce_publish(ACC (&acc)[TAPS][VEC], const kf_conv_args& a, const kf_epilogue& ep,
                                                  int split_stride, int F, int Y, int X, int lane0, bool lane_ok,
                                                  int lanes_total) {
  constexpr int THREADS_ = TG * TR;
  const int tid = threadIdx.y * TG + threadIdx.x;
  if constexpr (TG == 1) {  // one lane per block: shuffles within each warp, then across warps
    __shared__ ACC wred[(TR + 31) / 32][TAPS];
    const int wlane = threadIdx.y % warpSize, warp = threadIdx.y / warpSize;
#pragma unroll
    for (int f = 0; f < TAPS; ++f) {
      if (f < F) {
        const ACC v = kf_warp_sum(acc[f][0]);
        if (wlane == 0) wred[warp][f] = v;
      }
    }
    __syncthreads();
    if (tid < F && lane_ok) {
      ACC s = 0;
      for (int w = 0; w < (TR + warpSize - 1) / warpSize; ++w) s += wred[w][tid];
      dw_publish<REDUCE, TW, ACC>(a, ep, split_stride, lane0, tid / (X * Y), (tid / X) % Y, tid % X, s);
    }
  } else {  // TG lanes per warp row: fold the position-threads of a warp with shuffles, then sum across warps
    __shared__ ACC red[(TG * TR + 31) / 32][TG * VEC];
    const int wlane = tid % warpSize, warp = tid / warpSize;
#pragma unroll
    for (int f = 0; f < TAPS; ++f) {
      if (f < F) {
#pragma unroll
        for (int q = 0; q < VEC; ++q)
          for (int o = TG; o < warpSize; o <<= 1) acc[f][q] += kf_shfl_xor(acc[f][q], o);
      }
    }
    const int warps = (THREADS_ + warpSize - 1) / warpSize;
    const int lane = blockIdx.x * (TG * VEC) + tid;  // the lane thread tid publishes (tid < TG*VEC)
#pragma unroll
    for (int f = 0; f < TAPS; ++f) {
      if (f >= F) break;
      if (wlane < TG) {
#pragma unroll
        for (int q = 0; q < VEC; ++q) red[warp][wlane * VEC + q] = acc[f][q];
      }
      __syncthreads();
      if (tid < TG * VEC && lane < lanes_total) {
        ACC s = 0;
        for (int w = 0; w < warps; ++w) s += red[w][tid];
        dw_publish<REDUCE, TW, ACC>(a, ep, split_stride, lane, f / (X * Y), (f / X) % Y, f % X, s);
      }
      __syncthreads();
    }
  }
}
