"""On a GPU: every applicable instance matches the numpy reference on fresh random inputs."""

import pytest

from factory.device import target_for
from factory.selector import lookup
from factory.tuner import TuneSettings, tune
from gpu_problems import problems

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("problem", problems(), ids=lambda p: p.key)
def test_every_applicable_instance_matches_reference(problem, gpu_backend):
    candidates = lookup(problem, target=target_for(gpu_backend.device_info()))
    assert candidates, "no instance applies"
    measurements = tune(problem, candidates, gpu_backend, TuneSettings(reps=3, warmup=1))
    failed = [f"{m.instance}: {m.error}" for m in measurements if not m.verified]
    print(f"{problem.key}: {len(measurements) - len(failed)}/{len(measurements)} verified")
    assert not failed, "\n".join(failed)
