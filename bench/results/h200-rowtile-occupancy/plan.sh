# rowtile's blocks-an-SM points (`_o3`, `_o4`) on the H200: every rowtile point on the GPU-test problems and
# 231 random-shape runs against PyTorch, then the fresh suite (seed 65) tuned in full with them in the catalog.
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_dwsep_conv_fwd.py -k rowtile \
  tests/test_gpu_dwsep_random.py::test_rowtile_matches_pytorch_on_random_shapes 2>&1 | tail -8 | tee $OUT/verify.txt
bash bench/results/h200-rowtile/scripts/gpu_bench.sh fresh 330
