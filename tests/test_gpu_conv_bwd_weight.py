"""On a GPU: every applicable instance of every family matches the numpy reference on fresh random inputs.

One test per (family, problem), so a family's evidence can be run alone: `pytest -m gpu -k mma ...`."""

import pytest

from factory.ops.conv_bwd_weight import SOLVER
from gpu_against_torch import check_every_instance
from gpu_problems import problems

pytestmark = pytest.mark.gpu

CASES = [(family, problem) for problem in problems() for family in sorted(SOLVER.families)]


@pytest.mark.parametrize(("family", "problem"), CASES, ids=lambda v: v if isinstance(v, str) else v.key)
def test_every_applicable_instance_matches_reference(family, problem, gpu_backend):
    check_every_instance(family, problem, gpu_backend)
