"""Backend selection. Everything outside this package reaches a GPU runtime through here."""

from __future__ import annotations

import os
from typing import Callable, Sequence

from .base import Backend, BackendError, BackendKind, CompiledBinary, CompileError, DeviceInfo

BACKEND_ENV = "KFACTORY_BACKEND"


def compiler_for(kind: BackendKind) -> Callable[[str, str, Sequence[str]], CompiledBinary]:
    """The device-free compile function of a backend (picklable, for worker processes)."""
    if kind is BackendKind.CUDA:
        from .cuda import compile_cuda

        return compile_cuda
    from .hip import compile_hip

    return compile_hip


def compiler_version(kind: BackendKind) -> str:
    if kind is BackendKind.CUDA:
        from .cuda import nvrtc_version

        return nvrtc_version()
    from .hip import hiprtc_version

    return hiprtc_version()


_ACTIVE: dict[tuple[BackendKind, int], Backend] = {}


def get_backend(kind: BackendKind | str | None = None, device: int = 0) -> Backend:
    """The backend for `kind` (default: $KFACTORY_BACKEND, else whichever runtime finds a GPU)."""
    if isinstance(kind, str):
        kind = BackendKind(kind)
    if kind is None and os.environ.get(BACKEND_ENV):
        kind = BackendKind(os.environ[BACKEND_ENV])
    kinds = [kind] if kind is not None else [BackendKind.CUDA, BackendKind.HIP]
    errors = []
    for k in kinds:
        if (k, device) in _ACTIVE:
            return _ACTIVE[(k, device)]
        try:
            backend = _construct(k, device)
        except BackendError as exc:
            errors.append(f"{k.value}: {exc}")
            continue
        _ACTIVE[(k, device)] = backend
        return backend
    raise BackendError("no usable GPU runtime: " + "; ".join(errors))


def device_count(kind: BackendKind | str | None = None) -> int:
    """How many GPUs the runtime for `kind` sees (default: $KFACTORY_BACKEND, else the first that finds one)."""
    if isinstance(kind, str):
        kind = BackendKind(kind)
    if kind is None and os.environ.get(BACKEND_ENV):
        kind = BackendKind(os.environ[BACKEND_ENV])
    errors = []
    for k in [kind] if kind is not None else [BackendKind.CUDA, BackendKind.HIP]:
        try:
            if k is BackendKind.CUDA:
                from .cuda import device_count as count
            else:
                from .hip import device_count as count
            found = count()
        except BackendError as exc:
            errors.append(f"{k.value}: {exc}")
            continue
        if found > 0 or kind is not None:
            return found
        errors.append(f"{k.value}: no device")
    raise BackendError("no usable GPU runtime: " + "; ".join(errors))


def _construct(kind: BackendKind, device: int) -> Backend:
    if kind is BackendKind.CUDA:
        from .cuda import CudaBackend

        return CudaBackend(device)
    from .hip import HipBackend

    return HipBackend(device)


__all__ = [
    "Backend",
    "BackendError",
    "BackendKind",
    "CompileError",
    "CompiledBinary",
    "DeviceInfo",
    "compiler_for",
    "compiler_version",
    "device_count",
    "get_backend",
]
