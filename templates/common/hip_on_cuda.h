// HIP spellings on CUDA (NVRTC): included by prelude.h when compiling for NVIDIA GPUs.
#pragma once
#include <cuda_fp16.h>
#define KF_CUDA 1
#define KF_HAVE_STDINT 1
typedef signed char int8_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#define hipThreadIdx_x threadIdx.x
#define hipThreadIdx_y threadIdx.y
#define hipBlockIdx_x blockIdx.x
#define hipBlockIdx_y blockIdx.y
#define hipBlockIdx_z blockIdx.z
#define hipBlockDim_x blockDim.x
#define hipGridDim_x gridDim.x
#ifndef __forceinline__
#define __forceinline__ __inline__ __attribute__((always_inline))
#endif
