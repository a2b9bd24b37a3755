"""NGCHW problems for main kernels that read channels-last data: the input and the output gradient copied
NGCHW -> NHWGC into the workspace first (the transposing pass, factory/ops/conv/transpose.py), and the
main kernel's argument struct pointed at the copies. `mma`'s `transpose` points and every NGCHW `gwl`
instance run this way."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ...problem import ConvProblem, Layout
from ..base import Buf, Launch, Struct
from ..conv import kernel_args
from ..conv.transpose import copy_regions, transpose_launch
from .common import OUTPUT, TENSORS


@dataclass(frozen=True)
class StagedRegion:
    """Where the transposing pass puts one tensor's channels-last copy in the workspace."""

    tensor: str
    channels: int  # G * C or G * K
    spatial: int  # positions per sample
    copy: Buf


def staged_regions(problem: ConvProblem, at: int, element_bytes: int) -> tuple[tuple[StagedRegion, StagedRegion], int]:
    """The input's and the output gradient's copies, one after the other from byte `at`, and the byte
    after the last."""
    shapes = (("input", problem.G * problem.C, math.prod(problem.input)),
              ("grad_output", problem.G * problem.K, math.prod(problem.output)))
    copies, end = copy_regions(tuple(problem.N * channels * spatial * element_bytes for _, channels, spatial in shapes), at)
    staged_in, staged_out = (StagedRegion(name, channels, spatial, copy)
                             for (name, channels, spatial), copy in zip(shapes, copies))
    return (staged_in, staged_out), end


def staging_launches(problem: ConvProblem, at: int, element_bytes: int) -> tuple[tuple[Launch, ...], int]:
    """The two transposing launches and the workspace bytes their copies take from byte `at`."""
    regions, end = staged_regions(problem, at, element_bytes)
    launches = tuple(transpose_launch(Buf(r.tensor), r.copy, r.channels, r.spatial, problem.N, element_bytes)
                     for r in regions)
    return launches, end - at


def staged_conv_args(args: Struct, problem: ConvProblem, dst: str, staging_at: int, element_bytes: int) -> Struct:
    """`args` with the input and the output gradient replaced by their copies: the copies' geometry is the
    NHWGC problem's; the weight keeps the problem's own layout."""
    copies = kernel_args(TENSORS, dataclasses.replace(problem, layout=Layout.NHWGC), {OUTPUT: dst})
    (staged_in, staged_out), _ = staged_regions(problem, staging_at, element_bytes)
    moved = {f: v for f, v in copies.fields if f.startswith(("in_", "out_"))}
    return args.replace(**moved, **{"in": staged_in.copy, "out": staged_out.copy})
