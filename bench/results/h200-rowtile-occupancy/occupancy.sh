# rowtile with its launch bounds asking for 2, 3 or 4 resident 256-thread blocks an SM (registers capped at
# 128, 80, 64 a thread) and its wave sized to match: every rowtile point beside PyTorch on the latency-bound
# layers of §92/§95. Run before the points existed (NOTES 96): it set the module constant RESIDENT_BLOCKS, which
# blocks_per_sm (`_o3`, `_o4`) has replaced.
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
for spec in "fp16 N=64,C=64,K=128,input=112x112,filter=3x3,pad=1" \
            "fp16 N=64,C=32,K=64,input=112x112,filter=3x3,pad=1" \
            "fp16 N=64,C=80,K=40,input=106x106,filter=3x3,pad=1" \
            "fp16 N=128,C=32,K=112,input=42x54,filter=3x3,pad=1" \
            "fp16 N=64,C=64,K=128,input=112x112,filter=3x3,stride=2,pad=1" \
            "fp16 N=128,C=16,K=32,input=88x88,filter=3x3,pad=1" \
            "fp16 N=64,C=80,K=96,input=3320,filter=21,pad=10" \
            "fp16 N=4,C=216,K=152,input=3853,filter=25,pad=12"; do
  set -- $spec
  for blocks in 2 3 4; do
    echo "=== $1 $2 blocks=$blocks"
    timeout 60 python3 -c "
import runpy, sys
import factory.ops.dwsep_conv_fwd.rowtile as rowtile
rowtile.RESIDENT_BLOCKS = $blocks
sys.argv = ['time_instances.py', 'dwsep_conv_fwd', 'NHWGC', '$1', '$2', '--family', 'rowtile', '--show', '40']
runpy.run_path('scripts/time_instances.py', run_name='__main__')" 2>&1 | tail -40
  done
done
