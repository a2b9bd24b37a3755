"""Where a large convolution reference computes: numpy on the host, or the same float64 formula through
PyTorch on the tuner's CUDA GPU.

A tune computes its reference once, on the host, in float64; for a large convolution that is most of the
tune (measured on the H100: 24-33 s of a 50-60 s tune of a 205 MB depthwise backward-weight problem, numpy's
einsum running one tap after another on one core). Only the tuner turns the GPU on
(`device_references`), only for problems of at least MIN_DEVICE_MACS multiply-adds, and only where PyTorch
with CUDA is importable; anything else, and any error there, computes in numpy, which stays the definition
(tests/test_reference_device.py checks that the two agree).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Any, Callable, Iterator

import numpy as np

MIN_DEVICE_MACS = 100_000_000  # below this numpy takes well under a second; importing torch would not pay

_ORDINAL: contextvars.ContextVar[int | None] = contextvars.ContextVar("kfactory_reference_ordinal", default=None)


@contextlib.contextmanager
def device_references(ordinal: int | None) -> Iterator[None]:
    """Within the block, large references may compute on CUDA device `ordinal` (None: on the host)."""
    token = _ORDINAL.set(ordinal)
    try:
        yield
    finally:
        _ORDINAL.reset(token)


def prefetch(ordinal: int | None, macs: int) -> None:
    """Start importing PyTorch and its CUDA runtime on a thread when a reference of `macs` multiply-adds on
    device `ordinal` will want them: the import (seconds) then overlaps the drawing of the inputs."""
    if ordinal is not None and macs >= MIN_DEVICE_MACS:
        threading.Thread(target=_import_torch, name="kfactory-torch-import", daemon=True).start()


def _import_torch() -> None:
    try:
        import torch

        torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - reference_device says no device when it is asked
        pass


def reference_device(macs: int) -> Any | None:
    """The torch device a float64 reference of `macs` multiply-adds computes on, or None for numpy."""
    ordinal = _ORDINAL.get()
    if ordinal is None or macs < MIN_DEVICE_MACS:
        return None
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or ordinal >= torch.cuda.device_count():
        return None
    return torch.device("cuda", ordinal)


def computed_on_device(macs: int, dtype: np.dtype, compute: Callable[[Any], np.ndarray]) -> np.ndarray | None:
    """compute(device) for a float64 reference of `macs` multiply-adds when reference_device names a device;
    None, for numpy to compute it, otherwise or when that fails (out of GPU memory, say)."""
    device = reference_device(macs) if dtype == np.float64 else None
    if device is None:
        return None
    try:
        return compute(device)
    except RuntimeError:
        return None


def to_device(array: np.ndarray, device: Any) -> Any:
    """A host array as a torch tensor on `device`, in its own layout: a transposed view (a physical layout
    seen in logical order) travels as one copy of its buffer instead of being made contiguous on the host,
    one core at a time, first."""
    import torch

    if any(stride < 0 for stride in array.strides) or not array.flags.writeable:
        array = np.ascontiguousarray(array) if array.flags.writeable else array.copy()
    return torch.from_numpy(array).to(device)
