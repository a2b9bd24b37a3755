# per-kernel GPU durations (ncu) of a few Kernel.run calls of one variant
set -u
spec=$1; name=$2; variant=$3; shift 3
ncu --metrics gpu__time_duration.sum,sm__warps_launched.sum,smsp__inst_executed.sum --launch-skip 4 --launch-count 6 python3 exp/run_one.py "$spec" "$name" "$variant" "$@" 2>&1 | grep -E "kf_|memset|Memset|gpu__time|inst_executed|warps_launched|ran" | head -40
