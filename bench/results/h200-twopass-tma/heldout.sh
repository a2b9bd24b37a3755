# Held out from the `_tma` prior's threshold (8 stages of 64 channels): every twopass point of eight wide-C layers
# of late network stages, none of them timed before (time_instances: events, L2 flushed, median of 20).
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
t() { echo "=== $*"; timeout 60 python3 scripts/time_instances.py dwsep_conv_fwd "$@" --family twopass --show 200 2>&1 | tail -80; }
t NHWGC fp16 "N=32,C=960,K=160,input=7x7,filter=5x5,pad=2"
t NHWGC bf16 "N=64,C=672,K=112,input=14x14,filter=5x5,pad=2"
t NHWGC fp16 "N=32,C=768,K=768,input=14x14,filter=7x7,pad=3"
t NHWGC bf16 "N=16,C=1152,K=192,input=7x7,filter=3x3,pad=1"
t NGCHW fp16 "N=16,C=576,K=576,input=14x14,filter=3x3,pad=1"
t NHWGC fp16 "N=8,C=2048,K=512,input=16x16,filter=3x3,pad=1"
t NHWGC bf16 "N=128,C=480,K=80,input=14x14,filter=3x3,pad=1"
t NHWGC fp16 "N=64,C=384,K=384,input=28x28,filter=7x7,pad=3"
