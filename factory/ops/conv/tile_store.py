"""How a GEMM block's finished tile reaches its output, what the families on the implicit-GEMM engines share
(backward-data's `mma`, `wgmma` and `pw`, the fused forward's `twopass`)."""

from __future__ import annotations

import enum


class TileStore(enum.Enum):
    """ELEMENT: each accumulator where it lies in the matrix instructions' layout (2-element pieces over 8 rows
    a warp store, each 32-byte sector half filled). STAGED (`_st` in names): through shared memory first, then
    16 bytes a thread along the output's contiguous direction; each family says where it applies."""

    ELEMENT = "element"
    STAGED = "staged"
