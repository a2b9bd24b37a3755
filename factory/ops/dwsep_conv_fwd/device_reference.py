"""The fused depthwise-separable forward's float64 reference and error scale as device kernels
(templates/common/reference_dwsep.hip.j2), for tunes.

numpy computes the pointwise stage with einsum on one core: 11 s for the suite's mnv1_b64 on a two-core
host, twice (the error scale is a second pass on |inputs|). On the device both stages read the tensors the
candidates read; the depthwise stage's values and magnitudes wait in a scratch buffer of doubles.
"""

from __future__ import annotations

import math

from ..base import I32, REFERENCE_THREADS, REFERENCE_WORKSPACE, Buf, DeviceReference, Launch, LaunchPlan, reference_blocks
from ..conv import INT32_LIMIT, cl, cpp_type
from .fused import dwsep_args
from .problem import DwsepProblem

TEMPLATE = "reference_dwsep.hip.j2"
MAX_SCRATCH_BYTES = 8 << 30  # past this the depthwise stage's doubles would crowd the GPU: the host computes


def dwsep_device_reference(problem: DwsepProblem) -> DeviceReference | None:
    """The two launches (depthwise into the scratch, pointwise into the output's references)."""
    mids = problem.N * problem.C * math.prod(problem.output)
    outputs = problem.N * problem.K * math.prod(problem.output)
    if 16 * mids > MAX_SCRATCH_BYTES or max(problem.N * problem.C * math.prod(problem.input), outputs) > INT32_LIMIT:
        return None
    args = dwsep_args(problem)
    geometry = tuple(I32(v) for v in (*cl.pad_to_3d(problem.filter, 1), *cl.pad_to_3d(problem.stride, 1),
                                      *cl.pad_to_3d(problem.dilation, 1)))
    block = (REFERENCE_THREADS, 1, 1)
    steps = (
        Launch("kf_ref_depthwise", reference_blocks(mids), block, (args, Buf(REFERENCE_WORKSPACE), *geometry)),
        Launch("kf_ref_pointwise", reference_blocks(outputs), block,
               (args, Buf(REFERENCE_WORKSPACE), Buf("output.ref"), Buf("output.scale"))),
    )
    values = (("tin", cpp_type(problem.dtype.tensor)), ("channels_last", int(problem.channels_last)))
    return DeviceReference(TEMPLATE, values, LaunchPlan(steps, workspace_bytes=16 * mids))

