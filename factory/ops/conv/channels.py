"""Channels per group compiled into a kernel (the `gwl` families of both backward ops): how tuning points
spell them, `c<C>k<K>`, and how names parse back."""

from __future__ import annotations

import functools
import re

_CHANNELS_RE = re.compile(r"c(?P<c>\d+)k(?P<k>\d+)")
CHANNELS_PATTERN = r"c\d+k\d+"  # for a family's suffix pattern


def spell_channels(c: int, k: int) -> str:
    return f"c{c}k{k}"


@functools.lru_cache(maxsize=1024)
def parse_channels(text: str) -> tuple[int, int] | None:
    match = _CHANNELS_RE.fullmatch(text)
    return (int(match["c"]), int(match["k"])) if match else None
