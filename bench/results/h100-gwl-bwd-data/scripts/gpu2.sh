source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off
python3 -m compileall -q factory .site > /dev/null 2>&1
mkdir -p /tmp/r; nvidia-smi --query-gpu=name,driver_version --format=csv > /tmp/r/gpu.txt
t() { name=$1; shift; timeout 120 python3 scripts/time_instances.py conv_bwd_data "$@" > /tmp/r/$name.log 2>&1; }
S3="N=32,G=32,C=32,K=32,input=14x14,filter=3x3,pad=1"
t t_s3_nhwgc_fp16 NHWGC fp16 $S3 --per-family --show 6
t t_s3_nhwgc_bf16 NHWGC bf16 $S3 --per-family --show 6
t t_s3_nhwgc_fp32 NHWGC fp32 $S3 --per-family --show 6
t p01 NHWGC fp16 $S3 --family gwl --show 1000
t p02 NHWGC bf16 "N=32,G=32,C=16,K=16,input=28x28,filter=3x3,pad=1" --family gwl --show 1000
t p03 NHWGC fp16 "N=32,G=14,C=24,K=24,input=28x28,filter=3x3,pad=1" --family gwl --show 1000
t p04 NHWGC fp16 "N=16,G=8,C=64,K=64,input=28x28,filter=3x3,pad=1" --family gwl --show 1000
t p05 NHWGC fp16 "N=8,G=16,C=32,K=32,input=500,filter=7,pad=3" --family gwl --show 1000
t p06 GNHWC fp16 "N=32,G=64,C=8,K=8,input=28x28,filter=3x3,pad=1" --family gwl --show 1000
t p07 NHWGC fp32 "N=16,G=16,C=16,K=16,input=20x20,filter=3x3,pad=1" --family gwl --show 1000
t p08 NGCHW bf16 "N=64,G=32,C=16,K=16,input=14x14,filter=3x3,pad=1" --family gwl --show 1000
t p09 NHWGC fp16 "N=8,G=8,C=16,K=32,input=30x30,filter=5x5,pad=2" --family gwl --show 1000
t p10 NHWGC fp16 "N=2,G=4,C=32,K=32,input=9x9,filter=3x3,pad=1" --family gwl --show 1000
t p11 NHWGC bf16 "N=16,G=44,C=8,K=8,input=105x17,filter=3x3,pad=1" --family gwl --show 1000
t p12 GNHWC bf16 "N=4,G=6,C=48,K=24,input=33x45,filter=7x7,pad=3" --family gwl --show 1000
cd /tmp/r && tar czf $OUT/r2.tgz . && grep -h "best of each" -A4 t_*.log
