"""Declarative catalogs (instances/*.toml) expanded into named Instances.

A catalog file lists one kernel family's tuning points for one op; each point times each
(layout, dtype, ndim) cell it allows becomes an Instance whose name encodes all of it and parses back.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator

from .device import DEFAULT_TARGET, DeviceTarget
from .ops import solver_for
from .problem import ConvProblem, DType, KernelFactoryError, Layout, Op
from .resources import instances_dir


class CatalogError(KernelFactoryError):
    """A catalog file or instance name that does not describe a valid instance."""


@dataclass(frozen=True)
class Instance:
    op: Op
    family: str
    layout: Layout
    dtype: DType
    ndim: int
    params: Any  # the family's frozen params dataclass

    @property
    def name(self) -> str:
        return f"{self.op.value}_{self.ndim}d_{self.layout.value}_{self.dtype.value}_{self.family}_{self.params.suffix()}"

    @property
    def template(self) -> str:
        return solver_for(self.op).family(self.family).template

    def params_dict(self) -> dict[str, Any]:
        return {
            k: (v.value if isinstance(v, enum.Enum) else v) for k, v in dataclasses.asdict(self.params).items()
        }

    def cell_matches(self, problem: ConvProblem) -> bool:
        return (self.op, self.layout, self.dtype, self.ndim) == (problem.op, problem.layout, problem.dtype, problem.ndim)

    def why_not(self, problem: ConvProblem, target: DeviceTarget = DEFAULT_TARGET) -> str | None:
        """None when this instance computes `problem` on `target`; otherwise why not, in words."""
        if self.op is not problem.op:
            return f"instance is for {self.op.value}"
        for what, mine, theirs in (
            ("layout", self.layout.value, problem.layout.value),
            ("dtype", self.dtype.value, problem.dtype.value),
            ("rank", f"{self.ndim}D", f"{problem.ndim}D"),
        ):
            if mine != theirs:
                return f"{what} is {mine}, problem is {theirs}"
        return solver_for(self.op).why_not(self.family, self.params, problem, target)

    def why_not_on(self, target: DeviceTarget) -> str | None:
        """None when this instance can run on `target` at all (its matrix instructions exist there)."""
        return solver_for(self.op).family(self.family).why_not_on(self.params, target)

    def is_applicable(self, problem: ConvProblem, target: DeviceTarget = DEFAULT_TARGET) -> bool:
        return self.why_not(problem, target) is None


def _expand_point(point: dict[str, Any]) -> Iterator[dict[str, Any]]:
    keys = list(point)
    axes = [v if isinstance(v, list) else [v] for v in point.values()]
    for combo in itertools.product(*axes):
        yield dict(zip(keys, combo))


def _build_params(params_type: type, raw: dict[str, Any], source: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(params_type)}
    unknown = set(raw) - set(fields)
    if unknown:
        raise CatalogError(f"{source}: unknown field(s) {sorted(unknown)} for {params_type.__name__}")
    values = dict(raw)
    for name, f in fields.items():
        if name not in values:
            if f.default is dataclasses.MISSING:
                raise CatalogError(f"{source}: missing field {name!r}")
            continue
        enum_type = _enum_type(params_type, name)
        if enum_type is not None:
            try:
                values[name] = enum_type(values[name])
            except ValueError:
                choices = ", ".join(str(m.value) for m in enum_type)
                raise CatalogError(f"{source}: {name} = {values[name]!r}; choose one of: {choices}") from None
    try:
        return params_type(**values)
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"{source}: {exc}") from None


def _enum_type(params_type: type, name: str) -> type[enum.Enum] | None:
    import typing

    hints = typing.get_type_hints(params_type)
    hint = hints.get(name)
    return hint if isinstance(hint, type) and issubclass(hint, enum.Enum) else None


_FILE_FIELDS = ("op", "family", "layouts", "dtypes", "ndims")


def load_catalog_file(path: Path) -> list[Instance]:
    """Every instance one catalog file describes (points x allowed cells, duplicates dropped)."""
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{path.name}: {exc}") from None
    missing = [key for key in _FILE_FIELDS if key not in data]
    if missing:
        raise CatalogError(f"{path.name}: missing field(s) {missing}")
    unknown = sorted(set(data) - set(_FILE_FIELDS) - {"point"})
    if unknown:
        raise CatalogError(f"{path.name}: unknown field(s) {unknown}; fields: {', '.join(_FILE_FIELDS)}, point")
    try:
        op = Op.parse(data["op"])
        solver = solver_for(op)
        layouts = [Layout.parse(x) for x in data["layouts"]]
        dtypes = [DType.parse(x) for x in data["dtypes"]]
    except KernelFactoryError as exc:
        raise CatalogError(f"{path.name}: {exc}") from None
    try:
        family = solver.family(data["family"])
    except KernelFactoryError as exc:
        raise CatalogError(f"{path.name}: {exc}") from None
    ndims = list(data["ndims"])
    if any(n not in (1, 2, 3) or isinstance(n, bool) for n in ndims):
        raise CatalogError(f"{path.name}: ndims must be 1, 2 or 3, got {ndims}")
    seen: dict[str, Instance] = {}
    for index, point in enumerate(data.get("point", [])):
        for raw in _expand_point(point):
            if raw.get("split_k") == 1:
                raw["reduction"] = "direct"
            params = _build_params(family.params_type, raw, f"{path.name} point {index}")
            for layout, dtype, ndim in itertools.product(layouts, dtypes, ndims):
                if (layout, dtype, ndim) not in family.supported_cells():
                    continue
                if not family.cell_allows(params, layout, dtype, ndim):
                    continue
                inst = Instance(op, family.name, layout, dtype, ndim, params)
                seen.setdefault(inst.name, inst)
    return list(seen.values())


@lru_cache(maxsize=None)
def _catalog(directory: str) -> tuple[Instance, ...]:
    instances: list[Instance] = []
    for path in sorted(Path(directory).glob("*.toml")):
        instances.extend(load_catalog_file(path))
    return tuple(instances)


def all_instances(directory: Path | None = None) -> tuple[Instance, ...]:
    return _catalog(str(directory or instances_dir()))


Cell = tuple[Op, Layout, DType, int]


@lru_cache(maxsize=None)
def _by_cell(directory: str) -> dict[Cell, tuple[Instance, ...]]:
    index: dict[Cell, list[Instance]] = {}
    for inst in _catalog(directory):
        index.setdefault((inst.op, inst.layout, inst.dtype, inst.ndim), []).append(inst)
    return {cell: tuple(found) for cell, found in index.items()}


def instances_of_cell(op: Op, layout: Layout, dtype: DType, ndim: int, directory: Path | None = None) -> tuple[Instance, ...]:
    """The instances of one (op, layout, dtype, rank) cell, in catalog order: a dict lookup, so a
    problem's lookup checks only its own cell's instances, not the whole catalog."""
    return _by_cell(str(directory or instances_dir())).get((op, layout, dtype, ndim), ())


def select_instances(
    op: Op | None = None,
    layout: Layout | None = None,
    dtype: DType | None = None,
    ndim: int | None = None,
    family: str | None = None,
    instances: Iterable[Instance] | None = None,
) -> list[Instance]:
    """Instances of a configuration (any field left None matches all)."""
    if instances is None and op is not None and layout is not None and dtype is not None and ndim is not None:
        return [i for i in instances_of_cell(op, layout, dtype, ndim) if family is None or i.family == family]
    return [
        i
        for i in (instances if instances is not None else all_instances())
        if (op is None or i.op is op)
        and (layout is None or i.layout is layout)
        and (dtype is None or i.dtype is dtype)
        and (ndim is None or i.ndim == ndim)
        and (family is None or i.family == family)
    ]


@lru_cache(maxsize=None)
def _by_name(directory: str) -> dict[str, Instance]:
    index: dict[str, Instance] = {}
    for inst in _catalog(directory):
        index.setdefault(inst.name, inst)
    return index


def instance_by_name(name: str) -> Instance:
    """Parse a name back to its Instance; it must exist in the shipped catalogs (a dict lookup: forced
    selection and DB queries resolve names on the serving path)."""
    inst = _by_name(str(instances_dir())).get(name)
    if inst is None:
        raise CatalogError(f"no instance named {name!r} in the catalogs")
    return inst


_NAME_RE = re.compile(r"^(?P<op>[a-z_]+?)_(?P<ndim>[123])d_(?P<rest>.+)$")


def parse_instance_name(name: str) -> dict[str, Any]:
    """The fields a name encodes, without consulting the catalogs (op, ndim, layout, dtype, family, suffix)."""
    match = _NAME_RE.match(name)
    if not match:
        raise CatalogError(f"{name!r} is not an instance name")
    rest = match["rest"]
    for layout in sorted(Layout, key=lambda l: -len(l.value)):
        if rest.startswith(layout.value + "_"):
            rest = rest[len(layout.value) + 1 :]
            break
    else:
        raise CatalogError(f"{name!r}: unknown layout")
    for dtype in sorted(DType, key=lambda d: -len(d.value)):
        if rest.startswith(dtype.value + "_"):
            rest = rest[len(dtype.value) + 1 :]
            break
    else:
        raise CatalogError(f"{name!r}: unknown dtype")
    family, _, suffix = rest.partition("_")
    return {"op": Op.parse(match["op"]), "ndim": int(match["ndim"]), "layout": layout, "dtype": dtype,
            "family": family, "suffix": suffix}
