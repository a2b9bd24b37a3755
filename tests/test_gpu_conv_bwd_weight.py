"""On a GPU: every applicable instance of every family matches the numpy reference on fresh random inputs.

One test per (family, problem), so a family's evidence can be run alone: `pytest -m gpu -k mma ...`."""

import pytest

from factory.device import target_for
from factory.ops.conv_bwd_weight import SOLVER
from factory.selector import lookup
from factory.tuner import TuneSettings, tune
from gpu_problems import problems

pytestmark = pytest.mark.gpu

CASES = [(family, problem) for problem in problems() for family in sorted(SOLVER.families)]


@pytest.mark.parametrize(("family", "problem"), CASES, ids=lambda v: v if isinstance(v, str) else v.key)
def test_every_applicable_instance_matches_reference(family, problem, gpu_backend):
    everything = lookup(problem, target=target_for(gpu_backend.device_info()))
    assert everything, "no instance applies"
    candidates = [i for i in everything if i.family == family]
    if not candidates:
        pytest.skip(f"no {family} instance applies")
    measurements = tune(problem, candidates, gpu_backend, TuneSettings(reps=3, warmup=1))
    failed = [f"{m.instance}: {m.error}" for m in measurements if not m.verified]
    print(f"{family} {problem.key}: {len(measurements) - len(failed)}/{len(measurements)} verified")
    assert not failed, "\n".join(failed)
