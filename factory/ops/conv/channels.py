"""Channels per group compiled into a kernel (the `gwl` families of both backward ops): how tuning points
spell them, `c<C>k<K>`, how names parse back, what such points share (with their compiled-in shape), and
the refusal of a problem whose channels differ."""

from __future__ import annotations

import functools
import re
from typing import Any

from .shape import Shape

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


class ShapeAndChannels:
    """What the tuning points of a family that compiles the problem's filter, stride, dilation (`shape`) and
    channels per group (`channels`) in share; the dataclass declares the two fields."""

    shape: str
    channels: str

    def check_shape_and_channels(self, step: int, most: int) -> None:
        """Raise ValueError unless `shape` spells a shape and `channels` C and K multiples of `step` up to `most`."""
        if Shape.parse(self.shape) is None:
            raise ValueError(f"shape {self.shape!r} is not k<filter>s<stride>d<dilation>")
        channels = parse_channels(self.channels)
        if channels is None or min(channels) < step or max(channels) > most or any(v % step for v in channels):
            raise ValueError(f"channels {self.channels!r} must be c<C>k<K>, multiples of {step} up to {most}")

    @property
    def compiled(self) -> Shape:
        return Shape.checked(self.shape)

    @property
    def c(self) -> int:
        return parse_channels(self.channels)[0]  # type: ignore[index]  # checked on construction

    @property
    def k(self) -> int:
        return parse_channels(self.channels)[1]  # type: ignore[index]
