// Split-K: where one output element's sum goes under each reduction, and the second stage that sums
// per-split partials. Both end in the output epilogue (kf_epilogue, args.h). Needs prelude.h and args.h.
#pragma once

// The output epilogue on the final value `v` of element idx of a TW tensor: alpha * v + beta * d[idx]
// in ACC (int for integer outputs, where alpha and beta are integers: exact). The identity (alpha 1,
// beta 0) costs one uniform branch. d is read with a plain load by the thread that then writes element
// idx, and nothing else reads it, so d may be the output itself (accumulating into a gradient).
template <typename TW, typename ACC>
__device__ __forceinline__ ACC kf_epilogue_apply(const kf_epilogue& ep, long long idx, ACC v) {
  if (ep.alpha == 1.0f && ep.beta == 0.0f) return v;
  ACC r = (ACC)ep.alpha * v;
  if (ep.beta != 0.0f) r += (ACC)ep.beta * kf_load_acc<ACC, TW>(static_cast<const TW*>(ep.d)[idx]);
  return r;
}

// Store one accumulator value `v` of output element idx. REDUCE 0: the final value, through the
// epilogue `ep`, stored in the output type TW; 1: an atomic add into an accumulator buffer (ACC); 2: this
// split's slice of a workspace of per-split partials, split_stride elements apart. Under 1 and 2 `ep`
// is not used here: the finishing kernel (kf_splitk_finalize) applies it to the sum.
template <int REDUCE, typename TW, typename ACC>
__device__ __forceinline__ void kf_splitk_store(void* dst, long long idx, ACC v, int split, int split_stride,
                                                const kf_epilogue& ep) {
  if constexpr (REDUCE == 0) {
    static_cast<TW*>(dst)[idx] = kf_store_acc<TW, ACC>(kf_epilogue_apply<TW, ACC>(ep, idx, v));
  } else if constexpr (REDUCE == 1) {
    atomicAdd(static_cast<ACC*>(dst) + idx, v);
  } else {
    static_cast<ACC*>(dst)[(long long)split * split_stride + idx] = v;
  }
}

// Second stage: sum the per-split partials of an accumulator workspace (one split: the atomics' accumulator),
// apply the epilogue and convert once to TW. A thread sums V consecutive outputs, V at a time where the split
// stride allows: KF_FINALIZE_VECTOR on weights of KF_FINALIZE_WIDE_FROM outputs or more, else 1 (a small
// weight wants the blocks). With KF_FINALIZE_SPLIT_ROWS splits or more, a block of 32 x 8 threads owns 32 * V
// outputs: its 8 rows of threads take every 8th split, and the rows are summed in a fixed order. With fewer,
// each of the 256 threads sums every split of its own V outputs, so a block owns 256 * V. Either way the
// order of a sum does not depend on scheduling. (A block of 32 outputs, one a thread, whatever the splits,
// made 65,536 blocks over a 2M-element weight: 55 us on the H100 for a 24 MB pass.) The launch's grid is the
// plan's (conv_bwd_weight/common.py finalize_shape), which sizes a block's outputs by the same rules.
constexpr int KF_FINALIZE_VECTOR = {{ finalize_vector }}, KF_FINALIZE_SPLIT_ROWS = {{ finalize_split_rows }};
constexpr long long KF_FINALIZE_WIDE_FROM = {{ finalize_wide_from }};
template <typename ACC, typename TW, int V>
__device__ __forceinline__ void kf_splitk_finalize_by(const kf_splitk_args& s, const kf_epilogue& ep) {
  __shared__ ACC part[8][32 * V];
  const ACC* ws = static_cast<const ACC*>(s.ws);
  const bool rows = s.splits >= KF_FINALIZE_SPLIT_ROWS;  // the same for every thread of the launch
  const int thread = rows ? threadIdx.x : threadIdx.y * 32 + threadIdx.x;
  const long long first = ((long long)blockIdx.x * (rows ? 32 : 256) + thread) * V;
  const int k0 = rows ? threadIdx.y : 0, dk = rows ? 8 : 1;
  ACC sum[V];
#pragma unroll
  for (int j = 0; j < V; ++j) sum[j] = 0;
  if (first + V <= s.total && s.split_stride % V == 0) {
#pragma unroll 4
    for (int k = k0; k < s.splits; k += dk) {
      const kf_vec<ACC, V> v = *reinterpret_cast<const kf_vec<ACC, V>*>(ws + (long long)k * s.split_stride + first);
#pragma unroll
      for (int j = 0; j < V; ++j) sum[j] += v.v[j];
    }
  } else {
    for (int k = k0; k < s.splits; k += dk)
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (first + j < s.total) sum[j] += ws[(long long)k * s.split_stride + first + j];
  }
  if (rows) {
#pragma unroll
    for (int j = 0; j < V; ++j) part[threadIdx.y][threadIdx.x * V + j] = sum[j];
    __syncthreads();
    if (threadIdx.y != 0) return;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      ACC t = 0;
#pragma unroll
      for (int y = 0; y < 8; ++y) t += part[y][threadIdx.x * V + j];
      sum[j] = t;
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j)
    if (first + j < s.total)
      static_cast<TW*>(s.dst)[first + j] = kf_store_acc<TW, ACC>(kf_epilogue_apply<TW, ACC>(ep, first + j, sum[j]));
}

template <typename ACC, typename TW>
__device__ __forceinline__ void kf_splitk_finalize(const kf_splitk_args& s, const kf_epilogue& ep) {
  if (s.total >= KF_FINALIZE_WIDE_FROM) kf_splitk_finalize_by<ACC, TW, KF_FINALIZE_VECTOR>(s, ep);
  else kf_splitk_finalize_by<ACC, TW, 1>(s, ep);
}
{% if grid_finish %}

// The coop reduction of families whose tiles do not meet on their own (grid_finish): once every block of
// the launch has stored its split's partials (they meet at one counter: a cooperative launch, all
// resident), the launch's threads share out the outputs, each summing every split of its four consecutive
// ones in split order (the order never depends on scheduling) and storing them through the epilogue:
// kf_finalize's work, with no second launch. Reads go to L2 (kf_load_l2), past a stale L1.
template <typename ACC, typename TW, int THREADS>
__device__ __forceinline__ void kf_splitk_finish_in_grid(const kf_splitk_args& s, const kf_epilogue& ep,
                                                         unsigned int* counter) {
  static_assert(sizeof(ACC) == sizeof(float) && ACC(0.5f) != ACC(0), "fp32 partials (the families that finish here)");
  const unsigned int blocks = gridDim.x * gridDim.y * gridDim.z;
  kf_grid_sync(counter, blocks);
  const long long block = blockIdx.x + (long long)gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
  const long long stride = (long long)blocks * THREADS;
  const float* const ws = static_cast<const float*>(s.ws);
  TW* const dst = static_cast<TW*>(s.dst);
  // Four outputs a thread, one 16-byte load a split: a coop point's weight is a multiple of four elements
  // (conv_bwd_weight/common.py: grid_finish_refusal).
  for (long long first = (block * THREADS + threadIdx.x) * 4; first < s.total; first += stride * 4) {
    ACC sum[4] = {0, 0, 0, 0};
    int k = 0;
    for (; k + 4 <= s.splits; k += 4) {  // four loads in flight before any is summed
      kf_vec<float, 4> v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = kf_load_l2<4>(ws + (long long)(k + j) * s.split_stride + first);
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sum[e] += v[j].v[e];
    }
    for (; k < s.splits; ++k) {
      const kf_vec<float, 4> v = kf_load_l2<4>(ws + (long long)k * s.split_stride + first);
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[e] += v.v[e];
    }
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dst[first + e] = kf_store_acc<TW, ACC>(kf_epilogue_apply<TW, ACC>(ep, first + e, sum[e]));
  }
}
{% endif %}