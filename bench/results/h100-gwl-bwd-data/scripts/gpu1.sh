source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off
python3 -m compileall -q factory .site > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
t() { name=$1; shift; timeout 150 python3 scripts/time_instances.py conv_bwd_data "$@" --per-family --show 6 > $OUT/t_$name.log 2>&1; }
t s3_nhwgc_fp16 NHWGC fp16 "N=32,G=32,C=32,K=32,input=14x14,filter=3x3,pad=1"
t s3_nhwgc_bf16 NHWGC bf16 "N=32,G=32,C=32,K=32,input=14x14,filter=3x3,pad=1"
t s3_ngchw_fp16 NGCHW fp16 "N=32,G=32,C=32,K=32,input=14x14,filter=3x3,pad=1"
t s2_nhwgc_fp16 NHWGC fp16 "N=32,G=32,C=16,K=16,input=28x28,filter=3x3,pad=1"
t gw24_nhwgc_fp16 NHWGC fp16 "N=32,G=14,C=24,K=24,input=28x28,filter=3x3,pad=1"
t g8c64_nhwgc_bf16 NHWGC bf16 "N=16,G=8,C=64,K=64,input=28x28,filter=3x3,pad=1"
t d1_nhwgc_fp16 NHWGC fp16 "N=8,G=16,C=32,K=32,input=500,filter=7,pad=3"
t s3_nhwgc_fp32 NHWGC fp32 "N=32,G=32,C=32,K=32,input=14x14,filter=3x3,pad=1"
timeout 200 python3 -m pytest -m gpu -q -x tests/test_gpu_gwl_bwd_data_random.py -s > $OUT/random.log 2>&1
timeout 200 python3 -m pytest -m gpu -q tests/test_gpu_conv_bwd_data.py -k gwl -s > $OUT/every.log 2>&1
tail -3 $OUT/*.log
