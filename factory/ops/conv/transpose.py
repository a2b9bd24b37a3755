"""The transposing pass (templates/common/to_channels_last.h): `count` matrices of channels x positions
copied as positions x channels, so a matrix family's main kernel reads NGCHW tensors channels-last (and
a channels-last result goes back to NGCHW the same way, channels and positions swapped)."""

from __future__ import annotations

import math
from typing import Any

from ..base import I32, Buf, Launch

TRANSPOSE_TILE, TRANSPOSE_THREADS = 64, 256  # kf_to_channels_last: a 64 x 64 tile of (channels, positions)


def transpose_values() -> dict[str, Any]:
    """The template values to_channels_last.h reads."""
    return {"transpose_tile": TRANSPOSE_TILE, "transpose_threads": TRANSPOSE_THREADS}


def transpose_launch(src: Buf, dst: Buf, channels: int, spatial: int, count: int) -> Launch:
    """kf_to_channels_last: src[i][c][s] -> dst[i][s][c] for i < count (grid z), c < channels, s < spatial."""
    return Launch("kf_to_channels_last",
                  (math.ceil(spatial / TRANSPOSE_TILE), math.ceil(channels / TRANSPOSE_TILE), count),
                  (TRANSPOSE_THREADS, 1, 1), (src, dst, I32(channels), I32(spatial)))


COPY_ALIGN = 256  # bytes: each copy starts where a device allocation would


def copy_regions(sizes: tuple[int, ...], at: int = 0) -> tuple[tuple[Buf, ...], int]:
    """Workspace regions of `sizes` bytes one after another from byte `at`, and the byte after the last."""
    regions, offset = [], at
    for size in sizes:
        regions.append(Buf("workspace", offset))
        offset += math.ceil(size / COPY_ALIGN) * COPY_ALIGN
    return tuple(regions), offset
