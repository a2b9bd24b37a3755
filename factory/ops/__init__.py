"""The op registry: one solver module per op; adding an op adds one line here."""

from __future__ import annotations

from ..problem import Op, UnsupportedProblem
from .base import OpModule
from .conv_bwd_data import SOLVER as _CONV_BWD_DATA
from .conv_bwd_weight import SOLVER as _CONV_BWD_WEIGHT
from .dwsep_conv_fwd import SOLVER as _DWSEP_CONV_FWD
from .groupnorm_bwd import SOLVER as _GROUPNORM_BWD

SOLVERS: dict[Op, OpModule] = {
    Op.CONV_BWD_WEIGHT: _CONV_BWD_WEIGHT,
    Op.CONV_BWD_DATA: _CONV_BWD_DATA,
    Op.DWSEP_CONV_FWD: _DWSEP_CONV_FWD,
    Op.GROUPNORM_BWD: _GROUPNORM_BWD,
}


def solver_for(op: Op) -> OpModule:
    try:
        return SOLVERS[op]
    except KeyError:
        available = ", ".join(o.value for o in SOLVERS)
        raise UnsupportedProblem(f"{op.value} has no kernels yet (implemented: {available})") from None


def implemented_ops() -> tuple[Op, ...]:
    return tuple(SOLVERS)
