"""Tiles of output positions, what the families that walk them share (`dwl`, `gwl` backward-weight): the
input window a tile reaches under a compiled-in filter, how many tiles a problem's images hold, and the share
of a tile grid's positions that lie inside the output plane."""

from __future__ import annotations

import math
from typing import Any

from .shape import Shape, hw


def window_reach(shape: Shape, rows: int, cols: int) -> tuple[int, int]:
    """Input rows and columns a rows x cols tile of output positions reaches."""
    (fy, fx), (sh, sw), (dh, dw) = hw(shape.filter), hw(shape.stride), hw(shape.dilation)
    return (rows - 1) * sh + (fy - 1) * dh + 1, (cols - 1) * sw + (fx - 1) * dw + 1


def tile_items(problem: Any, rows: int, cols: int) -> int:
    """Tiles of every image's output plane."""
    ho, wo = hw(problem.output)
    return problem.N * math.ceil(ho / rows) * math.ceil(wo / cols)


def plane_cover(problem: Any, rows: int, cols: int) -> float:
    """The share of the tiles' positions that lie in the output plane."""
    ho, wo = hw(problem.output)
    return ho * wo / (math.ceil(ho / rows) * rows * math.ceil(wo / cols) * cols)
