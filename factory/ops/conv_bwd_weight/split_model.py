"""How long a split-K launch takes, as a function of the split: the prior's way to choose a split.

Splitting the reduction over more blocks fills the device and shortens each block's serial chain, but
every block past the fill waits for a wave, pays its own pipeline fill and adds a tile of partial sums
that the reduction must meet. Scoring only the fill (two blocks an SM, then less per doubling) missed
the chain: a dense layer with 133 tiles of a 205-step reduction picked split 1 and ran 2.9x the time of
split 16 (H100). The model below counts all three, in units of one block's reduction step.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)  # where `best` looks


@dataclass(frozen=True)
class SplitModel:
    """Constants fitted per kind of family on the H100 (every candidate of the suite and random seeds 21
    and 22 timed; bench/NOTES.md §32)."""

    resident: int  # blocks an SM runs at once
    fill_steps: float  # a block's steps of pipeline fill and epilogue
    partial_cost: float  # steps per thousand partial sums an SM adds

    def time(self, blocks: int, steps: int, outputs: int, split: int, processors: int) -> float:
        """Waves of resident blocks, each as long as a block's share of the `steps` plus its fill; a
        split above 1 adds `outputs` partial sums a split, spread over the SMs."""
        waves = math.ceil(blocks * split / (self.resident * processors))
        partials = self.partial_cost * outputs * split / (1000 * processors) if split > 1 else 0.0
        return waves * (math.ceil(steps / split) + self.fill_steps) + partials

    def best(self, blocks: int, steps: int, outputs: int, processors: int) -> int:
        """The split of SPLITS (at most `steps`, at least 1) the model finds fastest. Every split of one
        tile asks the same question, and the prior scores hundreds of candidates per problem: cached."""
        return _best(self, blocks, steps, outputs, processors)

    def lost(self, blocks: int, steps: int, outputs: int, split: int, processors: int) -> float:
        """log2 of how much slower the model finds `split` than its best split."""
        best = self.best(blocks, steps, outputs, processors)
        return math.log2(self.time(blocks, steps, outputs, split, processors)
                         / self.time(blocks, steps, outputs, best, processors))


@functools.lru_cache(maxsize=4096)
def _best(model: SplitModel, blocks: int, steps: int, outputs: int, processors: int) -> int:
    usable = [s for s in SPLITS if s <= max(steps, 1)]
    return min(usable, key=lambda s: model.time(blocks, steps, outputs, s, processors))


# Implicit GEMM on NVIDIA matrix instructions (mma, wgmma): a step is block_k reduction rows; outputs are
# the GEMM's. The lane families (dw, dwr, dwh) were fitted the same way (a step: a work item a thread):
# each block shape's split came closer to its best, but the prior's picks got worse on four of the five
# tuned sets (bench/NOTES.md §32), so they keep their fill rule.
GEMM_SPLITS = SplitModel(resident=3, fill_steps=8, partial_cost=1.0)
