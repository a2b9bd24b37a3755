"""On a GPU: a problem whose tensors hold more than 2^31 elements. Only the 64-bit-offset instances of the
matrix-instruction family take it (the rest refuse it with a reason); the heuristic's pick runs through
Kernel.run on PyTorch tensors and matches a float32 matmul of the same values. Needs ~20 GB of GPU memory."""

import pytest

from factory.api import SelectMode, select
from factory.device import target_for
from factory.problem import DType, Layout, parse_conv_problem
from factory.selector import lookup

pytestmark = pytest.mark.gpu

# 2 x 16384 x 8200 positions x 8 channels = 2,149,580,800 elements per activation (> 2^31 = 2,147,483,648).
SPEC = "N=2,G=1,C=8,K=8,input=16384x8200,filter=1x1"


def test_tensors_past_2_to_the_31_elements_run_on_64_bit_offsets(gpu_backend):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    problem = parse_conv_problem(SPEC, Layout.NHWGC, DType.BF16_FP32W)
    assert problem.element_count_max() > 2**31
    candidates = lookup(problem, target=target_for(gpu_backend.device_info()))
    assert candidates and all(i.family == "mma" and i.params.index_bits == 64 for i in candidates), \
        sorted({i.name for i in candidates})
    kernel = select(problem, mode=SelectMode.HEURISTIC, backend=gpu_backend)
    gen = torch.Generator(device="cuda").manual_seed(11)
    shape = (2, 8, 16384, 8200)
    # Small integers in bf16, an fp32 gradient: every product and partial sum (|sum| << 2^24) is exact.
    x = torch.randint(-2, 3, shape, device="cuda", generator=gen, dtype=torch.int8).bfloat16().to(memory_format=torch.channels_last)
    dy = torch.randint(-2, 3, shape, device="cuda", generator=gen, dtype=torch.int8).bfloat16().to(memory_format=torch.channels_last)
    dw = torch.full((8, 8, 1, 1), float("nan"), device="cuda", dtype=torch.float32).to(memory_format=torch.channels_last)
    kernel.run(input=x, grad_output=dy, grad_weight=dw)
    torch.cuda.synchronize()
    # Reference: sum over every position of dy[k] * x[c], in float64 chunks (channels-last rows of 8).
    ref = torch.zeros(8, 8, device="cuda", dtype=torch.float64)
    xr = x.permute(0, 2, 3, 1).reshape(-1, 8)
    dr = dy.permute(0, 2, 3, 1).reshape(-1, 8)
    step = 1 << 26
    for start in range(0, xr.shape[0], step):
        ref += dr[start:start + step].double().T @ xr[start:start + step].double()
    got = dw.reshape(8, 8).double()
    assert float(ref.abs().max()) < 2**24  # the sums are exact in fp32
    assert torch.equal(got, ref), f"max difference {float((got - ref).abs().max())}"
