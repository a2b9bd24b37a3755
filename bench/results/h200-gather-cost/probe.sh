# What the implicit gather costs backward-data's wgmma main loop: each dense stride-1 layer timed beside the
# 1x1 layer with the same GEMM (M = positions, N = C, reduction = K x taps), which `pw` and `wgmma` serve as
# plain row matrices with no gather (time_instances: events, L2 flushed, median of 20; cuDNN in the same run),
# and torch.matmul of the GEMM.
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
t() { echo "=== $*"; timeout 150 python3 scripts/time_instances.py conv_bwd_data NHWGC "$@" --per-family --show 4 2>&1 | tail -14; }
t fp16 "N=1,G=1,C=64,K=64,input=32x32x32,filter=3x3x3,pad=1x1x1" --family wgmma
t fp16 "N=1,G=1,C=64,K=1728,input=32x32x32,filter=1x1x1"
t fp16 "N=32,G=1,C=256,K=256,input=14x14,filter=3x3,pad=1x1" --family wgmma
t fp16 "N=32,G=1,C=256,K=2304,input=14x14,filter=1x1"
python3 - <<'PY'
import statistics, torch
def timed(fn, reps=30):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(5): fn()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.zero_(); s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) * 1000)
    return statistics.median(ts)
for M, N, K in ((32768, 64, 1728), (6272, 256, 2304)):
    a = torch.randn(M, K, dtype=torch.float16, device="cuda"); b = torch.randn(K, N, dtype=torch.float16, device="cuda")
    us = timed(lambda: a @ b)
    print(f"torch.matmul M={M} N={N} K={K}: {us:.1f} us, {2 * M * N * K / us / 1e6:.0f} TFLOP/s")
PY
