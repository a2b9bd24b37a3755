"""twopass's depthwise launch (kf_depthwise, and kf_pad_input before it): how each DepthwisePass lays out its
blocks, shared memory and grid, and the 16-byte chunks of channels the pass and the GEMM share
(templates/dwsep_conv_fwd/twopass.hip.j2). The family's choices (which points apply, how the prior ranks them)
stay in twopass.py; what is here only answers "given this point and problem, what does kf_depthwise launch"."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from ...device import DeviceTarget
from ..base import I32, Launch
from ..conv import layouts as cl
from ..conv.shape import Shape
from ..conv.warpgroups import OPERAND_BYTES
from .problem import DwsepProblem

if TYPE_CHECKING:
    from .twopass import TwopassParams

CHUNK = 8  # channels of one 16-byte chunk: a depthwise thread's, and the GEMM's copies'
DEPTHWISE_THREADS = 256
GROUP_CHUNKS = 32  # channels-last: a kf_depthwise block's chunks at most (a warp's lanes one strip's chunks)
# channels-last: kf_depthwise's shared copy of its chunks' weights at most (32 chunks of a 7x7 filter's floats fit)
SHARED_WEIGHTS_BYTES = 64 * 1024
SHARED_WEIGHT_BYTES = 4  # ... a weight there: a float (converted once a block, not once a strip)
DEPTHWISE_BLOCKS_PER_SM = 8  # channels-last: kf_depthwise's grid at most; a block loops over the strips beyond


class Channels(Enum):
    """Whether C fills whole 16-byte chunks, compiled in from the problem: WHOLE reads channels-last inputs 16
    bytes at a time and checks no channel; PADDED reads them a channel at a time, pads the workspace's rows
    with zero channels and copies the pointwise weights so padded (their rows must be whole chunks too)."""

    WHOLE = "whole"
    PADDED = "padded"

    @classmethod
    def of(cls, C: int) -> "Channels":
        return cls.WHOLE if C % CHUNK == 0 else cls.PADDED


class DepthwisePass(Enum):
    """How kf_depthwise computes. DIRECT: a thread loads its inputs from global memory, NCHW-style each of its
    chunk's channels' columns element by element (a 5x5 stride-2 strip of two positions: ~3700 instructions).
    TILED (`_tl`, NCHW-style): a block first copies its chunk's input window, coalesced along W, into shared
    memory as 16-byte chunks of channels by position (and the chunk's weights as floats), then its threads read
    a column's CHUNK channels in one 16-byte load, as channels-last does. MATRIX (`_mx`, channels-last 2-D,
    stride 1 along W): a block copies a chunk's window into shared memory as one plane a channel, and each warp
    computes a channel's filter rows as Toeplitz GEMMs on mma.sync (as conv_bwd_data's `dwm`), 16 output rows
    by 8 columns an instruction, where the direct pass spends ~2.8 instructions an FMA (bench/NOTES.md 111)."""

    DIRECT = "direct"
    TILED = "tiled"
    MATRIX = "matrix"


def redundant_strip(strip: int, problem: DwsepProblem) -> bool:
    """Whether half the strip already covers the output's width: the same single strip a row, more registers."""
    return strip > 1 and strip // 2 >= problem.output[-1]


def redundant_strip_reason(strip: int, problem: DwsepProblem) -> str | None:
    """why_not's words for a redundant strip (twopass's and rowtile's), or None."""
    if not redundant_strip(strip, problem):
        return None
    return (f"strip={strip}: the output's {problem.output[-1]} positions along W fit one strip of {strip // 2}; "
            "a longer one only costs registers")


def group_chunks(shape: Shape) -> int:
    """Channels-last, the most chunks a kf_depthwise block takes: GROUP_CHUNKS, fewer where their weights'
    shared copy (a row of that many chunks and one of padding a tap, as floats) would pass SHARED_WEIGHTS_BYTES."""
    row_limit = SHARED_WEIGHTS_BYTES // (math.prod(shape.filter) * CHUNK * SHARED_WEIGHT_BYTES)
    return max(1, min(GROUP_CHUNKS, row_limit - 1))


TILE_STRIPS = 32  # NCHW-style tiled: a block's strips along W at most (a warp's lanes one row's strips)
TILE_WINDOW_BYTES = 48 * 1024  # ... its input windows in shared memory at most: rows, then strips, cut to fit
TILE_WAVES = 2  # ... and chunks a block grouped only while the grid keeps this many blocks an SM


@dataclass(frozen=True)
class DepthwiseTile:
    """NCHW-style tiled kf_depthwise's block (DepthwisePass.TILED): `chunks` chunks of one sample and depth slice,
    each `rows` output rows by `strips` strips along W, a thread a (chunk, row, strip); their input windows
    (the filter's depth planes by rows_in by cols_in positions, a 16-byte chunk of channels each) and weights
    (floats) in shared memory. Whole rows where they fit TILE_STRIPS, and as many rows, then chunks, as
    DEPTHWISE_THREADS threads and TILE_WINDOW_BYTES allow."""

    chunks: int
    rows: int
    strips: int

    @classmethod
    def of(cls, p: TwopassParams, problem: DwsepProblem, target: DeviceTarget) -> "DepthwiseTile":
        _, out_h, out_w = cl.pad_to_3d(problem.output, 1)
        strips = min(math.ceil(out_w / p.strip), TILE_STRIPS)
        rows = min(out_h, DEPTHWISE_THREADS // strips)
        while rows > 1 and cls(1, rows, strips).shared_bytes(p) > TILE_WINDOW_BYTES:
            rows -= 1
        while strips > 1 and cls(1, rows, strips).shared_bytes(p) > TILE_WINDOW_BYTES:
            strips -= 1
        most = min(padded_channels(problem) // CHUNK, DEPTHWISE_THREADS // (rows * strips),
                   max(1, TILE_WINDOW_BYTES // cls(1, rows, strips).shared_bytes(p)))
        chunks = 1  # more a block only while the grid keeps TILE_WAVES blocks an SM
        while chunks < most and cls(chunks + 1, rows, strips).blocks(p, problem) >= TILE_WAVES * target.processors:
            chunks += 1
        return cls(chunks, rows, strips)

    def window(self, p: TwopassParams) -> tuple[int, int, int]:
        """A chunk's input window as stored: (depth planes, rows, slots a row). A row's columns are stored by phase
        (column c at (c % phases) * length + c // phases, phases = strip x stride along W), so a row takes a
        whole number of phases."""
        fz, fy, fx = cl.pad_to_3d(p.compiled.filter, 1)
        _, sh, sw = cl.pad_to_3d(p.compiled.stride, 1)
        _, dh, dw = cl.pad_to_3d(p.compiled.dilation, 1)
        columns, phases = (self.strips * p.strip - 1) * sw + (fx - 1) * dw + 1, p.strip * sw
        return fz, (self.rows - 1) * sh + (fy - 1) * dh + 1, math.ceil(columns / phases) * phases

    def shared_bytes(self, p: TwopassParams) -> int:
        """The windows (16 bytes a position) after the weights (CHUNK floats a tap), every chunk of the block's."""
        planes, rows_in, cols_in = self.window(p)
        weights = math.prod(p.compiled.filter) * CHUNK * SHARED_WEIGHT_BYTES
        return self.chunks * (weights + planes * rows_in * cols_in * CHUNK * OPERAND_BYTES)

    def blocks(self, p: TwopassParams, problem: DwsepProblem) -> int:
        out_d, out_h, out_w = cl.pad_to_3d(problem.output, 1)
        bands = math.ceil(out_h / self.rows) * math.ceil(math.ceil(out_w / p.strip) / self.strips)
        return problem.N * math.ceil(padded_channels(problem) // CHUNK / self.chunks) * out_d * bands


def depthwise_launch(p: TwopassParams, problem: DwsepProblem, target: DeviceTarget, args: tuple) -> Launch:
    """kf_depthwise's launch. Channels-last, the chunks split evenly into groups of at most group_chunks, a
    block a group's chunks of DEPTHWISE_THREADS // (chunks a group) strips at a time, looping over them, its
    group's weights in shared memory; at most DEPTHWISE_BLOCKS_PER_SM blocks an SM. NCHW-style, a thread a
    (strip, chunk), DEPTHWISE_THREADS to a block; tiled, a block a DepthwiseTile."""
    block = (DEPTHWISE_THREADS, 1, 1)
    if p.depthwise is DepthwisePass.MATRIX:
        return Launch("kf_depthwise", (matrix_blocks(problem), 1, 1), block, args, shared_bytes=matrix_shared_bytes(p))
    if p.depthwise is DepthwisePass.TILED:
        tile = DepthwiseTile.of(p, problem, target)
        sizes = (I32(tile.chunks), I32(tile.rows), I32(tile.strips))
        return Launch("kf_depthwise", (tile.blocks(p, problem), 1, 1), block, (*args, *sizes),
                      shared_bytes=tile.shared_bytes(p))
    if not problem.channels_last:
        return Launch("kf_depthwise", (math.ceil(depthwise_threads(problem, p.strip) / DEPTHWISE_THREADS), 1, 1),
                      block, args)
    chunks = padded_channels(problem) // CHUNK
    groups = math.ceil(chunks / group_chunks(p.compiled))
    per_block = DEPTHWISE_THREADS // math.ceil(chunks / groups)
    strip_blocks = math.ceil(depthwise_threads(problem, p.strip) // chunks / per_block)
    blocks = min(strip_blocks, max(1, DEPTHWISE_BLOCKS_PER_SM * target.processors // groups))
    return Launch("kf_depthwise", (groups * blocks, 1, 1), block, args, shared_bytes=shared_weights_bytes(p.compiled))


MATRIX_TILES = 8  # `_mx`: column tiles of 8 a block's band at most (64 output columns), by 16 rows
MMA_M, MMA_N, MMA_K = 16, 8, 16  # mma.sync m16n8k16: output rows, output columns, input columns an instruction


def matrix_window(p: TwopassParams) -> tuple[int, int]:
    """`_mx`: a channel's window in shared memory at most, as (input rows, row pitch in elements): the band's 16
    output rows through the filter's rows, and the last column tile's 16 input columns, the pitch an odd count
    of 16-byte units (ldmatrix's eight rows then fall in distinct banks)."""
    _, fy, _ = cl.pad_to_3d(p.compiled.filter, 1)
    _, sh, _ = cl.pad_to_3d(p.compiled.stride, 1)
    _, dh, _ = cl.pad_to_3d(p.compiled.dilation, 1)
    unit = 16 // OPERAND_BYTES
    columns = (MATRIX_TILES - 1) * MMA_N + MMA_K
    return (MMA_M - 1) * sh + (fy - 1) * dh + 1, ((columns // unit) | 1) * unit


def matrix_shared_bytes(p: TwopassParams) -> int:
    """`_mx` kf_depthwise's shared memory: a block's chunk, CHUNK planes and CHUNK x taps weights."""
    rows, pitch = matrix_window(p)
    return CHUNK * (rows * pitch + math.prod(p.compiled.filter)) * OPERAND_BYTES


def matrix_bands(problem: DwsepProblem) -> int:
    """`_mx`: a plane's bands of 16 output rows by MATRIX_TILES x 8 columns, a block each a sample and chunk."""
    _, out_h, out_w = cl.pad_to_3d(problem.output, 1)
    return math.ceil(out_h / MMA_M) * math.ceil(out_w / (MATRIX_TILES * MMA_N))


def matrix_blocks(problem: DwsepProblem) -> int:
    """`_mx` kf_depthwise's grid: samples x chunks x bands."""
    return problem.N * padded_channels(problem) // CHUNK * matrix_bands(problem)


def matrix_pass_reason(p: TwopassParams, target: DeviceTarget) -> str | None:
    """Why an `_mx` point cannot serve its shape, or None: 8 outputs' inputs along W must fall within one
    instruction's 16 columns (stride 1 along W, (FX - 1) x dilation of 8 or less), and the planes fit."""
    reach = matrix_reach_reason(p.compiled.stride, p.compiled.filter, p.compiled.dilation)
    if reach:
        return reach
    if matrix_shared_bytes(p) > target.shared_optin:
        return (f"the depthwise pass's planes need {matrix_shared_bytes(p)} bytes of shared memory, over the "
                f"{target.shared_optin} of {target.arch}")
    return None


def matrix_reach_reason(stride: tuple[int, ...], filter_: tuple[int, ...], dilation: tuple[int, ...]) -> str | None:
    """Why 8 outputs' inputs along W do not fall within one instruction's 16 columns, or None."""
    _, _, sw = cl.pad_to_3d(stride, 1)
    _, _, fx = cl.pad_to_3d(filter_, 1)
    _, _, dw = cl.pad_to_3d(dilation, 1)
    if sw != 1 or (MMA_N - 1) + (fx - 1) * dw >= MMA_K:
        return (f"the depthwise pass on matrix instructions takes stride 1 along W and (FX - 1) x dilation of "
                f"{MMA_K - MMA_N} or less, not stride {sw}, FX={fx}, dilation {dw}")
    return None


def shared_weights_bytes(shape: Shape) -> int:
    """Channels-last, kf_depthwise's shared copy of a group's weights: a row of group_chunks + 1 chunks a tap."""
    return math.prod(shape.filter) * (group_chunks(shape) + 1) * CHUNK * SHARED_WEIGHT_BYTES


def padded_channels(problem: DwsepProblem) -> int:
    """C rounded up to whole chunks: the workspace's and the GEMM's weight rows."""
    return math.ceil(problem.C / CHUNK) * CHUNK


def pad_input_launch(problem: DwsepProblem, target: DeviceTarget, args: tuple) -> Launch:
    """kf_pad_input: a thread a (input position, chunk) at a time, at most DEPTHWISE_BLOCKS_PER_SM blocks an SM."""
    work = problem.N * math.prod(problem.input) * (padded_channels(problem) // CHUNK)
    blocks = min(math.ceil(work / DEPTHWISE_THREADS), DEPTHWISE_BLOCKS_PER_SM * target.processors)
    return Launch("kf_pad_input", (blocks, 1, 1), (DEPTHWISE_THREADS, 1, 1), args)


def depthwise_threads(problem: DwsepProblem, strip: int) -> int:
    """kf_depthwise's threads: one per strip of `strip` output positions along W and chunk of channels."""
    strips = math.ceil(problem.output[-1] / strip)
    return problem.N * math.prod(problem.output[:-1]) * strips * (padded_channels(problem) // CHUNK)
