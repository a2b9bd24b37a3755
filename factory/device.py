"""The device a kernel is chosen and laid out for: arch, processor count, wave size, shared memory, matrix units.

Every decision that depends on the GPU (which instances apply, how many blocks fill it, how much shared
memory a block may take, which matrix instructions exist) reads a DeviceTarget instead of a constant.
A target comes from the GPU in hand (`target_for_device`) or, without one, from a name (`--target sm_90`).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, replace
from typing import Any

from .problem import KernelFactoryError


class UnknownTarget(KernelFactoryError):
    """A target name this package has no description of."""


class Vendor(enum.Enum):
    NVIDIA = "nvidia"
    AMD = "amd"


class MatrixUnit(enum.Enum):
    """Matrix instructions a kernel may be built on; a family names the ones its instances need."""

    MMA_SYNC = "mma.sync"  # NVIDIA sm_80+: warp-level mma.sync, ldmatrix, cp.async
    MMA_FP8 = "mma.sync fp8"  # NVIDIA sm_89+: mma.sync on e4m3 / e5m2 operands
    WGMMA = "wgmma"  # NVIDIA sm_90a: warpgroup MMA from shared-memory descriptors
    MFMA = "mfma"  # AMD CDNA (gfx908, gfx90a, gfx94x): 64-lane wavefront matrix fused multiply-add


@dataclass(frozen=True)
class DeviceTarget:
    """What kernels may assume about the device they run on."""

    arch: str  # the compiler's target: "sm_90", "sm_90a", "gfx90a"
    vendor: Vendor
    processors: int  # SMs on NVIDIA, CUs on AMD
    wave_size: int  # threads that execute in lockstep: 32 on NVIDIA, 64 on CDNA
    shared_static: int  # shared memory (LDS) a block gets without asking
    shared_optin: int  # the most a block may have once the backend raises its dynamic limit
    threads_per_processor: int  # resident threads per SM / CU
    matrix_units: frozenset[MatrixUnit]
    # What bounds how many blocks an SM holds (factory.occupancy); None where not described (AMD).
    registers_per_processor: int | None = None  # 32-bit registers
    blocks_per_processor: int | None = None
    shared_per_processor: int | None = None  # bytes, of which each resident block also takes shared_reserved
    shared_reserved: int = 0

    def lacks(self, needed: frozenset[MatrixUnit]) -> frozenset[MatrixUnit]:
        """The needed matrix units this target does not have."""
        return needed - self.matrix_units

    def blocks_by_shared(self, shared_bytes: int) -> int | None:
        """How many blocks of `shared_bytes` of shared memory one SM holds at once (each also costs
        shared_reserved); None where the target does not describe its SMs."""
        if self.shared_per_processor is None:
            return None
        return self.shared_per_processor // (shared_bytes + self.shared_reserved)

    @property
    def resident_threads(self) -> int:
        return self.processors * self.threads_per_processor

    def describe(self) -> str:
        return f"{self.arch} ({self.processors} {'SMs' if self.vendor is Vendor.NVIDIA else 'CUs'})"


_MMA = frozenset({MatrixUnit.MMA_SYNC})
_MMA_FP8 = _MMA | {MatrixUnit.MMA_FP8}
_WGMMA = _MMA_FP8 | {MatrixUnit.WGMMA}
_MFMA = frozenset({MatrixUnit.MFMA})

def _sm(blocks: int, shared_kib: int) -> dict[str, int]:
    """An NVIDIA SM's occupancy limits (CUDA's occupancy tables): 64 Ki registers, `blocks` resident
    blocks, `shared_kib` KiB of shared memory of which each block also takes 1 KiB for the system."""
    return {"registers_per_processor": 65536, "blocks_per_processor": blocks,
            "shared_per_processor": shared_kib * 1024, "shared_reserved": 1024}


# Shipped descriptions, by the name `--target` takes; processor counts are the common part of each arch.
TARGETS: dict[str, DeviceTarget] = {
    t.arch: t
    for t in (
        DeviceTarget("sm_80", Vendor.NVIDIA, 108, 32, 48 * 1024, 163 * 1024, 2048, _MMA, **_sm(32, 164)),  # A100
        DeviceTarget("sm_86", Vendor.NVIDIA, 84, 32, 48 * 1024, 99 * 1024, 1536, _MMA, **_sm(16, 100)),  # RTX A6000 class
        DeviceTarget("sm_89", Vendor.NVIDIA, 128, 32, 48 * 1024, 99 * 1024, 1536, _MMA_FP8, **_sm(24, 100)),  # L40 class
        DeviceTarget("sm_90", Vendor.NVIDIA, 132, 32, 48 * 1024, 227 * 1024, 2048, _MMA_FP8, **_sm(32, 228)),  # H100 SXM
        DeviceTarget("sm_90a", Vendor.NVIDIA, 132, 32, 48 * 1024, 227 * 1024, 2048, _WGMMA, **_sm(32, 228)),  # Hopper ISA
        DeviceTarget("gfx908", Vendor.AMD, 120, 64, 64 * 1024, 64 * 1024, 2560, _MFMA),  # MI100
        DeviceTarget("gfx90a", Vendor.AMD, 110, 64, 64 * 1024, 64 * 1024, 2048, _MFMA),  # MI210 / MI250X GCD
        DeviceTarget("gfx940", Vendor.AMD, 228, 64, 64 * 1024, 64 * 1024, 2048, _MFMA),
        DeviceTarget("gfx942", Vendor.AMD, 304, 64, 64 * 1024, 64 * 1024, 2048, _MFMA),  # MI300X
        DeviceTarget("gfx1100", Vendor.AMD, 96, 32, 64 * 1024, 64 * 1024, 2048, frozenset()),  # RDNA3, wave32
    )
}

# What `generate`, `list` and the heuristic assume when no GPU and no --target is given: the H100 as a tune on
# it describes it (`_DEVICE_ISA`): its arch-specific ISA, sm_90a, which has wgmma; every other instance still
# compiles for portable sm_90 (compile_arch).
DEFAULT_TARGET = TARGETS["sm_90a"]


def arch_specific_variant(target: DeviceTarget, needed: frozenset[MatrixUnit]) -> DeviceTarget | None:
    """The arch-specific ISA of `target`'s own GPU (sm_90 -> sm_90a) where it has the `needed` units that
    `target` lacks: what a GPU of that arch in hand is described as (`_DEVICE_ISA`)."""
    variant = TARGETS.get(_DEVICE_ISA.get(target.arch, ""))
    return variant if variant is not None and not variant.lacks(needed) else None


def target_named(name: str) -> DeviceTarget:
    """The shipped description of `name` ("sm_90", "gfx942"); an unknown name lists the known ones."""
    key = name.strip().lower()
    if key in TARGETS:
        return TARGETS[key]
    raise UnknownTarget(f"unknown target {name!r}; choose one of: {', '.join(TARGETS)}")


_NVIDIA_ARCH = re.compile(r"sm_(\d+)(a?)$")


# A GPU in hand also runs its arch-specific ISA ("a" targets: sm_90a's wgmma on an sm_90 part); the
# named target without the suffix stays the portable one, for code meant to run on later GPUs too.
_DEVICE_ISA = {"sm_90": "sm_90a"}


def compile_arch(arch: str, needs: frozenset[MatrixUnit]) -> str:
    """The compiler target of a kernel built on `needs` for a device of `arch`: wgmma exists only in
    the arch-specific sm_90a ISA (whose binaries run on sm_90 GPUs alone); everything else compiles
    for the device's own arch."""
    if MatrixUnit.WGMMA in needs and _DEVICE_ISA.get(arch) == "sm_90a":
        return "sm_90a"
    return arch


def target_for_device(arch: str, processors: int) -> DeviceTarget:
    """The target of a GPU in hand: its arch's description with the device's own processor count.

    An arch newer than any shipped description borrows the nearest older one of its vendor (a kernel
    that runs there runs on the newer part), so a new GPU is served rather than refused.
    """
    if arch in _DEVICE_ISA:
        return replace(TARGETS[_DEVICE_ISA[arch]], arch=arch, processors=processors)
    if arch in TARGETS:
        return replace(TARGETS[arch], processors=processors)
    match = _NVIDIA_ARCH.match(arch)
    if match:
        number = int(match[1])
        known = sorted((int(_NVIDIA_ARCH.match(t.arch)[1]), t) for t in TARGETS.values()
                       if t.vendor is Vendor.NVIDIA and not t.arch.endswith("a"))
        older = [t for n, t in known if n <= number]
        base = older[-1] if older else known[0][1]
        return replace(base, arch=arch, processors=processors)
    if arch.startswith("gfx"):
        return replace(TARGETS["gfx90a"], arch=arch, processors=processors)
    raise UnknownTarget(f"no description of arch {arch!r}; known: {', '.join(TARGETS)}")


def target_for(device: Any) -> DeviceTarget:
    """The target of a backend's DeviceInfo (anything with `arch` and `sm_count`)."""
    return target_for_device(device.arch, device.sm_count)
