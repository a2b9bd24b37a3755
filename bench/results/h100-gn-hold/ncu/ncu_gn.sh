set -u
for dt in fp16 bf16; do
  inst=groupnorm_bwd_2d_ngchw_${dt}_group_t512_v8_u4_per_sample_hold
  ncu --kernel-name kf_group --launch-skip 5 --launch-count 1 --set full --import-source no -o build/gn_$dt -f \
      python3 scripts/profile_one.py groupnorm_bwd ngchw $dt "N=32,C=256,G=32,input=56x56" $inst > build/gn_$dt.log 2>&1
  echo "== $dt"; grep "GPU time" build/gn_$dt.log
  ncu --import build/gn_$dt.ncu-rep --page details --print-units base 2>&1 | grep -E "^ +(Duration|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Executed Ipc A|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Theoretical Occ|Dynamic Shared|Block Limit Sh|Block Limit Reg|Executed Instructions  )" | head -30
  ncu --import build/gn_$dt.ncu-rep --page source --csv --print-source sass 2>/dev/null > build/gn_$dt.sass.csv
  python3 - build/gn_$dt.sass.csv <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keys = list(rows[0].keys())
def num(r, k):
    try: return float(r.get(k, "0").replace(",", "") or 0)
    except ValueError: return 0.0
ie = next((k for k in keys if k.startswith("Instructions Executed")), None)
ws = next((k for k in keys if k.startswith("Warp Stall Sampling (All")), None)
tot_ie = sum(num(r, ie) for r in rows); tot_ws = sum(num(r, ws) for r in rows)
print(f"total warp instructions {tot_ie:.0f}, stall samples {tot_ws:.0f}")
for r in sorted(rows, key=lambda r: -num(r, ws))[:16]:
    print(f"{num(r, ws)/tot_ws*100:5.1f}% {num(r, ie):9.0f} {r.get('Source','')[:90]}")
PY
done
cp build/gn_*.ncu-rep $OUT/ 2>/dev/null; true
