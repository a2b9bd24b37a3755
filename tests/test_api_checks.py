"""The Python API without a GPU: lookup, select's modes, and Kernel's checks of what it is handed.

Kernels are built for real (NVRTC compiles the instance to an sm_90 cubin, no GPU needed) on a fake
backend that records what would reach the device; every check must fail before anything is launched.
Torch tensors on this machine live on the host, so the shape/stride/dtype checks are reached by
presenting host tensors as device tensors (`host_tensors_as_device`); the host-tensor refusal itself is
tested with the real description.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

import factory.backends
from factory.device import target_for
from factory import abi, api
from factory.api import (
    ConvProblem, DType, Kernel, Layout, NotTuned, SelectMode, TensorMismatch, UnsupportedProblem, explain, lookup,
    select,
)
from factory.backends import BackendError, BackendKind, DeviceInfo
from factory.catalog import Instance, all_instances, specialized_instances
from factory.ops import solver_for
from factory.ops.base import Launch, Memset
from factory.problem import Op
from factory.selector import heuristic_pick
from factory.sources import hash_of
from tuning_db import Measurement, TuningDB

DEVICE = DeviceInfo(BackendKind.CUDA, "sm_90", "Fake H100", 132, "13000", "nvrtc 13.0")


def problem(layout: Layout = Layout.NHWGC, dtype: DType = DType.FP16) -> ConvProblem:
    return ConvProblem(N=4, G=4, C=8, K=8, input=(16, 16), filter=(3, 3), stride=(1, 1), pad=(1, 1),
                       dilation=(1, 1), layout=layout, dtype=dtype)


class FakeBackend:
    """Compiles nothing itself and launches nothing; records every call that would touch the device."""

    kind = BackendKind.CUDA

    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.launches: list[tuple[str, tuple[int, ...], int]] = []  # (entry, argument values, stream)
        self.memsets: list[tuple[int, int, int, int]] = []  # (pointer, byte, nbytes, stream)
        self.allocs: list[int] = []
        self.freed: list[int] = []

    def device_info(self) -> DeviceInfo:
        return DEVICE

    def load(self, binary: bytes, kernel_name: str) -> str:
        assert binary.startswith(b"\x7fELF")
        self.loaded.append(kernel_name)
        return kernel_name

    def prepare_args(self, args):
        return args

    def launch_prepared(self, kernel, grid, block, prepared, shared_bytes=0, stream=0) -> None:
        self.launches.append((kernel, abi.flatten(prepared), stream))

    def launch_cooperative(self, kernel, grid, block, prepared, shared_bytes=0, stream=0) -> None:
        self.launches.append((kernel, abi.flatten(prepared), stream))  # plans whose blocks meet (coop, resident)

    def memset_async(self, ptr: int, byte: int, nbytes: int, stream: int = 0) -> None:
        self.memsets.append((ptr, byte, nbytes, stream))

    def alloc(self, nbytes: int) -> int:
        self.allocs.append(nbytes)
        return 0x7000_0000 + 0x1000 * len(self.allocs)

    def free(self, ptr: int) -> None:
        self.freed.append(ptr)

    @property
    def touched_device(self) -> bool:
        return bool(self.launches or self.memsets)


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KFACTORY_CACHE_DIR", str(tmp_path_factory.mktemp("binaries")))
        yield


@pytest.fixture(autouse=True)
def _private_db(monkeypatch, tmp_path):
    monkeypatch.setenv("KFACTORY_DB", str(tmp_path / "tuning.sqlite"))
    monkeypatch.delenv("KFACTORY_BACKEND", raising=False)


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


TORCH_DTYPE = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
               "int8": torch.int8, "int32": torch.int32}


def physical(kernel: Kernel, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    spec = kernel.specs[name]
    return torch.zeros(spec.shape, dtype=dtype or TORCH_DTYPE[spec.scalar.numpy_name])


def framework(p: ConvProblem, name: str, dtype: torch.dtype = torch.float16, channels_last: bool = True) -> torch.Tensor:
    """PyTorch's convolution shape of a tensor: (N, G*C, H, W) activations, (G*K, C, Y, X) weights."""
    if name == "grad_weight":
        shape = (p.G * p.K, p.C, *p.filter)
    else:
        channels = p.C if name == "input" else p.K
        shape = (p.N, p.G * channels, *(p.input if name == "input" else p.output))
    t = torch.zeros(shape, dtype=dtype)
    return t.to(memory_format=torch.channels_last) if channels_last else t


def torch_tensors(p: ConvProblem, **overrides) -> dict[str, torch.Tensor]:
    tensors = {name: framework(p, name) for name in ("input", "grad_output", "grad_weight")}
    tensors.update(overrides)
    return tensors


@pytest.fixture
def kernel(backend) -> Kernel:
    k = select(problem(), mode="heuristic", backend=backend)
    assert not backend.touched_device
    return k


# --- lookup / explain ----------------------------------------------------------------------------
def test_lookup_returns_the_applicable_instances_of_the_cell():
    p = problem()
    found = lookup(p)
    assert found and all(isinstance(i, Instance) for i in found)
    assert all(i.cell_matches(p) and i.why_not(p) is None for i in found)
    assert len({i.name for i in found}) == len(found)
    assert "dwt" not in {i.family for i in found}  # C=K=8: the depthwise-only family does not apply


def test_lookup_and_explain_partition_the_op():
    p = problem(Layout.NGCHW)
    applicable = {i.name for i in lookup(p)}
    rejected = {r.instance.name: r.reason for r in explain(p)}
    assert applicable and rejected and not applicable & rejected.keys()
    listed = {i.name for i in all_instances() if i.op is Op.CONV_BWD_WEIGHT}
    assert applicable | rejected.keys() == listed | {i.name for i in specialized_instances(p)}
    dwt = next(name for name in rejected if "_ngchw_fp16_dwt_" in name and name.startswith("conv_bwd_weight_2d"))
    assert rejected[dwt] == "depthwise only (C=K=1), problem has C=8, K=8"


def test_lookup_of_a_cell_without_kernels_raises(monkeypatch):
    solver = solver_for(Op.CONV_BWD_WEIGHT)
    cells = solver.supported_cells() - {(Layout.GNHWC, DType.INT8, 2)}
    monkeypatch.setattr(solver, "supported_cells", lambda family=None: cells)
    with pytest.raises(UnsupportedProblem, match="no kernels for gnhwc/int8/2D; supported: "):
        lookup(problem(Layout.GNHWC, DType.INT8))


# --- select --------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, instance", [("heuristic", None), ("force", "pick")])
def test_select_without_gpu_raises_backend_error(monkeypatch, mode, instance):
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.setenv(var, "-1")
    monkeypatch.setattr(factory.backends, "_ACTIVE", {})
    p = problem()
    name = heuristic_pick(p).name if instance else None
    with pytest.raises(BackendError, match="no usable GPU runtime"):
        select(p, mode=mode, instance=name)


def test_select_heuristic_builds_the_heuristic_pick(backend):
    p = problem()
    k = select(p, mode=SelectMode.HEURISTIC, backend=backend)
    assert k.name == heuristic_pick(p, target=target_for(backend.device_info())).name
    assert k.tensor_names == ["input", "grad_output", "grad_weight"]
    assert k.specs["input"].shape == (4, 16, 16, 4, 8) and k.specs["grad_weight"].shape == (4, 8, 3, 3, 8)
    entries = [s.entry for s in k.plan.steps if isinstance(s, Launch)]
    assert backend.loaded == entries and not backend.touched_device


def test_select_force_checks_the_name(backend):
    p = problem()
    other = next(i for i in lookup(p) if i.name != heuristic_pick(p).name)
    assert select(p, mode="force", instance=other.name, backend=backend).name == other.name
    with pytest.raises(ValueError, match="needs instance="):
        select(p, mode="force", backend=backend)
    with pytest.raises(UnsupportedProblem, match="no instance named 'conv_bwd_weight_nonsense'"):
        select(p, mode="force", instance="conv_bwd_weight_nonsense", backend=backend)
    wrong_cell = next(i for i in all_instances() if i.op is p.op and i.layout is Layout.NGCHW and i.ndim == 2
                      and i.dtype is DType.FP16)
    with pytest.raises(UnsupportedProblem, match=r"does not compute this problem: layout is ngchw, problem is nhwgc"):
        select(p, mode="force", instance=wrong_cell.name, backend=backend)
    assert not backend.touched_device


def test_select_db_mode_and_auto_mode_follow_the_tuning_db(backend, tmp_path):
    p = problem()
    target = target_for(backend.device_info())  # an sm_90 GPU: wgmma instances apply
    db = TuningDB(str(tmp_path / "winners.sqlite"))
    with pytest.raises(NotTuned, match="no tuned winner"):
        select(p, mode="db", backend=backend, db=db)
    assert select(p, mode="auto", backend=backend, db=db).name == heuristic_pick(p, target=target).name

    tuned_instance = next(i for i in lookup(p, target=target) if i.name != heuristic_pick(p, target=target).name)
    tuned = tuned_instance.name
    db.record(p.key, p.op.value, DEVICE, [Measurement(tuned, 3.0, 0.1, 25, True, source_hash=hash_of(tuned_instance))])
    assert select(p, mode="db", backend=backend, db=db).name == tuned
    assert select(p, mode="auto", backend=backend, db=db).name == tuned
    # A winner from another driver is not served.
    elsewhere = TuningDB(str(tmp_path / "elsewhere.sqlite"))
    elsewhere.record(p.key, p.op.value, DeviceInfo(**{**DEVICE.__dict__, "driver_version": "1"}),
                     [Measurement(tuned, 3.0, 0.1, 25, True, source_hash=hash_of(tuned_instance))])
    assert select(p, mode="auto", backend=backend, db=elsewhere).name == heuristic_pick(p, target=target).name


# --- Kernel.run: names and devices --------------------------------------------------------------
@pytest.mark.parametrize("drop, add", [("grad_weight", None), (None, "bias"), ("input", "x")])
def test_run_needs_exactly_the_named_tensors(kernel, backend, drop, add):
    tensors = torch_tensors(kernel.problem)
    if drop:
        del tensors[drop]
    if add:
        tensors[add] = framework(kernel.problem, "input")
    with pytest.raises(TensorMismatch) as info:
        kernel.run(**tensors)
    message = str(info.value)
    assert message.startswith("run() takes input, grad_output, grad_weight;")
    assert f"missing {[drop] if drop else []}" in message and f"unexpected {[add] if add else []}" in message
    assert not backend.touched_device


def test_run_refuses_host_tensors(kernel, backend):
    with pytest.raises(TensorMismatch, match="input: must be on the GPU, got a host tensor"):
        kernel.run(**torch_tensors(kernel.problem))
    assert not backend.touched_device


def test_run_refuses_other_array_types(kernel, backend):
    tensors = torch_tensors(kernel.problem, input=np.zeros((4, 32, 16, 16), np.float16))
    with pytest.raises(TensorMismatch, match="unsupported tensor type ndarray"):
        kernel.run(**tensors)
    assert not backend.touched_device


def test_describe_reports_element_strides_of_host_tensors():
    t = torch.zeros((2, 6, 5, 4), dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    assert api._describe(t) == ((2, 6, 5, 4), (120, 1, 24, 6), "bfloat16", None, t.data_ptr())
    assert api._current_stream(t) is None


# --- Kernel.run: dtype, shape, strides (host tensors presented as device tensors) -----------------
def test_run_launches_on_channels_last_tensors(kernel, backend, host_tensors_as_device):
    tensors = torch_tensors(kernel.problem)
    kernel.run(stream=7, **tensors)
    launches = [s for s in kernel.plan.steps if isinstance(s, Launch)]
    assert [entry for entry, _, _ in backend.launches] == [s.entry for s in launches]
    assert {stream for _, _, stream in backend.launches} == {7}
    main_args = backend.launches[0][1]
    assert main_args[:2] == (tensors["input"].data_ptr(), tensors["grad_output"].data_ptr())
    memsets = [s for s in kernel.plan.steps if isinstance(s, Memset)]
    if memsets:  # atomic split-K's accumulator, or the coop reduction's counters, in the workspace
        assert [ptr for ptr, _, _, _ in backend.memsets] == [0x7000_1000 + m.offset for m in memsets]
        assert backend.allocs == [kernel.plan.workspace_bytes]


def test_run_takes_the_current_stream_once_and_refuses_tensors_on_two_gpus(kernel, backend, monkeypatch):
    tensors = torch_tensors(kernel.problem)
    on_second_gpu = tensors["grad_weight"].data_ptr()
    real = api._describe

    def describe(value):
        shape, strides, dtype, _device, ptr = real(value)
        return shape, strides, dtype, (1 if ptr == on_second_gpu else 0), ptr

    lookups = []
    monkeypatch.setattr(api, "_describe", describe)
    monkeypatch.setattr(api, "_current_stream", lambda value: lookups.append(value) or 5)
    with pytest.raises(TensorMismatch, match=r"different GPUs \[0, 1\]"):
        kernel.run(**tensors)
    assert not backend.launches and not lookups
    on_second_gpu = None
    kernel.run(**tensors)
    assert len(lookups) == 1 and {stream for _, _, stream in backend.launches} == {5}


def test_run_launches_on_physical_layout_tensors(kernel, backend, host_tensors_as_device):
    tensors = {name: physical(kernel, name) for name in kernel.tensor_names}
    kernel.run(**tensors)
    assert backend.launches and {stream for _, _, stream in backend.launches} == {0}


@pytest.mark.parametrize("name, tensor, message", [
    ("input", lambda p: framework(p, "input", torch.float32), "input: dtype float32, expected float16"),
    ("grad_weight", lambda p: framework(p, "grad_weight", torch.bfloat16), "grad_weight: dtype bfloat16, expected float16"),
    ("grad_output", lambda p: framework(p, "input")[:, :, :, :15], "grad_output: shape (4, 32, 16, 15) strides"),
    ("input", lambda p: torch.zeros((4, 16, 16, 32), dtype=torch.float16), "input: shape (4, 16, 16, 32) strides (8192, 512, 32, 1); expected shape (4, 16, 16, 4, 8)"),
    ("input", lambda p: framework(p, "input", channels_last=False), "input: shape (4, 32, 16, 16) strides (8192, 256, 16, 1); expected"),
    ("grad_weight", lambda p: framework(p, "grad_weight", channels_last=False), "grad_weight: shape (32, 8, 3, 3) strides (72, 9, 3, 1)"),
    ("grad_output", lambda p: framework(p, "grad_output").permute(0, 1, 3, 2), "grad_output: shape (4, 32, 16, 16) strides (8192, 1, 32, 512)"),
])
def test_run_refuses_wrong_dtype_shape_or_strides(kernel, backend, host_tensors_as_device, name, tensor, message):
    tensors = torch_tensors(kernel.problem, **{name: tensor(kernel.problem)})
    with pytest.raises(TensorMismatch) as info:
        kernel.run(**tensors)
    assert str(info.value).startswith(message)
    assert not backend.touched_device


def test_mismatch_names_both_accepted_forms(kernel, host_tensors_as_device):
    with pytest.raises(TensorMismatch) as info:
        kernel.run(**torch_tensors(kernel.problem, input=framework(kernel.problem, "input", channels_last=False)))
    assert str(info.value).endswith(
        "expected shape (4, 16, 16, 4, 8) strides (8192, 512, 32, 8, 1) or shape (4, 32, 16, 16) strides (8192, 1, 512, 32)"
    )


def test_ngchw_takes_default_contiguous_tensors_and_refuses_channels_last(backend, host_tensors_as_device):
    p = problem(Layout.NGCHW)
    k = select(p, mode="heuristic", backend=backend)
    contiguous = {name: framework(p, name, channels_last=False) for name in k.tensor_names}
    with pytest.raises(TensorMismatch, match="^input: shape"):
        k.run(**{**contiguous, "input": framework(p, "input")})
    assert not backend.touched_device
    k.run(**contiguous)
    assert backend.launches


def test_gnhwc_has_no_pytorch_view(backend, host_tensors_as_device):
    p = problem(Layout.GNHWC)
    k = select(p, mode="heuristic", backend=backend)
    tensors = {name: physical(k, name) for name in k.tensor_names}
    assert k.specs["input"].shape == (4, 4, 16, 16, 8)
    with pytest.raises(TensorMismatch, match=r"expected shape \(4, 4, 16, 16, 8\) strides \(8192, 2048, 128, 8, 1\)$"):
        k.run(**{**tensors, "input": framework(p, "input")})
    assert not backend.touched_device
    k.run(**tensors)
    assert backend.launches


def test_size_one_dims_may_have_any_stride():
    assert api._same_layout((4, 1, 3), (3, 99, 1), (4, 1, 3), (3, 3, 1))
    assert not api._same_layout((4, 2, 3), (3, 99, 1), (4, 2, 3), (6, 3, 1))
    assert not api._same_layout((4, 3), (3, 1), (4, 1, 3), (3, 3, 1))


def test_bf16_fp32w_wants_a_float32_weight_gradient(backend, host_tensors_as_device):
    p = problem(dtype=DType.BF16_FP32W)
    k = select(p, mode="heuristic", backend=backend)
    tensors = {name: framework(p, name, torch.bfloat16) for name in k.tensor_names}
    with pytest.raises(TensorMismatch, match="^grad_weight: dtype bfloat16, expected float32$"):
        k.run(**tensors)
    assert not backend.touched_device
    k.run(**{**tensors, "grad_weight": framework(p, "grad_weight", torch.float32)})
    assert backend.launches


# --- the output epilogue: D is one more tensor, passed by name -----------------------------------
def _bound(backend: FakeBackend, kernel: Kernel) -> list[dict[str, Any]]:
    """Per launch, what each argument (by buffer name or struct field) was bound to."""
    launches = [s for s in kernel.plan.steps if isinstance(s, Launch)]
    out = []
    for (entry, values, _), step in zip(backend.launches, launches, strict=True):
        assert entry == step.entry
        out.append({getattr(arg, "name", None) or f"#{i}": value
                    for i, (value, arg) in enumerate(zip(values, abi.flatten_args(step.args), strict=True))})
    return out


def test_a_bilinear_kernel_takes_d_by_name(backend, host_tensors_as_device):
    p = dataclasses.replace(problem(), alpha=0.5, beta=-2.0)
    k = select(p, mode="heuristic", backend=backend)
    assert k.tensor_names == ["input", "grad_output", "d", "grad_weight"]
    tensors = torch_tensors(p)
    with pytest.raises(TensorMismatch, match=r"missing \['d'\]"):
        k.run(**tensors)
    with pytest.raises(TensorMismatch, match="^d: dtype float32, expected float16$"):
        k.run(**tensors, d=framework(p, "grad_weight", torch.float32))
    with pytest.raises(TensorMismatch, match="^d: shape"):
        k.run(**tensors, d=framework(p, "grad_weight", channels_last=False))
    assert not backend.touched_device
    d = framework(p, "grad_weight")  # PyTorch's weight shape and layout, as grad_weight takes
    k.run(**tensors, d=d)
    bound = _bound(backend, k)
    assert all(b["d"] == d.data_ptr() for b in bound)  # every kernel that may apply the epilogue
    assert {b.get("grad_weight") for b in bound} >= {tensors["grad_weight"].data_ptr()}
    flat = [v for _, values, _ in backend.launches for v in values]
    assert 0.5 in flat and -2.0 in flat  # alpha and beta reach the kernels
    # D may be grad_weight itself: grad_weight = 0.5 * dW - 2 * grad_weight.
    backend.launches.clear()
    k.run(input=tensors["input"], grad_output=tensors["grad_output"], d=tensors["grad_weight"],
          grad_weight=tensors["grad_weight"])
    assert all(b["d"] == tensors["grad_weight"].data_ptr() for b in _bound(backend, k))
    k.run(**{name: physical(k, name) for name in k.tensor_names})


def test_a_scale_kernel_takes_no_d(backend, host_tensors_as_device):
    p = dataclasses.replace(problem(), alpha=3.0)
    k = select(p, mode="heuristic", backend=backend)
    assert k.tensor_names == ["input", "grad_output", "grad_weight"]
    tensors = torch_tensors(p)
    with pytest.raises(TensorMismatch, match=r"unexpected \['d'\]"):
        k.run(**tensors, d=framework(p, "grad_weight"))
    k.run(**tensors)
    assert 3.0 in [v for _, values, _ in backend.launches for v in values]


# --- Kernel.run_pointers -------------------------------------------------------------------------
GOOD = {"input": 0x100000, "grad_output": 0x200000, "grad_weight": 0x300000}  # 1 MiB apart: no overlap


@pytest.mark.parametrize("name, value", [
    ("input", 0), ("grad_output", -4096), ("grad_weight", 4096.0), ("input", "0x1000"), ("grad_output", None),
    ("grad_weight", True), ("input", torch.zeros(1)),
])
def test_run_pointers_refuses_non_pointers(kernel, backend, name, value):
    with pytest.raises(TensorMismatch, match=f"^{name}: needs a device pointer"):
        kernel.run_pointers({**GOOD, name: value})
    assert not backend.touched_device


def test_run_pointers_refuses_a_missing_pointer(kernel, backend):
    with pytest.raises(TensorMismatch, match="^grad_weight: needs a device pointer"):
        kernel.run_pointers({"input": GOOD["input"], "grad_output": GOOD["grad_output"]})
    assert not backend.touched_device


def test_run_pointers_binds_every_launch(kernel, backend):
    kernel.run_pointers(GOOD, stream=3)
    launches = [s for s in kernel.plan.steps if isinstance(s, Launch)]
    assert len(backend.launches) == len(launches)
    for (entry, values, stream), step in zip(backend.launches, launches):
        assert entry == step.entry and stream == 3
        for value, arg in zip(values, abi.flatten_args(step.args), strict=True):
            if hasattr(arg, "name"):  # a buffer, at its offset (coop's counters lie past the partials)
                assert value == {**GOOD, "workspace": kernel.workspace(3)}[arg.name] + getattr(arg, "offset", 0)
    # The same kernel runs again on new buffers.
    moved = {name: ptr + 0x10_0000 for name, ptr in GOOD.items()}
    kernel.run_pointers(moved)
    assert backend.launches[len(launches)][1][:2] == (moved["input"], moved["grad_output"])


# --- overlap: a written tensor that shares memory with another is refused -----------------------------
@pytest.mark.parametrize("other", ["input", "grad_output"])
@pytest.mark.parametrize("offset", [0, 16, -16])
def test_run_pointers_refuses_an_output_overlapping_an_input(kernel, backend, other, offset):
    with pytest.raises(TensorMismatch, match=f"^grad_weight overlaps {other} in memory"):
        kernel.run_pointers({**GOOD, "grad_weight": GOOD[other] + offset})
    assert not backend.touched_device


def test_run_refuses_an_output_viewing_an_input(kernel, backend, host_tensors_as_device):
    tensors = torch_tensors(kernel.problem)
    w = tensors["grad_weight"]
    tensors["grad_weight"] = tensors["input"].as_strided(w.shape, w.stride(), 0)  # the input's first bytes
    with pytest.raises(TensorMismatch, match="^grad_weight overlaps input in memory"):
        kernel.run(**tensors)
    assert not backend.touched_device


def test_the_epilogue_d_may_be_the_output_itself_but_not_part_of_it(backend):
    p = dataclasses.replace(problem(), alpha=0.5, beta=1.0)
    k = select(p, mode="heuristic", backend=backend)
    d = 0x400000
    k.run_pointers({**GOOD, "d": GOOD["grad_weight"]})  # in place: dW = 0.5 * dW' + dW
    with pytest.raises(TensorMismatch, match=r"^grad_weight overlaps d in memory: .*\(or exactly the same tensor\)"):
        k.run_pointers({**GOOD, "d": GOOD["grad_weight"] + 16})
    k.run_pointers({**GOOD, "d": d})


# --- alignment: a misaligned pointer is a sticky fault on the GPU, so it never reaches a launch -----
def offset_view(like: torch.Tensor, elements: int) -> torch.Tensor:
    """A tensor equal in shape and strides to `like`, starting `elements` into a larger buffer."""
    base = torch.zeros(like.numel() + elements, dtype=like.dtype)
    return base[elements:].as_strided(like.shape, like.stride())


class CudaLooking(torch.Tensor):
    """A host tensor that answers like a CUDA tensor, so Kernel.run takes its fast torch path."""

    __module__ = "torch"  # what Kernel.run's checked path looks at to recognise a torch tensor

    @property
    def is_cuda(self) -> bool:
        return True

    def get_device(self) -> int:
        return 0


def cuda_looking(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: t.as_subclass(CudaLooking) for name, t in tensors.items()}


def test_the_fast_path_launches_aligned_tensors_without_the_full_checks(kernel, backend, monkeypatch):
    monkeypatch.setattr(kernel, "_checked_pointers", lambda tensors: pytest.fail("took the checked path"))
    monkeypatch.setattr(api, "_current_stream", lambda value: 9)
    tensors = cuda_looking(torch_tensors(kernel.problem))
    kernel.run(**tensors)
    assert backend.launches[0][1][:2] == (tensors["input"].data_ptr(), tensors["grad_output"].data_ptr())


@pytest.mark.parametrize("name", ["input", "grad_output", "grad_weight"])
@pytest.mark.parametrize("elements", [1, 2, 4])
def test_run_refuses_a_view_whose_pointer_is_not_16_byte_aligned(kernel, backend, host_tensors_as_device, name, elements):
    tensors = torch_tensors(kernel.problem)
    tensors[name] = offset_view(tensors[name], elements)  # fp16: 2, 4 or 8 bytes in
    assert tensors[name].data_ptr() % 16
    for given in (tensors, cuda_looking(tensors)):  # the checked path, and the fast torch path
        with pytest.raises(TensorMismatch, match=f"^{name}: data pointer 0x[0-9a-f]+ is not 16-byte aligned"):
            kernel.run(**given)
    assert not backend.touched_device
    tensors[name] = offset_view(tensors[name], 8)  # 16 bytes in: aligned again
    kernel.run(**tensors)
    assert backend.launches


@pytest.mark.parametrize("name", ["input", "grad_output", "grad_weight"])
def test_run_pointers_refuses_a_misaligned_pointer(kernel, backend, name):
    with pytest.raises(TensorMismatch, match=f"^{name}: data pointer {hex(GOOD[name] + 2)} is not 16-byte aligned"):
        kernel.run_pointers({**GOOD, name: GOOD[name] + 2})
    assert not backend.touched_device


# --- workspaces: one per stream, freed with the Kernel ------------------------------------------------
def workspace_kernel(backend: FakeBackend) -> Kernel:
    p = problem()
    inst = next(i for i in lookup(p) if solver_for(p.op).launch_plan(i.family, i.params, p).workspace_bytes)
    return select(p, mode="force", instance=inst.name, backend=backend)


def test_each_stream_gets_its_own_workspace_on_first_use(backend):
    k = workspace_kernel(backend)
    assert backend.allocs == []  # nothing until a stream runs it
    k.run_pointers(GOOD, stream=1)
    k.run_pointers(GOOD, stream=2)
    k.run_pointers(GOOD, stream=1)
    nbytes = k.plan.workspace_bytes
    assert backend.allocs == [nbytes, nbytes]
    first, second = k.workspace(1), k.workspace(2)
    assert first != second and 0 not in (first, second)
    slots = {s.entry: [i for i, a in enumerate(abi.flatten_args(s.args)) if getattr(a, "name", None) == "workspace"]
             for s in k.plan.steps if isinstance(s, Launch)}
    by_stream: dict[int, set[int]] = {1: set(), 2: set()}
    for entry, values, stream in backend.launches:
        by_stream[stream] |= {values[i] for i in slots[entry]}
    assert by_stream == {1: {first}, 2: {second}}
    memset_targets = {(ptr, stream) for ptr, _, _, stream in backend.memsets}
    assert memset_targets <= {(first, 1), (second, 2)} | {(GOOD[n], s) for n in GOOD for s in (1, 2)}


def test_a_callers_workspace_replaces_the_kernels_own(backend):
    """What a capture-aware allocator passes: the launch uses it and the Kernel allocates nothing."""
    k = workspace_kernel(backend)
    mine = 0x7000_0000
    k.run_pointers(GOOD, stream=5, workspace=mine)
    assert backend.allocs == [] and k.workspace_bytes == k.plan.workspace_bytes > 0
    slots = {s.entry: [i for i, a in enumerate(abi.flatten_args(s.args)) if getattr(a, "name", None) == "workspace"]
             for s in k.plan.steps if isinstance(s, Launch)}
    used = {values[i] for entry, values, _ in backend.launches for i in slots[entry]}
    assert used == {mine}
    k.run_pointers(GOOD, stream=5)  # without one, the stream's own is allocated then
    assert backend.allocs == [k.plan.workspace_bytes]
    with pytest.raises(TensorMismatch, match="^workspace: data pointer .* is not 16-byte aligned"):
        k.run_pointers(GOOD, stream=5, workspace=mine + 4)
    with pytest.raises(TensorMismatch, match="^workspace: a device pointer, torch tensor or CuPy array"):
        k.run_pointers(GOOD, stream=5, workspace="big")


def test_a_kernels_workspaces_are_freed_with_it(backend):
    import gc

    k = workspace_kernel(backend)
    k.run_pointers(GOOD, stream=1)
    k.run_pointers(GOOD, stream=2)
    held = {k.workspace(1), k.workspace(2)}
    api.KERNELS.clear()
    del k
    gc.collect()
    assert set(backend.freed) == held and len(backend.freed) == 2


# --- one module per process and context; a repeated select hands back the same Kernel -----------------
def test_a_module_is_loaded_once_and_select_reuses_its_kernel(backend):
    p = problem()
    first = select(p, mode="heuristic", backend=backend)
    assert select(p, mode="heuristic", backend=backend) is first
    loaded = list(backend.loaded)
    # Another problem served by the same instance shares the module.
    bigger = ConvProblem(N=8, G=4, C=8, K=8, input=(16, 16), filter=(3, 3), stride=(1, 1), pad=(1, 1),
                         dilation=(1, 1), layout=Layout.NHWGC, dtype=DType.FP16)
    other = select(bigger, mode="force", instance=first.name, backend=backend)
    assert other is not first and other.problem == bigger
    assert backend.loaded == loaded
    # Another backend (another context) loads its own.
    elsewhere = FakeBackend()
    select(p, mode="heuristic", backend=elsewhere)
    assert elsewhere.loaded == loaded


# --- the catalog index ------------------------------------------------------------------------------
@pytest.mark.parametrize("layout, dtype", [(Layout.NHWGC, DType.FP16), (Layout.NGCHW, DType.BF16),
                                           (Layout.GNHWC, DType.FP32)])
def test_lookup_through_the_cell_index_finds_what_a_full_scan_finds(layout, dtype):
    p = problem(layout, dtype)
    listed = [i for i in all_instances() if i.is_applicable(p)]
    assert lookup(p) == listed + [i for i in specialized_instances(p) if i.is_applicable(p)]
