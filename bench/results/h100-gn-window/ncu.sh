M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum
run() { ncu --cache-control none --kernel-name regex:"kf_(window|stats|dx)" --launch-skip 0 --metrics $M --csv python3 build/ncu_run.py "$@" 2>/dev/null | grep -v "^==" | python3 -c "
import csv,sys
for r in csv.DictReader(sys.stdin):
    print(r['Kernel Name'][:12], r['Metric Name'], r['Metric Value'])
"; }
for p in "NGCHW fp16 N=4,C=128,G=32,input=310x310 groupnorm_bwd_2d_ngchw_fp16_window_t512_v4_u4_r2_b4_m8" \
         "NGCHW fp16 N=4,C=128,G=32,input=310x310 groupnorm_bwd_2d_ngchw_fp16_fused_t512_v4_u4_w4_atomic" \
         "NGCHW fp16 N=4,C=128,G=32,input=310x310 groupnorm_bwd_2d_ngchw_fp16_window_t512_v8_u4_r1_b4_m8" \
         "NHWGC fp16 N=64,C=256,G=32,input=51x51 groupnorm_bwd_2d_nhwgc_fp16_window_t512_v8_u2_r4_b4_m16"; do
  echo "== $p"; run $p
done
