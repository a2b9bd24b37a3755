# Every rowtile point beside PyTorch on layers drawn for the window rule's check (32 <= C <= 64, taps <= 9;
# none of them among plan.sh's eight): is a window point ahead of its family's best plain point?
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
for spec in "bf16 N=16,C=32,K=176,input=73x73,filter=3x3,pad=2,dilation=2" \
            "bf16 N=16,C=56,K=80,input=39x39,filter=3x3,stride=2,pad=1" \
            "fp16 N=16,C=40,K=168,input=60x60,filter=3x3,stride=2,pad=1" \
            "fp16 N=64,C=32,K=16,input=112x112,filter=3x3,pad=1" \
            "fp16 N=32,C=48,K=96,input=80x80,filter=3x3,pad=1" \
            "bf16 N=8,C=64,K=168,input=7x11x23,filter=3x1x1,pad=1x0x0" \
            "fp16 N=32,C=64,K=64,input=56x56,filter=3x3,pad=1" \
            "fp16 N=16,C=32,K=64,input=150x150,filter=3x3,stride=2,pad=1"; do
  set -- $spec
  echo "=== $1 $2"
  timeout 60 python3 scripts/time_instances.py dwsep_conv_fwd NHWGC $1 "$2" --family rowtile --show 40 2>&1 | tail -40
done
