"""Channels per group compiled into a kernel (the `gwl` families of both backward ops): how tuning points
spell them, `c<C>k<K>`, how names parse back, and the refusal of a problem whose channels differ."""

from __future__ import annotations

import functools
import re
from typing import Any

_CHANNELS_RE = re.compile(r"c(?P<c>\d+)k(?P<k>\d+)")
CHANNELS_PATTERN = r"c\d+k\d+"  # for a family's suffix pattern


def spell_channels(c: int, k: int) -> str:
    return f"c{c}k{k}"


@functools.lru_cache(maxsize=1024)
def parse_channels(text: str) -> tuple[int, int] | None:
    match = _CHANNELS_RE.fullmatch(text)
    return (int(match["c"]), int(match["k"])) if match else None


def channels_refusal(compiled: str, problem: Any, step: int, most: int) -> str | None:
    """Why a point compiled for `compiled` channels cannot take `problem`: its C and K per group must be
    multiples of `step` up to `most`, and the compiled ones."""
    if problem.C % step or problem.K % step or max(problem.C, problem.K) > most:
        return f"C and K per group must be multiples of {step} up to {most}, problem has C={problem.C}, K={problem.K}"
    if parse_channels(compiled) != (problem.C, problem.K):
        return f"compiled for {compiled}, problem has {spell_channels(problem.C, problem.K)}"
    return None
