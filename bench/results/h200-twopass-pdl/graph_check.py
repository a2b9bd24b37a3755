"""twopass with kf_main launched early, captured in a CUDA graph: the replay on new inputs gives the eager
call's bytes, and both agree with PyTorch's two calls (programmatic dependent launch inside stream capture).

    python bench/results/h200-twopass-pdl/graph_check.py [plain]    (plain: every launch plain, for comparison)
"""

from __future__ import annotations

import sys
import traceback

import torch

from factory.backends.cuda import CudaBackend

from factory.api import SelectMode, select
from factory.device import target_for
from factory.ops import solver_for
from factory.ops.base import Role
from factory.problem import DType, Layout, Op
from factory.selector import lookup
from time_instances import TORCH_DTYPES

LAYERS = [("NHWGC", "fp16", "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1", "b64x128x64_p3_w2_st_tma"),
          ("NGCHW", "bf16", "N=8,C=96,K=40,input=28x28,filter=3x3,stride=2,pad=1", "b64x64x64_p4_w1_k")]


def main() -> None:
    if sys.argv[1:] == ["plain"]:
        CudaBackend.launch_early = CudaBackend.launch_prepared
    for layer in LAYERS:
        try:
            check(*layer)
        except Exception:  # noqa: BLE001 - each layer's own report
            traceback.print_exc()


def check(layout: str, dtype: str, spec: str, tile: str) -> None:
    solver = solver_for(Op.DWSEP_CONV_FWD)
    if True:
        problem = solver.parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
        target = target_for(select(problem, mode=SelectMode.HEURISTIC).backend.device_info())
        instance = next(i for i in lookup(problem, target=target) if f"_twopass_{tile}" in i.name)
        assert solver.families["twopass"].launch_plan(instance.params, problem, target).steps[1].early_start
        kernel = select(problem, mode=SelectMode.FORCE, instance=instance.name)
        specs = list(solver.tensors(problem))
        make = lambda: {s.name: torch.empty(s.shape, dtype=TORCH_DTYPES[s.scalar.numpy_name], device="cuda").uniform_(-1, 1)
                        for s in specs}
        tensors = make()
        # a workspace from PyTorch's capture-aware allocator (Kernel.run's own is per stream: the capture's side
        # stream would allocate one during the capture)
        workspace = torch.empty(max(kernel.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
        for _ in range(3):
            kernel.run(workspace=workspace, **tensors)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kernel.run(workspace=workspace, **tensors)
        fresh = make()
        for s in specs:
            if s.role is Role.INPUT:
                tensors[s.name].copy_(fresh[s.name])
        outputs = [s.name for s in specs if s.role is Role.OUTPUT]
        for name in outputs:
            tensors[name].fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        replayed = {n: tensors[n].clone() for n in outputs}
        for name in outputs:
            tensors[name].fill_(float("nan"))
        kernel.run(workspace=workspace, **tensors)
        torch.cuda.synchronize()
        inputs = {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT}
        baseline = solver.torch_baseline(problem, inputs)
        baseline.run()
        theirs = baseline.outputs()
        for name in outputs:
            same = torch.equal(replayed[name], tensors[name])
            ref = theirs[name].reshape(replayed[name].shape)
            err = ((replayed[name].float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            print(f"{instance.name}: graph replay {'==' if same else '!='} eager call; max error against PyTorch "
                  f"{err:.2e} of its largest output")
            assert same and err < 2e-2


if __name__ == "__main__":
    main()
