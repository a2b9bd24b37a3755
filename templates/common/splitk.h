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

// Second stage: sum the per-split partials of an accumulator workspace, apply the epilogue and convert
// once to TW. A block of 32 x 8 threads owns 32 outputs; its 8 rows of threads take every 8th split,
// then the rows are summed in a fixed order, so the result does not depend on scheduling.
template <typename ACC, typename TW>
__device__ __forceinline__ void kf_splitk_finalize(const kf_splitk_args& s, const kf_epilogue& ep) {
  __shared__ ACC part[8][32];
  const ACC* ws = static_cast<const ACC*>(s.ws);
  const int idx = blockIdx.x * 32 + threadIdx.x;
  ACC sum = 0;
  if (idx < s.total) {
#pragma unroll 4
    for (int k = threadIdx.y; k < s.splits; k += 8) sum += ws[(long long)k * s.split_stride + idx];
  }
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && idx < s.total) {
    ACC t = 0;
#pragma unroll
    for (int y = 0; y < 8; ++y) t += part[y][threadIdx.x];
    static_cast<TW*>(s.dst)[idx] = kf_store_acc<TW, ACC>(kf_epilogue_apply<TW, ACC>(ep, idx, t));
  }
}
