"""`fused` / `fused_mfma`: the depthwise stage on the vector units, the pointwise stage on matrix instructions,
the depthwise output kept in shared memory between them (templates/dwsep_conv_fwd/fused.hip.j2).

A block owns block_m output positions x block_n output channels and loops over the input channels in
chunks of block_k: the chunk's depthwise outputs go into shared memory as the GEMM's A tile, the
chunk's pointwise weights as its B tile, and the warps multiply them into the accumulators. Where
block_n < K, the blocks of one position tile each compute its depthwise outputs (a recomputation of
9-49 multiply-adds per channel against block_n of the pointwise GEMM). Filter, stride and dilation are
compiled in (`shape = "problem"` points), so the tap loops unroll and the bounds tests fold.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ...device import DeviceTarget
from ...problem import DType, Layout
from ..base import Buf, Family, I32, Launch, LaunchPlan, Struct, params_from_suffix
from ..conv import cpp_type
from ..conv import layouts as cl
from ..conv.family import CHUNK_BYTES_MAX, LANES, MFMA_TILE, MMA_K, MMA_M, MMA_N, WAVE_LANES, MfmaRules, MmaSyncRules, fill_score
from ..conv.shape import CompiledShape, Shape
from .problem import Activation, DwsepProblem

DTYPES = (DType.FP16, DType.BF16, DType.FP32)
LAYOUTS = (Layout.NHWGC, Layout.NGCHW)
CELLS = frozenset((layout, dtype, ndim) for layout in LAYOUTS for dtype in DTYPES for ndim in (1, 2, 3))
INT32_LIMIT = 2**31 - 1
GRID_Y_LIMIT = 65535
STAGES = 2
PREFETCH_REGISTERS = 48  # 32-bit registers a thread may hold a step's depthwise inputs in
ACTIVATION_CODES = {Activation.NONE: 0, Activation.RELU: 1, Activation.RELU6: 2}
DWSEP_ARGS = "kf_dwsep_args"  # templates/common/args.h


@dataclass(frozen=True)
class FusedParams:
    # The engine's instruction tile and lanes per warp (mma.sync here; fused_mfma's are AMD's).
    instruction_m: ClassVar[int] = MMA_M
    instruction_n: ClassVar[int] = MMA_N
    lanes: ClassVar[int] = LANES
    engine: ClassVar[str] = "mma"

    block_m: int  # output positions per block
    block_n: int  # output channels per block
    block_k: int  # input channels per chunk
    warps_m: int
    warps_n: int
    vector: int  # channels per load of the pointwise weights, and of channels-last inputs (16 bytes at most)
    shape: str  # the compiled-in filter, stride and dilation (conv.shape.spell_shape)
    # Channels-last: the bytes of a position's channels one thread sums each step, in loads of `vector`
    # (16), or 0: one load's worth (see item()).
    item_bytes: int = 0

    def __post_init__(self) -> None:
        im, in_ = self.instruction_m, self.instruction_n
        if self.block_m % (self.warps_m * im) or self.block_n % (self.warps_n * in_):
            raise ValueError(f"block {self.block_m}x{self.block_n} does not split into {self.warps_m}x{self.warps_n} "
                             f"warp tiles of whole {im}x{in_} instructions")
        if self.block_k % MMA_K:
            raise ValueError(f"block_k {self.block_k} must be a multiple of {MMA_K}")
        if self.vector not in (1, 2, 4, 8) or self.block_k % self.vector:
            raise ValueError(f"vector {self.vector} must be 1, 2, 4 or 8 and divide block_k {self.block_k}")
        if self.item_bytes not in (0, CHUNK_BYTES_MAX):
            raise ValueError(f"item_bytes {self.item_bytes} must be 0 (one load) or {CHUNK_BYTES_MAX}")
        if Shape.parse(self.shape) is None:
            raise ValueError(f"shape {self.shape!r} is not k<filter>s<stride>d<dilation>")

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * self.lanes

    @property
    def compiled(self) -> Shape:
        return Shape.checked(self.shape)

    def item(self, element_bytes: int) -> int:
        """Channels-last: the channels a thread sums of each of its positions. One load's worth gives a
        one-element load block_k threads a position and a thread 8-64 positions, each position's window
        held in registers; 16 bytes' worth gives it one or two positions, its loads spread over more
        sectors. On the H100 neither won everywhere (bench/NOTES.md §37): a tuning point."""
        return max(self.vector, self.item_bytes // element_bytes) if self.item_bytes else self.vector

    def same_as_narrow(self, channels_last: bool, element_bytes: int) -> bool:
        """Whether wide items change nothing here: NGCHW, or loads already 16 bytes wide."""
        return bool(self.item_bytes) and (not channels_last or self.item(element_bytes) == self.vector)

    def work(self, channels_last: bool, element_bytes: int) -> tuple[int, int, int] | None:
        """(threads per position, groups, items per thread) of the depthwise stage, or None when the
        tile does not split: channels-last, block_k / item threads share a position and a thread takes
        block_m / groups positions; otherwise a thread takes one position and block_k / groups channels."""
        return self.work_of_items(channels_last, self.item(element_bytes))

    def work_of_items(self, channels_last: bool, item: int) -> tuple[int, int, int] | None:
        """work() with channels-last items of `item` channels."""
        if channels_last:
            tpr = self.block_k // item
            if self.threads % tpr or self.block_m % (self.threads // tpr):
                return None
            groups = self.threads // tpr
            return tpr, groups, self.block_m // groups
        if self.threads % self.block_m or self.block_k % (self.threads // self.block_m):
            return None
        groups = self.threads // self.block_m
        return 1, groups, self.block_k // groups

    def shared_bytes(self, dtype: DType) -> int:
        """Two stages of A ([m][k] or [k][m]) and B ([n][k]) tiles, rows padded by 16 bytes (igemm.h
        Config), the output tile; then two buffers of a chunk's depthwise weights and biases and the
        block's pointwise biases, in fp32."""
        size = dtype.tensor.nbytes
        pad = 16 // size
        a = max(self.block_m * (self.block_k + pad), self.block_k * (self.block_m + pad))
        b = self.block_n * (self.block_k + pad)
        out = max(self.block_m * (self.block_n + pad), self.block_n * (self.block_m + pad))
        weights = (2 * (math.prod(self.compiled.filter) + 1) * self.block_k + self.block_n) * 4
        return (STAGES * (a + b) + out) * size + weights

    def prefetch(self, channels_last: bool, element_bytes: int) -> bool:
        """Whether a thread's depthwise inputs of a chunk fit PREFETCH_REGISTERS, so they are loaded a
        step ahead (their latency hidden under the multiplications) rather than just before use."""
        work = self.work(channels_last, element_bytes)
        assert work is not None
        per, width = work[2], (self.item(element_bytes) if channels_last else 1)
        return per * math.prod(self.compiled.filter) * width * 2 <= PREFETCH_REGISTERS * 4  # 16-bit worst case

    @property
    def min_blocks(self) -> int:
        """Blocks per multiprocessor the launch bounds ask for (a register cap of 128 per thread)."""
        return max(1, 512 // self.threads)

    def suffix(self) -> str:
        items = f"i{self.item_bytes}" if self.item_bytes else ""
        return (f"b{self.block_m}x{self.block_n}x{self.block_k}_w{self.warps_m}x{self.warps_n}"
                f"_v{self.vector}{items}_{self.shape}")

    def template_values(self) -> dict[str, Any]:
        shape = self.compiled
        values: dict[str, Any] = {
            "engine": self.engine, "block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k,
            "warps_m": self.warps_m, "warps_n": self.warps_n, "threads": self.threads, "vector": self.vector,
            "min_blocks": self.min_blocks}
        for name in ("filter", "stride", "dilation"):
            values[name] = cl.pad_to_3d(getattr(shape, name), 1)  # (D, H, W)
        return values


_SUFFIX_RE = re.compile(r"b(?P<block_m>\d+)x(?P<block_n>\d+)x(?P<block_k>\d+)_w(?P<warps_m>\d+)x(?P<warps_n>\d+)"
                        r"_v(?P<vector>\d+)(?:i(?P<item_bytes>\d+))?_(?P<shape>[a-z0-9x]+)")


def dwsep_args(problem: DwsepProblem) -> Struct:
    """The kernel's argument struct (templates/common/args.h, kf_dwsep_args); an absent bias points at
    the pointwise weight, which the kernel then never reads as a bias."""
    def pad3(values: tuple[int, ...], fill: int) -> list[int]:
        return cl.pad_to_3d(values, fill)

    pointers = (("in", Buf("input")), ("wdw", Buf("weight_dw")), ("wpw", Buf("weight_pw")),
                ("bdw", Buf("bias_dw" if problem.bias_dw else "weight_pw")),
                ("bpw", Buf("bias_pw" if problem.bias_pw else "weight_pw")), ("out", Buf("output")))
    ints = [("N", problem.N), ("C", problem.C), ("K", problem.K)]
    ints += list(zip(("Di", "Hi", "Wi"), pad3(problem.input, 1)))
    ints += list(zip(("Do", "Ho", "Wo"), pad3(problem.output, 1)))
    ints += list(zip(("pd", "ph", "pw"), pad3(problem.pad, 0)))
    ints += [("bias_dw", int(problem.bias_dw)), ("bias_pw", int(problem.bias_pw)),
             ("act_dw", ACTIVATION_CODES[problem.act_dw]), ("act_pw", ACTIVATION_CODES[problem.act_pw])]
    return Struct(DWSEP_ARGS, pointers + tuple((name, I32(v)) for name, v in ints))


class Fused(MmaSyncRules, CompiledShape, Family[FusedParams, DwsepProblem]):
    name = "fused"
    template = "dwsep_conv_fwd/fused.hip.j2"
    params_type = FusedParams
    suffix_re = _SUFFIX_RE
    description = ("depthwise outputs computed per channel chunk into shared memory, multiplied at once into the "
                   "pointwise sums on matrix instructions (mma.sync; fp32 as 3xTF32); filter compiled in")

    def supported_cells(self) -> frozenset[tuple[Layout, DType, int]]:
        return CELLS

    def cell_allows(self, params: FusedParams, layout: Layout, dtype: DType, ndim: int) -> bool:
        channels_last, size = layout is Layout.NHWGC, dtype.tensor.nbytes
        return (len(params.compiled.filter) == ndim and params.vector * size <= CHUNK_BYTES_MAX
                and not params.same_as_narrow(channels_last, size) and params.work(channels_last, size) is not None)

    def parse_suffix(self, suffix: str) -> Any:
        return params_from_suffix(self.suffix_re, self.params_type, suffix,
                                  {"shape": str, "item_bytes": lambda v: int(v or 0)})

    def why_not(self, p: FusedParams, problem: DwsepProblem, target: DeviceTarget) -> str | None:
        wrong = self.wrong_shape(p.shape, p.compiled, problem)
        if wrong:
            return wrong
        largest = max(problem.N * problem.C * math.prod(problem.input), problem.positions * problem.K)
        if largest > INT32_LIMIT:
            return "a tensor has 2**31 elements or more; the kernel indexes with 32-bit integers"
        if problem.C % p.vector:
            return f"vector {p.vector} needs C={problem.C} divisible by it"
        if math.ceil(problem.K / p.block_n) > GRID_Y_LIMIT:
            return f"K={problem.K} needs more than {GRID_Y_LIMIT} channel tiles"
        shared = p.shared_bytes(problem.dtype)
        if shared > target.shared_optin:
            return f"needs {shared} bytes of shared memory, over the {target.shared_optin} of {target.arch}"
        return None

    def template_values(self, params: FusedParams, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        channels_last, size = layout is Layout.NHWGC, dtype.tensor.nbytes
        work = params.work(channels_last, size)
        assert work is not None  # cell_allows
        tpr, groups, per = work
        return params.template_values() | {
            "tin": cpp_type(dtype.tensor), "channels_last": "true" if channels_last else "false",
            "item": params.item(size), "tpr": tpr, "groups": groups, "per_thread": per,
            "prefetch": "true" if params.prefetch(channels_last, size) else "false"}

    def launch_plan(self, p: FusedParams, problem: DwsepProblem, target: DeviceTarget) -> LaunchPlan:
        grid = (_blocks_m(p, problem, target), math.ceil(problem.K / p.block_n), 1)
        return LaunchPlan((Launch("kf_main", grid, (p.threads, 1, 1), (dwsep_args(problem),),
                                  shared_bytes=p.shared_bytes(problem.dtype)),))

    # A doubling of the channel tiles (each recomputes the depthwise stage) costs this much of the score
    # at a 3x3 filter in 16 bits (recompute()).
    recompute_weight: ClassVar[float] = 0.2

    def heuristic_score(self, p: FusedParams, problem: DwsepProblem, target: DeviceTarget) -> float:
        # Few channel tiles, little padding of K and C, a full wave of blocks, wide loads, a short
        # depthwise chain a thread.
        tiles_n = math.ceil(problem.K / p.block_n)
        used_n = problem.K / (tiles_n * p.block_n)
        used_k = problem.C / (math.ceil(problem.C / p.block_k) * p.block_k)
        blocks = math.ceil(problem.positions / p.block_m) * tiles_n  # tiles: what the blocks share out
        wide = 0.3 * (p.vector * problem.dtype.tensor.nbytes == CHUNK_BYTES_MAX)
        return (used_n + used_k + wide + self.fill(blocks, target) - self.recompute(problem) * math.log2(tiles_n)
                - self.depthwise_chain(p, problem) + self.item_width(p, problem))

    def recompute(self, problem: DwsepProblem) -> float:
        """What a doubling of the channel tiles costs: each tile recomputes the depthwise stage, whose
        share of a tile's work grows with the taps and shrinks where the multiplications cost more (fp32
        runs them as 3xTF32). recompute_weight x sqrt(taps / 9) from 9 taps on, halved for fp32: fitted
        on every candidate of the suite and random seeds 21 and 52-56 (bench/NOTES.md §37), where a
        constant 0.3 picked 64x256 tiles for 3x3 layers with a few hundred positions (2.4x the best) and
        for fp32 layers (2.0x)."""
        taps = max(math.prod(problem.filter), 9)
        return self.recompute_weight * math.sqrt(taps / 9) * (0.5 if problem.dtype is DType.FP32 else 1.0)

    def fill(self, blocks: int, target: DeviceTarget) -> float:
        """Up to 2 as the grid grows to one wave of two resident blocks an SM, on a log scale: a tile of
        256 positions' worth of channels that leaves half the SMs idle loses more than the same tile
        with 4x the depthwise recomputation. Fitted with `recompute_weight` on the H100 (every candidate
        of 64 problems timed: the suite and random seeds 21 and 52; bench/NOTES.md §35), where the
        linear fill to 4 blocks an SM with 0.1 a channel-tile doubling picked b64x64 tiles for wide K
        (1.6-2x the best, b64x128/b64x256 winning) and the prior's pick ran 1.228x the best (worst
        3.37x); with these 1.113x (worst 1.67x); on seeds 54 and 55, tuned after the choice, 1.232x ->
        1.119x and 1.264x -> 1.138x (worst 1.59x and 2.04x). The channel-tile term has since become
        recompute() (§37)."""
        wave = 2 * target.processors
        return 2.0 * min(math.log2(max(blocks, 1)) / math.log2(wave), 1.0)

    def depthwise_chain(self, p: FusedParams, problem: DwsepProblem) -> float:
        """0.3 a doubling of the depthwise outputs a thread computes in turn each step, past two: the
        stage runs before the step's multiplications can start. On the H100 (every candidate of 17
        problems timed: the suite's 4 rows, 2 of random seed 21, 11 of seed 52; bench/NOTES.md §34) the
        median candidate with 32 outputs a thread ran 7x its problem's best, with 1-2 outputs 1.4x;
        the term took the prior's pick from 1.63x the best to 1.16x (worst 6.07x -> 1.70x)."""
        # Counted as for the same tile with items one load wide: the term was fitted on those, and
        # item_width weighs the wider items on their own.
        work = p.work_of_items(problem.layout is Layout.NHWGC, p.vector)
        items = work[2] if work else 1
        return 0.3 * max(0.0, math.log2(items / 2))

    # The score of 16-byte items over narrower loads, for or against them (item_width).
    wide_items_weight: ClassVar[float] = 0.5

    def item_width(self, p: FusedParams, problem: DwsepProblem) -> float:
        """For 16-byte items over narrower loads where they paid on the H100, against them elsewhere. Every
        candidate of the 39 shipped channels-last problems whose winners had narrower loads timed both
        ways (bench/NOTES.md §37): over 32 taps (each window's tap masks then take four registers, not
        one) the best wide tile ran 1.7-3.3x faster than the best narrow one (5 layers, all 7x7); fp32
        (items of 4 over 1) 0.84-1.25x; 16-bit with up to 29 taps 0.65-1.05x, 0.86x geomean."""
        if not p.item_bytes:
            return 0.0
        pays = math.prod(problem.filter) > 32 or problem.dtype is DType.FP32
        return self.wide_items_weight if pays else -self.wide_items_weight


@dataclass(frozen=True)
class FusedMfmaParams(FusedParams):
    instruction_m: ClassVar[int] = MFMA_TILE
    instruction_n: ClassVar[int] = MFMA_TILE
    lanes: ClassVar[int] = WAVE_LANES
    engine: ClassVar[str] = "mfma"


class FusedMfma(MfmaRules, Fused):
    name = "fused_mfma"
    params_type = FusedMfmaParams
    description = "the `fused` kernel on AMD CDNA matrix cores (MFMA, 64-lane wavefronts; fp32 on the fp32 instruction)"

    def why_not(self, p: FusedParams, problem: DwsepProblem, target: DeviceTarget) -> str | None:
        return self.bf16_refusal(problem, target) or super().why_not(p, problem, target)

    # Measured on the H100 only; AMD targets keep the prior without these terms.
    recompute_weight: ClassVar[float] = 0.1

    def fill(self, blocks: int, target: DeviceTarget) -> float:
        return fill_score(blocks, target)

    def recompute(self, problem: DwsepProblem) -> float:
        return self.recompute_weight

    def depthwise_chain(self, p: FusedParams, problem: DwsepProblem) -> float:
        return 0.0


def _blocks_m(p: FusedParams, problem: DwsepProblem, target: DeviceTarget) -> int:
    """Blocks along the position tiles: one per tile. (The kernel lets a block take every gridDim.x-th
    tile, its next tile's inputs loading under the current one's multiplications; one to eight waves
    of resident blocks that way measured slower on the H100 in §24 and no faster in §36 of
    bench/NOTES.md.)"""
    return math.ceil(problem.positions / p.block_m)
