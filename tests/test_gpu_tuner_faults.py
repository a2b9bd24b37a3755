"""On a GPU: a tune survives a kernel that faults (illegal address) and one that never finishes.

The faulty kernels are a test-only family, `faulty`, on conv_bwd_weight's problem and tensors: the
template is tests/data/faulty/faulty.hip.j2, the instances are built here, and FaultySolver (the
conv_bwd_weight op with this family added to its list) is handed to the tuner by patching its
solver lookup and renderer for the duration of a test. Production code does not know the family.

Run on a GPU machine:  .venv/bin/python -m pytest -m gpu -s -v tests/test_gpu_tuner_faults.py
"""

from __future__ import annotations

import enum
import multiprocessing
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pytest

import factory.sources
import factory.tuner
from factory import api
from factory.backends import BackendKind
from factory.catalog import Instance
from factory.codegen import render as real_render
from factory.ops import solver_for
from factory.device import DeviceTarget
from factory.ops.base import Buf, Family, Launch, LaunchPlan, Memset
from factory.ops.conv_bwd_weight import ConvBwdWeight
from factory.problem import DType, Layout, Op, parse_conv_problem
from factory.selector import lookup
from factory.tuner import Progress, TuneSettings, tune
from tuning_db import Measurement, TuningDB

DATA = Path(__file__).parent / "data" / "faulty"
FAMILY = "faulty"
HANG_TIMEOUT_S = 3.0
PROBLEM = parse_conv_problem("N=2,G=4,C=3,K=5,input=17x17,filter=3x3,stride=2,pad=1", Layout.NHWGC, DType.FP16)
# Three worker starts (first, after the fault, after the hang), the hang's limit, and slack for
# tearing down a context whose kernel never returned.
BENCHMARK_BOUND_S = 60.0


class Fault(enum.Enum):
    OOB = "oob"
    HANG = "hang"


@dataclass(frozen=True)
class FaultyParams:
    fault: Fault

    def suffix(self) -> str:
        return self.fault.value

    def template_values(self) -> dict[str, Any]:
        return {"fault": self.fault.value}


class Faulty(Family):
    """The test-only family: its kernels read out of bounds or spin until stopped."""

    name = FAMILY
    template = "faulty.hip.j2"  # under tests/data/faulty, rendered by render_faulty
    params_type = FaultyParams
    description = "test-only: kernels that fault or hang"

    def supported_cells(self) -> frozenset:
        return solver_for(Op.CONV_BWD_WEIGHT).supported_cells()

    def why_not(self, params: FaultyParams, problem: Any, target: DeviceTarget) -> str | None:
        return None

    def template_values(self, params: FaultyParams, layout: Any, dtype: Any, ndim: int) -> dict[str, Any]:
        return params.template_values()

    def heuristic_score(self, params: FaultyParams, problem: Any, target: DeviceTarget) -> float:
        return 0.0

    def launch_plan(self, params: FaultyParams, problem: Any, target: DeviceTarget) -> LaunchPlan:
        if params.fault is Fault.OOB:
            return LaunchPlan((Launch("kf_main", (8, 1, 1), (128, 1, 1), (Buf("grad_weight"), Buf("grad_weight"))),))
        # The flag lives in the workspace; the plan zeroes it right before the kernel spins on it.
        return LaunchPlan(
            (Memset("workspace", 4, 0), Launch("kf_main", (1, 1, 1), (32, 1, 1), (Buf("grad_weight"), Buf("workspace")))),
            workspace_bytes=4,
        )


class FaultySolver(ConvBwdWeight):
    """conv_bwd_weight (tensors, reference, tolerance, its families) plus the `faulty` family."""

    family_list = ConvBwdWeight.family_list + (Faulty(),)


FAULTY_SOLVER = FaultySolver()
_TEMPLATES = jinja2.Environment(loader=jinja2.FileSystemLoader(str(DATA)), undefined=jinja2.StrictUndefined,
                                keep_trailing_newline=True)


def render_faulty(instance: Instance) -> str:
    return _TEMPLATES.get_template("faulty.hip.j2").render(name=instance.name, **instance.params.template_values())


def faulty(problem: Any, fault: Fault) -> Instance:
    return Instance(problem.op, FAMILY, problem.layout, problem.dtype, problem.ndim, FaultyParams(fault))


@pytest.fixture
def faulty_family(monkeypatch):
    """The tuner sees the `faulty` family: its solver lookup and renderer know it for this test."""
    faulty_solver_for = lambda op: FAULTY_SOLVER if op is Op.CONV_BWD_WEIGHT else solver_for(op)  # noqa: E731
    monkeypatch.setattr(factory.tuner, "solver_for", faulty_solver_for)
    monkeypatch.setattr(api, "solver_for", faulty_solver_for)  # api.tune_problem ranks the candidates
    monkeypatch.setattr(factory.sources, "render", lambda c: render_faulty(c) if c.family == FAMILY else real_render(c))
    yield
    assert multiprocessing.active_children() == [], "a worker process outlived its tune"


def candidates() -> tuple[list[Instance], list[Instance], Instance, Instance]:
    """[good, OOB, good, hang, good]: three real instances (different families where possible) and the faulty two."""
    applicable = lookup(PROBLEM)
    by_family: dict[str, Instance] = {}
    for inst in applicable:
        by_family.setdefault(inst.family, inst)
    good = list(by_family.values())[:3]
    good += [i for i in applicable if i not in good][: 3 - len(good)]
    assert len(good) == 3
    oob, hang = faulty(PROBLEM, Fault.OOB), faulty(PROBLEM, Fault.HANG)
    return [good[0], oob, good[1], hang, good[2]], good, oob, hang


def print_table(title: str, ms: list[Measurement]) -> None:
    print(f"\n{title}")
    print(f"{'instance':<72} {'µs':>9} {'verified':>8}  error")
    for m in ms:
        us = f"{m.median_us:9.2f}" if m.median_us is not None else f"{'-':>9}"
        error = (m.error or "").splitlines()[0] if m.error else ""
        print(f"{m.instance:<72} {us} {str(m.verified):>8}  {error}")


def check_fault_errors(kind: BackendKind, errors: dict[str, str | None], oob: Instance, hang: Instance) -> None:
    oob_error = errors[oob.name] or ""
    if kind is BackendKind.CUDA:
        # The fault surfaces at the synchronization after the verification launch, as a sticky error.
        assert re.fullmatch(r"launch: \w+ failed: CUDA_ERROR_ILLEGAL_ADDRESS.*\(worker restarted\)", oob_error), oob_error
    else:
        # ROCm may report the fault as a sticky error or abort the process ("Memory access fault").
        assert re.fullmatch(r"launch: .*\(worker restarted\)|worker died: .*", oob_error), oob_error
    assert errors[hang.name] == f"timeout: exceeded {HANG_TIMEOUT_S:g} s"


def settings() -> TuneSettings:
    return TuneSettings(reps=10, warmup=2, seed=7, candidate_timeout_s=HANG_TIMEOUT_S)


@pytest.mark.gpu
def test_tune_survives_a_faulting_and_a_hanging_candidate(gpu_backend, faulty_family):
    backend = gpu_backend
    cands, good, oob, hang = candidates()
    restarts: list[tuple[str, str]] = []
    stages: dict[str, float] = {}
    progress = Progress(on_stage=lambda stage, _n: stages.setdefault(stage, time.monotonic()),
                        on_worker_restart=lambda name, why: restarts.append((name, why)))
    started = time.monotonic()
    ms = tune(PROBLEM, cands, backend, settings(), progress)
    done = time.monotonic()
    print_table(f"{PROBLEM.key} on {backend.device_info().name}", ms)
    benchmark_s = done - stages["benchmark"]
    print(f"compile {stages['benchmark'] - started:.1f} s, benchmark {benchmark_s:.1f} s, restarts {len(restarts)}")

    assert [m.instance for m in ms] == [c.name for c in cands]
    by = {m.instance: m for m in ms}
    for inst in good:
        m = by[inst.name]
        assert m.verified and m.error is None and m.median_us is not None and m.median_us > 0, m
    for inst in (oob, hang):
        assert not by[inst.name].verified and by[inst.name].median_us is None
    check_fault_errors(backend.device_info().backend, {m.instance: m.error for m in ms}, oob, hang)
    assert [name for name, _ in restarts] == [oob.name, hang.name]
    winner = min((m for m in ms if m.verified), key=lambda m: m.median_us)
    assert winner.instance in {g.name for g in good}
    assert benchmark_s < BENCHMARK_BOUND_S


@pytest.mark.gpu
def test_tune_problem_stores_the_winner_and_the_failures(gpu_backend, faulty_family, monkeypatch, tmp_path):
    backend = gpu_backend
    cands, good, oob, hang = candidates()
    monkeypatch.setattr(api, "lookup", lambda problem, *_, **__: list(cands))
    db = TuningDB(str(tmp_path / "tuning.sqlite"))
    outcome = api.tune_problem(PROBLEM, backend, db, settings())

    device = backend.device_info()
    stored = [m for m, _, _ in db.measurements(PROBLEM.key, device)]
    print_table(f"stored in {tmp_path / 'tuning.sqlite'}", stored)
    by = {m.instance: m for m in stored}
    assert set(by) == {c.name for c in cands}
    assert all(by[g.name].verified and by[g.name].error is None for g in good)
    assert not by[oob.name].verified and not by[hang.name].verified
    check_fault_errors(device.backend, {m.instance: m.error for m in stored}, oob, hang)

    winner = db.best(PROBLEM.key, device)
    assert winner is not None and outcome.winner is not None
    assert winner.instance == outcome.winner.instance
    assert winner.instance == min((by[g.name] for g in good), key=lambda m: m.median_us).instance
    print(f"winner: {winner.instance} {winner.median_us:.2f} µs")


# --- without a GPU: the faulty kernels compile and launch as the tests above expect ----------------
@pytest.mark.parametrize("fault", list(Fault))
def test_faulty_kernels_compile_and_plan(fault):
    inst = faulty(PROBLEM, fault)
    source = render_faulty(inst)
    assert inst.name == f"conv_bwd_weight_2d_nhwgc_fp16_faulty_{fault.value}" and inst.name in source
    plan = FAULTY_SOLVER.launch_plan(inst.family, inst.params, PROBLEM)
    launch = plan.steps[-1]
    assert isinstance(launch, Launch) and launch.entry == "kf_main" and len(launch.args) == 2
    if fault is Fault.HANG:
        assert plan.steps[0] == Memset("workspace", 4, 0) and plan.workspace_bytes == 4
        assert "volatile" in source and "while (*flag == 0u)" in source
    from factory.backends.cuda import compile_cuda, cuda_include_dir

    if cuda_include_dir() is None:
        pytest.skip("no CUDA headers for NVRTC")
    binary = compile_cuda(source, "sm_90")
    assert binary.binary.startswith(b"\x7fELF")
    # The conv solver's own families still go through the wrapper unchanged.
    real = lookup(PROBLEM)[0]
    assert FAULTY_SOLVER.launch_plan(real.family, real.params, PROBLEM) == solver_for(PROBLEM.op).launch_plan(real.family, real.params, PROBLEM)
