"""One run each of the best dwv and dwl points on mnv1_dw3 (NHWGC fp16), for ncu to profile kf_main."""
import torch

from factory.api import SelectMode, select
from factory.bench.runner import make_tensors
from factory.ops import solver_for
from factory.problem import DType, Layout, Op

SPEC = "N=64,G=256,C=1,K=1,input=28x28,filter=3x3,pad=1"
NAMES = ["conv_bwd_weight_2d_nhwgc_fp16_dwv_t256_v1_c16_r4x32_a2_k3x3s1x1d1x1_sk16_twostage",
         "conv_bwd_weight_2d_nhwgc_fp16_dwl_t256_v4_c16_a2_b2x8_p2_k3x3s1x1d1x1_sk64_twostage"]

solver = solver_for(Op.CONV_BWD_WEIGHT)
problem = solver.parse_problem(SPEC, Layout.NHWGC, DType.FP16)
tensors = make_tensors(list(solver.tensors(problem)), torch.device("cuda"), 0)
for name in NAMES:
    kernel = select(problem, mode=SelectMode.FORCE, instance=name)
    kernel.run(**tensors)
    torch.cuda.synchronize()
    print(name, flush=True)
