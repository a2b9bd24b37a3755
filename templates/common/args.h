// kernel-factory kernel ABI: the argument structs every kernel takes by value, as its first parameters.
// Each struct is filled in one place in Python (named below) and packed by factory/abi.py as a
// ctypes.Structure of the same fields in the same order; tests/test_catalog.py compares the two field by
// field (name, pointer / int / float, order). Pointers come first, so no field needs padding: the layout
// is the same under the host's and the device compilers' rules. A kernel's own extra arguments follow
// the struct(s) as plain parameters (its template says which). Include before any #define: the field
// names are plain identifiers.
#pragma once

// A convolution: its three tensors and geometry (factory/ops/conv/__init__.py: kernel_args).
// Pointers are named by the convolution tensor, whichever the op reads or writes (cast in the kernel).
struct kf_conv_args {
  void* in;   // input activation  (N, G, C, Di, Hi, Wi)
  void* out;  // output activation (N, G, K, Do, Ho, Wo)
  void* wei;  // weight            (G, K, C, Z, Y, X)
  int N, G, C, K;  // C and K per group
  int Di, Hi, Wi;  // input size (1 for missing dimensions)
  int Do, Ho, Wo;  // output size
  int Z, Y, X;     // filter size
  int sd, sh, sw;  // stride
  int pd, ph, pw;  // padding
  int dd, dh, dw;  // dilation
  // Element strides, logical order.
  int in_n, in_g, in_c, in_d, in_h, in_w;
  int out_n, out_g, out_k, out_d, out_h, out_w;
  int wei_g, wei_k, wei_c, wei_z, wei_y, wei_x;
};

// Element offset of weight (g, k, c, z, y, x).
__device__ __forceinline__ long long kf_wei_offset(const kf_conv_args& a, int g, int k, int c, int z, int y, int x) {
  return (long long)g * a.wei_g + (long long)k * a.wei_k + (long long)c * a.wei_c + (long long)z * a.wei_z +
         (long long)y * a.wei_y + (long long)x * a.wei_x;
}

// The output epilogue (factory/ops/conv/__init__.py: epilogue_args): the written value of element idx is
// alpha * computed + beta * d[idx], d holding the written tensor's shape, layout and storage type. d is
// read only when beta != 0 (otherwise it points at another buffer of the plan); integer outputs scale
// by (int)alpha and (int)beta, which are integers there. Applied by kf_epilogue_apply (common/splitk.h).
struct kf_epilogue {
  const void* d;
  float alpha, beta;
};

// The split-K finishing kernel (factory/ops/conv_bwd_weight/common.py: splitk_args): `splits` partial
// accumulators of `total` elements, `split_stride` apart in `ws`, summed into `dst`.
struct kf_splitk_args {
  const void* ws;
  void* dst;
  int total, splits, split_stride;
};

// GroupNorm backward (factory/ops/groupnorm_bwd/common.py: gn_args). Without affine parameters gamma,
// dgamma and dbeta point at other buffers and are never touched.
struct kf_gn_args {
  const void* x;
  const void* dy;
  const float* mean;  // (N, G)
  const float* rstd;  // (N, G)
  const void* gamma;  // (C)
  void* dx;
  void* dgamma;
  void* dbeta;
  float* ws;  // the family's workspace (may be unused)
  int N, C, G, D, S;  // D = C / G channels per group, S spatial elements per channel
  int affine;
  float inv_m;  // 1 / (D * S)
};

// How the streaming GroupNorm kernels tile a problem (factory/ops/groupnorm_bwd/stream.py: tiles_args).
struct kf_gn_tiles {
  int lanes, rows;  // block = lanes x rows threads
  int chunk, splits, tiles;
};

// The fused depthwise-separable forward (factory/ops/dwsep_conv_fwd/fused.py: dwsep_args). Activations
// are (N, C, D, H, W) or channels-last (N, D, H, W, C) as the template is compiled; the depthwise weight is
// (C, Z, Y, X), the pointwise one (K, C). An absent bias points at another buffer and is never read.
struct kf_dwsep_args {
  const void* in;
  const void* wdw;
  const void* wpw;
  const void* bdw;  // (C), read when bias_dw
  const void* bpw;  // (K), read when bias_pw
  void* out;
  int N, C, K;
  int Di, Hi, Wi;  // input size (1 for missing dimensions)
  int Do, Ho, Wo;  // output size
  int pd, ph, pw;  // padding (both sides)
  int bias_dw, bias_pw;  // 0 or 1
  int act_dw, act_pw;    // 0 none, 1 relu, 2 relu6
};
