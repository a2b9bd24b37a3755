"""The transposing pass's launch: which kernel a copy takes, and that its grid covers every element once
(the kernels' index arithmetic mirrored; tests/test_emulated_*.py run the kernels themselves)."""

from __future__ import annotations

import itertools
import re

import pytest

from factory.ops.base import Buf
from factory.ops.conv.transpose import (SQUARE_LANES_C, SQUARE_WARPS_C, TRANSPOSE_THREADS, TRANSPOSE_TILE,
                                        transpose_launch)

SRC, DST = Buf("input"), Buf("workspace")


@pytest.mark.parametrize("channels, spatial, element_bytes, entry", [
    (512, 784, 2, "kf_to_channels_last_c16s16"),  # ResNeXt's 28x28 planes: blocks of 8 x 8
    (336, 784, 4, "kf_to_channels_last_c16s16"),  # fp32: 4 x 4
    (1024, 196, 2, "kf_to_channels_last_c16s8"),  # 14x14 planes: 196 = 4 x 49, 8 channels by 4 positions
    (196, 1024, 2, "kf_to_channels_last"),  # going back, channels in 8-byte runs: the shared tile
    (12, 20, 2, "kf_to_channels_last"),
    (24, 30, 4, "kf_to_channels_last_c16s8"),  # fp32: 4 channels by 2 positions
    (512, 49, 2, "kf_to_channels_last"),  # 7x7 planes: the shared tile (transpose_flat)
    (30, 64, 2, "kf_to_channels_last"),  # channels in no vector
    (512, 784, 1, "kf_to_channels_last"),  # int8 keeps the shared tile
])
def test_the_copy_goes_in_registers_where_both_extents_are_whole_vectors(channels: int, spatial: int,
                                                                         element_bytes: int, entry: str) -> None:
    launch = transpose_launch(SRC, DST, channels, spatial, 3, element_bytes)
    assert launch.entry == entry
    assert launch.grid[2] == 3 and launch.block == (TRANSPOSE_THREADS, 1, 1)


def lane_blocks(channels: int, spatial: int, element_bytes: int) -> tuple[int, int, list[tuple[int, int]]]:
    """A lane's channels and positions, and (c, s) of every lane's block the launch copies, as
    transpose_squares computes them."""
    launch = transpose_launch(SRC, DST, channels, spatial, 1, element_bytes)
    c_bytes, s_bytes = map(int, re.fullmatch(r"kf_to_channels_last_c(\d+)s(\d+)", launch.entry).groups())
    cv, sv = c_bytes // element_bytes, 16 // element_bytes  # a lane's positions: 16 bytes, read in s_bytes loads
    lanes_s, warps_s = 32 // SQUARE_LANES_C, TRANSPOSE_THREADS // 32 // SQUARE_WARPS_C
    tile_c, tile_s = SQUARE_WARPS_C * SQUARE_LANES_C * cv, warps_s * lanes_s * sv
    s_tiles = -(-spatial // tile_s)
    origins = []
    for block, thread in itertools.product(range(launch.grid[0]), range(TRANSPOSE_THREADS)):
        warp, lane = divmod(thread, 32)
        c = block // s_tiles * tile_c + (warp % SQUARE_WARPS_C * SQUARE_LANES_C + lane % SQUARE_LANES_C) * cv
        s = block % s_tiles * tile_s + (warp // SQUARE_WARPS_C * lanes_s + lane // SQUARE_LANES_C) * sv
        if c < channels and s < spatial:
            origins.append((c, s))
    return cv, sv, origins


@pytest.mark.parametrize("channels, spatial, element_bytes",
                         [(512, 784, 2), (72, 200, 2), (1024, 196, 2), (40, 30, 4), (24, 30, 4), (784, 256, 4)])
def test_the_lanes_cover_every_element_once(channels: int, spatial: int, element_bytes: int) -> None:
    cv, sv, origins = lane_blocks(channels, spatial, element_bytes)
    assert len(set(origins)) == len(origins)
    assert sum(cv * min(sv, spatial - s) for _, s in origins) == channels * spatial  # the last lanes' blocks cut short
    assert all(c % cv == 0 and s % sv == 0 for c, s in origins)


def test_the_shared_tile_grid_is_unchanged() -> None:
    launch = transpose_launch(SRC, DST, 100, 49, 2, 2)
    assert launch.grid == (1, -(-100 // TRANSPOSE_TILE), 2)
