#!/usr/bin/env bash
# On a GPU machine with the image's Python (numpy, jinja2, pytest, torch, cuda-bindings, NVRTC), run from
# the repository root: the GPU test suite, a tune -> query round trip through the CLI on one depthwise
# and one grouped problem, and a host/GPU profile of one GroupNorm call. Logs go to $OUT (default
# build/gpu-evidence). Wheels missing from the image may be put in .whl/ (installed into .site/).
#
#   scripts/gpu_evidence.sh [pytest args...]     # e.g. tests/test_gpu_groupnorm_bwd.py
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-evidence}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl || exit 1
  export PYTHONPATH=$PWD/.site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export KFACTORY_DB=${KFACTORY_DB:-$OUT/evidence.db} KFACTORY_CACHE_DIR=${KFACTORY_CACHE_DIR:-/tmp/kfactory-cache}
kf() { python3 -m factory.cli "$@"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/device.txt"

{
  echo "== profile: groupnorm_bwd unet_320 fp16 (heuristic pick)"
  python3 scripts/profile_one.py groupnorm_bwd NGCHW fp16 "N=4,C=320,G=32,input=32x32"
} > "$OUT/profile.txt" 2>&1
head -4 "$OUT/profile.txt"

start=$(date +%s)
python3 -m pytest -m gpu -q -rA -p no:cacheprovider "${@:-tests}" > "$OUT/pytest_gpu.log" 2>&1
echo "pytest -m gpu exit $? in $(( $(date +%s) - start )) s"
grep -E "verified|passed|failed|error" "$OUT/pytest_gpu.log" | grep -vE "^PASSED" | tail -60

{
  for args in "--layout NHWGC --dtype fp16 --problem N=32,G=32,C=1,K=1,input=56x56,filter=3x3,stride=1,pad=1,dilation=1" \
              "--layout NGCHW --dtype bf16 --problem N=8,G=8,C=16,K=16,input=28x28,filter=3x3,stride=2,pad=1"; do
    echo "== kfactory query (before) $args"; kf query --op conv_bwd_weight $args
    echo "== kfactory tune $args"; kf tune --op conv_bwd_weight $args --reps 20 | tail -n 12
    echo "== kfactory query $args"; kf query --op conv_bwd_weight $args
  done
  echo "== kfactory db stats"; kf db stats
} > "$OUT/roundtrip.txt" 2>&1
tail -n 40 "$OUT/roundtrip.txt"
