"""Adaptive repetitions (tuner.time_plan): a candidate stops once its median has settled, once even
its fastest rep is clearly slower than the best so far, or after a single probe rep far slower than
the best; `reps` stays the most it takes."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Iterator

import pytest

from factory.tuner import (CLEARLY_SLOWER, HOST_MARGIN, MIN_STABLE_REPS, PROBE_SLOWER, ROUND_REPS, TuneSettings, _iqr,
                           time_plan)


@dataclass
class Timeline:
    """A backend whose n-th timed rep lasts `times[n]` µs (events, flush and sync are no-ops)."""

    times: Iterator[float]
    reps: int = 0
    events: int = 0

    def synchronize(self) -> None:
        pass

    def memset_async(self, *_: object) -> None:
        pass

    def event_create(self) -> int:
        self.events += 1
        return self.events

    def event_record(self, event: int, stream: int = 0) -> None:
        pass

    def event_elapsed_ms(self, start: int, end: int) -> float:
        self.reps += 1
        return next(self.times) / 1000.0

    def event_destroy(self, event: int) -> None:
        pass


class Plan:
    def enqueue(self) -> None:
        pass


class Tensors:
    flush = 0

    def flush_us(self) -> float:
        return 85.0  # an H100's 256 MiB flush


def reps_taken(times: list[float], settings: TuneSettings, best_us: float | None = None) -> list[float]:
    return time_plan(Timeline(iter(times)), Plan(), Tensors(), settings, best_us)


def test_a_steady_kernel_stops_once_its_median_settles():
    samples = reps_taken([10.0] * 100, TuneSettings(reps=50, warmup=0))
    assert len(samples) == max(MIN_STABLE_REPS, 2 * ROUND_REPS) < 50


def test_a_noisy_kernel_takes_more_rounds_and_never_more_than_reps():
    noisy = [10.0, 14.0, 9.0, 17.0, 8.0] * 40  # the median moves by more than 1 % round after round
    samples = reps_taken([t + i * 0.2 for i, t in enumerate(noisy)], TuneSettings(reps=30, warmup=0))
    assert len(samples) == 30


def test_a_clearly_slower_kernel_stops_after_one_round_and_a_close_one_does_not():
    # Slower than CLEARLY_SLOWER but within PROBE_SLOWER: the probe passes, then one round decides.
    best = 20.0 / (CLEARLY_SLOWER + 0.1)
    assert 20.0 < PROBE_SLOWER * best
    slow = reps_taken([20.0] * 100, TuneSettings(reps=50, warmup=0), best_us=best)
    assert len(slow) == ROUND_REPS  # the probe is not kept: it ran before the warm-up
    close = reps_taken([20.0] * 100, TuneSettings(reps=50, warmup=0), best_us=20.0 / (CLEARLY_SLOWER - 0.1))
    assert len(close) == MIN_STABLE_REPS


def test_a_far_slower_kernel_ends_after_its_probe_and_says_so_in_one_sample():
    timeline = Timeline(iter([20.0] * 100))
    samples = time_plan(timeline, Plan(), Tensors(), TuneSettings(reps=50, warmup=5), 20.0 / (PROBE_SLOWER + 0.1))
    assert samples == [20.0] and timeline.reps == 1
    assert _iqr(samples) == 0.0


def test_a_probe_just_within_the_margin_goes_on_to_the_rounds():
    samples = reps_taken([20.0] * 100, TuneSettings(reps=50, warmup=0), best_us=20.0 / (PROBE_SLOWER - 0.1))
    assert len(samples) == ROUND_REPS  # past the probe, then clearly slower after one round


def test_the_first_candidate_and_a_tune_without_adaptive_take_no_probe():
    first = Timeline(iter([10.0] * 100))
    time_plan(first, Plan(), Tensors(), TuneSettings(reps=50, warmup=0))
    assert first.reps == max(MIN_STABLE_REPS, 2 * ROUND_REPS)
    fixed = Timeline(iter([100.0] * 100))
    assert len(time_plan(fixed, Plan(), Tensors(), TuneSettings(reps=7, warmup=0, adaptive=False), best_us=1.0)) == 7


@pytest.mark.parametrize("reps", [1, 3, 7, 25])
def test_without_adaptive_every_rep_is_taken(reps):
    assert len(reps_taken([10.0] * 100, TuneSettings(reps=reps, warmup=0, adaptive=False))) == reps


@dataclass
class CountingTimeline(Timeline):
    """A Timeline that counts the flushes enqueued before each rep's start event."""

    flushes: list[int] | None = None
    pending: int = 0

    def memset_async(self, *_: object) -> None:
        self.pending += 1

    def event_record(self, event: int, stream: int = 0) -> None:
        if event % 2 == 1 and self.flushes is not None:  # starts are created first: odd ids in a round of one
            self.flushes.append(self.pending)
        self.pending = 0


class SlowPlan:
    """A plan whose enqueue takes the host `seconds`, longer than one flush keeps the GPU busy."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def enqueue(self) -> None:
        time.sleep(self.seconds)


def test_reps_whose_enqueue_outlasts_their_flush_run_again_behind_more_flushes():
    # The first rep's 400 us is the host's enqueue showing through; behind enough flushes the kernel's 10 us.
    timeline = CountingTimeline(iter([400.0, 10.0, 10.0]), flushes=[])
    samples = time_plan(timeline, SlowPlan(0.0005), Tensors(), TuneSettings(reps=1, warmup=0, adaptive=False))
    assert samples == [10.0]
    assert timeline.flushes[0] == 1 and timeline.flushes[1] >= math.ceil(HOST_MARGIN * 500 / 85.0)


def test_reps_enqueued_within_their_flush_are_taken_once():
    timeline = CountingTimeline(iter([10.0, 99.0]), flushes=[])
    assert time_plan(timeline, Plan(), Tensors(), TuneSettings(reps=1, warmup=0, adaptive=False)) == [10.0]
    assert timeline.flushes == [1]
