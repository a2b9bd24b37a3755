// Blocks of one launch meeting at a counter in global memory: each arrives once, then waits until
// `arrivals` have. The counter only grows (zeroed by the plan's memset before the launch), so the r-th
// meeting of the same blocks waits for r times their number. Sound only where every block that is waited
// for is resident: a cooperative launch (factory/ops/base.py: Launch.cooperative).
#pragma once

__device__ __forceinline__ void kf_grid_sync(unsigned int* counter, unsigned int arrivals) {
  __syncthreads();
  if (threadIdx.x == 0) {
#if defined(KF_CUDA)
    // Release: the block's writes (ordered before this thread by the barrier above) before the arrival;
    // acquire: the other blocks' writes after it. No full fence either side.
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(counter) : "memory");
    unsigned int seen;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < arrivals);
#else
    __threadfence();
    atomicAdd(counter, 1u);
    while (*reinterpret_cast<volatile unsigned int*>(counter) < arrivals) {
    }
    __threadfence();
#endif
  }
  __syncthreads();
}

// N consecutive floats (N = 1 or 4, 4N-byte aligned) that other blocks stored before a kf_grid_sync, read
// from L2: past this multiprocessor's L1, whatever it may hold of those lines.
template <int N>
__device__ __forceinline__ kf_vec<float, N> kf_load_l2(const float* p) {
  static_assert(N == 1 || N == 4, "one float or four");
  kf_vec<float, N> v;
#if defined(KF_CUDA)
  if constexpr (N == 4)
    asm volatile("ld.global.cg.v4.f32 { %0, %1, %2, %3 }, [%4];"
                 : "=f"(v.v[0]), "=f"(v.v[1]), "=f"(v.v[2]), "=f"(v.v[3]) : "l"(p));
  else
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v.v[0]) : "l"(p));
#else
  for (int i = 0; i < N; ++i) v.v[i] = reinterpret_cast<const volatile float*>(p)[i];
#endif
  return v;
}
