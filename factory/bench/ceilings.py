"""The GPU's practical ceilings, measured in the same run as the cases they scale.

DRAM: a device-to-device copy of a buffer far larger than L2, read + write bytes counted (what a
memory-bound kernel can reach). Compute: a bf16 n x n x n matmul through PyTorch (cuBLAS), 2 n^3 flops.
"""

from __future__ import annotations

from typing import Any, Callable

from .model import Ceilings, Timing

COPY_BYTES = 1 << 30  # 1 GiB each way
MATMUL_N = 8192


def measure_ceilings(
    timer: Callable[[Callable[[], Any]], Timing], device: Any, copy_bytes: int = COPY_BYTES, matmul_n: int = MATMUL_N
) -> Ceilings:
    import torch

    ceilings = Ceilings(
        copy_gbps=_copy_gbps(timer, device, copy_bytes),
        matmul_tflops=_matmul_tflops(timer, device, matmul_n),
        copy_bytes=copy_bytes,
        matmul_n=matmul_n,
    )
    torch.cuda.empty_cache()  # hand the buffers back before the cases allocate theirs
    return ceilings


def _copy_gbps(timer: Callable[[Callable[[], Any]], Timing], device: Any, nbytes: int) -> float:
    import torch

    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    t = timer(lambda: dst.copy_(src))
    return 2 * nbytes / (t.median_us * 1e-6) / 1e9


def _matmul_tflops(timer: Callable[[Callable[[], Any]], Timing], device: Any, n: int) -> float:
    import torch

    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    c = torch.empty(n, n, dtype=torch.bfloat16, device=device)
    t = timer(lambda: torch.matmul(a, b, out=c))
    return 2 * n**3 / (t.median_us * 1e-6) / 1e12
