"""Theoretical occupancy: how many of an SM's warp slots a kernel's blocks can fill at once, from the
registers and static shared memory the compiler reported (factory.kernel_resources) and the block
size and dynamic shared memory of its launch, as CUDA's occupancy calculator counts them.

It bounds latency hiding, not speed: a memory-bound kernel may need half the slots, a tiled GEMM one
block. A tune shows it beside each candidate's time so a slow candidate's cause can be told apart.
"""

from __future__ import annotations

import math

from .device import DeviceTarget
from .kernel_resources import KernelResources

REGISTER_UNIT = 256  # registers are allocated per warp in units of this many
REGISTERS_PER_THREAD_UNIT = 8


def blocks_per_processor(resources: KernelResources, threads: int, dynamic_shared: int,
                         target: DeviceTarget) -> int | None:
    """Resident blocks per SM, the least of the four limits; None where the target is not described."""
    if target.registers_per_processor is None or target.blocks_per_processor is None \
            or target.shared_per_processor is None or threads < 1:
        return None
    warps = math.ceil(threads / target.wave_size)
    limits = [target.blocks_per_processor, target.threads_per_processor // (warps * target.wave_size)]
    if resources.registers:
        per_thread = math.ceil(resources.registers / REGISTERS_PER_THREAD_UNIT) * REGISTERS_PER_THREAD_UNIT
        per_warp = math.ceil(per_thread * target.wave_size / REGISTER_UNIT) * REGISTER_UNIT
        limits.append(target.registers_per_processor // (per_warp * warps))
    shared = resources.shared_bytes + dynamic_shared
    fitting = target.blocks_by_shared(shared)
    if shared and fitting is not None:
        limits.append(fitting)
    return max(0, min(limits))


def occupancy(resources: KernelResources, threads: int, dynamic_shared: int, target: DeviceTarget) -> float | None:
    """Resident warps over the SM's warp slots (0 when a block does not fit at all)."""
    blocks = blocks_per_processor(resources, threads, dynamic_shared, target)
    if blocks is None:
        return None
    slots = target.threads_per_processor // target.wave_size
    return min(1.0, blocks * math.ceil(threads / target.wave_size) / slots)
