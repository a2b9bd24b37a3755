# ncu on the main kernel of one instance: summary sections and the hottest SASS lines
set -u
spec=$1; name=$2; variant=${3:-stock}; tag=${4:-a}
ncu --kernel-name kf_main --launch-skip 2 --launch-count 1 --set full --import-source no \
    -o build/$tag -f python3 exp/run_one.py "$spec" "$name" "$variant" > build/$tag.ncu.log 2>&1
tail -3 build/$tag.ncu.log
ncu --import build/$tag.ncu-rep --page details --print-units base 2>&1 | grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Executed Ipc|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Stall|L1/TEX Hit|L2 Hit|Theoretical Occ|Block Limit|Waves" | head -40
ncu --import build/$tag.ncu-rep --page source --csv --print-source sass 2>/dev/null > build/$tag.sass.csv
python3 - build/$tag.sass.csv <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
if not rows: sys.exit("no source rows")
keys = list(rows[0].keys())
print("columns:", [k for k in keys][:30])
def num(r, k):
    try: return float(r.get(k, "0").replace(",", "") or 0)
    except ValueError: return 0.0
ie = next((k for k in keys if k.startswith("Instructions Executed")), None)
ws = next((k for k in keys if k.startswith("Warp Stall Sampling (All")), None)
tot_ie = sum(num(r, ie) for r in rows); tot_ws = sum(num(r, ws) for r in rows)
print(f"total warp instructions {tot_ie:.0f}, stall samples {tot_ws:.0f}")
top = sorted(rows, key=lambda r: -num(r, ws))[:40]
for r in top:
    print(f"{num(r, ws)/tot_ws*100:5.1f}% samp {num(r, ie):9.0f} ex  {r.get('Address','')} {r.get('Source','')[:110]}")
PY
