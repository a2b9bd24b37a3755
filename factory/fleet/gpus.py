"""Where a worker's GPU comes from, and which GPUs `kfactory worker --gpus` names.

Production workers use the backend of the GPU their process sees (`factory.backends`), one per
process through CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES. Tests run workers on tests/fake_gpu.py's
FakeGPU instead: $KFACTORY_FLEET_GPU=module:attribute names a callable returning a GpuSource (the
module importable by the worker process), the same way tests hand tune_problem a backend object.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Protocol

from ..backends import Backend, DeviceInfo
from ..problem import KernelFactoryError

GPU_SOURCE_ENV = "KFACTORY_FLEET_GPU"
VISIBLE_DEVICE_ENVS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


class FleetError(KernelFactoryError):
    """A fleet command's input is unusable (a bad --gpus, problem file or device); one line for the CLI."""


class GpuSource(Protocol):
    """The GPU of a worker process: its identity, and a backend ready to tune a problem on it."""

    def device(self) -> DeviceInfo: ...

    def backend(self, problem: Any) -> Backend: ...

    def count(self) -> int: ...


class LocalGpu:
    """The GPU this process sees, through the runtime `factory.backends` picks."""

    def device(self) -> DeviceInfo:
        return self.backend(None).device_info()

    def backend(self, problem: Any) -> Backend:
        from ..backends import get_backend

        return get_backend()

    def count(self) -> int:
        from ..backends import device_count

        return device_count()


def gpu_source() -> GpuSource:
    """LocalGpu, unless $KFACTORY_FLEET_GPU names another source (tests)."""
    named = os.environ.get(GPU_SOURCE_ENV, "").strip()
    if not named:
        return LocalGpu()
    module, _, attribute = named.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attribute or "gpu_source")
    except (ImportError, AttributeError) as exc:
        raise FleetError(f"{GPU_SOURCE_ENV}={named!r}: {exc}") from None
    return factory()


def parse_gpus(text: str, source: GpuSource | None = None) -> list[str]:
    """`all` (every GPU the runtime sees) or a comma-separated list of device ordinals, repeats allowed
    (`0,0`: two workers sharing GPU 0)."""
    value = text.strip().lower()
    if value == "all":
        count = (source or gpu_source()).count()
        if count < 1:
            raise FleetError("--gpus all: no GPU found")
        return [str(i) for i in range(count)]
    gpus = [part.strip() for part in value.split(",")]
    if not gpus or not all(part.isdigit() for part in gpus):
        raise FleetError(f"--gpus must be 'all' or device numbers like 0,1,3 (got {text!r})")
    return [str(int(part)) for part in gpus]


def visible(gpu: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that shows a worker process only GPU `gpu` (as its device 0).

    `gpu` counts the GPUs this process sees: under an inherited CUDA_VISIBLE_DEVICES (a SLURM
    allocation sets one) ordinal 1 of "2,3" is physical GPU 3.
    """
    environ = dict(os.environ) if environ is None else environ
    shown: dict[str, str] = {}
    for name in VISIBLE_DEVICE_ENVS:
        inherited = environ.get(name)
        if inherited is None:
            shown[name] = gpu
            continue
        entries = [entry.strip() for entry in inherited.split(",") if entry.strip()]
        if int(gpu) >= len(entries):
            raise FleetError(f"--gpus {gpu}: this process sees {len(entries)} GPU(s) ({name}={inherited!r})")
        shown[name] = entries[int(gpu)]
    return shown
