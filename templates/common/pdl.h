// Programmatic dependent launch (sm_90): a launch marked early_start (factory/ops/base.py: Launch) may have its
// blocks placed on the GPU while the launch before it is still running, so that the gap between two dependent
// kernels (the second launch's processing, its blocks' dispatch) overlaps the first one's last wave.
//   kf_allow_next_grid()     in the first kernel: the next launch may start once every block of this one has
//                            called it (or exited).
//   kf_wait_previous_grid()  in the early kernel, before it reads anything the previous launch writes: returns
//                            once that launch has finished and its writes are visible.
// Elsewhere (AMD, the host emulator, a plain launch) both do nothing: an early_start launch is then a plain one.
// Needs prelude.h.
#pragma once

__device__ __forceinline__ void kf_allow_next_grid() {
#if defined(KF_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void kf_wait_previous_grid() {
#if defined(KF_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
