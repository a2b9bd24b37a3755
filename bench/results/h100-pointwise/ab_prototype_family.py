"""A/B: the prototype kernel against the pw family's instance of the same tile, same process, resnet_1x1."""
import ctypes, statistics, sys
sys.path.insert(0, "build")
import torch
import pw_proto as P
from factory.api import SelectMode, select
from factory.ops import solver_for
from factory.problem import DType, Layout, Op
from factory.backends.cuda import CudaBackend

be = CudaBackend(0)
cfg = (64, 128, 64, 6, 2, 0, 1)
_, _, binary, _, _ = P.build(("f16", [cfg]))
kern = be.load(binary, P.kname(cfg)); fin = be.load(binary, "fin_partials")
N, H, C, K = 32, 28, 512, 128
R = N * H * H
x = torch.randn(R, C, device="cuda", dtype=torch.float16); dy = torch.randn(R, K, device="cuda", dtype=torch.float16)
out = torch.empty(K, C, device="cuda", dtype=torch.float16)
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
stream = torch.cuda.current_stream().cuda_stream
def timed(fn, reps=40):
    for _ in range(5): fn()
    torch.cuda.synchronize(); ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.zero_(); torch.cuda._sleep(300_000); s.record(); fn(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1000)
    return statistics.median(ts)
splits = 16; rps = -(-(-(-R // splits)) // 64) * 64
ws = torch.empty(splits * K * C, device="cuda", dtype=torch.float32)
prep = be.prepare_args([ctypes.c_uint64(dy.data_ptr()), ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(ws.data_ptr()), ctypes.c_uint64(out.data_ptr()),
                        ctypes.c_int(R), ctypes.c_int(K), ctypes.c_int(C), ctypes.c_longlong(K), ctypes.c_longlong(C), ctypes.c_int(rps)])
fprep = be.prepare_args([ctypes.c_uint64(ws.data_ptr()), ctypes.c_uint64(out.data_ptr()), ctypes.c_int(K * C), ctypes.c_int(splits)])
tiles = (K // 64) * (C // 128)
main = lambda: be.launch_prepared(kern, (tiles, splits, 1), (128, 1, 1), prep, P.smem_bytes(cfg), stream)
finl = lambda: be.launch_prepared(fin, (-(-K * C // 256), 1, 1), (256, 1, 1), fprep, 0, stream)
def both(): main(); finl()
problem = solver_for(Op("conv_bwd_weight")).parse_problem(f"N={N},G=1,C={C},K={K},input={H}x{H},filter=1x1", Layout.NHWGC, DType.FP16)
k = select(problem, mode=SelectMode.FORCE, instance="conv_bwd_weight_2d_nhwgc_fp16_pw_b64x128x64_p6_v8x8_sk16_twostage")
t = {"input": x.view(N, H, H, C), "grad_output": dy.view(N, H, H, K), "grad_weight": out.view(K, 1, 1, C)}
specs = {s.name: s.shape for s in k.specs.values()}; print(specs)
t = {n: t[n].reshape(specs[n]) for n in specs}
fam = lambda: k.run(**t)
for rnd in range(0 if len(sys.argv) > 1 else 2):
    print(f"proto main {timed(main):.1f}  proto main+fin {timed(both):.1f}  family plan {timed(fam):.1f}", flush=True)
if len(sys.argv) > 1:
    for _ in range(2): main(); finl(); fam()
    torch.cuda.synchronize()
