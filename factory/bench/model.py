"""The benchmark's vocabulary: suite cases, what one row measured, and the machine's ceilings.

Torch-free and GPU-free, so suites, reports and comparisons work (and are tested) anywhere.
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from ..problem import DType, KernelFactoryError, Layout, Op


class BenchError(KernelFactoryError):
    """A bad suite, filter or results file, or no GPU: the CLI prints it as one line."""


class Serve(enum.Enum):
    """Which of our kernels a bench row runs (`kfactory bench --select`)."""

    TUNED = "tuned"  # the problem's tuned winner, tuning it first when this device has none
    NEAREST = "nearest"  # what select(mode=AUTO) serves, never tuning: own winner, nearest's, heuristic
    HEURISTIC = "heuristic"  # the op's prior alone


class Status(enum.Enum):
    """What became of one (case, dtype, layout) row; only OK rows have a speedup."""

    OK = "ok"  # both timed, outputs agree
    WRONG = "wrong"  # our output disagrees with PyTorch's: reported, never timed
    NO_BASELINE = "no_baseline"  # ours timed; the op (or this dtype) has no PyTorch equivalent
    NOT_IMPLEMENTED = "not_implemented"  # the op has no registered solver yet
    NO_KERNEL = "no_kernel"  # no instance applies, or tuning verified none
    FAILED = "failed"  # a runtime error while running the row

    @property
    def label(self) -> str:
        return {
            "ok": "ok",
            "wrong": "WRONG",
            "no_baseline": "no PyTorch baseline",
            "not_implemented": "not implemented",
            "no_kernel": "no kernel",
            "failed": "failed",
        }[self.value]


@dataclass(frozen=True)
class Case:
    """One suite entry: sizes as written (lists for per-dim values) and the dtypes/layouts it runs in."""

    op: Op
    name: str
    sizes: tuple[tuple[str, Any], ...]
    dtypes: tuple[DType, ...]
    layouts: tuple[Layout, ...]

    def spec(self) -> str:
        """The op's --problem string, e.g. 'N=32,G=14,C=24,K=24,input=28x28,filter=3x3,...'."""
        def text(value: Any) -> str:
            if isinstance(value, (list, tuple)):
                return "x".join(str(v) for v in value)
            return str(value)

        return ",".join(f"{key}={text(value)}" for key, value in self.sizes)


@dataclass(frozen=True)
class BenchItem:
    """One row to run: a case in one dtype and layout; problem is None when the op has no solver."""

    case: Case
    dtype: DType
    layout: Layout
    problem: Any | None

    @property
    def label(self) -> str:
        return f"{self.case.op.value}/{self.case.name} {self.dtype.value} {self.layout.name}"


@dataclass(frozen=True)
class Timing:
    """Median and spread (interquartile range, min, max) of per-rep microseconds.

    host_us / flush_us: the host's median time to enqueue one call, and the GPU time of the L2 flush
    that precedes it. The events measure the call alone only while the flush outlasts the enqueue.
    """

    median_us: float
    iqr_us: float
    min_us: float
    max_us: float
    reps: int
    host_us: float | None = None
    flush_us: float | None = None

    @classmethod
    def from_samples(
        cls, samples: Sequence[float], host_us: float | None = None, flush_us: float | None = None
    ) -> "Timing":
        if not samples:
            raise ValueError("no timing samples")
        if len(samples) >= 2:
            q = statistics.quantiles(samples, n=4, method="inclusive")
            iqr = q[2] - q[0]
        else:
            iqr = 0.0
        return cls(statistics.median(samples), iqr, min(samples), max(samples), len(samples), host_us, flush_us)

    @property
    def launch_exposed(self) -> bool:
        """True when host enqueue time may have leaked into the events (the GPU idled waiting for the call)."""
        return self.host_us is not None and self.flush_us is not None and self.host_us > self.flush_us


@dataclass(frozen=True)
class Ceilings:
    """What this GPU reaches in the same run: the denominators of the roofline percentages."""

    copy_gbps: float  # device-to-device copy, read + write bytes counted
    matmul_tflops: float  # bf16 n x n x n matmul, 2 n^3 flops
    copy_bytes: int
    matmul_n: int

    def dram_pct(self, min_bytes: int | None, us: float | None) -> float | None:
        if min_bytes is None or us is None or us <= 0 or self.copy_gbps <= 0:
            return None
        return 100.0 * min_bytes / (us * 1e-6) / (self.copy_gbps * 1e9)

    def mma_pct(self, macs: int | None, us: float | None) -> float | None:
        if macs is None or us is None or us <= 0 or self.matmul_tflops <= 0:
            return None
        return 100.0 * 2 * macs / (us * 1e-6) / (self.matmul_tflops * 1e12)

    def roofline_pct(self, min_bytes: int | None, macs: int | None, us: float | None) -> float | None:
        """% of the binding roofline: the larger of the DRAM floor (minimum bytes at the copy bandwidth) and
        the matmul floor (2 MACs at the matmul rate), over the time; so the larger of the two percentages."""
        pcts = [p for p in (self.dram_pct(min_bytes, us), self.mma_pct(macs, us)) if p is not None]
        return max(pcts) if pcts else None


@dataclass(frozen=True)
class Row:
    """The outcome of one BenchItem."""

    op: Op
    case: str
    dtype: DType
    layout: Layout
    status: Status
    problem: str  # the canonical problem key, or the suite's size spec when the op has no solver
    instance: str | None = None
    ours: Timing | None = None
    torch: Timing | None = None
    max_rel_err: float | None = None
    tolerance: float | None = None
    min_bytes: int | None = None
    macs: int | None = None
    note: str = ""
    # Seconds the run spent getting our kernel: tuning what this device had not measured (a problem
    # tuned before costs a DB read) and loading the winner. None where no kernel was asked for.
    tune_s: float | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.op.value, self.case, self.dtype.value, self.layout.name)

    @property
    def speedup(self) -> float | None:
        """PyTorch time over ours (> 1: we are faster); only for rows whose outputs agree."""
        if self.status is not Status.OK or self.ours is None or self.torch is None or self.ours.median_us <= 0:
            return None
        return self.torch.median_us / self.ours.median_us
