"""GroupNorm backward's float64 reference and error scale as device kernels
(templates/common/reference_groupnorm.hip.j2), for tunes.

On the host a large problem's reference (two passes of the formula over float64 copies of x and dy, and
its results handed to the measuring worker) is most of a tune (bench/NOTES.md 45, 46); on the device it
reads the tensors the candidates read and leaves the references where the output check needs them.
"""

from __future__ import annotations

import math

from ...problem import Layout
from ..base import REFERENCE_THREADS, REFERENCE_WORKSPACE, Buf, DeviceReference, Launch, LaunchPlan, reference_blocks
from ..conv import cpp_type
from .common import INT32_LIMIT, gn_args
from .problem import GroupNormProblem

TEMPLATE = "reference_groupnorm.hip.j2"
SUMS = 4  # doubles per channel (a, b and their magnitudes), then per group (c2, c3 and theirs)


def groupnorm_device_reference(problem: GroupNormProblem) -> DeviceReference | None:
    """The launches: per-channel sums, per-group coefficients, dx, then dgamma and dbeta (affine)."""
    if problem.numel > INT32_LIMIT:
        return None
    args = gn_args(problem).replace(ws=Buf(REFERENCE_WORKSPACE))
    channels, groups = problem.N * problem.C, problem.N * problem.G
    block = (REFERENCE_THREADS, 1, 1)
    steps = [
        Launch("kf_ref_channels", (channels, 1, 1), block, (args,)),
        Launch("kf_ref_groups", (math.ceil(groups / REFERENCE_THREADS), 1, 1), block, (args,)),
        Launch("kf_ref_dx", reference_blocks(problem.numel), block,
               (args, Buf("dx.ref"), Buf("dx.scale"))),
    ]
    if problem.affine:
        steps.append(Launch("kf_ref_affine", (math.ceil(problem.C / REFERENCE_THREADS), 1, 1), block,
                            (args, Buf("dgamma.ref"), Buf("dgamma.scale"), Buf("dbeta.ref"), Buf("dbeta.scale"))))
    plan = LaunchPlan(tuple(steps), workspace_bytes=8 * SUMS * (channels + groups))
    values = (("tin", cpp_type(problem.dtype.tensor)), ("channels_last", int(problem.layout is Layout.NHWGC)))
    return DeviceReference(TEMPLATE, values, plan)
