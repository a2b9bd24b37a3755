"""Two results.json files side by side: per case, how our time (and PyTorch's) moved from run A to B.

Ratios are A / B of median µs, so > 1 means B is faster. PyTorch's ratio shows drift of the machine
or library between the runs; a case in only one run is listed as such, never dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .model import BenchError
from .report import geomean

Key = tuple[str, str, str, str]
_KEY_FIELDS = ("op", "case", "dtype", "layout")


@dataclass(frozen=True)
class Compared:
    key: Key
    a: dict[str, Any] | None
    b: dict[str, Any] | None

    def _get(self, side: dict[str, Any] | None, field: str) -> Any:
        return None if side is None else side.get(field)

    @staticmethod
    def _ratio(x: Any, y: Any) -> float | None:
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and x > 0 and y > 0:
            return float(x) / float(y)
        return None

    @property
    def ours_ratio(self) -> float | None:
        """Our µs in A over our µs in B: > 1 when B is faster."""
        return self._ratio(self._get(self.a, "ours_us"), self._get(self.b, "ours_us"))

    @property
    def torch_ratio(self) -> float | None:
        return self._ratio(self._get(self.a, "torch_us"), self._get(self.b, "torch_us"))

    @property
    def where(self) -> str:
        if self.a is None:
            return "only in B"
        if self.b is None:
            return "only in A"
        return ""


def load_results(path: Path | str) -> list[dict[str, Any]]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BenchError(f"results {path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BenchError(f"results {path}: not a readable JSON file: {exc}") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and all(k in r for k in _KEY_FIELDS) for r in rows):
        raise BenchError(f"results {path}: not a kfactory bench results.json (no rows with {', '.join(_KEY_FIELDS)})")
    return rows


def _key(row: dict[str, Any]) -> Key:
    return tuple(str(row[k]) for k in _KEY_FIELDS)  # type: ignore[return-value]


def compare_runs(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]]) -> list[Compared]:
    """Every case of A (in A's order), then those only in B."""
    by_b = {_key(r): r for r in b}
    seen: set[Key] = set()
    result = []
    for row in a:
        key = _key(row)
        seen.add(key)
        result.append(Compared(key, row, by_b.get(key)))
    result.extend(Compared(_key(r), None, r) for r in b if _key(r) not in seen)
    return result


def print_comparison(console: Any, compared: Sequence[Compared], a_name: str, b_name: str) -> float | None:
    """The per-case table and the geometric mean of our ratio; returns that mean."""
    from rich.markup import escape
    from rich.table import Table

    def num(v: Any, fmt: str) -> str:
        return "–" if not isinstance(v, (int, float)) else format(v, fmt)

    table = Table(title=escape(f"A = {a_name}   B = {b_name}   (ratio = A µs / B µs; > 1: B faster)"))
    for col in ("op", "case", "dtype", "layout", "ours A µs", "ours B µs", "ours A/B", "PyTorch A/B",
                "speedup A", "speedup B", "note"):
        table.add_column(col, justify="right" if "µs" in col or "/" in col or "speedup" in col else "left")
    for c in compared:
        ratio = c.ours_ratio
        ratio_text = "–" if ratio is None else f"[{'green' if ratio >= 1 else 'red'}]{ratio:.2f}×[/]"
        notes = [c.where] if c.where else []
        for side, name in ((c.a, "A"), (c.b, "B")):
            if side is not None and side.get("status") not in (None, "ok"):
                notes.append(f"{name}: {side.get('status')}")
        table.add_row(*(escape(k) for k in c.key), num(c._get(c.a, "ours_us"), ".1f"), num(c._get(c.b, "ours_us"), ".1f"), ratio_text,
                      num(c.torch_ratio, ".2f"), num(c._get(c.a, "speedup"), ".2f"), num(c._get(c.b, "speedup"), ".2f"),
                      escape("; ".join(notes)))
    console.print(table)
    mean = geomean(r for r in (c.ours_ratio for c in compared) if r is not None)
    counted = sum(1 for c in compared if c.ours_ratio is not None)
    console.print(f"geomean ours A/B: {'–' if mean is None else f'{mean:.2f}×'} over {counted} cases in both runs")
    return mean
