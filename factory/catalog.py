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
from typing import Any, Hashable, Iterable, Iterator, Mapping

from .device import DEFAULT_TARGET, DeviceTarget, compile_arch
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
        """Whether the instance is of the cell its family computes `problem` in (the problem's own, or that
        of its lower-rank view for a family without kernels of the problem's rank)."""
        if self.op is not problem.op:
            return False
        seen = solver_for(self.op).problem_seen_by(self.family, problem)
        return (self.layout, self.dtype, self.ndim) == (seen.layout, seen.dtype, seen.ndim)

    def why_not(self, problem: ConvProblem, target: DeviceTarget = DEFAULT_TARGET) -> str | None:
        """None when this instance computes `problem` on `target`; otherwise why not, in words."""
        if self.op is not problem.op:
            return f"instance is for {self.op.value}"
        solver = solver_for(self.op)
        seen = solver.problem_seen_by(self.family, problem)
        for what, mine, theirs in (
            ("layout", self.layout.value, seen.layout.value),
            ("dtype", self.dtype.value, seen.dtype.value),
            ("rank", f"{self.ndim}D", f"{seen.ndim}D"),
        ):
            if mine != theirs:
                return f"{what} is {mine}, problem is {theirs}" + ("" if seen is problem else f" (as {seen.key})")
        return solver.why_not(self.family, self.params, problem, target)

    def why_not_on(self, target: DeviceTarget) -> str | None:
        """None when this instance can run on `target` at all (its matrix instructions exist there)."""
        return solver_for(self.op).family(self.family).why_not_on(self.params, target)

    def compile_arch(self, device_arch: str) -> str:
        """The compiler target of this instance on a device of `device_arch` (sm_90a for wgmma on sm_90)."""
        family = solver_for(self.op).families.get(self.family)  # None: a family outside the op's list
        return compile_arch(device_arch, family.needs(self.params) if family else frozenset())

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
            values[name] = _enum_value(enum_type, name, values[name], source)
    try:
        return params_type(**values)
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"{source}: {exc}") from None


@lru_cache(maxsize=None)
def _enum_type(params_type: type, name: str) -> type[enum.Enum] | None:
    """The enum a params field holds, if any (resolved once per field: type hints are slow to evaluate)."""
    import typing

    hints = typing.get_type_hints(params_type)
    hint = hints.get(name)
    return hint if isinstance(hint, type) and issubclass(hint, enum.Enum) else None


_FILE_FIELDS = ("op", "family", "layouts", "dtypes", "ndims")

PROBLEM = "problem"  # a point field's value that the family fills from each problem (Family.problem_values)

Template = tuple[tuple[str, Any], ...]  # a point with PROBLEM fields, as (field, value) pairs in file order


def _check_template(params_type: type, raw: dict[str, Any], source: str) -> None:
    """What can be checked of a template point before a problem fills it: field names and enum values."""
    fields = {f.name: f for f in dataclasses.fields(params_type)}
    unknown = set(raw) - set(fields)
    if unknown:
        raise CatalogError(f"{source}: unknown field(s) {sorted(unknown)} for {params_type.__name__}")
    for name, f in fields.items():
        if name not in raw and f.default is dataclasses.MISSING:
            raise CatalogError(f"{source}: missing field {name!r}")
        enum_type = _enum_type(params_type, name)
        if enum_type is not None and name in raw and raw[name] != PROBLEM:
            _enum_value(enum_type, name, raw[name], source)


def _enum_value(enum_type: type[enum.Enum], name: str, value: Any, source: str) -> enum.Enum:
    try:
        return enum_type(value)
    except ValueError:
        choices = ", ".join(str(m.value) for m in enum_type)
        raise CatalogError(f"{source}: {name} = {value!r}; choose one of: {choices}") from None


def _fill(template: Template, values: Mapping[str, Any]) -> dict[str, Any] | None:
    """A template's raw point with its PROBLEM fields taken from `values`; None if one is missing."""
    raw: dict[str, Any] = {}
    for name, value in template:
        if value == PROBLEM:
            if name not in values:
                return None
            value = values[name]
        raw[name] = value
    if raw.get("split_k") == 1:
        raw["reduction"] = "direct"
    return raw


@dataclass(frozen=True)
class CatalogFile:
    """One catalog file, read and checked: its family, the cells it lists that the family serves,
    every concrete tuning point's params (in file order), and the template points whose `"problem"`
    fields each problem fills (`specialize`)."""

    name: str
    op: Op
    family: Any  # the op's Family object
    cells: tuple[tuple[Layout, DType, int], ...]
    points: tuple[Any, ...]
    templates: tuple[Template, ...] = ()

    def expand(self, cell: tuple[Layout, DType, int] | None = None) -> list[Instance]:
        """The instances of every listed cell (or of one), points x cells, duplicates dropped."""
        cells = self.cells if cell is None else [c for c in self.cells if c == cell]
        seen: dict[str, Instance] = {}
        for params in self.points:
            for layout, dtype, ndim in cells:
                if self.family.cell_allows(params, layout, dtype, ndim):
                    inst = Instance(self.op, self.family.name, layout, dtype, ndim, params)
                    seen.setdefault(inst.name, inst)
        return list(seen.values())

    def specialize(self, cell: tuple[Layout, DType, int], problem: Any) -> list[Instance]:
        """The template points completed with the values the family takes from `problem`, as instances
        of `cell` (none when the cell is not listed or the family declines the problem). A filled point
        that its params reject (e.g. rows > 1 with a 1-D filter) does not fit this problem: left out."""
        if not self.templates or cell not in self.cells:
            return []
        values = self.family.problem_values(problem)
        return [] if values is None else self.specialize_values(cell, values)

    def specialize_values(self, cell: tuple[Layout, DType, int], values: Mapping[str, Any]) -> list[Instance]:
        """`specialize` for the values a problem gave (what serving caches on)."""
        if cell not in self.cells:
            return []
        layout, dtype, ndim = cell
        seen: dict[str, Instance] = {}
        for params in self._filled_points(values):
            if isinstance(params, CatalogError):
                continue
            if self.family.cell_allows(params, layout, dtype, ndim):
                inst = Instance(self.op, self.family.name, layout, dtype, ndim, params)
                seen.setdefault(inst.name, inst)
        return list(seen.values())

    def specialize_refusal(self, cell: tuple[Layout, DType, int], values: Mapping[str, Any]) -> str:
        """Why `specialize_values` made nothing for `values` in `cell`: the first template point's reason."""
        layout, dtype, ndim = cell
        for params in self._filled_points(values):
            if isinstance(params, CatalogError):
                return str(params)
            if self.family.cell_allows(params, layout, dtype, ndim):
                return "a point fits (no refusal)"
        return f"no template point of {self.name} fits the {layout.value} {dtype.value} {ndim}-D cell"

    def _filled_points(self, values: Mapping[str, Any]) -> Iterator[Any]:
        """Each template point that takes `values` (the problem's), built: its params, or the CatalogError
        that says why they are not a valid point."""
        for index, template in enumerate(self.templates):
            raw = _fill(template, values)
            if raw is None:
                continue
            try:
                yield _build_params(self.family.params_type, raw, f"{self.name} template {index}")
            except CatalogError as exc:
                yield exc

    def specializes(self, params: Any) -> bool:
        """Whether `params` is one of the template points with its `"problem"` fields filled (from
        the params themselves): how a specialized name is told from a made-up one."""
        values = dataclasses.asdict(params)
        for index, template in enumerate(self.templates):
            raw = _fill(template, values)
            if raw is None:
                continue
            try:
                if _build_params(self.family.params_type, raw, f"{self.name} template {index}") == params:
                    return True
            except CatalogError:
                continue
        return False


def read_catalog_file(path: Path) -> CatalogFile:
    """A catalog file checked field by field; every mistake is a CatalogError naming the file."""
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
    points = []
    templates: dict[Template, None] = {}
    for index, point in enumerate(data.get("point", [])):
        source = f"{path.name} point {index}"
        for raw in _expand_point(point):
            if PROBLEM in raw.values():
                if not family.takes_problem_values():
                    raise CatalogError(f"{source}: family {family.name!r} takes no values from problems "
                                       f"(a field may be {PROBLEM!r} only where the family implements "
                                       f"problem_values and parse_suffix)")
                _check_template(family.params_type, raw, source)
                templates.setdefault(tuple(raw.items()), None)
                continue
            if raw.get("split_k") == 1:
                raw["reduction"] = "direct"
            points.append(_build_params(family.params_type, raw, source))
    supported = family.supported_cells()
    cells = tuple(c for c in itertools.product(layouts, dtypes, ndims) if c in supported)
    return CatalogFile(path.name, op, family, cells, tuple(points), tuple(templates))


def load_catalog_file(path: Path) -> list[Instance]:
    """Every instance one catalog file describes (points x allowed cells, duplicates dropped)."""
    return read_catalog_file(path).expand()


@lru_cache(maxsize=None)
def _files(directory: str) -> tuple[CatalogFile, ...]:
    return tuple(read_catalog_file(path) for path in sorted(Path(directory).glob("*.toml")))


@lru_cache(maxsize=None)
def _catalog(directory: str) -> tuple[Instance, ...]:
    return tuple(inst for f in _files(directory) for inst in f.expand())


def all_instances(directory: Path | None = None) -> tuple[Instance, ...]:
    return _catalog(str(directory or instances_dir()))


Cell = tuple[Op, Layout, DType, int]


@lru_cache(maxsize=None)
def _cell(directory: str, cell: Cell) -> tuple[Instance, ...]:
    """One cell's instances, expanded from the files of its op alone (the serving path never expands
    the whole catalog); the same instances, in the same order, as all_instances() filtered to the cell."""
    op, layout, dtype, ndim = cell
    return tuple(inst for f in _files(directory) if f.op is op for inst in f.expand((layout, dtype, ndim)))


def instances_of_cell(op: Op, layout: Layout, dtype: DType, ndim: int, directory: Path | None = None) -> tuple[Instance, ...]:
    """The instances of one (op, layout, dtype, rank) cell, in catalog order: a dict lookup, so a
    problem's lookup checks only its own cell's instances, not the whole catalog."""
    return _cell(str(directory or instances_dir()), (op, layout, dtype, ndim))


def _values_key(values: Mapping[str, Any] | None) -> Hashable:
    return None if values is None else tuple(sorted(values.items()))


@lru_cache(maxsize=4096)
def _specialized(directory: str, cell: Cell, family: str, values: Hashable) -> tuple[Instance, ...]:
    """Specializations of one family's templates in one cell for one set of problem values: cached by
    the values, not the problem, so every problem with the same filter/stride/dilation shares them."""
    op, layout, dtype, ndim = cell
    given = dict(values)  # type: ignore[arg-type]
    return tuple(inst for f in _files(directory) if f.op is op and f.family.name == family
                 for inst in f.specialize_values((layout, dtype, ndim), given))


def specialized_instances(problem: Any, directory: Path | None = None) -> tuple[Instance, ...]:
    """The template points of the problem's cell completed for `problem`, in catalog order. The same
    tuple object comes back for every problem with the same cell and values (callers may memoize on it)."""
    where = str(directory or instances_dir())
    keys = tuple((family.name, _values_key(family.problem_values(problem))) for family in _template_families(where, problem.op))
    return _specialized_all(where, (problem.op, problem.layout, problem.dtype, problem.ndim), keys)


def unspecialized_families(problem: Any, directory: Path | None = None) -> dict[str, str]:
    """The families whose catalogs have template points for the problem's cell but made no instance for
    `problem`, each with why (`list --why`: such a family has no instance whose row could say it)."""
    where = str(directory or instances_dir())
    cell = (problem.layout, problem.dtype, problem.ndim)
    made = {inst.family for inst in specialized_instances(problem, directory)}
    reasons: dict[str, str] = {}
    for f in _files(where):
        name = f.family.name
        if f.op is not problem.op or not f.templates or cell not in f.cells or name in made or name in reasons:
            continue
        values = f.family.problem_values(problem)
        reasons[name] = ("its per-problem points take no values from this problem" if values is None
                         else f.specialize_refusal(cell, values))
    return reasons


@lru_cache(maxsize=None)
def _template_families(directory: str, op: Op) -> tuple[Any, ...]:
    """The families of `op` whose catalogs have template points, each once."""
    return tuple(dict.fromkeys(f.family for f in _files(directory) if f.op is op and f.templates))


@lru_cache(maxsize=4096)
def _specialized_all(directory: str, cell: Cell, keys: tuple[tuple[str, Hashable], ...]) -> tuple[Instance, ...]:
    return tuple(inst for family, key in keys if key is not None for inst in _specialized(directory, cell, family, key))


def per_problem_families(op: Op, layout: Layout | None = None, dtype: DType | None = None, ndim: int | None = None,
                         directory: Path | None = None) -> tuple[str, ...]:
    """Families of `op` with template points in a matching cell: their instances are made per problem
    (`lookup`, `generate --problem`), so a listing without a problem cannot show them."""
    names = []
    for f in _files(str(directory or instances_dir())):
        if f.op is not op or not f.templates:
            continue
        if any((layout is None or l is layout) and (dtype is None or d is dtype) and (ndim is None or n == ndim)
               for l, d, n in f.cells):
            names.append(f.family.name)
    return tuple(dict.fromkeys(names))


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
def _named_in_cell(directory: str, cell: Cell) -> dict[str, Instance]:
    index: dict[str, Instance] = {}
    for inst in _cell(directory, cell):
        index.setdefault(inst.name, inst)
    return index


def instance_by_name(name: str) -> Instance:
    """Parse a name back to its Instance; it must exist in the shipped catalogs. Only the cell the name
    spells is expanded (forced selection and DB queries resolve names on the serving path)."""
    try:
        fields = parse_instance_name(name)
    except KernelFactoryError:
        raise CatalogError(f"no instance named {name!r} in the catalogs") from None
    cell = (fields["op"], fields["layout"], fields["dtype"], fields["ndim"])
    inst = _named_in_cell(str(instances_dir()), cell).get(name)
    if inst is None:
        inst = _specialized_by_name(str(instances_dir()), cell, fields["family"], fields["suffix"])
    if inst is None:
        raise CatalogError(f"no instance named {name!r} in the catalogs")
    return inst


@lru_cache(maxsize=4096)
def _specialized_by_name(directory: str, cell: Cell, family: str, suffix: str) -> Instance | None:
    """A specialized instance its name spells: the family parses the suffix back, and the params must
    fill one of its templates in that cell (a name that merely parses is not an instance)."""
    op, layout, dtype, ndim = cell
    for f in _files(directory):
        if f.op is not op or f.family.name != family or not f.templates or (layout, dtype, ndim) not in f.cells:
            continue
        params = f.family.parse_suffix(suffix)
        if params is None or not f.family.cell_allows(params, layout, dtype, ndim) or not f.specializes(params):
            continue
        return Instance(op, family, layout, dtype, ndim, params)
    return None


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
