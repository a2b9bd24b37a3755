"""Why the bench timed the shipped dwl winners 1.3-1.4x slower than the tuner recorded them (H200):
each row's served instance timed by the bench's own timer, before and after PyTorch's call, then with
the shared-memory carveout preference set to its maximum. Occupancy per entry printed beside."""
import statistics
import sys

import torch

from factory.api import SelectMode, select
from factory.bench.runner import make_tensors
from factory.bench.timing import CudaTimer, TimingSettings
from factory.ops import solver_for
from factory.ops.base import Launch, Role
from factory.problem import DType, Layout, Op

ROWS = [
    ("conv_bwd_weight", "NHWGC", "fp16", "N=64,G=256,C=1,K=1,input=28x28,filter=3x3,pad=1",
     "conv_bwd_weight_2d_nhwgc_fp16_dwl_t256_v4_c16_a4_b2x8_p2_k3x3s1x1d1x1_sk64_twostage"),
    ("conv_bwd_weight", "NHWGC", "bf16", "N=64,G=256,C=1,K=1,input=28x28,filter=3x3,pad=1",
     "conv_bwd_weight_2d_nhwgc_bf16_dwl_t256_v4_c16_a2_b2x8_p2_k3x3s1x1d1x1_sk64_twostage"),
    ("conv_bwd_weight", "NHWGC", "fp16", "N=32,G=256,C=1,K=1,input=2048,filter=15,pad=7",
     "conv_bwd_weight_1d_nhwgc_fp16_dwl_t256_v2_c16_a16_b1x8_p2_k15s1d1_sk64_twostage"),
    ("conv_bwd_weight", "NHWGC", "bf16", "N=64,G=576,C=1,K=1,input=14x14,filter=5x5,stride=2,pad=2", None),
    ("conv_bwd_weight", "NGCHW", "fp16", "N=64,G=256,C=1,K=1,input=28x28,filter=3x3,pad=1", None),
    ("conv_bwd_weight", "NHWGC", "fp16", "N=32,G=1,C=512,K=128,input=28x28,filter=1x1", None),
    ("conv_bwd_data", "NHWGC", "fp16", "N=1,G=1,C=64,K=64,input=32x32x32,filter=3x3x3,pad=1", None),
]


def functions(kernel):
    return {s.entry: kernel._loaded.kernel(s.entry) for s in kernel.plan.steps if isinstance(s, Launch)}


def set_carveout(kernel, percent: int) -> None:
    d = kernel.backend._driver
    for fn in functions(kernel).values():
        err, = d.cuFuncSetAttribute(fn.function, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, percent)
        assert int(err) == 0, err


def occupancy(kernel) -> str:
    d = kernel.backend._driver
    out = []
    for s in kernel.plan.steps:
        if isinstance(s, Launch):
            fn = kernel._loaded.kernel(s.entry)
            block = s.block[0] * s.block[1] * s.block[2]
            err, n = d.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn.function, block, s.shared_bytes)
            regs = d.cuFuncGetAttribute(d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, fn.function)[1]
            out.append(f"{s.entry}: block {block}, smem {s.shared_bytes}, regs {regs}, {n} blocks/SM")
    return "; ".join(out)


SEED = int(sys.argv[1]) if len(sys.argv) > 1 else 0


def main() -> None:
    torch.backends.cudnn.benchmark = True
    timer = CudaTimer(TimingSettings(reps=30, warmup=10), torch.device("cuda"))
    for op, layout, dtype, spec, name in ROWS:
        solver = solver_for(Op.parse(op))
        problem = solver.parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
        kernel = select(problem, mode=SelectMode.FORCE, instance=name) if name else select(problem, mode=SelectMode.AUTO)
        specs = list(solver.tensors(problem))
        tensors = make_tensors(specs, torch.device("cuda"), SEED)
        base = solver.torch_baseline(problem, {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT})
        ours = lambda: kernel.run(**tensors)
        row = {}
        row["fresh"] = timer(ours).median_us
        row["torch"] = timer(base.run).median_us
        row["after_torch"] = timer(ours).median_us
        set_carveout(kernel, 100)
        row["max_shared"] = timer(ours).median_us
        row["torch2"] = timer(base.run).median_us
        row["max_shared_after_torch"] = timer(ours).median_us
        set_carveout(kernel, -1)
        row["default_again"] = timer(ours).median_us
        print(f"{op} {layout} {dtype} {spec}\n  {kernel.name}\n  {occupancy(kernel)}\n  "
              + "  ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
