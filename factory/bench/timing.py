"""One timing function for every contender (our kernels, PyTorch's ops, the ceilings).

As triton.testing.do_bench and the tuner: warm-up, then per rep an L2 flush (zeroing a 256 MiB
buffer), a start event, the call, an end event, all on the current CUDA stream; the median and the
spread of the per-rep times. The flush also keeps the GPU busy while the host enqueues the call, so
host-side launch overhead (Python checks, PyTorch dispatch) stays out of the events: when the warm-up
shows a call's enqueue outlasting one flush, each rep is preceded by enough flushes to cover it, and
when the timed reps enqueue slower than the warm-up did, they run again behind more flushes. The
host's enqueue time is reported beside the GPU time (`Timing.host_us`).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..tuner import L2_FLUSH_BYTES, flushes_to_cover
from .model import Timing

MIN_REPS = 30  # below this a run is a smoke test; the report says so


@dataclass(frozen=True)
class TimingSettings:
    reps: int = 50
    warmup: int = 10


class CudaTimer:
    """Times a callable with torch.cuda events; the same instance times ours and PyTorch's."""

    def __init__(self, settings: TimingSettings, device: Any) -> None:
        import torch

        if settings.reps < 1 or settings.warmup < 0:
            raise ValueError("reps must be >= 1 and warmup >= 0")
        self.settings = settings
        self.device = device
        self._torch = torch
        self._flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=device)
        self.flush_us = self._flush_time()

    def _flush_time(self) -> float:
        """GPU time of one flush: the host budget for enqueueing a call without the GPU going idle."""
        torch = self._torch
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(5)]
        for start, end in events:
            start.record()
            self._flush.zero_()
            end.record()
        torch.cuda.synchronize(self.device)
        return statistics.median([s.elapsed_time(e) * 1000.0 for s, e in events])

    def __call__(self, fn: Callable[[], Any]) -> Timing:
        """Warm-up, then the timed reps behind enough flushes to cover the warm-up's enqueue time. Timed
        reps can enqueue slower than the warm-up did (a dwsep_conv_fwd call measured 135 µs timed against
        less than one 85 µs flush warm, so its 10 µs kernel timed at 218 µs): when their median enqueue
        outlasts the flushes, the reps run once more behind flushes sized from it."""
        warm_host = []
        for _ in range(self.settings.warmup):
            t0 = time.perf_counter()
            fn()
            warm_host.append((time.perf_counter() - t0) * 1e6)
        self._torch.cuda.synchronize(self.device)
        flushes = self.flushes_for(statistics.median(warm_host) if warm_host else 0.0)
        samples, host = self._reps(fn, flushes)
        if statistics.median(host) > flushes * self.flush_us:
            flushes = self.flushes_for(statistics.median(host))
            samples, host = self._reps(fn, flushes)
        return Timing.from_samples(samples, host_us=statistics.median(host), flush_us=flushes * self.flush_us)

    def _reps(self, fn: Callable[[], Any], flushes: int) -> tuple[list[float], list[float]]:
        """The timed reps, each behind `flushes` flushes: GPU µs per rep, and the host's enqueue µs."""
        torch = self._torch
        reps = self.settings.reps
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        host: list[float] = []
        for start, end in zip(starts, ends):
            for _ in range(flushes):
                self._flush.zero_()
            start.record()
            t0 = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t0) * 1e6)
            end.record()
        torch.cuda.synchronize(self.device)
        return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)], host

    def flushes_for(self, host_us: float) -> int:
        """Flushes per rep that keep the GPU busy while the host enqueues a call taking `host_us`."""
        return flushes_to_cover(host_us, self.flush_us)
