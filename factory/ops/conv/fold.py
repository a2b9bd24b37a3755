"""3-D convolutions that are 2-D ones in disguise: the same bytes read as a problem of lower rank.

An axis whose filter is 1, with stride 1 and no padding, maps each input position to the output
position of the same index. Two such axes next to each other in memory act as one axis of their
product's length, and so do the batch axis and such a spatial axis where they are adjacent. So a
(3, 1, 1) filter over D x H x W (R(2+1)D's temporal convolution) is a (3, 1) filter over D x (H * W),
in every layout, and a (1, 3, 3) filter (its spatial one) over N images of D frames is a 3 x 3 filter
over N * D images, where N and D are adjacent (NDHWGC, GNDHWC; not NGCDHW, whose groups and channels
lie between them). Every tensor keeps its bytes: the weight's folded axes have length 1.

Families that have no 3-D kernels serve such problems through this view (`OpModule.problem_seen_by`);
the tensors the caller passes, the reference and the checks stay the 3-D problem's.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from ...problem import ConvProblem, Layout

# Layouts whose activations hold the batch axis right outside the outermost spatial one.
BATCH_BESIDE_SPACE = frozenset((Layout.NHWGC, Layout.GNHWC))


def passes_through(problem: ConvProblem, axis: int) -> bool:
    """Whether spatial `axis` maps every input position to the same output index (filter 1, stride 1,
    no padding on either side): it then merges with an adjacent axis that does too."""
    return (problem.filter[axis] == 1 and problem.stride[axis] == 1
            and problem.pad[axis] == 0 and problem.pad_right[axis] == 0)


@lru_cache(maxsize=4096)
def lower_rank(problem: ConvProblem) -> ConvProblem | None:
    """The 2-D problem a 3-D one is, on the same tensors; None when it is not one.

    H and W passing through merge into one axis (any layout); otherwise D passing through merges into
    the batch where the layout keeps them adjacent. 1-D and 2-D problems are left as they are.
    """
    if problem.ndim != 3:
        return None
    if passes_through(problem, 1) and passes_through(problem, 2):
        depth, height, width = problem.input
        return _keep_axis(problem, 0, (depth, height * width))
    if passes_through(problem, 0) and problem.layout in BATCH_BESIDE_SPACE:
        return dataclasses.replace(_keep_axes(problem, (1, 2)), N=problem.N * problem.input[0])
    return None


def _keep_axis(problem: ConvProblem, axis: int, input_sizes: tuple[int, int]) -> ConvProblem:
    """`problem` over `input_sizes`, the kept axis's filter geometry first and a pass-through axis after."""
    def pair(values: tuple[int, ...], through: int) -> tuple[int, int]:
        return (values[axis], through)
    return dataclasses.replace(problem, input=input_sizes, filter=pair(problem.filter, 1),
                               stride=pair(problem.stride, 1), pad=pair(problem.pad, 0),
                               pad_right=pair(problem.pad_right, 0), dilation=pair(problem.dilation, 1))


def _keep_axes(problem: ConvProblem, axes: tuple[int, int]) -> ConvProblem:
    """`problem` over two of its spatial axes, each with its own filter geometry."""
    def pick(values: tuple[int, ...]) -> tuple[int, int]:
        return (values[axes[0]], values[axes[1]])
    return dataclasses.replace(problem, input=pick(problem.input), filter=pick(problem.filter),
                               stride=pick(problem.stride), pad=pick(problem.pad),
                               pad_right=pick(problem.pad_right), dilation=pick(problem.dilation))
