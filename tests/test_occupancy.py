"""Theoretical occupancy (factory.occupancy) as CUDA's occupancy calculator counts it on the H100 and
the A100: each of the four limits binding in turn, and nothing for a target without the figures."""

from __future__ import annotations

import pytest

from factory.device import TARGETS
from factory.kernel_resources import KernelResources
from factory.occupancy import blocks_per_processor, occupancy

H100, A100, MI250 = TARGETS["sm_90"], TARGETS["sm_80"], TARGETS["gfx90a"]


def uses(registers: int, shared: int = 0) -> KernelResources:
    return KernelResources(registers, 0, 0, 0, shared)


@pytest.mark.parametrize(("resources", "threads", "dynamic", "blocks", "fraction"), [
    (uses(32), 256, 0, 8, 1.0),  # threads bind: 2048 / 256
    (uses(128), 256, 0, 2, 0.25),  # registers: 65536 / (128 * 256)
    (uses(60), 128, 0, 8, 0.5),  # 60 registers are allocated as 64: 65536 / (64 * 128)
    (uses(64, 48 * 1024), 256, 0, 4, 0.5),  # shared: 228 KiB / (48 + 1 KiB), registers allow 4 too
    (uses(40, 16 * 1024), 64, 80 * 1024, 2, 2 / 32),  # static + dynamic shared memory together
    (uses(16), 32, 0, 32, 0.5),  # the block count binds: 32 one-warp blocks
    (uses(255), 1024, 0, 0, 0.0),  # 256 x 1024 registers do not fit one block
])
def test_each_limit_binds_as_the_occupancy_calculator_says(resources, threads, dynamic, blocks, fraction):
    assert blocks_per_processor(resources, threads, dynamic, H100) == blocks
    assert occupancy(resources, threads, dynamic, H100) == pytest.approx(fraction)


def test_the_a100_holds_less_shared_memory_and_an_amd_target_is_not_described():
    assert blocks_per_processor(uses(32, 48 * 1024), 128, 0, A100) == 3  # 164 KiB / 49 KiB
    assert occupancy(uses(32), 256, 0, MI250) is None


def test_blocks_by_shared_counts_each_blocks_reserved_kib():
    assert H100.blocks_by_shared(48 * 1024) == 4  # 228 KiB / (48 + 1 KiB)
    assert H100.blocks_by_shared(113 * 1024) == 2 and H100.blocks_by_shared(113 * 1024 + 1) == 1
    assert A100.blocks_by_shared(48 * 1024) == 3
    assert MI250.blocks_by_shared(1024) is None
