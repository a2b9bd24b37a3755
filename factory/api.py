"""Public Python API: problems in, a ready Kernel out.

    from factory.api import ConvProblem, Layout, DType, lookup, select, SelectMode
    p = ConvProblem(N=32, G=32, C=4, K=4, input=(56, 56), filter=(3, 3), stride=(1, 1), pad=(1, 1),
                    dilation=(1, 1), layout=Layout.NHWGC, dtype=DType.FP16)
    lookup(p)                               # the instances that compute p
    k = select(p, mode=SelectMode.TUNE)     # tuned on this GPU once, then served from the DB
    k.run(input=x, grad_output=dy, grad_weight=dw)   # torch / CuPy tensors, on their current stream
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from . import numerics
from .backends import Backend, get_backend
from .catalog import Instance
from .codegen import render
from .compile_cache import CompileJob, compile_cached
from .executor import LoadedBinary, PreparedPlan
from .ops import solver_for
from .ops.base import TensorSpec
from .problem import ConvProblem, DType, KernelFactoryError, Layout, Op, UnsupportedProblem
from .selector import NotTuned, SelectMode, explain, forced, heuristic_pick, lookup, stored_choice
from .tuner import Progress, TuneSettings, retry_on_resume, tune
from tuning_db import Measurement, TuningDB, Winner

__all__ = [
    "ConvProblem", "DType", "Layout", "Op", "SelectMode", "Kernel", "TensorMismatch", "TuneOutcome",
    "lookup", "explain", "select", "tune_problem", "NotTuned", "UnsupportedProblem",
]


class TensorMismatch(KernelFactoryError, ValueError):
    """A tensor handed to Kernel.run has the wrong shape, strides, dtype or device."""


@dataclass(frozen=True)
class TuneOutcome:
    measurements: list[Measurement]  # one per candidate: measured now, or the stored one a resumed run kept
    winner: Winner | None
    reused: int = 0  # candidates not measured again because this device already has their measurement


def tune_problem(
    problem: Any,
    backend: Backend | None = None,
    db: TuningDB | None = None,
    settings: TuneSettings = TuneSettings(),
    progress: Progress = Progress(),
    *,
    fresh: bool = False,
    on_resume: Callable[[int, int], None] | None = None,
) -> TuneOutcome:
    """Measure every applicable instance on this GPU, storing each measurement as it is taken.

    Each measurement is its own short transaction that also offers it to the winner rule, so a
    killed tune leaves the old winner or a verified new one, never half a result. A rerun on the
    same device (arch, SM count, driver, compiler) continues: candidates measured there before are
    skipped and their stored measurements count (`on_resume(already, total)` is told). `fresh`
    re-measures everything and decides the winner from this run's times only.
    """
    backend = backend or get_backend()
    db = db or TuningDB()
    device = backend.device_info()
    candidates = lookup(problem)
    if not candidates:
        raise UnsupportedProblem(f"no instance applies to {problem.key}; `kfactory list --why` says why")
    names = frozenset(c.name for c in candidates)
    since = datetime.now(timezone.utc) if fresh else None
    stored = {} if fresh else _stored_measurements(db, problem, device, names)
    if stored and on_resume is not None:
        on_resume(len(stored), len(candidates))
    measured = tune(problem, candidates, backend, settings, _storing(progress, db, problem, device), frozenset(stored))
    winner = db.decide(problem.key, device, names, since)
    latest = stored | {m.instance: m for m in measured}
    return TuneOutcome([latest[c.name] for c in candidates if c.name in latest], winner, len(stored))


def _stored_measurements(db: TuningDB, problem: Any, device: Any, names: frozenset[str]) -> dict[str, Measurement]:
    """The latest stored measurement of each candidate on exactly this device, less environment failures
    (a cache that could not be written, a worker time limit): those candidates are measured again."""
    latest = {m.instance: m for m, _, _ in db.measurements(problem.key, device) if m.instance in names}
    return {name: m for name, m in latest.items() if not retry_on_resume(m)}


def _storing(progress: Progress, db: TuningDB, problem: Any, device: Any) -> Progress:
    """`progress` whose on_measured first commits the measurement (and the winner it may make)."""
    report = progress.on_measured

    def on_measured(m: Measurement) -> None:
        db.record(problem.key, problem.op.value, device, [m])
        if report is not None:
            report(m)

    return dataclasses.replace(progress, on_measured=on_measured)


def select(
    problem: Any,
    mode: SelectMode | str = SelectMode.AUTO,
    instance: str | None = None,
    backend: Backend | None = None,
    db: TuningDB | None = None,
) -> "Kernel":
    """A ready Kernel for `problem`; see SelectMode for where the choice comes from.

    A stored winner is served only when it was recorded on this exact device and its instance still
    computes the problem (`selector.stored_choice`); otherwise the DB counts as untuned.
    """
    mode = SelectMode(mode)
    backend = backend or get_backend()
    if mode is SelectMode.FORCE:
        if instance is None:
            raise ValueError("mode force needs instance=<name>")
        return Kernel(forced(problem, instance), problem, backend)
    candidates = lookup(problem)
    if mode is SelectMode.HEURISTIC:
        return Kernel(heuristic_pick(problem, candidates), problem, backend)
    db = db or TuningDB()
    by_name = {c.name: c for c in candidates}
    choice = stored_choice(problem, db.lookup(problem.key, backend.device_info()), candidates)
    if choice.instance is not None:
        return Kernel(choice.instance, problem, backend)
    if mode is SelectMode.DB:
        why = "".join(f"; {r.line()}" for r in choice.refusals)
        raise NotTuned(f"no tuned winner for {problem.key} on this device{why}; run `kfactory tune` or use mode=tune")
    if mode is SelectMode.TUNE:
        outcome = tune_problem(problem, backend, db)
        if outcome.winner is None or outcome.winner.instance not in by_name:
            raise NotTuned(f"tuning found no verified instance for {problem.key}")
        return Kernel(by_name[outcome.winner.instance], problem, backend)
    return Kernel(heuristic_pick(problem, candidates), problem, backend)


class Kernel:
    """One compiled instance bound to one problem; run() launches on the caller's stream."""

    def __init__(self, instance: Instance, problem: Any, backend: Backend) -> None:
        self.instance = instance
        self.problem = problem
        self.backend = backend
        self._solver = solver_for(problem.op)
        self.specs: dict[str, TensorSpec] = {s.name: s for s in self._solver.tensors(problem)}
        self.plan = self._solver.launch_plan(instance.family, instance.params, problem)
        arch = backend.device_info().arch
        outcome = compile_cached(backend.kind, CompileJob(instance.name, render(instance), arch))
        if outcome.binary is None:
            raise KernelFactoryError(f"{instance.name} failed to compile: {outcome.error}")
        self._prepared = PreparedPlan(LoadedBinary(backend, outcome.binary, {}), self.plan)
        self._workspace = backend.alloc(self.plan.workspace_bytes) if self.plan.workspace_bytes else 0
        # What run() accepts per tensor, computed once: run() sits on the caller's hot path.
        self._accepted = {name: self._accepted_layouts(name) for name in self.specs}
        self._dtypes = {name: _framework_dtype(spec) for name, spec in self.specs.items()}
        self._torch_accepted: dict[str, tuple[Any, list]] | None = None  # built on the first torch call

    @property
    def name(self) -> str:
        return self.instance.name

    @property
    def tensor_names(self) -> list[str]:
        return list(self.specs)

    def run(self, stream: int | None = None, **tensors: Any) -> None:
        """Launch on torch tensors / CuPy arrays named as `tensor_names`; checks them first.

        Accepted: a contiguous tensor of the physical shape (e.g. NHWGC -> (N, H, W, G, C)), or for
        layouts PyTorch has, the PyTorch convolution shape with that layout's strides (channels_last
        tensors for NHWGC, contiguous ones for NGCHW).
        """
        if tensors.keys() != self.specs.keys():
            missing = set(self.specs) - set(tensors)
            extra = set(tensors) - set(self.specs)
            raise TensorMismatch(f"run() takes {', '.join(self.specs)}; missing {sorted(missing)}, unexpected {sorted(extra)}")
        pointers = self._torch_fast_pointers(tensors)
        if pointers is None:
            pointers = self._checked_pointers(tensors)
        if stream is None:
            # One stream lookup per call (not per tensor): it costs microseconds on the caller's hot path.
            stream = _current_stream(next(iter(tensors.values()))) or 0
        self._enqueue(pointers, stream)

    def run_pointers(self, pointers: Mapping[str, int], stream: int = 0) -> None:
        """Launch on raw device pointers laid out as `self.specs` describes (contiguous, physical order)."""
        for name in self.specs:
            ptr = pointers.get(name)
            if not isinstance(ptr, int) or isinstance(ptr, bool) or ptr <= 0:  # True is an int, not a pointer
                raise TensorMismatch(f"{name}: needs a device pointer (a positive int)")
        self._enqueue(pointers, stream)

    def _enqueue(self, pointers: Mapping[str, int], stream: int) -> None:
        resolved = dict(pointers)
        resolved["workspace"] = self._workspace
        self._prepared.bind(resolved)
        self._prepared.enqueue(stream)

    # --- tensor checks --------------------------------------------------------------------------
    def _accepted_layouts(self, name: str) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        spec = self.specs[name]
        accepted = [(spec.shape, _contiguous_strides(spec.shape))]
        view = getattr(self._solver, "framework_view", None)
        if view is not None:
            alt = view(self.problem, name)
            if alt is not None:
                accepted.append(alt)
        return accepted

    def _checked_pointers(self, tensors: Mapping[str, Any]) -> dict[str, int]:
        """Data pointers after the full checks of every tensor; raises TensorMismatch naming the first bad one."""
        pointers: dict[str, int] = {}
        devices = set()
        for name, value in tensors.items():
            pointers[name], device = self._check_tensor(name, value)
            devices.add(device)
        if len(devices) > 1:
            raise TensorMismatch(f"tensors on different GPUs {sorted(devices)}: one kernel runs on one device")
        return pointers

    def _torch_fast_pointers(self, tensors: Mapping[str, Any]) -> dict[str, int] | None:
        """Data pointers when every tensor is a CUDA torch tensor of exactly an accepted dtype, shape and
        strides, all on one GPU: the common call, checked with a few attribute reads per tensor. None sends
        the call through `_checked_pointers`, which accepts the rest (size-1 dims with any stride, CuPy)
        and words the errors."""
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        if self._torch_accepted is None:
            self._torch_accepted = {name: (_torch_dtypes(torch)[spec.scalar.numpy_name], self._accepted[name])
                                    for name, spec in self.specs.items()}
        tensor_type = torch.Tensor
        pointers: dict[str, int] = {}
        device = None
        for name, value in tensors.items():
            dtype, accepted = self._torch_accepted[name]
            if not isinstance(value, tensor_type) or value.dtype is not dtype or not value.is_cuda:
                return None
            shape, strides = value.shape, value.stride()
            if not any(shape == s and strides == t for s, t in accepted):
                return None
            index = value.get_device()
            if device is None:
                device = index
            elif index != device:
                return None
            pointers[name] = value.data_ptr()
        return pointers

    def _check_tensor(self, name: str, value: Any) -> tuple[int, int]:
        """(data pointer, device index) of a tensor that matches the spec named `name`."""
        shape, strides, dtype_name, device, ptr = _describe(value)
        if device is None:
            raise TensorMismatch(f"{name}: must be on the GPU, got a host tensor")
        want_dtype = self._dtypes[name]
        if dtype_name not in want_dtype:
            raise TensorMismatch(f"{name}: dtype {dtype_name}, expected {' or '.join(sorted(want_dtype))}")
        accepted = self._accepted[name]
        if not any(_same_layout(shape, strides, s, t) for s, t in accepted):
            shown = " or ".join(f"shape {tuple(s)} strides {tuple(t)}" for s, t in accepted)
            raise TensorMismatch(f"{name}: shape {tuple(shape)} strides {tuple(strides)}; expected {shown}")
        return ptr, device


def _same_layout(shape, strides, want_shape, want_strides) -> bool:
    """Equal shapes and equal strides on every dim longer than 1 (a size-1 dim's stride is arbitrary)."""
    if tuple(shape) != tuple(want_shape):
        return False
    return all(n == 1 or a == b for n, a, b in zip(shape, strides, want_strides))


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _framework_dtype(spec: TensorSpec) -> set[str]:
    return {
        "float16": {"float16"},
        "bfloat16": {"bfloat16"},
        "float32": {"float32"},
        "int8": {"int8"},
        "int32": {"int32"},
    }[spec.scalar.numpy_name]


def _framework(value: Any) -> str:
    module = type(value).__module__.split(".")[0]
    if module not in ("torch", "cupy"):
        raise TensorMismatch(f"unsupported tensor type {type(value).__name__}: pass torch tensors, CuPy arrays, or use run_pointers")
    return module


def _describe(value: Any) -> tuple[tuple[int, ...], tuple[int, ...], str, int | None, int]:
    """(shape, element strides, dtype name, GPU index or None for host memory, data pointer) of a torch/CuPy array."""
    if _framework(value) == "torch":
        device = value.device
        index = (device.index or 0) if device.type == "cuda" else None
        return tuple(value.shape), tuple(value.stride()), _torch_dtype_name(value.dtype), index, value.data_ptr()
    strides = tuple(s // value.itemsize for s in value.strides)
    return tuple(value.shape), strides, str(value.dtype), int(value.device.id), int(value.data.ptr)


def _current_stream(value: Any) -> int | None:
    """The framework's current stream on the value's device (None for host memory)."""
    if _framework(value) == "torch":
        import torch

        if not value.is_cuda:
            return None
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what torch's own launchers call: ~1 µs
        if raw is not None:
            return raw(value.get_device())
        return torch.cuda.current_stream(value.device).cuda_stream
    import cupy

    return cupy.cuda.get_current_stream().ptr


@functools.lru_cache(maxsize=1)
def _torch_dtypes(torch: Any) -> dict[str, Any]:
    """numpy dtype names -> torch dtypes."""
    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
            "int8": torch.int8, "int32": torch.int32}


_TORCH_DTYPE_NAMES: dict[Any, str] = {}


def _torch_dtype_name(dtype: Any) -> str:
    name = _TORCH_DTYPE_NAMES.get(dtype)
    if name is None:
        name = _TORCH_DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name
