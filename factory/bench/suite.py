"""Suite TOML -> cases -> the (case, dtype, layout) items a run measures, with the CLI's filters.

A suite has one array of tables per op id. Each case has a `name`, the op's size fields (lists for
per-dim values: `input = [28, 28]` becomes `input=28x28`), optional `fp32 = true` (adds fp32 to fp16
and bf16) and `layouts` (default NGCHW, PyTorch's default layout). The op's own problem parser turns
the sizes into a problem, so the suite speaks each op's --problem language: words too, such as
dwsep_conv_fwd's activations (`act_dw = "relu6"`).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..ops import SOLVERS
from ..problem import DType, KernelFactoryError, Layout, Op
from ..resources import bench_dir
from .model import BenchError, BenchItem, Case

DEFAULT_SUITE_NAME = "public_suite.toml"
BASE_DTYPES = (DType.FP16, DType.BF16)
SUITE_DTYPES = (DType.FP16, DType.BF16, DType.FP32)
DEFAULT_LAYOUTS = (Layout.NGCHW,)
# Layouts an op can be benchmarked in; ops not listed take every layout.
OP_LAYOUTS: dict[Op, tuple[Layout, ...]] = {
    Op.GROUPNORM_BWD: (Layout.NGCHW, Layout.NHWGC),
    Op.DWSEP_CONV_FWD: (Layout.NHWGC, Layout.NGCHW),  # activations only: no group axis to place
}
_META_KEYS = frozenset({"name", "fp32", "layouts"})


@dataclass(frozen=True)
class Suite:
    path: Path
    cases: tuple[Case, ...]

    @property
    def ops(self) -> tuple[Op, ...]:
        return tuple(dict.fromkeys(c.op for c in self.cases))


def default_suite_path() -> Path:
    return bench_dir() / DEFAULT_SUITE_NAME


def load_suite(path: Path | str | None = None) -> Suite:
    """Read and check a suite file; every mistake is one BenchError naming the file and case."""
    path = Path(path) if path is not None else default_suite_path()
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise BenchError(f"suite {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchError(f"suite {path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise BenchError(f"suite {path}: not valid TOML: {exc}") from None
    cases: list[Case] = []
    names: set[tuple[Op, str]] = set()
    for table, entries in data.items():
        try:
            op = Op.parse(table)
        except KernelFactoryError as exc:
            raise BenchError(f"suite {path}: {exc}") from None
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise BenchError(f"suite {path}: {table} must be an array of tables ({table} = [ {{ name = ... }}, ... ])")
        for index, entry in enumerate(entries):
            case = _case(path, op, index, entry)
            if (op, case.name) in names:
                raise BenchError(f"suite {path}: {op.value} case {case.name!r} appears twice")
            names.add((op, case.name))
            cases.append(case)
    if not cases:
        raise BenchError(f"suite {path}: no cases")
    return Suite(path, tuple(cases))


def _case(path: Path, op: Op, index: int, entry: dict[str, Any]) -> Case:
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise BenchError(f"suite {path}: {op.value} case #{index + 1} has no name")
    where = f"suite {path}: {op.value}/{name}"
    fp32 = entry.get("fp32", False)
    if not isinstance(fp32, bool):
        raise BenchError(f"{where}: fp32 must be true or false")
    raw_layouts = entry.get("layouts", [layout.name for layout in DEFAULT_LAYOUTS])
    if not isinstance(raw_layouts, list) or not raw_layouts or not all(isinstance(x, str) for x in raw_layouts):
        raise BenchError(f"{where}: layouts must be a non-empty list of layout names")
    try:
        layouts = tuple(Layout.parse(x) for x in raw_layouts)
    except KernelFactoryError as exc:
        raise BenchError(f"{where}: {exc}") from None
    allowed = OP_LAYOUTS.get(op)
    if allowed is not None and any(layout not in allowed for layout in layouts):
        raise BenchError(f"{where}: {op.value} is benchmarked in {', '.join(l.name for l in allowed)} only")
    sizes = tuple((key, value) for key, value in entry.items() if key not in _META_KEYS)
    for key, value in sizes:
        if isinstance(value, str) and value:
            continue  # a word of the op's problem language (act_dw = "relu6"): its parser checks it
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise BenchError(f"{where}: {key} must be an integer, a list of integers or a word, got {value!r}")
    dtypes = BASE_DTYPES + ((DType.FP32,) if fp32 else ())
    return Case(op, name, sizes, dtypes, tuple(dict.fromkeys(layouts)))


def parse_list(text: str | None) -> list[str]:
    """'a, b,c' -> ['a', 'b', 'c']; None or '' -> []."""
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def parse_ops(text: str | None) -> tuple[Op, ...] | None:
    names = parse_list(text)
    if not names:
        return None
    try:
        return tuple(dict.fromkeys(Op.parse(n) for n in names))
    except KernelFactoryError as exc:
        raise BenchError(str(exc)) from None


def parse_dtypes(text: str | None) -> tuple[DType, ...] | None:
    return dtypes_among(parse_list(text), SUITE_DTYPES,
                        f"suite cases run in {', '.join(d.value for d in SUITE_DTYPES)} (fp32 where a case sets fp32 = true)")


def dtypes_among(names: Sequence[str], allowed: Iterable[DType], where: str) -> tuple[DType, ...] | None:
    """--dtypes as DTypes, each one of `allowed` (else a BenchError: "`where`; not X"); [] -> None (all)."""
    if not names:
        return None
    try:
        dtypes = tuple(dict.fromkeys(DType.parse(n) for n in names))
    except KernelFactoryError as exc:
        raise BenchError(str(exc)) from None
    allowed = tuple(allowed)
    for dtype in dtypes:
        if dtype not in allowed:
            raise BenchError(f"{where}; not {dtype.value}")
    return dtypes


def expand(
    suite: Suite,
    ops: Sequence[Op] | None = None,
    dtypes: Sequence[DType] | None = None,
    cases: Sequence[str] | None = None,
) -> list[BenchItem]:
    """Every (case, dtype, layout) the filters keep, in suite order; ops without a solver get problem None."""
    if ops is not None:
        missing = [op.value for op in ops if op not in suite.ops]
        if missing:
            raise BenchError(f"suite {suite.path} has no cases for {', '.join(missing)}")
    if cases:
        known = {c.name for c in suite.cases}
        unknown = [n for n in cases if n not in known]
        if unknown:
            raise BenchError(f"unknown case {', '.join(unknown)}; suite cases: {', '.join(sorted(known))}")
    items: list[BenchItem] = []
    for case in suite.cases:
        if ops is not None and case.op not in ops:
            continue
        if cases and case.name not in cases:
            continue
        for dtype in case.dtypes:
            if dtypes is not None and dtype not in dtypes:
                continue
            for layout in case.layouts:
                items.append(BenchItem(case, dtype, layout, _problem(suite.path, case, layout, dtype)))
    if not items:
        raise BenchError("no suite case matches the --ops / --dtypes / --cases filters")
    return items


def _problem(path: Path, case: Case, layout: Layout, dtype: DType) -> Any | None:
    solver = SOLVERS.get(case.op)
    if solver is None:
        return None
    try:
        return solver.parse_problem(case.spec(), layout, dtype)
    except (KernelFactoryError, ValueError) as exc:
        raise BenchError(f"suite {path}: {case.op.value}/{case.name} ({layout.name}, {dtype.value}): {exc}") from None


def ops_in(items: Iterable[BenchItem]) -> tuple[Op, ...]:
    return tuple(dict.fromkeys(item.case.op for item in items))
