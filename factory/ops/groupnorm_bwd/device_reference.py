"""GroupNorm backward's float64 reference and error scale as device kernels
(templates/common/reference_groupnorm.hip.j2), for tunes.

On the host a large problem's reference (two passes of the formula over float64 copies of x and dy, and
its results handed to the measuring worker) is most of a tune (bench/NOTES.md 45, 46); on the device it
reads the tensors the candidates read and leaves the references where the output check needs them.
"""

from __future__ import annotations

import math

from ...problem import Layout
from ..base import REFERENCE_WORKSPACE, Buf, DeviceReference, Launch, LaunchPlan
from ..conv import cpp_type
from .common import INT32_LIMIT, gn_args
from .problem import GroupNormProblem

TEMPLATE = "reference_groupnorm.hip.j2"
THREADS = 256
GRID_STRIDE_BLOCKS = 132 * 16  # enough blocks to fill any current GPU; each strides over the rest
SUMS = 4  # doubles per channel (a, b and their magnitudes), then per group (c2, c3 and theirs)


def groupnorm_device_reference(problem: GroupNormProblem) -> DeviceReference | None:
    """The launches: per-channel sums, per-group coefficients, dx, then dgamma and dbeta (affine)."""
    if problem.numel > INT32_LIMIT:
        return None
    args = gn_args(problem).replace(ws=Buf(REFERENCE_WORKSPACE))
    channels, groups = problem.N * problem.C, problem.N * problem.G
    block = (THREADS, 1, 1)
    steps = [
        Launch("kf_ref_channels", (channels, 1, 1), block, (args,)),
        Launch("kf_ref_groups", (math.ceil(groups / THREADS), 1, 1), block, (args,)),
        Launch("kf_ref_dx", (max(1, min(GRID_STRIDE_BLOCKS, math.ceil(problem.numel / THREADS))), 1, 1), block,
               (args, Buf("dx.ref"), Buf("dx.scale"))),
    ]
    if problem.affine:
        steps.append(Launch("kf_ref_affine", (math.ceil(problem.C / THREADS), 1, 1), block,
                            (args, Buf("dgamma.ref"), Buf("dgamma.scale"), Buf("dbeta.ref"), Buf("dbeta.scale"))))
    plan = LaunchPlan(tuple(steps), workspace_bytes=8 * SUMS * (channels + groups))
    values = (("tin", cpp_type(problem.dtype.tensor)), ("channels_last", int(problem.layout is Layout.NHWGC)))
    return DeviceReference(TEMPLATE, values, plan)
