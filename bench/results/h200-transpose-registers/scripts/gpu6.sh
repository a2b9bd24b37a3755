#!/bin/bash
# Call 6 (H200): ncu of the two copies of the 62x62 layer (the register copy against the shared tile), then the
# public suite served from the shipped winners (--select nearest: no tuning), PyTorch in the same run.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site build/s60/old > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
SPEC="N=32,G=53,C=8,K=8,input=62x62,filter=3x3,pad=1"; INST=conv_bwd_weight_2d_ngchw_gkyxc_bf16_gwl_g4_j4_b8x16_p2_k3x3s1x1d1x1_c8k8_sk32_twostage
SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section Occupancy"
KFACTORY_SHIPPED=off timeout 35 ncu --clock-control none -k regex:kf_to_channels_last -c 1 $SECTIONS python3 scripts/profile_one.py conv_bwd_weight NGCHW_GKYXC bf16 "$SPEC" $INST > $OUT/ncu_62_new.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ncu_62_new.txt
KFACTORY_SHIPPED=off PYTHONPATH=$PWD/build/s60/old:$PYTHONPATH timeout 35 ncu --clock-control none -k regex:kf_to_channels_last -c 1 $SECTIONS python3 scripts/profile_one.py conv_bwd_weight NGCHW_GKYXC bf16 "$SPEC" $INST > $OUT/ncu_62_old.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ncu_62_old.txt
timeout 100 python3 -c 'import sys; from factory.cli import main; sys.exit(main())' bench --select nearest --reps 30 --db $OUT/empty.db --out $OUT/suite > $OUT/suite_bench.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/suite_bench.log
rm -f $OUT/empty.db* $OUT/suite/*.png
