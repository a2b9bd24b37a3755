# Prepared, not yet run (the device time ran out): twopass kf_depthwise with its launch bounds asking for 3 or 4
# blocks an SM (registers capped), the heuristic's first six twopass points of mnv1_b1024 timed at each.
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
T=templates/dwsep_conv_fwd/twopass.hip.j2
for b in 0 3 4; do
  [ $b != 0 ] && sed -i "s/__launch_bounds__({{ depthwise_threads }}[^)]*)/__launch_bounds__({{ depthwise_threads }}, $b)/" $T
  echo "=== blocks $b: $(grep -c "__launch_bounds__({{ depthwise_threads }}, $b)" $T)"
  timeout 25 python3 scripts/time_instances.py dwsep_conv_fwd NHWGC fp16 "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1" --family twopass --top 6 --show 6 2>&1 | tail -7
done
