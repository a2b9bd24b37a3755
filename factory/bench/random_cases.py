"""Random benchmark problems: `kfactory bench --random N --seed S` draws N problems per op.

The draws resemble the layers of real networks rather than a fixed list, so a good result cannot come
from tuning the catalog to the suite. Each drawn problem becomes a one-dtype, one-layout suite Case
(named e.g. `rand_s7_012_dw1d_k31`: seed, index within the op, kind, filter) whose problem is parsed
from its spec by the op's own parser, so the runner, the report and `--compare` treat it as any suite
case. The same (seed, N, ops, dtypes) draws the same problems: every problem has its own generator,
`numpy.random.default_rng([seed, op stream, index])`, read only through `random()` (doubles taken
straight from the bit generator, so the draws do not hang on how numpy implements its distributions);
`--random 3` draws the first 3 problems of `--random 60`, and adding an op leaves the other op's
problems as they were.

conv_bwd_weight (C and K per group; a kind first, then layout, dtype, then the sizes):

  kind     share  groups x channels               filters (share within the kind)              spatial
  dw2d     30 %   G 32..1024, C = K = 1            3x3 45, 5x5 22, 7x7 15, 4x4 5, 9x9..13x13 13    H, W 7..112
  dw1d     12 %   G 32..1024, C = K = 1            3..64 taps                                      W 256..8192
  dw3d      8 %   G 32..512, C = K = 1             3x3x3 40, 1x3x3 30, 3x1x1 30                    D 4..32, H, W 7..56
  grouped  18 %   C = K 2..32, G*C 32..1024        3x3 80, 1x1 10, 5x5 10                          H, W 7..112
  dense    22 %   G = 1, C, K 16..512              1x1 50, 3x3 50                                  H, W 7..112
  dense3d  10 %   G = 1, C, K 16..256              3x1x1 40, 3x3x3 40, 1x3x3 20                    D 4..32, H, W 7..56

- Sizes within a range are log-uniform integers (small sizes as likely per octave as large ones), odd
  sizes included; H = W in 3 draws of 4. Channel counts (G for depthwise, C and K for dense) are rounded
  to a multiple of 8 in 3 draws of 4 and kept as drawn otherwise. Grouped C = K per group is one of
  2, 4, 8, 16, 32 in 7 draws of 10, any of 2..32 otherwise.
- Batch N from 1, 2, 4, 8, 16, 32, 64, 128, 256 with weights 1, 1, 2, 4, 5, 5, 4, 2, 1.
- Stride along H and W (W for 1-D; depth keeps stride 1): 2 in 30 % of 2-D/3-D draws, 15 % of 1-D ones.
  Dilation 2 along the filtered dims in 10 % of the stride-1 depthwise draws. Padding "same"-style,
  dilation*(k-1)//2 on both sides, or TensorFlow's SAME in 15 % of draws (the odd pixel after the last
  element: asymmetric where the total is odd).
- Layout: NHWGC 35 %, NGCHW 35 %, NGCHW_GKYXC 15 %, GNHWC 15 %. Dtype: fp16 35 %, bf16 35 %, fp32 20 %,
  bf16_fp32w 10 %.

conv_bwd_data: the same kinds, sizes, layouts and caps as conv_bwd_weight, drawn from a stream of its
own; dtype fp16 40 %, bf16 40 %, fp32 20 %.

groupnorm_bwd (C channels in all, G groups):

  kind     share  N                  C              spatial
  gnsmall  15 %   1..4               32..256        H, W 4..16 (launch-latency sized)
  gn1d     15 %   1..64              32..1024       W 64..16384
  gn2d     40 %   1..64              32..1280       H, W 7..128
  gn3d     15 %   1..16              32..512        D 2..32, H, W 8..64
  gnlarge  15 %   1..8               128..512       H, W 128..512 (VAE decoder, high-resolution UNet)

- G is 32 in 70 % of draws, 8 or 16 in 15 % each; C is rounded to a multiple of G. N is a power of two
  in 4 draws of 5, any integer of its range otherwise. GroupNorm without gamma/beta (affine=0) in 10 %.
- Layout: NGCHW 60 %, NHWGC 40 %. Dtype: fp16 40 %, bf16 40 %, fp32 20 %.

dwsep_conv_fwd (depthwise C -> C, then pointwise C -> K; activations act_dw / act_pw):

  kind      share  channels                  filters (share within the kind)   stride 2  spatial
  mnv1      30 %   C 16..1024, K 16..1280    3x3 85, 5x5 15                    25 %      H, W 7..112
  mnv2      25 %   C 16..1024, K 16..320     3x3 60, 5x5 40                    25 %      H, W 7..112
  convnext  15 %   C 96..768, K = C in 1/2   7x7                               0         H, W 7..56
  dw1d      15 %   C, K 64..512              3..31 taps, odd                   15 %      W 128..4096
  dw3d      15 %   C, K 16..256              3x3x3 40, 1x3x3 30, 3x1x1 30      25 %      D 4..16, H, W 7..28

  activations act_dw/act_pw (share within the kind)
  mnv1      relu6/relu6 60, relu/relu 25, none/none 15
  mnv2      relu6/none 70, relu/none 15, none/none 15
  convnext  none/none 60, none/relu 20, relu/relu 20
  dw1d      none/none 30, relu/relu 30, none/relu 20, relu/none 20
  dw3d      relu/relu 40, none/none 30, relu6/relu6 15, none/relu 15

- mnv1 is a MobileNetV1 block (both stages followed by relu6 in most draws), mnv2 the depthwise and
  projection of a MobileNetV2 / EfficientNet block (the expanded C down to a narrow K, no activation
  after it), convnext ConvNeXt's 7x7 stage (its GELU as relu), dw1d a separable conv of a speech model
  (QuartzNet, Conformer), dw3d a video block (X3D's channelwise 3x3x3, 1x3x3 and 3x1x1 factorized ones).
- C and K are both multiples of 8 in 3 draws of 4 and both odd otherwise. Sizes log-uniform, H = W in 3
  draws of 4, batch N as for the convs. Stride along H and W (depth keeps 1); dilation 2 in 10 % of the
  stride-1 mnv1, mnv2 and dw1d draws; padding dilation*(k-1)//2 on both sides.
- Biases: none 50 %, both 30 %, depthwise only 10 %, pointwise only 10 % (batch-norm folded in gives both).
- Layout: NHWGC 60 %, NGCHW 40 %. Dtype: fp16 40 %, bf16 40 %, fp32 20 %.

Caps, met by drawing the sizes again (the kind, layout and dtype stay): every tensor at most 256 MiB and a
conv at most 2**33 multiply-adds (dwsep_conv_fwd: its pointwise GEMM's), so one call takes well under a
second and the CPU reference that tuning checks against stays affordable. `--dtypes` restricts the dtype
draw to the dtypes given.

Change a table and the same seed draws other problems: bump RANDOM_VERSION (recorded in results.json).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence, TypeVar

import numpy as np

from ..ops import SOLVERS
from ..problem import DType, KernelFactoryError, Layout, Op
from .model import BenchError, BenchItem, Case
from .suite import dtypes_among

RANDOM_VERSION = 1
RANDOM_OPS = (Op.CONV_BWD_WEIGHT, Op.GROUPNORM_BWD, Op.CONV_BWD_DATA, Op.DWSEP_CONV_FWD)  # the order items come in
CONV_OPS = (Op.CONV_BWD_WEIGHT, Op.CONV_BWD_DATA)
# Per-op generator streams: never renumber.
_STREAM = {Op.CONV_BWD_WEIGHT: 1, Op.GROUPNORM_BWD: 2, Op.CONV_BWD_DATA: 3, Op.DWSEP_CONV_FWD: 4}
MAX_TENSOR_BYTES = 256 * 2**20
MAX_CONV_MACS = 2**33
MAX_TRIES = 10_000  # size draws per problem before giving up (a cap no draw of the kind can meet)

T = TypeVar("T")
Range = tuple[int, int]
Weighted = tuple[tuple[Any, float], ...]

LAYOUTS: dict[Op, Weighted] = {
    Op.CONV_BWD_WEIGHT: ((Layout.NHWGC, 35), (Layout.NGCHW, 35), (Layout.NGCHW_GKYXC, 15), (Layout.GNHWC, 15)),
    Op.CONV_BWD_DATA: ((Layout.NHWGC, 35), (Layout.NGCHW, 35), (Layout.NGCHW_GKYXC, 15), (Layout.GNHWC, 15)),
    Op.GROUPNORM_BWD: ((Layout.NGCHW, 60), (Layout.NHWGC, 40)),
    Op.DWSEP_CONV_FWD: ((Layout.NHWGC, 60), (Layout.NGCHW, 40)),
}
DTYPES: dict[Op, Weighted] = {
    Op.CONV_BWD_WEIGHT: ((DType.FP16, 35), (DType.BF16, 35), (DType.FP32, 20), (DType.BF16_FP32W, 10)),
    Op.CONV_BWD_DATA: ((DType.FP16, 40), (DType.BF16, 40), (DType.FP32, 20)),
    Op.GROUPNORM_BWD: ((DType.FP16, 40), (DType.BF16, 40), (DType.FP32, 20)),
    Op.DWSEP_CONV_FWD: ((DType.FP16, 40), (DType.BF16, 40), (DType.FP32, 20)),
}
CONV_BATCHES: Weighted = ((1, 1), (2, 1), (4, 2), (8, 4), (16, 5), (32, 5), (64, 4), (128, 2), (256, 1))
SQUARE = 0.75  # chance that W = H
ROUND_TO_8 = 0.75  # chance that a channel count is rounded to a multiple of 8
TF_SAME = 0.15  # chance of TensorFlow's SAME padding instead of symmetric dilation*(k-1)//2
GROUPED_WIDTHS: Weighted = ((2, 14), (4, 14), (8, 14), (16, 14), (32, 14), (None, 30))  # None: any of 2..32
GN_GROUPS: Weighted = ((32, 70), (8, 15), (16, 15))
GN_POW2_BATCH = 0.8
GN_AFFINE = 0.9
# (bias_dw, bias_pw): folded batch-norm gives both; a bias after one stage only is rarer.
DWSEP_BIASES: Weighted = (((False, False), 50), ((True, True), 30), ((True, False), 10), ((False, True), 10))


@dataclass(frozen=True)
class FilterChoice:
    """A filter shape: k drawn from `sizes` for the dims marked True, 1 for the others."""

    sizes: Range
    dims: tuple[bool, ...]
    weight: float


def _square(lo: int, hi: int, weight: float) -> FilterChoice:
    return FilterChoice((lo, hi), (True, True), weight)


@dataclass(frozen=True)
class ConvKind:
    """One kind of conv layer and its share of the conv draws."""

    tag: str
    weight: float
    channels: str  # "depthwise" (C = K = 1), "grouped" (C = K per group) or "dense" (G = 1)
    groups: Range  # depthwise: G; grouped: G*C; dense: unused
    per_group: Range  # grouped: C = K; dense: C and K each; depthwise: unused
    filters: tuple[FilterChoice, ...]
    stride2: float  # chance of stride 2 along H and W (W for 1-D)
    dilation2: float  # chance of dilation 2 along the filtered dims (stride-1 draws only)
    spatial: Range  # H and W (W for 1-D)
    depth: Range | None = None  # D for 3-D kinds

    @property
    def ndim(self) -> int:
        return len(self.filters[0].dims)


CONV_KINDS: tuple[ConvKind, ...] = (
    ConvKind("dw2d", 30, "depthwise", (32, 1024), (1, 1),
             (_square(3, 3, 45), _square(5, 5, 22), _square(7, 7, 15), _square(4, 4, 5), _square(9, 13, 13)),
             stride2=0.3, dilation2=0.1, spatial=(7, 112)),
    ConvKind("dw1d", 12, "depthwise", (32, 1024), (1, 1), (FilterChoice((3, 64), (True,), 1),),
             stride2=0.15, dilation2=0.1, spatial=(256, 8192)),
    ConvKind("dw3d", 8, "depthwise", (32, 512), (1, 1),
             (FilterChoice((3, 3), (True, True, True), 40), FilterChoice((3, 3), (False, True, True), 30),
              FilterChoice((3, 3), (True, False, False), 30)),
             stride2=0.3, dilation2=0.1, spatial=(7, 56), depth=(4, 32)),
    ConvKind("grouped", 18, "grouped", (32, 1024), (2, 32),
             (_square(3, 3, 80), _square(1, 1, 10), _square(5, 5, 10)),
             stride2=0.3, dilation2=0.0, spatial=(7, 112)),
    ConvKind("dense", 22, "dense", (1, 1), (16, 512), (_square(1, 1, 50), _square(3, 3, 50)),
             stride2=0.3, dilation2=0.0, spatial=(7, 112)),
    ConvKind("dense3d", 10, "dense", (1, 1), (16, 256),
             (FilterChoice((3, 3), (True, False, False), 40), FilterChoice((3, 3), (True, True, True), 40),
              FilterChoice((3, 3), (False, True, True), 20)),
             stride2=0.3, dilation2=0.0, spatial=(7, 56), depth=(4, 32)),
)


@dataclass(frozen=True)
class NormKind:
    """One kind of GroupNorm layer and its share of the groupnorm draws."""

    tag: str
    weight: float
    batch: Range
    channels: Range  # C before rounding to a multiple of G
    spatial: Range  # H and W (W for 1-D)
    ndim: int
    depth: Range | None = None


NORM_KINDS: tuple[NormKind, ...] = (
    NormKind("gnsmall", 15, (1, 4), (32, 256), (4, 16), 2),
    NormKind("gn1d", 15, (1, 64), (32, 1024), (64, 16384), 1),
    NormKind("gn2d", 40, (1, 64), (32, 1280), (7, 128), 2),
    NormKind("gn3d", 15, (1, 16), (32, 512), (8, 64), 3, depth=(2, 32)),
    NormKind("gnlarge", 15, (1, 8), (128, 512), (128, 512), 2),
)


@dataclass(frozen=True)
class DwsepKind:
    """One kind of depthwise-separable block and its share of the dwsep_conv_fwd draws."""

    tag: str
    weight: float
    channels: Range  # C (depthwise, the pointwise GEMM's reduction)
    outputs: Range  # K
    same_k: float  # chance that K = C
    filters: tuple[FilterChoice, ...]
    stride2: float
    dilation2: float  # stride-1 draws only
    spatial: Range
    acts: Weighted  # (act_dw, act_pw) spellings
    depth: Range | None = None

    @property
    def ndim(self) -> int:
        return len(self.filters[0].dims)


_3D_FILTERS = (FilterChoice((3, 3), (True, True, True), 40), FilterChoice((3, 3), (False, True, True), 30),
               FilterChoice((3, 3), (True, False, False), 30))
DWSEP_KINDS: tuple[DwsepKind, ...] = (
    DwsepKind("mnv1", 30, (16, 1024), (16, 1280), 0.0, (_square(3, 3, 85), _square(5, 5, 15)),
              stride2=0.25, dilation2=0.1, spatial=(7, 112),
              acts=((("relu6", "relu6"), 60), (("relu", "relu"), 25), (("none", "none"), 15))),
    DwsepKind("mnv2", 25, (16, 1024), (16, 320), 0.0, (_square(3, 3, 60), _square(5, 5, 40)),
              stride2=0.25, dilation2=0.1, spatial=(7, 112),
              acts=((("relu6", "none"), 70), (("relu", "none"), 15), (("none", "none"), 15))),
    DwsepKind("convnext", 15, (96, 768), (96, 768), 0.5, (_square(7, 7, 1),),
              stride2=0.0, dilation2=0.0, spatial=(7, 56),
              acts=((("none", "none"), 60), (("none", "relu"), 20), (("relu", "relu"), 20))),
    DwsepKind("dw1d", 15, (64, 512), (64, 512), 0.0, (FilterChoice((3, 31), (True,), 1),),
              stride2=0.15, dilation2=0.1, spatial=(128, 4096),
              acts=((("none", "none"), 30), (("relu", "relu"), 30), (("none", "relu"), 20), (("relu", "none"), 20))),
    DwsepKind("dw3d", 15, (16, 256), (16, 256), 0.0, _3D_FILTERS, stride2=0.25, dilation2=0.0, spatial=(7, 28),
              acts=((("relu", "relu"), 40), (("none", "none"), 30), (("relu6", "relu6"), 15), (("none", "relu"), 15)),
              depth=(4, 16)),
)


# --- drawing primitives: only rng.random(), whose stream numpy keeps across versions ---------------
def _pick(rng: np.random.Generator, table: Sequence[tuple[T, float]]) -> T:
    total = sum(w for _, w in table)
    x = rng.random() * total
    for value, weight in table:
        x -= weight
        if x < 0:
            return value
    return table[-1][0]


def _chance(rng: np.random.Generator, p: float) -> bool:
    return rng.random() < p


def _uniform_int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return min(hi, lo + int(rng.random() * (hi - lo + 1)))


def _log_int(rng: np.random.Generator, lo: int, hi: int) -> int:
    """An integer of [lo, hi], log-uniform: each octave as likely as the next."""
    value = int(math.exp(math.log(lo) + rng.random() * (math.log(hi + 1) - math.log(lo))))
    return max(lo, min(hi, value))


def _channels(rng: np.random.Generator, lo: int, hi: int) -> int:
    value = _log_int(rng, lo, hi)
    if _chance(rng, ROUND_TO_8):
        value = max(-(-lo // 8) * 8, min(hi // 8 * 8, round(value / 8) * 8))
    return value


def _spatial(rng: np.random.Generator, kind: Any) -> tuple[int, ...]:
    """A kind's input size: a length, a height x width, or a depth before them (3-D kinds carry `depth`)."""
    if kind.ndim == 1:
        return (_log_int(rng, *kind.spatial),)
    if kind.ndim == 2:
        return _hw(rng, kind.spatial)
    assert kind.depth is not None
    return (_log_int(rng, *kind.depth), *_hw(rng, kind.spatial))


def _hw(rng: np.random.Generator, spatial: Range) -> tuple[int, int]:
    h = _log_int(rng, *spatial)
    return h, (h if _chance(rng, SQUARE) else _log_int(rng, *spatial))


# --- conv_bwd_weight -------------------------------------------------------------------------------
def _conv_sizes(rng: np.random.Generator, kind: ConvKind) -> tuple[tuple[str, Any], ...]:
    if kind.channels == "depthwise":
        groups, c, k = _channels(rng, *kind.groups), 1, 1
    elif kind.channels == "grouped":
        c = k = _pick(rng, GROUPED_WIDTHS) or _uniform_int(rng, *kind.per_group)
        groups = _log_int(rng, -(-kind.groups[0] // c), kind.groups[1] // c)
    else:
        groups, c, k = 1, _channels(rng, *kind.per_group), _channels(rng, *kind.per_group)
    n = _pick(rng, CONV_BATCHES)
    choice = _pick(rng, [(f, f.weight) for f in kind.filters])
    size = _log_int(rng, *choice.sizes)
    filt = tuple(size if on else 1 for on in choice.dims)
    spatial = _spatial(rng, kind)
    s = 2 if _chance(rng, kind.stride2) else 1
    stride = tuple(1 if kind.ndim == 3 and d == 0 else s for d in range(kind.ndim))
    dil = 2 if s == 1 and _chance(rng, kind.dilation2) else 1
    dilation = tuple(dil if f > 1 else 1 for f in filt)
    if _chance(rng, TF_SAME):
        totals = [max((-(-i // st) - 1) * st + di * (f - 1) + 1 - i, 0)
                  for i, f, st, di in zip(spatial, filt, stride, dilation)]
        left = tuple(t // 2 for t in totals)
        right = tuple(t - t // 2 for t in totals)
    else:
        left = right = tuple(di * (f - 1) // 2 for f, di in zip(filt, dilation))
    sizes: list[tuple[str, Any]] = [("N", n), ("G", groups), ("C", c), ("K", k), ("input", spatial), ("filter", filt)]
    if any(v != 1 for v in stride):
        sizes.append(("stride", stride))
    if left != right:
        sizes += [("pad_left", left), ("pad_right", right)]
    elif any(left):
        sizes.append(("pad", left))
    if any(v != 1 for v in dilation):
        sizes.append(("dilation", dilation))
    return tuple(sizes)


def _conv_fits(problem: Any) -> bool:
    t, w = problem.dtype.tensor.nbytes, problem.dtype.weight.nbytes
    tensors = (math.prod(problem.input_shape_logical) * t, math.prod(problem.output_shape_logical) * t,
               math.prod(problem.weight_shape_logical) * w)
    return max(tensors) <= MAX_TENSOR_BYTES and problem.macs <= MAX_CONV_MACS and min(problem.output) >= 1


def _conv_hint(kind: ConvKind | DwsepKind, problem: Any) -> str:
    hint = "k" + "x".join(str(f) for f in problem.filter)
    if max(problem.stride) > 1:
        hint += f"s{max(problem.stride)}"
    if max(problem.dilation) > 1:
        hint += f"d{max(problem.dilation)}"
    return f"{kind.tag}_{hint}"


# --- groupnorm_bwd ---------------------------------------------------------------------------------
def _norm_sizes(rng: np.random.Generator, kind: NormKind) -> tuple[tuple[str, Any], ...]:
    if _chance(rng, GN_POW2_BATCH):
        powers = [p for p in (1, 2, 4, 8, 16, 32, 64) if kind.batch[0] <= p <= kind.batch[1]]
        n = powers[_uniform_int(rng, 0, len(powers) - 1)]
    else:
        n = _uniform_int(rng, *kind.batch)
    groups = _pick(rng, GN_GROUPS)
    channels = max(groups, round(_log_int(rng, *kind.channels) / groups) * groups)
    spatial = _spatial(rng, kind)
    sizes: list[tuple[str, Any]] = [("N", n), ("C", channels), ("G", groups), ("input", spatial)]
    if not _chance(rng, GN_AFFINE):
        sizes.append(("affine", 0))
    return tuple(sizes)


def _norm_fits(problem: Any) -> bool:
    return problem.numel * problem.dtype.tensor.nbytes <= MAX_TENSOR_BYTES


def _norm_hint(kind: NormKind, problem: Any) -> str:
    return f"{kind.tag}_g{problem.G}" + ("" if problem.affine else "_noaffine")


# --- dwsep_conv_fwd --------------------------------------------------------------------------------
def _odd_or_8(rng: np.random.Generator, lo: int, hi: int, aligned: bool) -> int:
    """A log-uniform channel count of [lo, hi]: a multiple of 8 when `aligned`, else odd (no vector divides it)."""
    value = _log_int(rng, lo, hi)
    if aligned:
        return max(-(-lo // 8) * 8, min(hi // 8 * 8, round(value / 8) * 8))
    return value if value % 2 else value + 1 if value < hi else value - 1


def _dwsep_sizes(rng: np.random.Generator, kind: DwsepKind) -> tuple[tuple[str, Any], ...]:
    aligned = _chance(rng, ROUND_TO_8)
    c = _odd_or_8(rng, *kind.channels, aligned)
    k = c if _chance(rng, kind.same_k) else _odd_or_8(rng, *kind.outputs, aligned)
    n = _pick(rng, CONV_BATCHES)
    choice = _pick(rng, [(f, f.weight) for f in kind.filters])
    size = min(_log_int(rng, *choice.sizes) | 1, choice.sizes[1])  # odd: centred, as networks use
    filt = tuple(size if on else 1 for on in choice.dims)
    spatial = _spatial(rng, kind)
    s = 2 if _chance(rng, kind.stride2) else 1
    stride = tuple(1 if kind.ndim == 3 and d == 0 else s for d in range(kind.ndim))
    dil = 2 if s == 1 and _chance(rng, kind.dilation2) else 1
    dilation = tuple(dil if f > 1 else 1 for f in filt)
    pad = tuple(di * (f - 1) // 2 for f, di in zip(filt, dilation))
    bias_dw, bias_pw = _pick(rng, DWSEP_BIASES)
    act_dw, act_pw = _pick(rng, kind.acts)
    sizes: list[tuple[str, Any]] = [("N", n), ("C", c), ("K", k), ("input", spatial), ("filter", filt)]
    if any(v != 1 for v in stride):
        sizes.append(("stride", stride))
    if any(pad):
        sizes.append(("pad", pad))
    if any(v != 1 for v in dilation):
        sizes.append(("dilation", dilation))
    sizes += [(name, 1) for name, on in (("bias_dw", bias_dw), ("bias_pw", bias_pw)) if on]
    sizes += [(name, act) for name, act in (("act_dw", act_dw), ("act_pw", act_pw)) if act != "none"]
    return tuple(sizes)


def _dwsep_fits(problem: Any) -> bool:
    tensors = SOLVERS[Op.DWSEP_CONV_FWD].tensors(problem)
    return max(t.nbytes for t in tensors) <= MAX_TENSOR_BYTES and problem.macs <= MAX_CONV_MACS


# --- drawing items ---------------------------------------------------------------------------------
def _kinds(op: Op) -> tuple[Any, ...]:
    if op is Op.DWSEP_CONV_FWD:
        return DWSEP_KINDS
    return CONV_KINDS if op in CONV_OPS else NORM_KINDS


def _sizes(op: Op, rng: np.random.Generator, kind: Any) -> tuple[tuple[str, Any], ...]:
    if op is Op.DWSEP_CONV_FWD:
        return _dwsep_sizes(rng, kind)
    return _conv_sizes(rng, kind) if op in CONV_OPS else _norm_sizes(rng, kind)


def _fits(op: Op, problem: Any) -> bool:
    if op is Op.DWSEP_CONV_FWD:
        return _dwsep_fits(problem)
    return _conv_fits(problem) if op in CONV_OPS else _norm_fits(problem)


def _hint(op: Op, kind: Any, problem: Any) -> str:
    """The name's kind and shape: the filter, stride and dilation for the convolutions, the groups for GroupNorm."""
    return _norm_hint(kind, problem) if op is Op.GROUPNORM_BWD else _conv_hint(kind, problem)


def draw_item(op: Op, seed: int, index: int, dtypes: Sequence[DType] | None = None) -> BenchItem:
    """Problem `index` of `op` for `seed`: a kind, a layout, a dtype (one of `dtypes`), then sizes within the caps."""
    rng = np.random.default_rng([seed, _STREAM[op], index])
    kind = _pick(rng, [(k, k.weight) for k in _kinds(op)])
    layout = _pick(rng, LAYOUTS[op])
    allowed = [(d, w) for d, w in DTYPES[op] if dtypes is None or d in dtypes]
    if not allowed:
        raise BenchError(f"--dtypes leaves {op.value} no dtype to draw (it runs in {', '.join(d.value for d, _ in DTYPES[op])})")
    dtype = _pick(rng, allowed)
    solver = SOLVERS[op]
    for _ in range(MAX_TRIES):
        sizes = _sizes(op, rng, kind)
        case = Case(op, "", sizes, (dtype,), (layout,))
        try:
            problem = solver.parse_problem(case.spec(), layout, dtype)
        except (KernelFactoryError, ValueError):
            continue
        if not _fits(op, problem):
            continue
        name = f"rand_s{seed}_{index:03d}_{_hint(op, kind, problem)}"
        return BenchItem(Case(op, name, sizes, (dtype,), (layout,)), dtype, layout, problem)
    raise RuntimeError(f"no {op.value} {kind.tag} draw within the caps in {MAX_TRIES} tries (seed {seed}, index {index})")


def parse_random_dtypes(names: Sequence[str]) -> tuple[DType, ...] | None:
    """--dtypes of a random run: any dtype some op draws (bf16_fp32w included); [] -> None (all)."""
    drawn = list(dict.fromkeys(d for table in DTYPES.values() for d, _ in table))
    return dtypes_among(names, drawn, f"random problems are drawn in {', '.join(d.value for d in drawn)}")


def draw(n: int, seed: int, ops: Sequence[Op] | None = None, dtypes: Sequence[DType] | None = None) -> list[BenchItem]:
    """n problems per op (default: every op with random problems), op by op, as suite items."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BenchError(f"--random needs a number of problems >= 1, got {n}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise BenchError(f"--random needs a --seed >= 0, got {seed}")
    chosen = RANDOM_OPS if ops is None else tuple(dict.fromkeys(ops))
    others = [op.value for op in chosen if op not in RANDOM_OPS]
    if others:
        raise BenchError(f"random problems are drawn for {', '.join(o.value for o in RANDOM_OPS)} only "
                         f"(the ops with kernels); not {', '.join(others)}")
    return [draw_item(op, seed, i, dtypes) for op in RANDOM_OPS if op in chosen for i in range(n)]


def kind_of(item: BenchItem) -> str:
    """The kind tag a random item was drawn as (from its name)."""
    return item.case.name.split("_")[3]


def random_meta(n: int, seed: int, ops: Sequence[Op] | None, dtypes: Sequence[DType] | None,
                items: Sequence[BenchItem]) -> dict[str, Any]:
    """What results.json records of a random run: enough to draw the same problems again."""
    chosen = [op.value for op in RANDOM_OPS if ops is None or op in ops]
    kinds: dict[str, dict[str, int]] = {}
    for item in items:
        per_op = kinds.setdefault(item.case.op.value, {})
        per_op[kind_of(item)] = per_op.get(kind_of(item), 0) + 1
    command = f"kfactory bench --random {n} --seed {seed} --ops {','.join(chosen)}"
    if dtypes:
        command += f" --dtypes {','.join(d.value for d in dtypes)}"
    return {
        "n_per_op": n,
        "seed": seed,
        "ops": chosen,
        "dtypes": [d.value for d in dtypes] if dtypes else None,
        "version": RANDOM_VERSION,
        "kinds": kinds,
        "command": command,
    }
