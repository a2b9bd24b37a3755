"""conv_bwd_data `dws` with several whole planes a block: names, refusals and the launch (the kernels
themselves: tests/test_emulated_bwd_data.py on the host, tests/test_gpu_conv_bwd_data.py on a GPU)."""

from __future__ import annotations

from factory.device import target_for_device
from factory.ops import solver_for
from factory.problem import DType, Layout, Op

H100 = target_for_device("sm_90", 132)
SOLVER = solver_for(Op.CONV_BWD_DATA)


def _problem(spec: str):
    return SOLVER.parse_problem(spec, Layout.NGCHW, DType.FP16)


def test_dws_planes_spell_parse_and_fit_whole_planes_in_a_block():
    dws = SOLVER.family("dws")
    one, four = dws.parse_suffix("t256_b2x2_k3x3s1x1d1x1"), dws.parse_suffix("t256_b2x2_p4_k3x3s1x1d1x1")
    assert one.planes == 1 and one.suffix() == "t256_b2x2_k3x3s1x1d1x1"
    assert four.planes == 4 and four.suffix() == "t256_b2x2_p4_k3x3s1x1d1x1"
    assert dws.parse_suffix("t256_b2x2_p3_k3x3s1x1d1x1") is None  # not a listed width
    small = _problem("N=64,G=10,C=1,K=1,input=14x14,filter=3x3,pad=1")
    assert dws.why_not_here(four, small, H100) is None  # 4 planes of 7 x 7 tiles: 196 of 256 threads
    assert "whole planes need more tiles" in dws.why_not_here(dws.parse_suffix("t256_b2x2_p8_k3x3s1x1d1x1"), small, H100)
    assert "planes a block for G=2" in dws.why_not_here(four, _problem("N=64,G=2,C=1,K=1,input=14x14,filter=3x3,pad=1"), H100)
    (launch,) = dws.launch_plan(four, small, H100).steps
    assert launch.grid == (1, 3, 64) and launch.shared_bytes == 4 * 16 * 16 * 4  # 4 planes of 16 x 16 fp32 values
