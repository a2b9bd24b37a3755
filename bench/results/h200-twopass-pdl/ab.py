"""twopass with kf_main launched early (programmatic dependent launch) against the same binaries launched plainly.

    python bench/results/h200-twopass-pdl/ab.py [--top K] [--held-out]

For each layer below, every twopass point (or the prior's first K) runs both ways in turns: "early" is the plan's
own launch (kf_main early; ab.txt and held_out/heldout_rule.txt ran under a rule, since removed, that kept some
small grids plain: twopass.starts_early() of commit 626fa2f),
"plain" the backend's launch_early replaced by launch_prepared, so the sources and binaries are the same. Device events,
L2 flushed before each call, median of 20 after 5 warm-up calls, three turns each way; PyTorch timed in the run.
"""

from __future__ import annotations

import argparse
import math
import statistics

import torch

from factory.api import SelectMode, select
from factory.backends import BackendKind
from factory.backends.cuda import CudaBackend
from factory.compile_cache import CompileJob, compile_many
from factory.device import target_for
from factory.ops import solver_for
from factory.ops.base import Role
from factory.problem import DType, Layout, Op
from factory.selector import lookup
from factory.sources import source_of
from time_instances import TORCH_DTYPES, timed

LAYERS = [
    ("NHWGC", "fp16", "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1"),
    ("NHWGC", "bf16", "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1"),
    ("NHWGC", "bf16", "N=16,C=1152,K=192,input=7x7,filter=3x3,pad=1"),
    ("NHWGC", "fp16", "N=8,C=2048,K=512,input=16x16,filter=3x3,pad=1"),
    ("NHWGC", "fp16", "N=32,C=768,K=768,input=14x14,filter=7x7,pad=3"),
    ("NHWGC", "fp16", "N=16,C=472,K=248,input=19x19,filter=3x3,pad=1,bias_pw=1,act_dw=relu6"),
    ("NGCHW", "fp16", "N=32,C=320,K=320,input=14x14,filter=5x5,pad=2"),
    ("NGCHW", "bf16", "N=8,C=96,K=40,input=28x28,filter=3x3,stride=2,pad=1"),
    ("NHWGC", "fp16", "N=4,C=256,K=256,input=500,filter=7,pad=3"),
]
# Layers that rule was not fitted on: five of §97's held-out wide-C layers, three small grids.
HELD_OUT = [
    ("NHWGC", "fp16", "N=32,C=960,K=160,input=7x7,filter=5x5,pad=2"),
    ("NHWGC", "bf16", "N=64,C=672,K=112,input=14x14,filter=5x5,pad=2"),
    ("NGCHW", "fp16", "N=16,C=576,K=576,input=14x14,filter=3x3,pad=1"),
    ("NHWGC", "bf16", "N=128,C=480,K=80,input=14x14,filter=3x3,pad=1"),
    ("NHWGC", "fp16", "N=64,C=384,K=384,input=28x28,filter=7x7,pad=3"),
    ("NHWGC", "fp16", "N=1,C=960,K=160,input=7x7,filter=5x5,pad=2"),
    ("NHWGC", "bf16", "N=2,C=512,K=512,input=14x14,filter=3x3,pad=1"),
    ("NGCHW", "fp16", "N=4,C=640,K=256,input=10x10,filter=3x3,pad=1"),
]
PLAIN, EARLY = CudaBackend.launch_prepared, CudaBackend.launch_early


def one_layer(layout: str, dtype: str, spec: str, top: int, flush: torch.Tensor) -> list[float]:
    solver = solver_for(Op.DWSEP_CONV_FWD)
    problem = solver.parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
    target = target_for(select(problem, mode=SelectMode.HEURISTIC).backend.device_info())
    candidates = [c for c in lookup(problem, target=target) if c.family == "twopass"]
    candidates.sort(key=lambda c: -solver.heuristic_score(c.family, c.params, problem, target))
    candidates = candidates[:top] if top else candidates
    arch = select(problem, mode=SelectMode.FORCE, instance=candidates[0].name).backend.device_info().arch
    compile_many(BackendKind.CUDA, [CompileJob(c.name, source_of(c).text, c.compile_arch(arch)) for c in candidates])
    tensors = {}
    for s in solver.tensors(problem):
        t = torch.empty(s.shape, dtype=TORCH_DTYPES[s.scalar.numpy_name], device="cuda")
        t.uniform_(-1, 1)
        tensors[s.name] = t
    inputs = {s.name: tensors[s.name] for s in solver.tensors(problem) if s.role is Role.INPUT}
    theirs = timed(solver.torch_baseline(problem, inputs).run, flush)
    print(f"=== {layout} {dtype} {spec}\nPyTorch {theirs:.1f} us", flush=True)
    rows = []
    for c in candidates:
        kernel = select(problem, mode=SelectMode.FORCE, instance=c.name)
        runs: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(3):
            for early in (False, True):
                CudaBackend.launch_early = EARLY if early else (lambda self, *a, **k: PLAIN(self, *a, **k))
                runs[early].append(timed(lambda: kernel.run(**tensors), flush))
        plain, early = statistics.median(runs[False]), statistics.median(runs[True])
        rows.append((early, plain, c.name))
    CudaBackend.launch_early = EARLY
    for early, plain, name in sorted(rows)[:12]:
        print(f"  plain {plain:8.1f} us  early {early:8.1f} us  {plain / early:5.3f}x  {theirs / early:5.2f}x PyTorch  {name}")
    ratios = [plain / early for early, plain, _ in rows]
    best_plain, best_early = min(p for _, p, _ in rows), min(e for e, _, _ in rows)
    print(f"best plain {best_plain:.1f} us, best early {best_early:.1f} us ({best_plain / best_early:.3f}x; "
          f"{theirs / best_plain:.2f}x -> {theirs / best_early:.2f}x PyTorch); every point {len(rows)}: "
          f"{math.exp(statistics.fmean(map(math.log, ratios))):.3f}x geomean, {min(ratios):.3f}-{max(ratios):.3f}x", flush=True)
    return [best_plain / best_early]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int, default=24, help="the prior's first K twopass points a layer (0: all)")
    parser.add_argument("--held-out", action="store_true", help="the HELD_OUT layers instead of LAYERS")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    best = [r for layer in (HELD_OUT if args.held_out else LAYERS) for r in one_layer(*layer, args.top, flush)]
    print(f"best early / best plain over {len(best)} layers: {math.exp(statistics.fmean(map(math.log, best))):.3f}x geomean")


if __name__ == "__main__":
    main()
