// kernel-factory prelude: one spelling of the device language for hiprtc, hipcc and NVRTC.
// Kernels are written in HIP C++; on NVIDIA this header maps the few HIP-only spellings to CUDA.
#pragma once
#if defined(__HIPCC_RTC__)
  // hiprtc: the HIP runtime header and the fp16 types are predefined.
  #define KF_HIP 1
#elif defined(__HIP__) || defined(__HIP_PLATFORM_AMD__)
  #include <hip/hip_runtime.h>
  #include <hip/hip_fp16.h>
  #define KF_HAVE_STDINT 1
  #define KF_HIP 1
#else
  #include "hip_on_cuda.h"
#endif

typedef __half f16_t;
#ifndef KF_HAVE_STDINT
typedef signed char int8_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#endif

// bf16 as raw bits with round-to-nearest-even conversion: portable across all three compilers.
struct bf16_t { unsigned short bits; };

__device__ __forceinline__ float kf_to_float(float x) { return x; }
__device__ __forceinline__ float kf_to_float(f16_t x) { return __half2float(x); }
__device__ __forceinline__ float kf_to_float(bf16_t x) { return __uint_as_float(((unsigned int)x.bits) << 16); }
__device__ __forceinline__ int kf_to_int(int8_t x) { return (int)x; }
__device__ __forceinline__ int kf_to_int(int x) { return x; }

template <typename T> __device__ __forceinline__ T kf_from_float(float x);
template <> __device__ __forceinline__ float kf_from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ f16_t kf_from_float<f16_t>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ bf16_t kf_from_float<bf16_t>(float x) {
  unsigned int u = __float_as_uint(x);
  bf16_t r;
  if ((u & 0x7fffffffu) > 0x7f800000u) { r.bits = 0x7fc0; return r; }  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  r.bits = (unsigned short)(u >> 16);
  return r;
}

// Accumulator <-> storage conversions used by the templates: ACC is float or int.
template <typename ACC, typename T> __device__ __forceinline__ ACC kf_load_acc(T x);
template <> __device__ __forceinline__ float kf_load_acc<float, float>(float x) { return x; }
template <> __device__ __forceinline__ float kf_load_acc<float, f16_t>(f16_t x) { return kf_to_float(x); }
template <> __device__ __forceinline__ float kf_load_acc<float, bf16_t>(bf16_t x) { return kf_to_float(x); }
template <> __device__ __forceinline__ int kf_load_acc<int, int8_t>(int8_t x) { return (int)x; }
template <> __device__ __forceinline__ int kf_load_acc<int, int>(int x) { return x; }

template <typename T, typename ACC> __device__ __forceinline__ T kf_store_acc(ACC x);
template <> __device__ __forceinline__ float kf_store_acc<float, float>(float x) { return x; }
template <> __device__ __forceinline__ f16_t kf_store_acc<f16_t, float>(float x) { return kf_from_float<f16_t>(x); }
template <> __device__ __forceinline__ bf16_t kf_store_acc<bf16_t, float>(float x) { return kf_from_float<bf16_t>(x); }
template <> __device__ __forceinline__ int kf_store_acc<int, int>(int x) { return x; }
template <> __device__ __forceinline__ int8_t kf_store_acc<int8_t, int>(int x) {  // int8_sat: saturated
  return (int8_t)(x < -128 ? -128 : x > 127 ? 127 : x);
}

// A naturally aligned vector of N elements for wide loads.
template <typename T, int N> struct alignas(sizeof(T) * N) kf_vec { T v[N]; };

// A global load through the read-only (non-coherent) cache, for data the kernel only reads. Kernels
// take their pointers from an argument struct, from which the compiler does not prove this itself
// (measured: without it every conv load is a plain ld.global, and the depthwise kernels lose 10-25 %).
template <typename T> __device__ __forceinline__ T kf_ldg(const T* p) {
#if defined(KF_CUDA)
  T v;
  if constexpr (sizeof(T) % 16 == 0 && alignof(T) >= 16) {
#pragma unroll
    for (int i = 0; i < (int)(sizeof(T) / 16); ++i)
      reinterpret_cast<uint4*>(&v)[i] = __ldg(reinterpret_cast<const uint4*>(p) + i);
  } else if constexpr (sizeof(T) == 8 && alignof(T) >= 8) {
    *reinterpret_cast<uint2*>(&v) = __ldg(reinterpret_cast<const uint2*>(p));
  } else if constexpr (sizeof(T) == 4 && alignof(T) >= 4) {
    *reinterpret_cast<unsigned int*>(&v) = __ldg(reinterpret_cast<const unsigned int*>(p));
  } else if constexpr (sizeof(T) == 2 && alignof(T) >= 2) {
    *reinterpret_cast<unsigned short*>(&v) = __ldg(reinterpret_cast<const unsigned short*>(p));
  } else if constexpr (sizeof(T) == 1) {
    *reinterpret_cast<unsigned char*>(&v) = __ldg(reinterpret_cast<const unsigned char*>(p));
  } else {
    v = *p;
  }
  return v;
#else
  return *p;
#endif
}

// Warp shuffles: 32 lanes on NVIDIA, warpSize (64 on CDNA) on AMD.
template <typename T> __device__ __forceinline__ T kf_shfl_xor(T v, int offset) {
#if defined(KF_CUDA)
  return __shfl_xor_sync(0xffffffffu, v, offset);
#else
  return __shfl_xor(v, offset);
#endif
}

// Sum over a warp; every lane gets the total.
template <typename T> __device__ __forceinline__ T kf_warp_sum(T v) {
  for (int o = warpSize / 2; o > 0; o >>= 1) v += kf_shfl_xor(v, o);
  return v;
}

// Division by a divisor fixed for the kernel's life, as a multiply and a shift (n < 2^31): the index
// arithmetic of implicit GEMM divides every element's position, and a hardware-less integer division
// costs ~20 instructions. m = floor(2^32 (2^s - d) / d) + 1 with 2^s >= d gives n / d = (hi(n m) + n) >> s.
struct kf_divider {
  unsigned int d, m, s;
  __device__ __forceinline__ void init(int divisor) {
    d = (unsigned int)divisor;
    s = 0;
    while ((1u << s) < d) ++s;
    m = (unsigned int)(((1ull << 32) * ((1ull << s) - d)) / d + 1);
  }
  __device__ __forceinline__ int div(int n) const {
    const unsigned int hi = (unsigned int)(((unsigned long long)(unsigned int)n * m) >> 32);
    return (int)((hi + (unsigned int)n) >> s);
  }
  // n / d and n % d.
  __device__ __forceinline__ int divmod(int n, int& rem) const {
    const int q = div(n);
    rem = n - q * (int)d;
    return q;
  }
};
