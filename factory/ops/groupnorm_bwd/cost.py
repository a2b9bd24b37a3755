"""The heuristic's time model, shared by the GroupNorm backward families.

Each family's heuristic_score is -log2 of the microseconds it estimates (a score of 1 more is half the time):
a fixed cost per launch, then each pass bound by the slower of its latency chain (the dependent load trips
of one thread, times the waves of blocks) and its memory traffic, plus what the sums cost to meet
(atomics or a finishing kernel). The constants are fitted on the H100 (sm_90, 132 SMs) tuning DBs of the
public suite and 30 random problems of seed 21, every candidate timed (scripts/prior_fit.py); the shape of
the model (launches, waves, bytes, contention) carries to other devices through the DeviceTarget.
"""

from __future__ import annotations

import math

from ...device import DeviceTarget
from ...kernel_resources import KernelResources
from ...occupancy import blocks_per_processor

# Fixed costs. The smallest problems (<= 0.2 MB a tensor, H100 suite+seed21) add about 2 us per kernel:
# group per_group (1 kernel) 5.7-7.7 us, per_sample (2) 7.9-9.7, fused twostage (3) 10.4-11.6,
# threepass (3 and a memset) 12.2-15.8; a memset costs less: fused atomic (2 and a memset) 9.2-11.6.
BASE_US = 2.0
KERNEL_US = 2.0
MEMSET_US = 0.8

LATENCY_US = 0.4  # one dependent trip of loads under load, DRAM and L2 hits mixed
DRAM_BYTES_PER_US = 2.8e6  # H100: fused's 5 transfers of 241 MB in 424 us (bf16 N=8 C=384 251x156)
SM_BYTES_PER_US = 40e3  # what one SM's blocks stream: grids of fewer blocks than SMs (per_group: G blocks) get less
L2_BYTES = 40e6  # of the H100's 50 MB L2, what a pass re-reading the last one's tensors still finds
SMOOTH = 4  # latency and traffic overlap: a smooth maximum (p-norm), so near the crossover both count



def launch_us(kernels: int, memsets: int = 0) -> float:
    return BASE_US + KERNEL_US * kernels + MEMSET_US * memsets


def bound_us(latency_us: float, memory_us: float) -> float:
    """A pass's time: the smooth maximum of its latency chain and its traffic time."""
    return (latency_us**SMOOTH + memory_us**SMOOTH) ** (1 / SMOOTH)


def memory_us(nbytes: float, blocks: int, target: DeviceTarget) -> float:
    """Moving `nbytes` with a grid of `blocks`: DRAM bandwidth, or less when few SMs have blocks."""
    return nbytes / min(DRAM_BYTES_PER_US, min(blocks, target.processors) * SM_BYTES_PER_US)


def resident_blocks(threads: int, registers: int, target: DeviceTarget, shared_bytes: int = 0) -> int:
    """Blocks of `threads` one SM holds at once (factory.occupancy's limits); by threads alone where the
    target does not describe its registers and shared memory."""
    described = blocks_per_processor(KernelResources(registers, 0, 0, 0, shared_bytes), threads, 0, target)
    return max(1, described if described is not None else target.threads_per_processor // threads)


def waves(blocks: int, per_processor: int, target: DeviceTarget) -> int:
    """How many rounds of resident blocks a grid of `blocks` takes."""
    return math.ceil(blocks / (target.processors * per_processor))


def score(us: float) -> float:
    return -math.log2(us)
