source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off
python3 -m compileall -q factory .site > /dev/null 2>&1
kf() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
mkdir -p /tmp/r; nvidia-smi --query-gpu=name,driver_version --format=csv > /tmp/r/gpu.txt
kf db import shipped/sm_90.json --db /tmp/r/ship.sqlite > /tmp/r/import.log 2>&1
start=$(date +%s)
while read -r line; do
  echo "== $line" >> /tmp/r/retune.log
  timeout 60 bash -c "python3 -c 'import sys; from factory.cli import main; sys.exit(main())' tune --db /tmp/r/ship.sqlite --reps 20 $line" >> /tmp/r/retune.log 2>&1
  echo "rc=$? t=$(( $(date +%s) - start ))" >> /tmp/r/retune.log
  [ $(( $(date +%s) - start )) -gt 230 ] && break
done < build/s56/shipped_gwl_strided_problems.txt
python3 scripts/ship_winners.py --db /tmp/r/ship.sqlite --arch sm_90 --out /tmp/r/sm_90.json > /tmp/r/ship.log 2>&1
cd /tmp/r && gzip -9 retune.log && tar czf $OUT/r6.tgz gpu.txt import.log retune.log.gz ship.log sm_90.json && cat ship.log
