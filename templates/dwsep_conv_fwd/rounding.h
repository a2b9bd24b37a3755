// One rounding to the operand type. bf16 on NVIDIA sm_80+ by the hardware's round-to-nearest-even
// (one cvt; the portable kf_from_float tests for NaN and rounds by hand, about six instructions): the
// same bits for every number, and a NaN stays a NaN.
template <typename U> __device__ __forceinline__ U round_to(float x) { return kf_from_float<U>(x); }
#if defined(KF_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
template <> __device__ __forceinline__ bf16_t round_to<bf16_t>(float x) {
  bf16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
  return r;
}
#endif
template <typename U> struct IsBf16 { static constexpr bool value = false; };
template <> struct IsBf16<bf16_t> { static constexpr bool value = true; };

// An activation as a clamp to [lo, hi] (none: +-inf; relu: 0, inf; relu6: 0, 6): two instructions,
// no branches per element.
struct Clamp {
  float lo, hi;
  __device__ __forceinline__ explicit Clamp(int act)
      : lo(act == 0 ? -__uint_as_float(0x7f800000u) : 0.0f), hi(act == 2 ? 6.0f : __uint_as_float(0x7f800000u)) {}
  __device__ __forceinline__ float operator()(float v) const { return fminf(fmaxf(v, lo), hi); }
};
