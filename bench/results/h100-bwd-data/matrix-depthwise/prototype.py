"""Prototype: depthwise backward-data (NGCHW, stride 1, dilation 1) on mma.sync, each plane as Toeplitz GEMMs.

dIn[hi, wi] = sum_y sum_x dOut[hi + ph - y, wi + pw - x] * W[y, x]. For a tile of 16 dIn rows x 8 dIn columns
and a tap row y, that is A (16 x 16: the dOut rows hi + ph - y, 16 dOut columns) times B (16 x 8: the banded
Toeplitz matrix of W's row y, B[k][n] = W[y][n - k + FX - 1]). A warp takes the planes of one group in turn:
the plane is copied 16 bytes a load into a pitched, zero-bordered buffer in shared memory, A comes in by
ldmatrix (rows outside the plane point at a zero line), B is built once a warp from the group's weights.

    python prototype.py OUT.json            (on the GPU; compiles with the factory's NVRTC backend)
"""
import ctypes, json, statistics, sys, time

import torch

SRC = r'''
typedef unsigned short u16;
#define PLANE (HO * WO)
#define HL (FX - 1 - PW)
#define MT ((HI + 15) / 16)
#define NT ((WI + 7) / 8)
#define PITCH_RAW ((8 * (NT - 1) + 16) > (HL + WO) ? (8 * (NT - 1) + 16) : (HL + WO))
#define PITCH (((PITCH_RAW + 7) / 8) * 8)
#define BUF (HO * PITCH + 8)
#define LP (PLANE / 8 + 2)                    // 16-byte line slots a plane
#define SLOTS ((DEPTH * LP + 31) / 32)         // line slots a lane
#define OBUF (((HI * WI + 16) + 7) / 8 * 8)    // a dIn plane staged as it lies in memory (shifted to its 16-byte phase)
struct __align__(16) L16 { unsigned v[4]; };

__device__ __forceinline__ unsigned saddr(const void* p) {
  unsigned a; asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p)); return a; }
__device__ __forceinline__ L16 ldg16(const L16* p) {
  L16 r; asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.v[0]), "=r"(r.v[1]), "=r"(r.v[2]), "=r"(r.v[3]) : "l"(p));
  return r; }
__device__ __forceinline__ u16 cvt_out(float v) { u16 h;
#if BF16
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
#else
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
#endif
  return h; }

// Block: group blockIdx.x, images n0 .. n0 + WARPS * DEPTH - 1; warp w takes DEPTH of them, all loaded at once
// (the lanes' line slots run over the DEPTH planes' lines), placed into DEPTH buffers, then computed in turn.
extern "C" __global__ void __launch_bounds__(WARPS * 32) dwm(const L16* __restrict__ dout, const u16* __restrict__ w,
                                                             u16* __restrict__ din, int N, int G) {
  __shared__ __align__(16) u16 bufs[WARPS][DEPTH][BUF];
  __shared__ __align__(16) u16 obufs[WARPS][OBUF];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = blockIdx.x, nfirst = blockIdx.y * WARPS * DEPTH + warp * DEPTH;
  L16 v[SLOTS];
#pragma unroll
  for (int t = 0; t < SLOTS; ++t) {
    const int s = lane + 32 * t, d = s / LP, li = s - d * LP;
    if (d < DEPTH && nfirst + d < N) {
      const long long base = ((long long)(nfirst + d) * G + g) * PLANE, l0 = base >> 3;
      if (li <= (int)(((base + PLANE - 1) >> 3) - l0)) v[t] = ldg16(dout + l0 + li);
    }
  }
  u16* buf = &bufs[warp][0][0];
  for (int i = lane; i < DEPTH * BUF / 2; i += 32) reinterpret_cast<unsigned*>(buf)[i] = 0;
  unsigned b[FY][2];
#pragma unroll
  for (int y = 0; y < FY; ++y)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      unsigned word = 0;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = (lane % 4) * 2 + h + 8 * r, x = lane / 4 - k + FX - 1;
        const unsigned val = (x >= 0 && x < FX) ? w[(g * FY + y) * FX + x] : 0u;
        word |= val << (16 * h);
      }
      b[y][r] = word;
    }
  __syncwarp();
  // Place: a line's first element at (r, c) by one division, the rest by stepping.
#pragma unroll
  for (int t = 0; t < SLOTS; ++t) {
    const int s = lane + 32 * t, d = s / LP, li = s - d * LP;
    if (d < DEPTH && nfirst + d < N) {
      const long long base = ((long long)(nfirst + d) * G + g) * PLANE;
      int e = (int)(((base >> 3) << 3) - base) + li * 8;
      const int ep = e < 0 ? 0 : e;
      int r = ep / WO, c = ep - r * WO;
      u16* at = buf + d * BUF + r * PITCH + c + HL;
#pragma unroll
      for (int j = 0; j < 8; ++j, ++e) {
        if ((unsigned)e < (unsigned)PLANE) {
          *at = (u16)(v[t].v[j / 2] >> (16 * (j % 2)));
          ++at;
          if (++c == WO) c = 0, at += PITCH - WO;
        }
      }
    }
  }
  __syncwarp();
  const unsigned szero = saddr(bufs[warp][DEPTH - 1] + HO * PITCH);  // the last buffer's spare line: zeros
  const int lr = (lane & 7) + ((lane >> 3) & 1) * 8, lk = (lane >> 4) * 8;
#pragma unroll 1
  for (int d = 0; d < DEPTH; ++d) {
    const int n = nfirst + d;
    if (n >= N) break;
    const unsigned sbuf = saddr(buf + d * BUF);
    const long long obase = ((long long)n * G + g) * (HI * WI);
    const int phase = (int)(obase & 7);
    u16* staged = obufs[warp] + phase;
#pragma unroll 1
    for (int i = 0; i < MT; ++i) {
      unsigned addr[FY], step[FY];
#pragma unroll
      for (int y = 0; y < FY; ++y) {
        const int o = 16 * i + lr + PH - y;
        const bool in = o >= 0 && o < HO;
        addr[y] = in ? sbuf + (o * PITCH + lk) * 2 : szero;
        step[y] = in ? 16 : 0;
      }
#pragma unroll UNROLL_J
      for (int j = 0; j < NT; ++j) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int y = 0; y < FY; ++y) {
          unsigned a0, a1, a2, a3;
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                       : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(addr[y] + step[y] * j));
#if BF16
          asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
#else
          asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
#endif
                       : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b[y][0]), "r"(b[y][1]));
        }
        const int r0 = 16 * i + lane / 4, c = 8 * j + (lane % 4) * 2;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = r0 + 8 * h;
          if (r < HI && c < WI) staged[r * WI + c] = cvt_out(acc[2 * h]);
          if (r < HI && c + 1 < WI) staged[r * WI + c + 1] = cvt_out(acc[2 * h + 1]);
        }
      }
    }
    __syncwarp();
    // Write back: whole 16-byte lines where the plane covers them, the partial first and last by element.
    const int lines = (phase + HI * WI + 7) / 8;
    L16* out_lines = reinterpret_cast<L16*>(din) + (obase >> 3);
    for (int li = lane; li < lines; li += 32) {
      const int e0 = li * 8 - phase;
      if (e0 >= 0 && e0 + 8 <= HI * WI) {
        out_lines[li] = *reinterpret_cast<const L16*>(obufs[warp] + li * 8);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (e0 + j >= 0 && e0 + j < HI * WI) din[obase + e0 + j] = obufs[warp][li * 8 + j];
      }
    }
    __syncwarp();
  }
}
'''

PROBLEMS = [  # N, G, H (= W), filter, pad
    (64, 512, 14, 3, 1), (64, 384, 14, 7, 3), (64, 192, 28, 7, 3), (64, 192, 28, 3, 1), (64, 768, 7, 7, 3),
    (64, 960, 7, 3, 1), (32, 256, 13, 5, 2), (16, 128, 27, 7, 3),
]
CONFIGS = [(1, 4), (2, 2), (2, 4), (4, 2), (4, 4), (2, 8), (4, 8), (8, 1), (8, 2)]  # warps a block, planes a warp


def timed(fn, flush, reps=30):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.zero_()
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1000)
    return statistics.median(ts)


def main():
    from factory.backends.cuda import CudaBackend, compile_cuda
    be = CudaBackend(0)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    torch.backends.cudnn.benchmark = True
    results = []
    only = tuple(int(x) for x in sys.argv[2].split(",")) if len(sys.argv) > 2 else None  # H,F,warps,depth (for ncu)
    for dt in ("fp16",) if only else ("fp16", "bf16"):
        tdt = torch.float16 if dt == "fp16" else torch.bfloat16
        for N, G, H, F, P in PROBLEMS if dt == "fp16" else PROBLEMS[:2]:
            if only and (H, F) != only[:2]:
                continue
            dout = torch.randn(N, G, H, H, device="cuda", dtype=tdt)
            wt = torch.randn(G, 1, F, F, device="cuda", dtype=tdt)
            ref = torch.nn.grad.conv2d_input((N, G, H, H), wt.float(), dout.float(), padding=P, groups=G)
            din = torch.empty(N, G, H, H, device="cuda", dtype=tdt)
            cudnn = 0.0 if only else timed(lambda: torch.ops.aten.convolution_backward(dout, din, wt, None, [1, 1], [P, P], [1, 1], False,
                                                                     [0, 0], G, [True, False, False]), flush)
            floor = 2 * N * G * H * H * 2 / 3.0e6
            row = dict(dtype=dt, N=N, G=G, H=H, filter=F, pad=P, floor_us=round(floor, 2), cudnn_us=round(cudnn, 2), configs=[])
            for warps, nb in [only[2:]] if only else CONFIGS:
                if (nb * (H * H // 8 + 2) + 31) // 32 > 12:  # line slots a lane
                    continue
                defs = f"#define HO {H}\n#define WO {H}\n#define HI {H}\n#define WI {H}\n#define FY {F}\n#define FX {F}\n" \
                       f"#define PH {P}\n#define PW {P}\n#define WARPS {warps}\n#define DEPTH {nb}\n#define BF16 {int(dt == 'bf16')}\n" \
                       f"#define UNROLL_J {1 if H > 28 else 4}\n"
                t0 = time.time()
                try:
                    binary = compile_cuda(defs + SRC, "sm_90")
                except Exception as error:  # a buffer over 48 KB of static shared memory
                    print(f"w{warps} nb{nb}: {str(error).splitlines()[-1][:100]}")
                    continue
                kern = be.load(binary.binary, "dwm")
                args = be.prepare_args([ctypes.c_uint64(dout.data_ptr()), ctypes.c_uint64(wt.data_ptr()),
                                        ctypes.c_uint64(din.data_ptr()), ctypes.c_int(N), ctypes.c_int(G)])
                grid = (G, -(-N // (warps * nb)), 1)
                run = lambda: be.launch_prepared(kern, grid, (warps * 32, 1, 1), args, 0, stream)
                din.fill_(float("nan"))
                run(); torch.cuda.synchronize()
                err = ((din.float() - ref).norm() / ref.norm()).item()
                us = timed(run, flush) if err < 1e-2 else None
                row["configs"].append(dict(warps=warps, nb=nb, err=err, us=us and round(us, 2)))
                print(f"{dt} N={N} G={G} {H}x{H} {F}x{F} w{warps} nb{nb}: err {err:.1e} {us and round(us, 2)} us "
                      f"(cuDNN {cudnn:.2f}, floor {floor:.2f})", flush=True)
            results.append(row)
    json.dump(results, open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
