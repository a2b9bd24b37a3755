"""On a GPU: NGCHW problems served through the transposing pass (tensors copied channels-last, the main kernel,
grad_input copied back) against PyTorch, on seeded random shapes whose planes take each of the pass's kernels:
in registers with 16- and 8-byte runs of positions, and the shared tile (odd planes, channels in 8-byte runs)."""

import collections

import numpy as np
import pytest

from factory.ops import solver_for
from factory.ops.base import Launch
from factory.problem import DType, Layout, Op, parse_conv_problem
from factory.selector import lookup
from gpu_against_torch import cuda_target, run_against_pytorch

pytestmark = pytest.mark.gpu

SEED = 6060
COUNT = 60
PASS = "kf_to_channels_last"
# Planes by how they divide: whole 8-element vectors, whole 4-element ones only, odd.
PLANES = {1: ((64,), (120,), (36,), (100,), (49,), (75,)),
          2: ((8, 10), (16, 14), (14, 14), (6, 10), (7, 7), (9, 11)),
          3: ((4, 4, 6), (2, 6, 6), (3, 5, 7))}


def draw(rng: np.random.Generator):
    """One NGCHW backward problem, channels mostly in whole 8-element chunks (what most transposing points take)."""
    op = (Op.CONV_BWD_WEIGHT, Op.CONV_BWD_DATA)[int(rng.integers(2))]
    layout = (Layout.NGCHW, Layout.NGCHW_GKYXC)[int(rng.integers(2))]
    dtype = (DType.FP16, DType.BF16, DType.FP32)[int(rng.integers(3))]
    ndim = int(rng.choice([1, 2, 2, 3]))
    plane = PLANES[ndim][int(rng.integers(len(PLANES[ndim])))]
    g = int(rng.choice([1, 1, 2, 4, 8]))
    c, k = (int(rng.choice([8, 12, 16, 24, 32, 64])) for _ in range(2))
    n = int(rng.integers(1, 7))
    filt = int(rng.choice([1, 3]))
    stride = 1 if min(plane) < 6 else int(rng.choice([1, 1, 2]))
    x = "x".join
    spec = (f"N={n},G={g},C={c},K={k},input={x(map(str, plane))},filter={x([str(filt)] * ndim)},"
            f"stride={stride},pad={filt // 2}")
    return parse_conv_problem(spec, layout, dtype, op=op)


def pass_entries(problem, candidate, target) -> list[str]:
    plan = solver_for(problem.op).launch_plan(candidate.family, candidate.params, problem, target)
    return [s.entry for s in plan.steps if isinstance(s, Launch) and s.entry.startswith(PASS)]


def test_transposing_points_match_pytorch_on_random_ngchw_problems(gpu_backend):
    target = cuda_target(gpu_backend, cudnn_tf32=False)
    rng = np.random.default_rng(SEED)
    runs, entries = [], collections.Counter()
    while len({p for p, _ in runs}) < COUNT:
        problem = draw(rng)
        solver = solver_for(problem.op)
        best: dict[str, tuple[float, object]] = {}  # per family, its best-ranked transposing point
        for c in lookup(problem, target=target):
            if pass_entries(problem, c, target):
                score = solver.heuristic_score(c.family, c.params, problem, target)
                if c.family not in best or score > best[c.family][0]:
                    best[c.family] = (score, c)
        for _, c in best.values():
            runs.append((problem, c))
            entries.update(pass_entries(problem, c, target))
    ran, failures = run_against_pytorch(runs, gpu_backend, SEED)
    print(f"{ran} runs of transposing points on {COUNT} random NGCHW problems against PyTorch, "
          f"{len(failures)} failed; the pass's launches: {dict(entries)}")
    assert not failures, "\n".join(failures)
    assert all(entries[PASS + shape] >= 10 for shape in ("", "_c16s16", "_c16s8")), entries
