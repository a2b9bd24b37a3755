"""A filter, stride and dilation compiled into a kernel: how tuning points spell them, and what a family
whose points say `shape = "problem"` shares (the value filled in, the refusal of another problem's
shape, names parsed back). Any problem with `filter`, `stride` and `dilation` tuples is served."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..base import params_from_suffix

_SHAPE_RE = re.compile(r"k(?P<filter>\d+(?:x\d+){0,2})s(?P<stride>\d+(?:x\d+){0,2})d(?P<dilation>\d+(?:x\d+){0,2})")


def spell_shape(filt: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> str:
    def dims(v: tuple[int, ...]) -> str:
        return "x".join(map(str, v))

    return f"k{dims(filt)}s{dims(stride)}d{dims(dilation)}"


def hw(values: tuple[int, ...]) -> tuple[int, int]:
    """The H and W entries of a per-dimension tuple (H = 1 for 1-D)."""
    return (values[-2] if len(values) > 1 else 1), values[-1]


@dataclass(frozen=True)
class Shape:
    """A compiled-in filter, stride and dilation (one entry per spatial dim)."""

    filter: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> "Shape | None":
        match = _SHAPE_RE.fullmatch(text)
        if match is None:
            return None
        parts = [tuple(int(v) for v in match[name].split("x")) for name in ("filter", "stride", "dilation")]
        if len({len(p) for p in parts}) != 1 or min(min(p) for p in parts) < 1:
            return None
        return cls(*parts)

    @classmethod
    def checked(cls, text: str) -> "Shape":
        """The shape a params field spells, which its params validated when they were built. Cached: the
        families ask for it in every check and score of every candidate."""
        return _checked(text)

    def of(self, problem: Any) -> bool:
        return (self.filter, self.stride, self.dilation) == (problem.filter, problem.stride, problem.dilation)

    def template_values(self) -> dict[str, list[int]]:
        """filter, stride and dilation as the templates read them: (D, H, W), 1 for missing dimensions."""
        return {name: [1] * (3 - len(v)) + list(v) for name, v in
                (("filter", self.filter), ("stride", self.stride), ("dilation", self.dilation))}


@functools.lru_cache(maxsize=4096)
def _checked(text: str) -> Shape:
    shape = Shape.parse(text)
    assert shape is not None  # checked on the params' construction
    return shape


class CompiledShape:
    """What a family whose points compile the problem's filter, stride and dilation in shares: the value
    a "problem" point takes, the refusal of another problem's shape, and names parsed back."""

    params_type: type
    suffix_re: re.Pattern[str]

    def problem_values(self, problem: Any) -> Mapping[str, Any] | None:
        return {"shape": spell_shape(problem.filter, problem.stride, problem.dilation)}

    @staticmethod
    def wrong_shape(shape_text: str, compiled: Shape | None, problem: Any) -> str | None:
        if compiled is None or compiled.of(problem):
            return None
        return f"compiled for {shape_text}, problem has {spell_shape(problem.filter, problem.stride, problem.dilation)}"

    def parse_suffix(self, suffix: str) -> Any:
        """The params whose suffix is `suffix` (the pattern's groups name the fields), else None."""
        return params_from_suffix(self.suffix_re, self.params_type, suffix, {"shape": str})
