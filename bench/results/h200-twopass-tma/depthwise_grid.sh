# kf_depthwise's grid on short planes: mnv1_b1024's blocks each take one block of 8 strips after copying
# their 32 chunks' weights into shared memory. Fewer blocks an SM (each looping over more strips) or smaller
# groups of chunks amortize the copy; the heuristic's first 6 twopass points timed at each setting.
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
for spec in "fp16 N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1" "bf16 N=64,C=512,K=512,input=14x14,filter=7x7,pad=3"; do
  for setting in "8 32" "4 32" "2 32" "8 16"; do
    set -- $setting
    echo "=== $spec  blocks an SM $1, group chunks $2"
    timeout 40 python3 -c "
import runpy, sys
import factory.ops.dwsep_conv_fwd.twopass as t
t.DEPTHWISE_BLOCKS_PER_SM = $1
t.GROUP_CHUNKS = $2
sys.argv = ['time_instances.py', 'dwsep_conv_fwd', 'NHWGC', '${spec%% *}', '${spec#* }', '--family', 'twopass', '--top', '6', '--show', '3']
runpy.run_path('scripts/time_instances.py', run_name='__main__')" 2>&1 | tail -4
  done
done
