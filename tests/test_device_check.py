"""The device-side output check (factory/device_check.py) run on the host emulator: for every output
type it finds the largest error ratio verify.py's bound gives and counts unwritten elements, across
grid-stride loops and chunked launches; its bounds are never stricter than verify.py's."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

import factory.device_check as device_check
from factory.device_check import ENTRY, bounds, check_plan, check_source, read_result
from factory.ops.base import Role, TensorSpec, Tolerance
from factory.problem import Scalar
from factory.verify import verify
from kernel_emulator import available, compile_source, run_plan

pytestmark = pytest.mark.skipif(not available(), reason="the host emulator needs g++")

N = 5003  # odd, and more than one grid-stride pass of the 8 blocks one processor gets
TOL = Tolerance(rtol=1e-2, atol=1e-3)


class Solver:
    """Just what bounds() and verify() ask of an op: its tolerance and its tensors."""

    def __init__(self, spec: TensorSpec) -> None:
        self.spec = spec

    def tolerance(self, dtype):
        return TOL

    def tensors(self, problem):
        return [self.spec]


def as_device(values: np.ndarray, scalar: Scalar) -> np.ndarray:
    """`values` (already representable) in the output type's storage."""
    if scalar is Scalar.BF16:
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(scalar.numpy_name)


def representable(values: np.ndarray, scalar: Scalar) -> np.ndarray:
    if scalar is Scalar.BF16:
        return (values.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32).astype(np.float64)
    if scalar.is_float:
        return values.astype(scalar.numpy_name).astype(np.float64)
    return np.round(values).clip(-100, 100).astype(np.float64)


def run_check(scalar: Scalar, got: np.ndarray, ref: np.ndarray, abs_ref: np.ndarray) -> tuple[float, int]:
    spec = TensorSpec("out", got.shape, scalar, Role.OUTPUT, "X")
    want, allowed = bounds(Solver(spec), SimpleNamespace(dtype=None), spec, ref, abs_ref)
    lib = ctypes.CDLL(str(compile_source(check_source(scalar), [ENTRY], f"check_{scalar.name}")))
    buffers = {"out": as_device(got, scalar), "out.ref": want, "out.allowed": allowed,
               "check.result": np.zeros(16, dtype=np.uint8)}
    run_plan(lib, check_plan(spec, processors=1), buffers)
    return read_result(bytes(buffers["check.result"]))


def expected_ratio(got: np.ndarray, ref: np.ndarray, abs_ref: np.ndarray, scalar: Scalar) -> float:
    spec = TensorSpec("out", got.shape, scalar, Role.OUTPUT, "X")
    _, allowed = bounds(Solver(spec), SimpleNamespace(dtype=None), spec, ref, abs_ref)
    diff = np.abs(got - ref)
    if not scalar.is_float:
        return 1e300 if np.any(diff > 0) else 0.0
    return float(np.max(diff / allowed.astype(np.float64)))


@pytest.mark.parametrize("scalar", list(Scalar), ids=lambda s: s.name)
def test_the_check_finds_the_worst_element_and_the_unwritten_ones(scalar, monkeypatch):
    rng = np.random.default_rng(7)
    ref = representable(rng.normal(0, 3, N), scalar)
    abs_ref = np.abs(ref) * 2 + 0.5
    got = ref.copy()
    if scalar.is_float:
        got = representable(ref + rng.uniform(-1e-4, 1e-4, N), scalar)  # within the tolerance
    ratio, nonfinite = run_check(scalar, got, ref, abs_ref)
    assert nonfinite == 0 and ratio == pytest.approx(expected_ratio(got, ref, abs_ref, scalar), rel=1e-12)
    assert ratio <= 1.0
    bad = got.copy()
    bad[[17, N - 1]] += [0.5, 40.0]  # the last element of the last grid-stride pass is the worst
    bad = representable(bad, scalar)
    ratio, nonfinite = run_check(scalar, bad, ref, abs_ref)
    assert ratio > 1.0 and ratio == pytest.approx(expected_ratio(bad, ref, abs_ref, scalar), rel=1e-12)
    monkeypatch.setattr(device_check, "CHUNK", 1000)  # several launches, each at its offsets
    assert run_check(scalar, bad, ref, abs_ref)[0] == ratio
    if scalar.is_float:
        unwritten = got.copy()
        unwritten[[0, 2500, N - 1]] = np.nan
        assert run_check(scalar, unwritten, ref, abs_ref)[1] == 3


@pytest.mark.parametrize("scalar", [Scalar.F16, Scalar.BF16, Scalar.F32], ids=lambda s: s.name)
def test_the_device_bound_is_never_stricter_than_verify_s(scalar):
    """Elements right at verify.py's bound pass on both sides: the float32 bound is rounded up."""
    rng = np.random.default_rng(3)
    ref = representable(rng.normal(0, 1, N), scalar)
    abs_ref = np.abs(rng.normal(0, 5, N)) + 1e-3
    allowed = TOL.rtol * abs_ref + TOL.atol * np.abs(ref) + scalar.rounding_floor + 1e-30
    spec = TensorSpec("out", (N,), scalar, Role.OUTPUT, "X")
    _, single = bounds(Solver(spec), SimpleNamespace(dtype=None), spec, ref, abs_ref)
    assert np.all(single.astype(np.float64) >= allowed)
    assert np.all(single.astype(np.float64) <= allowed * (1 + 2**-22))
    got = ref + allowed * 0.999  # float64: what verify() sees of an output this close
    assert verify(Solver(spec), SimpleNamespace(dtype=None), {"out": got}, {"out": ref}, {"out": abs_ref}).ok
    assert np.all(np.abs(got - ref) <= single.astype(np.float64))


def test_the_tuner_checks_on_the_device_only_where_it_can(monkeypatch):
    import factory.tuner as tuner
    from factory.tuner import TuneSettings, device_check_for

    small = TensorSpec("out", (64,), Scalar.F16, Role.OUTPUT, "X")
    huge = TensorSpec("out", (device_check.MAX_CHECKED_ELEMENTS + 1,), Scalar.F16, Role.OUTPUT, "X")

    def bench(spec, **settings):
        return SimpleNamespace(settings=TuneSettings(**settings), specs=(spec,), solver=None, problem=None,
                               ref={}, abs_ref={}, target=SimpleNamespace(processors=1), on_device=None)

    able = SimpleNamespace(device_checks=True)
    tensors = SimpleNamespace(pointers={})
    built = []
    monkeypatch.setattr(tuner, "DeviceCheck", lambda *args: built.append(args) or "check")
    assert device_check_for(able, bench(small), tensors) == "check" and len(built) == 1
    assert device_check_for(SimpleNamespace(), bench(small), tensors) is None  # a test double: outputs read back
    assert device_check_for(able, bench(small, device_verify=False), tensors) is None
    assert device_check_for(able, bench(huge), tensors) is None
    assert len(built) == 1

    def broken(*args):
        raise RuntimeError("the output check kernel did not compile: nvrtc says no")

    monkeypatch.setattr(tuner, "DeviceCheck", broken)
    with pytest.warns(RuntimeWarning, match="checked on the host: .* nvrtc says no"):
        assert device_check_for(able, bench(small), tensors) is None


def test_a_check_that_cannot_be_set_up_gives_its_memory_back(monkeypatch):
    from factory.compile_cache import CompileOutcome
    from factory.device_check import DeviceCheck
    from fake_gpu import DEVICE

    class Memory:
        def __init__(self):
            self.live: set[int] = set()

        def device_info(self):
            return DEVICE

        def alloc(self, nbytes):
            ptr = 0x1000 * (len(self.live) + 1)
            self.live.add(ptr)
            return ptr

        def free(self, ptr):
            self.live.remove(ptr)

        def copy_to_device(self, ptr, data):
            pass

    monkeypatch.setattr(device_check, "compile_cached", lambda kind, job: CompileOutcome(job.name, None, "no", False))
    spec = TensorSpec("out", (64,), Scalar.F32, Role.OUTPUT, "X")
    memory = Memory()
    with pytest.raises(RuntimeError, match="did not compile: no"):
        DeviceCheck(memory, Solver(spec), SimpleNamespace(dtype=None), {"out": spec}, {"out": np.zeros(64)},
                    {"out": np.ones(64)}, processors=1)
    assert memory.live == set()
