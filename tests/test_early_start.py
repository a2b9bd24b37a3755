"""Launches that start before the previous one ends (Launch.early_start, templates/common/pdl.h): twopass's GEMM
launches, and its depthwise launches that follow an input copy, are so marked and their kernels wait before
reading, the executor routes them to the backend's early launch, and the CUDA backend's launch config is laid out
as cuda.h's."""

from __future__ import annotations

import ctypes
import re

from factory.backends import cuda
from factory.device import target_for_device
from factory.executor import LoadedBinary, PreparedPlan
from factory.ops import solver_for
from factory.ops.base import Launch, LaunchPlan
from factory.problem import DType, Layout, Op
from factory.selector import lookup
from factory.sources import source_of

H200 = target_for_device("sm_90", 132)
SOLVER = solver_for(Op.DWSEP_CONV_FWD)


def twopass_points(layout: Layout, spec: str) -> tuple[object, list]:
    problem = SOLVER.parse_problem(spec, layout, DType.FP16)
    return problem, [i for i in lookup(problem, target=H200) if i.family == "twopass"]


def main_launch(instance, problem) -> Launch:
    plan = SOLVER.families["twopass"].launch_plan(instance.params, problem, H200)
    *first, depthwise, main = plan.steps
    assert depthwise.entry == "kf_depthwise"
    # Early only after kf_pad_input (channels-last, C not a multiple of 8); first, it follows unrelated work.
    assert [s.entry for s in first] == (["kf_pad_input"] if instance.params.channels.value == "padded"
                                        and problem.channels_last else [])
    assert depthwise.early_start == bool(first)
    return main


def test_a_kernel_launched_early_waits_before_its_first_statement_that_reads():
    """Every twopass kf_main (both engines, both stores, every layout) is launched early and calls the wait before
    anything else but its static checks: what it reads is kf_depthwise's."""
    for layout, spec in ((Layout.NHWGC, "N=4,C=100,K=72,input=9x9,filter=5x5,pad=2"),
                         (Layout.NGCHW, "N=2,C=64,K=40,input=11x7,filter=3x3,pad=1")):
        problem, points = twopass_points(layout, spec)
        kinds = {(i.params.tma, i.params.store) for i in points}
        assert len(kinds) == 3  # threads' copies (both stores) and bulk copies
        for kind in kinds:
            instance = next(i for i in points if (i.params.tma, i.params.store) == kind)
            assert main_launch(instance, problem).early_start
            body = source_of(instance).text.split(" kf_main(", 1)[1].split("\n}\n", 1)[0]
            statements = [s.strip() for s in body.split("{", 1)[1].split(";") if s.strip()]
            first = next(s for s in statements if not s.startswith("static_assert"))
            assert re.fullmatch(r"kf_wait_previous_grid\(\)", first.split("\n")[0]), first


def test_the_depthwise_pass_waits_for_the_input_copy_before_its_strips():
    """Channels-last with C not a multiple of 8, kf_depthwise is launched early behind kf_pad_input: it waits
    before its first strip (what the strips read is the copy), after only what reads the user's own tensors."""
    problem, points = twopass_points(Layout.NHWGC, "N=4,C=100,K=72,input=9x9,filter=5x5,pad=2")
    instance = points[0]
    main_launch(instance, problem)
    body = source_of(instance).text.split(" kf_depthwise(", 1)[1].split("\n}\n", 1)[0]
    channels_last = body.split("if (CHANNELS_LAST) {", 1)[1]
    assert channels_last.index("kf_wait_previous_grid()") < channels_last.index("depthwise_strip(")
    assert "kf_allow_next_grid()" in source_of(instance).text.split(" kf_pad_input(", 1)[1].split("\n}\n", 1)[0]


class RecordingBackend:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def load(self, binary: bytes, entry: str) -> str:
        return entry

    def prepare_args(self, args: list) -> list:
        return args

    def launch_prepared(self, kernel, grid, block, prepared, shared_bytes=0, stream=0) -> None:
        self.calls.append(("plain", kernel))

    def launch_early(self, kernel, grid, block, prepared, shared_bytes=0, stream=0) -> None:
        self.calls.append(("early", kernel))

    def launch_cooperative(self, kernel, grid, block, prepared, shared_bytes=0, stream=0) -> None:
        self.calls.append(("cooperative", kernel))


def test_the_executor_launches_marked_steps_early():
    backend = RecordingBackend()
    plan = LaunchPlan((Launch("first", (1, 1, 1), (32, 1, 1), ()),
                       Launch("second", (1, 1, 1), (32, 1, 1), (), early_start=True),
                       Launch("third", (1, 1, 1), (32, 1, 1), (), cooperative=True)))
    prepared = PreparedPlan(LoadedBinary(backend, b"", {}), plan)
    prepared.bind({})
    prepared.enqueue()
    assert backend.calls == [("plain", "first"), ("early", "second"), ("cooperative", "third")]


def test_the_launch_config_is_laid_out_as_cuda_h():
    """CUlaunchAttribute: a 4-byte id, padding to 8, a 64-byte value union; CUlaunchConfig: seven unsigned ints,
    the stream at 32, the attributes at 40, their count at 48 (x86-64 and aarch64)."""
    attribute, config = cuda._LaunchAttribute, cuda._LaunchConfig
    assert (ctypes.sizeof(attribute), attribute.value.offset) == (72, 8)
    assert (ctypes.sizeof(config), config.stream.offset, config.attrs.offset, config.count.offset) == (56, 32, 40, 48)
    made = cuda._early_config((3, 2, 1), (160, 1, 1), 1024, 0).contents
    assert (list(made.grid), list(made.block), made.shared_bytes, made.count) == ([3, 2, 1], [160, 1, 1], 1024, 1)
    assert (made.attrs.contents.id, made.attrs.contents.value[0]) == (6, 1)  # programmatic serialisation allowed
