"""The transposing pass (templates/common/to_channels_last.h): `count` matrices of channels x positions
copied as positions x channels, so a matrix family's main kernel reads NGCHW tensors channels-last (and
a channels-last result goes back to NGCHW the same way, channels and positions swapped)."""

from __future__ import annotations

import math
from typing import Any

from ..base import I32, Buf, Launch

TRANSPOSE_TILE, TRANSPOSE_THREADS = 64, 256  # kf_to_channels_last: a 64 x 64 tile of (channels, positions)
# kf_to_channels_last_c*s*: a warp's lanes 4 along channels (8 along positions), its 8 warps 2 along channels.
SQUARE_LANES_C, SQUARE_WARPS_C = 4, 2
SQUARE_ELEMENT_BYTES = (2, 4)  # the types a lane's registers transpose
# (channels written, positions read) as vectors of these bytes, widest first. Channels in 8-byte runs only
# (grad_input's 14x14 planes going back) ran 1.26x slower than the shared tile (bench/NOTES.md section 90).
SQUARE_SHAPES = ((16, 16), (16, 8))


def transpose_values() -> dict[str, Any]:
    """The template values to_channels_last.h reads."""
    return {"transpose_tile": TRANSPOSE_TILE, "transpose_threads": TRANSPOSE_THREADS,
            "square_lanes_c": SQUARE_LANES_C, "square_warps_c": SQUARE_WARPS_C, "square_shapes": SQUARE_SHAPES}


def transpose_launch(src: Buf, dst: Buf, channels: int, spatial: int, count: int, element_bytes: int) -> Launch:
    """src[i][c][s] -> dst[i][s][c] for i < count (grid z), c < channels, s < spatial: in registers
    (kf_to_channels_last_c*s*) where a 2- or 4-byte type's channels go as 16-byte vectors and its positions
    are read as 16- or 8-byte ones (a lane's 16 bytes of them in two halves), else through a shared tile
    (kf_to_channels_last)."""
    args = (src, dst, I32(channels), I32(spatial))
    shape = next(((c, s) for c, s in SQUARE_SHAPES
                  if channels % (c // element_bytes) == 0 and spatial % (s // element_bytes) == 0), None)
    if element_bytes in SQUARE_ELEMENT_BYTES and shape:
        c_bytes, s_bytes = shape
        tile_c = SQUARE_WARPS_C * SQUARE_LANES_C * c_bytes // element_bytes
        lanes_s = TRANSPOSE_THREADS // 32 // SQUARE_WARPS_C * (32 // SQUARE_LANES_C)
        tile_s = lanes_s * 16 // element_bytes  # a lane's positions: 16 bytes, whatever its loads
        tiles = math.ceil(spatial / tile_s) * math.ceil(channels / tile_c)
        return Launch(f"kf_to_channels_last_c{c_bytes}s{s_bytes}", (tiles, 1, count), (TRANSPOSE_THREADS, 1, 1), args)
    return Launch("kf_to_channels_last",
                  (math.ceil(spatial / TRANSPOSE_TILE), math.ceil(channels / TRANSPOSE_TILE), count),
                  (TRANSPOSE_THREADS, 1, 1), args)


COPY_ALIGN = 256  # bytes: each copy starts where a device allocation would


def copy_regions(sizes: tuple[int, ...], at: int = 0) -> tuple[tuple[Buf, ...], int]:
    """Workspace regions of `sizes` bytes one after another from byte `at`, and the byte after the last."""
    regions, offset = [], at
    for size in sizes:
        regions.append(Buf("workspace", offset))
        offset += math.ceil(size / COPY_ALIGN) * COPY_ALIGN
    return tuple(regions), offset
