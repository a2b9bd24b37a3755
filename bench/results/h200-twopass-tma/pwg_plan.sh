# Run on branch prepared/tma-producer-warpgroup (commit d532705, not merged: bench/NOTES.md 97; output pwg_plan.txt): twopass `_tma` points with a producer warpgroup that
# hands its registers to the consumers (`_pwg`, setmaxnreg: 232 a consumer thread), so 128x256 tiles fit without
# spills (NVRTC: 0 bytes; a 32-thread producer caps a 9-warp block at 168 registers and 128x256 spilled 0.4-2.8
# KB). Also the producer threads now leave the kernel after issuing (the consumers synchronise on named barrier
# 1), which changes every `_tma` source: the three shipped `_tma` winners need timing again (step 3).
#   bash bench/results/h200-twopass-tma/pwg_plan.sh      (one H200 call, about 8 minutes)
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
# 1. correctness: every twopass instance against the reference, the `_tma` random test against PyTorch
timeout 300 python3 -m pytest -m gpu -q -x tests/test_gpu_dwsep_conv_fwd.py -k twopass 2>&1 | tail -3
timeout 200 python3 -m pytest -m gpu -q -x -s tests/test_gpu_dwsep_random.py -k bulk 2>&1 | tail -3
# 2. speed: every twopass point of the layers where `_tma` won (tma_vs_threads.py reads the output)
t() { echo "=== $*"; timeout 60 python3 scripts/time_instances.py dwsep_conv_fwd "$@" --family twopass --show 200 2>&1 | tail -90; }
t NHWGC fp16 "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1"
t NHWGC bf16 "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1"
t NHWGC fp16 "N=8,C=2048,K=512,input=16x16,filter=3x3,pad=1"
t NHWGC fp16 "N=32,C=768,K=768,input=14x14,filter=7x7,pad=3"
t NHWGC bf16 "N=16,C=1152,K=192,input=7x7,filter=3x3,pad=1"
# 3. the shipped `_tma` winners on the changed source (re-tuned where 1.25x slower), for shipped/sm_90.json
KF db import shipped/sm_90.json --db $OUT/ship.db > /dev/null
KF db verify --changed --op dwsep_conv_fwd --db $OUT/ship.db 2>&1 | tail -8
