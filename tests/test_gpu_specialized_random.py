"""On a GPU: problem-specialized instances (the filter, stride and dilation compiled in for the problem at
hand) against PyTorch (cuDNN) on 60 seeded random depthwise shapes the catalogs never list.

Filters are drawn from 1-D taps 3..64 and 2-D k x l up to 13 x 13 (square and not), stride 1 or 2,
dilation 1 or 2, every layout and dtype the specializing family takes, spatial sizes that are multiples
of nothing. For each problem and each family that specializes for it (dwr; dwh on 2-D), the instance the
heuristic ranks first, the one with the fewest splits, and for dwh the best-ranked of each `ahead` run
through Kernel.run on PyTorch tensors (outputs poisoned first) and must agree with
aten.convolution_backward as `kfactory bench` requires."""

import numpy as np
import pytest

from factory.catalog import specialized_instances
from factory.ops.conv_bwd_weight import SOLVER
from factory.problem import DType, Layout, parse_conv_problem
from gpu_against_torch import assert_agree_with_pytorch, cuda_target

pytestmark = pytest.mark.gpu

SEED = 4242
COUNT = 60
DTYPES = (DType.FP16, DType.BF16, DType.BF16_FP32W, DType.FP32, DType.INT8)


def draw(rng: np.random.Generator) -> tuple[Layout, DType, str]:
    """One depthwise problem whose filter is specialized: 1-D (40 %) or 2-D (60 %)."""
    while True:
        layout = Layout(rng.choice([l.value for l in Layout]))
        dtype = DTYPES[int(rng.integers(len(DTYPES)))]
        g = int(rng.choice([3, 8, 17, 32, 64, 96, 200]))
        n = int(rng.choice([1, 2, 3, 4, 8]))
        stride = int(rng.choice([1, 1, 2]))
        dilation = int(rng.choice([1, 1, 2])) if stride == 1 else 1
        if rng.random() < 0.4:
            filt = [int(rng.integers(3, 65))]
            sizes = [int(rng.integers(max(filt[0] * dilation, 40), 3000))]
        else:
            k = int(rng.integers(2, 14))
            filt = [k, k if rng.random() < 0.7 else int(rng.integers(1, 14))]
            sizes = [int(rng.integers(max(f * dilation, 9), 80)) for f in filt]
        pad = [dilation * (f - 1) // 2 for f in filt]
        x = "x".join
        spec = (f"N={n},G={g},C=1,K=1,input={x(map(str, sizes))},filter={x(map(str, filt))},"
                f"stride={stride},pad={x(map(str, pad))},dilation={dilation}")
        return layout, dtype, spec


def problems() -> list:
    rng = np.random.default_rng(SEED)
    return [parse_conv_problem(spec, layout, dtype) for layout, dtype, spec in (draw(rng) for _ in range(COUNT))]


def test_specialized_instances_match_pytorch_on_random_shapes(gpu_backend):
    target = cuda_target(gpu_backend, cudnn_tf32=False)
    runs, missing = [], []
    for problem in problems():
        mine = [c for c in specialized_instances(problem) if c.why_not(problem, target) is None]
        if not mine:
            missing.append(problem.key)
            continue
        for family in sorted({c.family for c in mine}):
            own = [c for c in mine if c.family == family]
            score = lambda c: SOLVER.heuristic_score(c.family, c.params, problem, target)  # noqa: E731
            best = max(own, key=score)
            fewest = min(own, key=lambda c: (c.params.split_k, c.name))
            # dwh: also the best-ranked point of each way of loading ahead (ahead 0, 1, 2).
            aheads = {getattr(c.params, "ahead", None) for c in own} - {None}
            per_ahead = [max((c for c in own if c.params.ahead == n), key=score) for n in sorted(aheads)]
            runs += [(problem, c) for c in dict.fromkeys((best, fewest, *per_ahead))]
    assert not missing, f"no specialized instance applies to: {missing}"
    shapes = len({p.key for p, _ in runs})
    per_family = {f: len({p.key for p, c in runs if c.family == f}) for f in sorted({c.family for _, c in runs})}
    assert_agree_with_pytorch(runs, gpu_backend, SEED, f"specialized instances on {shapes} random shapes "
                                                       f"({per_family} shapes per family)")
    assert shapes >= 50 and per_family.get("dwh", 0) >= 25
