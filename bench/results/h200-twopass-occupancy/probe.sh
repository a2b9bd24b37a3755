# twopass with its kernels' launch bounds asking for more resident blocks: kf_depthwise at 3 or 4 blocks an SM,
# kf_main (the pointwise GEMM, 256 threads at 128-row tiles) at 2; the heuristic's first 8 twopass points of
# three channels-last layers timed at each (time_instances: events, L2 flushed, median of 20), and PyTorch's
# two calls split (the depthwise conv and the 1x1 as a matmul) for scale.
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
T=templates/dwsep_conv_fwd/twopass.hip.j2
cp $T /tmp/twopass.orig
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
variant() {  # $1: kf_depthwise min blocks (0: none), $2: kf_main min blocks (0: none)
  cp /tmp/twopass.orig $T
  [ $1 != 0 ] && sed -i "s/__launch_bounds__({{ depthwise_threads }})/__launch_bounds__({{ depthwise_threads }}, $1)/" $T
  [ $2 != 0 ] && sed -i "s/__launch_bounds__({{ threads }})/__launch_bounds__({{ threads }}, $2)/" $T
  grep -c "__launch_bounds__" $T > /dev/null
}
layer() {  # $1 dtype, $2 spec, $3.. variants as dw:main
  local dt=$1 spec=$2; shift 2
  for v in "$@"; do
    variant ${v%%:*} ${v##*:}
    echo "=== $dt $spec  depthwise ${v%%:*} main ${v##*:}"
    timeout 60 python3 scripts/time_instances.py dwsep_conv_fwd NHWGC $dt "$spec" --family twopass --top 8 --show 8 2>&1 | tail -9
  done
}
layer fp16 "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1" 0:0 3:0 4:0 0:2 3:2 4:2
layer bf16 "N=64,C=512,K=512,input=14x14,filter=7x7,pad=3" 0:0 0:2 3:2
layer fp16 "N=64,C=64,K=128,input=112x112,filter=3x3,pad=1" 0:0 0:2 3:2
cp /tmp/twopass.orig $T
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
torch.backends.cudnn.benchmark = True
for dt, N, C, K, H, F in ((torch.float16, 64, 1024, 1024, 7, 3), (torch.bfloat16, 64, 512, 512, 14, 7),
                          (torch.float16, 64, 64, 128, 112, 3)):
    x = torch.randn(N, C, H, H, dtype=dt, device="cuda").to(memory_format=torch.channels_last)
    wd = torch.randn(C, 1, F, F, dtype=dt, device="cuda")
    wp = torch.randn(K, C, 1, 1, dtype=dt, device="cuda")
    mid = torch.nn.functional.conv2d(x, wd, padding=F // 2, groups=C)
    a = torch.randn(N * H * H, C, dtype=dt, device="cuda"); b = torch.randn(K, C, dtype=dt, device="cuda")
    dw = timed(lambda: torch.nn.functional.conv2d(x, wd, padding=F // 2, groups=C))
    pw = timed(lambda: torch.nn.functional.conv2d(mid, wp))
    mm = timed(lambda: a @ b.t())
    both = timed(lambda: torch.nn.functional.conv2d(torch.nn.functional.conv2d(x, wd, padding=F // 2, groups=C), wp))
    fl = 2 * N * H * H * C * K
    print(f"torch {dt} N={N} C={C} K={K} {H}x{H} {F}x{F}: depthwise {dw:.1f} us, pointwise conv {pw:.1f} us, "
          f"matmul {mm:.1f} us ({fl / mm / 1e6:.0f} TFLOP/s), both {both:.1f} us")
PY
