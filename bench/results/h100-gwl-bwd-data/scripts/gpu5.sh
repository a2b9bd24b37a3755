source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off
python3 -m compileall -q factory .site > /dev/null 2>&1
kf() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
mkdir -p /tmp/r; nvidia-smi --query-gpu=name,driver_version --format=csv > /tmp/r/gpu.txt
timeout 120 python3 -m pytest -m gpu -q tests/test_gpu_gwl_bwd_data_random.py -s > /tmp/r/gpu_random.log 2>&1
timeout 100 python3 -m pytest -m gpu -q tests/test_gpu_conv_bwd_data.py -k gwl -s > /tmp/r/gpu_every_instance.log 2>&1
t() { name=$1; shift; timeout 75 python3 scripts/time_instances.py conv_bwd_data "$@" --per-family --show 4 > /tmp/r/t_$name.log 2>&1; }
t s2_ngchw_g10 NGCHW bf16 "N=32,G=10,C=32,K=32,input=81x66,filter=3x3,stride=2,pad=1"
t s2_gnhwc_g50 GNHWC fp16 "N=64,G=50,C=16,K=16,input=28x80,filter=3x3,stride=2,pad=1"
t s2_nhwgc_c8 NHWGC fp16 "N=128,G=10,C=8,K=8,input=40x40,filter=3x3,stride=2,pad=1"
t s2_nhwgc_rx NHWGC bf16 "N=32,G=32,C=16,K=16,input=56x56,filter=3x3,stride=2,pad=1"
t s1_s3_nhwgc NHWGC fp16 "N=32,G=32,C=32,K=32,input=14x14,filter=3x3,pad=1"
kf db import shipped/sm_90.json --db /tmp/r/ship.sqlite > /tmp/r/import.log 2>&1
timeout 120 python3 -c 'import sys; from factory.cli import main; sys.exit(main())' db verify --changed --op conv_bwd_data --db /tmp/r/ship.sqlite > /tmp/r/verify_changed.log 2>&1
python3 scripts/ship_winners.py --db /tmp/r/ship.sqlite --arch sm_90 --out /tmp/r/sm_90.json > /tmp/r/ship.log 2>&1
cd /tmp/r && tar czf $OUT/r5.tgz . && tail -n 2 gpu_random.log gpu_every_instance.log verify_changed.log ship.log
