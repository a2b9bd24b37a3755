"""`mma`: backward-data as implicit GEMM on matrix instructions (templates/common/igemm.h, mma.h).

Per group and stride phase (templates/conv_bwd_data/mma.hip.j2): dIn (input positions of the phase x
C) = sum over (tap of the phase, k) of dOut x W, with blocks tiling positions (M) and channels (N) and
warps issuing mma.sync (fp32 as three TF32 products, int8 on s8 with int32 sums). A strided problem
runs its stride phases as grid z, each reducing over only the taps that reach it (CK's YTilde/XTilde
split, in one launch); a 1x1 stride-1 problem is one phase with one tap: a plain GEMM.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout
from ..base import I32, Buf, Launch, LaunchPlan, Struct
from ..conv import layouts as cl
from ..conv.family import CHUNK_BYTES_MAX, LANES, MMA_K, MMA_M, MMA_N, MmaSyncRules
from ..conv import kernel_args
from ..conv.tile_store import TileStore
from ..conv.transpose import TRANSPOSE_TILE, copy_regions, transpose_launch, transpose_values
from .common import ALL_CELLS, GRID_Y_LIMIT, OUTPUT, TENSORS, BwdDataFamily, input_positions, reduction_rows, result_scalar

# Groups side by side, measured on the H100 (bench/NOTES.md section 59): the best such point against the best
# without, C = 8: 0.79x, C = 16: 0.86x and 0.97x, C = 24: 1.11x, C = 32: 1.03-1.18x (five problems). The
# products off the diagonal outweigh the fuller tile from C = 24 on, so wider groups are refused, and the
# prior charges 0.3 a doubling of groups (wgmma's best picks at C = 8 and 16 under it).
MAX_C_SIDE_BY_SIDE = 16
GROUPS_WASTE = 0.3
K32_DTYPES = frozenset({DType.INT8, DType.INT8_SAT})  # m16n8k32: block_k a multiple of 32
OPERAND_BYTES = {DType.FP16: 2, DType.BF16: 2, DType.FP32: 4, DType.INT8: 1, DType.INT8_SAT: 1}
ACC_BYTES = 4  # an accumulator: fp32, or int32 for int8 operands
STORE_BYTES = 16  # a staged store's vector of grad_input elements
MAX_TAPS = 256  # the template's table of a phase's taps
TAP_BYTES = 20  # one table entry (Tap: two offsets, three ints)
GRID_Z_LIMIT = 65535


class PhaseLaunch(enum.Enum):
    """How a strided problem's stride phases are launched: all as grid z of one launch, or one launch
    per phase, each sized to its own positions (the tuner decides which is faster)."""

    MERGED = "merged"
    PER_PHASE = "per_phase"


@dataclass(frozen=True)
class MmaParams:
    # The engine's instruction tile and lanes per warp (mma.sync here; the mfma family's are AMD's).
    instruction_m: ClassVar[int] = MMA_M
    instruction_n: ClassVar[int] = MMA_N
    lanes: ClassVar[int] = LANES
    engine: ClassVar[str] = "mma"

    block_m: int  # input positions per block
    block_n: int  # input channels per block
    block_k: int  # reduction rows (tap, k) per stage
    warps_m: int
    warps_n: int
    stages: int
    vector_a: int  # output-gradient elements per chunk: along k (channels-last), or along positions
    #                (NGKHW tensors of a pointwise problem); else 1
    vector_b: int  # weight elements per chunk along c (GKYXC weights, or any weight of a 1x1 filter); else 1
    phases: PhaseLaunch = PhaseLaunch.MERGED
    store: TileStore = TileStore.ELEMENT
    transpose: bool = False  # NGCHW: grad_output (and a GKCYX weight) copied channels-last into the
    #                         workspace, the channels-last grad_input copied back (conv/transpose.py)
    groups_per_tile: int = 1  # groups side by side in a block's GEMM (block-diagonal weight, zeros loaded)

    def __post_init__(self) -> None:
        im, in_ = self.instruction_m, self.instruction_n
        if self.block_m % (self.warps_m * im) or self.block_n % (self.warps_n * in_):
            raise ValueError(f"block {self.block_m}x{self.block_n} does not split into {self.warps_m}x{self.warps_n} "
                             f"warp tiles of whole {im}x{in_} instructions")
        if self.block_k % MMA_K or self.threads % self.block_k:
            raise ValueError(f"block_k {self.block_k} must be a multiple of {MMA_K} dividing the {self.threads} threads")
        if self.stages < 2:
            raise ValueError("the pipeline needs at least 2 stages")
        for v in (self.vector_a, self.vector_b):
            if v not in (1, 2, 4, 8, 16) or self.block_k % v or self.block_n % v or self.block_m % v:
                raise ValueError(f"vector width {v} must be 1, 2, 4, 8 or 16 and divide the block tile")
        check_groups_per_tile(self.groups_per_tile)

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * self.lanes

    def shared_bytes(self, layout: Layout, dtype: DType) -> int:
        """The block's dynamic shared memory: every stage's A and B tiles (igemm.h Config::SHARED_BYTES),
        rows padded by 16 bytes, A r-major where the output gradient is not channels-last; a staged store
        reuses it for the finished tile (store_staged)."""
        size = OPERAND_BYTES[dtype]
        pad = 16 // size
        a_by_rows = a_rmajor(layout) and not self.transpose
        a = self.block_k * (self.block_m + pad) if a_by_rows else self.block_m * (self.block_k + pad)
        b = self.block_k * (self.block_n + pad)
        pipeline = (a + b) * self.stages * size
        if self.store is TileStore.STAGED:  # the finished tile in accumulators, rows padded by 4
            return max(pipeline, self.block_m * (self.block_n + 4) * ACC_BYTES)
        return pipeline

    def suffix(self) -> str:
        per_phase = "_pp" if self.phases is PhaseLaunch.PER_PHASE else ""
        staged = "_st" if self.store is TileStore.STAGED else ""
        transposed = "_tr" if self.transpose else ""
        return (f"b{self.block_m}x{self.block_n}x{self.block_k}_w{self.warps_m}x{self.warps_n}_p{self.stages}"
                f"_v{self.vector_a}x{self.vector_b}{per_phase}{transposed}{staged}{groups_suffix(self.groups_per_tile)}")

    def template_values(self) -> dict[str, Any]:
        return {"engine": self.engine, "block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k,
                "warps_m": self.warps_m, "warps_n": self.warps_n, "threads": self.threads, "stages": self.stages,
                "vector_a": self.vector_a, "vector_b": self.vector_b, "max_taps": MAX_TAPS,
                "per_phase": self.phases is PhaseLaunch.PER_PHASE, "staged_store": self.store is TileStore.STAGED,
                "transpose": self.transpose, "stage_positions": True,
                "groups_per_tile": self.groups_per_tile} | transpose_values()


def check_groups_per_tile(groups: int) -> None:
    if groups not in (1, 2, 4, 8):
        raise ValueError(f"groups_per_tile must be 1, 2, 4 or 8, not {groups}")


def groups_suffix(groups: int) -> str:
    return f"_gt{groups}" if groups > 1 else ""


def groups_refusal(p: Any, problem: ConvProblem) -> str | None:
    """Why `groups_per_tile` groups side by side do not suit `problem`, or None."""
    if p.groups_per_tile == 1:
        return None
    if problem.G < p.groups_per_tile:
        return f"G={problem.G}: fewer groups than the {p.groups_per_tile} a tile takes"
    if problem.C > MAX_C_SIDE_BY_SIDE:
        return (f"C={problem.C}: groups side by side pay for C <= {MAX_C_SIDE_BY_SIDE} only (the products off the "
                f"diagonal cost more than the fuller tile gains)")
    return None


def a_rmajor(layout: Layout) -> bool:
    """Output-gradient tiles are stored r-major (element by element) unless K is innermost."""
    return not cl.channel_innermost(layout)


def weight_c_innermost(layout: Layout) -> bool:
    return layout.weight_order.endswith("C")


def pointwise(problem: ConvProblem) -> bool:
    """A 1x1 filter at stride 1 without padding: one tap, input position = output position, so an
    NGKHW output gradient is contiguous along the GEMM's positions and any weight along C."""
    return (problem.filter_volume == 1 and math.prod(problem.stride) == 1
            and not any(problem.pad_left) and not any(problem.pad_right))


class Mma(MmaSyncRules, BwdDataFamily):
    name = "mma"
    template = "conv_bwd_data/mma.hip.j2"
    params_type = MmaParams
    description = ("implicit GEMM on matrix instructions (mma.sync; fp32 as 3xTF32, int8 on s8); strided problems "
                   "split by stride phase, only the taps that reach a phase multiplied")

    def supported_cells(self) -> frozenset:
        return ALL_CELLS

    def cell_allows(self, params: MmaParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        if dtype in K32_DTYPES and params.block_k % 32:
            return False
        return max(params.vector_a, params.vector_b) * OPERAND_BYTES[dtype] <= CHUNK_BYTES_MAX

    def why_not_here(self, p: MmaParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.C == 1 and problem.K == 1:
            return ("depthwise (C = K = 1): a 1x1 GEMM a group; the depthwise families serve it (on 654 tuned "
                    "H100 problems this family's best took 1.9-500x the best one's time)")
        if problem.G > GRID_Y_LIMIT:
            return f"G={problem.G} exceeds the grid's {GRID_Y_LIMIT} groups"
        if math.prod(problem.stride) > GRID_Z_LIMIT:
            return f"{math.prod(problem.stride)} stride phases exceed the grid's {GRID_Z_LIMIT}"
        if problem.filter_volume > MAX_TAPS:
            return f"filter has {problem.filter_volume} taps, the phase table holds {MAX_TAPS}"
        if p.phases is PhaseLaunch.PER_PHASE and math.prod(problem.stride) == 1:
            return "one stride phase: launching per phase is the merged launch"
        if p.transpose and p.phases is PhaseLaunch.PER_PHASE:
            return "the transposing pass runs with the merged launch of the stride phases"
        if p.transpose and (refusal := transpose_refusal(problem)):
            return refusal
        if refusal := groups_refusal(p, problem):
            return refusal
        read = channels_last_copy(problem) if p.transpose else problem  # what the main kernel reads
        if refusal := chunk_refusal(read, p.vector_a, p.vector_b):
            return refusal
        if p.store is TileStore.STAGED and (refusal := staged_store_refusal(read)):
            return refusal
        shared = p.shared_bytes(problem.layout, problem.dtype) + MAX_TAPS * TAP_BYTES
        if shared > target.shared_optin:
            return f"the pipeline needs {shared} bytes of shared memory, over the {target.shared_optin} of {target.arch}"
        return None

    def layout_values(self, params: MmaParams, layout: Layout) -> dict[str, Any]:
        return {"a_rmajor": "true" if a_rmajor(layout) and not params.transpose else "false"}

    def main_launch(self, p: MmaParams, problem: ConvProblem, target: DeviceTarget, args: Struct) -> Launch:
        return Launch("kf_main", (_tiles(problem, p.block_m, p.block_n, p.groups_per_tile),
                                  math.ceil(problem.G / p.groups_per_tile), math.prod(problem.stride)),
                      (p.threads, 1, 1), (args,),
                      shared_bytes=p.shared_bytes(problem.layout, problem.dtype))

    def launch_plan(self, p: MmaParams, problem: ConvProblem, target: DeviceTarget) -> LaunchPlan:
        if p.transpose:
            return transposed_plan(self, p, problem, target)
        if p.phases is PhaseLaunch.MERGED:
            return super().launch_plan(p, problem, target)
        args = kernel_args(TENSORS, problem)
        tiles_n = math.ceil(problem.C * p.groups_per_tile / p.block_n)
        groups = math.ceil(problem.G / p.groups_per_tile)
        return LaunchPlan(tuple(
            Launch("kf_main", (math.ceil(positions / p.block_m) * tiles_n, groups, 1), (p.threads, 1, 1),
                   (args, I32(phase)), shared_bytes=p.shared_bytes(problem.layout, problem.dtype))
            for phase, positions in enumerate(phase_sizes(problem)) if positions))

    def heuristic_score(self, p: MmaParams, problem: ConvProblem, target: DeviceTarget) -> float:
        # The terms are in doublings of time: least squares over the 585 mma times of the H100 suite+seed21
        # problems with C*K > 16, each problem's mean taken out.
        many = 1.0 if problem.C * problem.K > 16 else -1.0  # few channels per group: the direct family's
        # Chunks narrower than the problem allows: output-gradient chunks count most (vector_a 2 0.48x the
        # time of 1, 4 0.69x of 2, 8 0.80x of 4), weight chunks little (vector_b 0.95x a doubling); 60-112
        # same-params pairs each.
        widest_a, widest_b = widest_chunks(channels_last_copy(problem) if p.transpose else problem)
        chunks = 0.6 * math.log2(p.vector_a / widest_a) + 0.1 * math.log2(p.vector_b / widest_b)
        # A larger tile reuses each staged element over more products: 0.5 a doubling of products per
        # element loaded, counted from one instruction's tile (NHWGC C=K=256 stride 2: 128x128 0.64x the time
        # of 64x32).
        reuse = 0.5 * math.log2(products_per_load(p.block_m, p.block_n) / products_per_load(MMA_M, MMA_N))
        # Channels past C are computed and dropped: 0.6 a halving of the share kept (columns of all the
        # block's groups).
        columns = problem.C * p.groups_per_tile
        used_n = columns / (math.ceil(columns / p.block_n) * p.block_n)
        # Groups side by side multiply the off-diagonal weight blocks (zeros) too.
        off_diagonal = GROUPS_WASTE * math.log2(p.groups_per_tile)
        # Reduction rows past the sum are staged and multiplied by zero: time in proportion to the stages
        # (a 1x1 K = 8 problem fills a quarter of a 32-row stage).
        rows = reduction_rows(problem)
        used_k = rows / (math.ceil(rows / p.block_k) * p.block_k)
        # One launch per stride phase ran 1.30x the merged launch's time (16 same-tile pairs, 13 slower), as
        # bench/NOTES.md section 20 found.
        per_phase = 0.4 if p.phases is PhaseLaunch.PER_PHASE else 0.0
        # The staged store: 0.91x the time of the same point's element stores (geomean of 150 pairs, 0.67-1.06x)
        # on the seven H100 channels-last suite problems it serves (bench/NOTES.md section 49).
        staged = 0.15 if p.store is TileStore.STAGED else 0.0
        transposed = transposed_gain(problem) if p.transpose else 0.0
        return (2.0 + many + chunks + reuse + 0.6 * math.log2(used_n) + math.log2(used_k) - per_phase + staged + transposed
                - off_diagonal + self.tile_fill(p, problem, target))

    def tile_fill(self, p: MmaParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """Under two blocks an SM, 0.6 a halving: fewer blocks leave SMs idle or without a second block to
        hide the first's latency (3-D fp32 C=48: 64x32 tiles, 3.4 blocks an SM, ran 0.76x the time of
        128x32 at 1.7); past that the larger tile is the better use of the SMs (the reuse term). Counted
        against the blocks of one instruction tile each where those are fewer, so a small problem is not
        marked down against the other families for a fill no tile reaches."""
        most = min(2 * target.processors, merged_blocks(problem, MMA_M, MMA_N))
        blocks = merged_blocks(problem, p.block_m, p.block_n, p.groups_per_tile)
        return 0.6 * min(0.0, math.log2(blocks / most))


def products_per_load(rows: int, cols: int) -> float:
    """Multiply-accumulates per staged element of a rows x cols tile (per reduction row)."""
    return rows * cols / (rows + cols)


def chunk_refusal(problem: ConvProblem, vector_a: int, vector_b: int) -> str | None:
    """Why chunks of vector_a output-gradient and vector_b weight elements cannot load `problem`, or None."""
    positions = math.prod(problem.input)
    if a_rmajor(problem.layout) and vector_a > 1 and not (pointwise(problem) and positions % vector_a == 0):
        return (f"chunks of {vector_a} output-gradient positions need a 1x1 filter at stride 1 without "
                f"padding and positions per image divisible by them ({positions})")
    if not weight_c_innermost(problem.layout) and vector_b > 1 and problem.filter_volume != 1:
        return f"chunks of {vector_b} weights along C need C innermost (GKYXC) or a 1x1 filter"
    if (not a_rmajor(problem.layout) and problem.K % vector_a) or problem.C % vector_b:
        return (f"chunks of {vector_a} along K and {vector_b} along C need K and C divisible by them "
                f"(C={problem.C}, K={problem.K})")
    return None


TRANSPOSED_DTYPES = (DType.FP16, DType.BF16, DType.FP32)  # grad_input of the tensors' own type


def transposed_plan(family: BwdDataFamily, p: Any, problem: ConvProblem, target: DeviceTarget) -> LaunchPlan:
    """grad_output (and a GKCYX weight of several taps) copied channels-last, the family's main kernel on the
    copies writing a channels-last grad_input into the workspace, and that copied back to NGCHW."""
    read = channels_last_copy(problem)
    size = OPERAND_BYTES[problem.dtype]
    out_spatial, in_spatial = math.prod(problem.output), math.prod(problem.input)
    taps, rows = problem.filter_volume, problem.G * problem.K
    copy_weight = not weight_c_innermost(problem.layout) and taps > 1  # one tap: GKCYX is GKYXC already
    sizes = (problem.N * out_spatial * rows * size, input_positions(problem) * problem.G * problem.C * size)
    sizes += (rows * taps * problem.C * size,) if copy_weight else ()
    regions, workspace = copy_regions(sizes)
    dout, din = regions[0], regions[1]
    moved = {"out": dout, "in": din} | ({"wei": regions[2]} if copy_weight else {})
    args = kernel_args(TENSORS, read).replace(**moved)
    steps = [transpose_launch(Buf("grad_output"), dout, rows, out_spatial, problem.N, size)]
    if copy_weight:  # (G*K) x C x taps -> (G*K) x taps x C
        steps.append(transpose_launch(Buf("weight"), regions[2], problem.C, taps, rows, size))
    steps.append(family.main_launch(p, read, target, args))
    # N x positions x (G*C) -> N x (G*C) x positions: the pass with channels and positions swapped.
    steps.append(transpose_launch(din, Buf(OUTPUT), in_spatial, problem.G * problem.C, problem.N, size))
    return LaunchPlan(tuple(steps), workspace)


def transpose_refusal(problem: ConvProblem) -> str | None:
    """Why the transposing pass cannot serve `problem`, or None."""
    if cl.channel_innermost(problem.layout):
        return "the transposing pass serves NGCHW tensors; these are channels-last already"
    if problem.dtype not in TRANSPOSED_DTYPES:
        return "the transposing pass copies fp16, bf16 and fp32 tensors (int8 writes an int32 or int8 gradient)"
    if max(problem.N, problem.G * problem.K) > GRID_Z_LIMIT:
        return f"the transposing pass takes one sample (and one weight row) per grid z, at most {GRID_Z_LIMIT}"
    back = transpose_launch(Buf(OUTPUT), Buf(OUTPUT), math.prod(problem.input), problem.G * problem.C, problem.N,
                            OPERAND_BYTES[problem.dtype])
    if back.grid[1] > GRID_Y_LIMIT:  # the shared tile's copy (the register copy's grid is one-dimensional)
        return (f"copying grad_input back through the shared tile takes a block row per {TRANSPOSE_TILE} input "
                f"positions, at most {GRID_Y_LIMIT * TRANSPOSE_TILE} (the input has {math.prod(problem.input)})")
    return None


def transposed_gain(problem: ConvProblem) -> float:
    """The prior's weight of a transposing point against the NGCHW points that read the tensors in place
    (chunks are counted against the copies' widest, so this term weighs the copies' chunked reads against
    the pass's traffic and launches). Best point of each kind, H100, the suite and random seed 13
    (bench/NOTES.md sections 50 and 54): where grad_output is read element by element in place, the copies
    ran 1.15-2.4x faster on 16-bit problems of 5.8 MB and more, 1.17x on fp32 (3xTF32's products weigh
    more), but 0.5-0.69x on problems of 0.3-2.9 MB (three more launches; random seed 83, section 54)
    unless each grad_input element sums many products: on the small problems of eight DBs the copies ran
    1.28-2.0x slower with 32-216 reduction rows and 0.46-0.86x faster with 432-6480 (section 59), the
    in-place element reads being paid per product; where the in-place reads are chunks already (a
    pointwise layer's positions), 0.58x."""
    if widest_chunks(problem)[0] > 1:
        return -0.5
    if problem_bytes(problem) < TRANSPOSE_PAYS_BYTES and reduction_rows(problem) < TRANSPOSE_PAYS_ROWS:
        return -1.0
    return 0.2 if problem.dtype is DType.FP32 else 0.9


TRANSPOSE_PAYS_BYTES = 4_000_000  # grad_output and grad_input together
TRANSPOSE_PAYS_ROWS = 384  # products a grad_input element sums past which the copies pay on small problems


def problem_bytes(problem: ConvProblem) -> int:
    """grad_output's and grad_input's bytes: what the pass copies."""
    elements = problem.N * problem.G * (math.prod(problem.output) * problem.K + math.prod(problem.input) * problem.C)
    return elements * OPERAND_BYTES[problem.dtype]


def channels_last_copy(problem: ConvProblem) -> ConvProblem:
    """The problem the main kernel of a transposing point computes: the same sizes, channels-last."""
    return dataclasses.replace(problem, layout=Layout.NHWGC)


def staged_store_refusal(problem: ConvProblem) -> str | None:
    """Why a staged store's 16-byte vectors along C cannot write `problem`'s grad_input, or None."""
    vector = STORE_BYTES // result_scalar(problem.dtype).nbytes
    if not cl.channel_innermost(problem.layout):
        return "a staged store writes along C: grad_input must be channels-last (NHWGC, GNHWC)"
    if problem.C % vector:
        return f"a staged store writes {vector} channels at once: C={problem.C} must divide by {vector}"
    return None


def widest_chunks(problem: ConvProblem) -> tuple[int, int]:
    """The widest vector_a and vector_b (powers of 2 up to 16 bytes) that chunk_refusal allows."""
    widths = [1 << i for i in range((CHUNK_BYTES_MAX // OPERAND_BYTES[problem.dtype]).bit_length())]
    widest_a = max(w for w in widths if chunk_refusal(problem, w, 1) is None)
    widest_b = max(w for w in widths if chunk_refusal(problem, 1, w) is None)
    return widest_a, widest_b


def phase_positions(problem: ConvProblem) -> int:
    """Input positions (times N) of the largest stride phase: ceil(input / stride) along each axis."""
    return problem.N * math.prod(math.ceil(i / s) for i, s in zip(problem.input, problem.stride))


def phase_sizes(problem: ConvProblem) -> list[int]:
    """Input positions (times N) of each stride phase, in the template's phase order (W fastest)."""
    per_axis = []
    for size, stride, pad in zip(problem.input, problem.stride, problem.pad_left):
        first = [(t - pad) % stride for t in range(stride)]  # the phase's first input coordinate
        per_axis.append([max(0, math.ceil((size - i0) / stride)) for i0 in first])
    return [problem.N * math.prod(counts) for counts in _product(per_axis)]


def _product(per_axis: list[list[int]]) -> list[tuple[int, ...]]:
    combos: list[tuple[int, ...]] = [()]
    for values in per_axis:
        combos = [c + (v,) for c in combos for v in values]
    return combos


def merged_blocks(problem: ConvProblem, block_m: int, block_n: int, groups_per_tile: int = 1) -> int:
    """Blocks of the merged launch of block_m x block_n tiles: the largest phase's tiles, times the
    blocks of groups and stride phases."""
    groups = math.ceil(problem.G / groups_per_tile)
    return _tiles(problem, block_m, block_n, groups_per_tile) * groups * math.prod(problem.stride)


def _tiles(problem: ConvProblem, block_m: int, block_n: int, groups_per_tile: int = 1) -> int:
    """A block of groups' position tiles x channel tiles (its GEMM has groups_per_tile x C columns)."""
    return math.ceil(phase_positions(problem) / block_m) * math.ceil(problem.C * groups_per_tile / block_n)
