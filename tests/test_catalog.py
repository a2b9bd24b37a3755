"""Every shipped catalog instance: it renders, its name parses back, the catalogs fill exactly the cells
their solvers promise, applicability agrees with the selector, and launch plans stay within what a GPU
accepts and what the rendered kernels declare.

Everything below iterates over `implemented_ops()` and the solvers' families, so a new op or family is
covered as soon as it is registered and has a catalog.
"""

from __future__ import annotations

import ast
import ctypes
import dataclasses
import enum
import itertools
import json
import math
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

from factory import abi, codegen
from factory.device import DEFAULT_TARGET
from factory.catalog import (
    CatalogError,
    Instance,
    all_instances,
    instance_by_name,
    load_catalog_file,
    parse_instance_name,
    _files,
    _template_families,
    select_instances,
    specialized_instances,
)
from factory.ops import implemented_ops, solver_for
from factory.ops.conv_bwd_weight.common import TABLE_DTYPES
from factory.ops.base import F32, I32, Buf, Launch, LaunchPlan, Memset, Struct, TensorMap, buffers_of
from factory.problem import ConvProblem, DType, Layout, Op, parse_conv_problem, supported_cells_text
from factory.resources import instances_dir
from factory.selector import explain, lookup

OP_FAMILIES = [(op, family) for op in implemented_ops() for family in solver_for(op).families]
OP_FAMILY_IDS = [f"{op.value}-{family}" for op, family in OP_FAMILIES]

# CUDA's launch limits (AMD's are the same or looser), and the shared memory a kernel gets without opting in.
GRID_X_MAX = 2**31 - 1
GRID_YZ_MAX = 65535
BLOCK_DIM_MAX = (1024, 1024, 64)
BLOCK_THREADS_MAX = 1024
SHARED_MAX = DEFAULT_TARGET.shared_optin  # what the backend lets a block have once it raises the limit
INT32_RANGE = range(-(2**31), 2**31)


@pytest.fixture(scope="module")
def instances() -> tuple[Instance, ...]:
    return all_instances()


@lru_cache(maxsize=None)
def rendered(inst: Instance) -> str:
    return codegen.render(inst)


# --- rendering and names ---------------------------------------------------------------------------


def test_every_instance_renders(instances: tuple[Instance, ...]) -> None:
    """A template that fails for one tuning point fails only at tune time on a GPU; catch it here."""
    failures = []
    for inst in instances:
        try:
            source = codegen.render(inst)
        except Exception as exc:  # noqa: BLE001 - collect every failure, report them together
            failures.append(f"{inst.name}: {type(exc).__name__}: {exc}")
            continue
        if not source.strip() or "{%" in source or "{{ " in source:
            failures.append(f"{inst.name}: empty source or unexpanded Jinja left in it")
    assert not failures, f"{len(failures)} of {len(instances)} instances do not render:\n" + "\n".join(failures[:50])


def test_every_registered_family_has_instances(instances: tuple[Instance, ...]) -> None:
    """A family without catalog entries is dead code that the selector can never hand out. A family whose
    points all take values from the problem (conv_bwd_data's dwr) has template points instead."""
    present = {(i.op, i.family) for i in instances}
    present |= {(op, f.name) for op in implemented_ops() for f in _template_families(str(instances_dir()), op)}
    missing = [f"{op.value}/{family}" for op, family in OP_FAMILIES if (op, family) not in present]
    assert not missing, f"families with no catalog instances: {missing}"
    stray = sorted(f"{op.value}/{family}" for op, family in present - set(OP_FAMILIES))
    assert not stray, f"instances of unregistered ops or families: {stray}"


def test_names_are_unique(instances: tuple[Instance, ...]) -> None:
    """Names key the compile cache, the tuning DB and generated file names."""
    dupes = [name for name, n in Counter(i.name for i in instances).items() if n > 1]
    assert not dupes, f"{len(dupes)} duplicate instance names, e.g. {dupes[:5]}"


def test_names_are_identifier_safe(instances: tuple[Instance, ...]) -> None:
    """Names become file names and appear in kernel sources; keep them to [a-z0-9_]."""
    bad = [i.name for i in instances if not re.fullmatch(r"[a-z0-9_]+", i.name)]
    assert not bad, f"names outside [a-z0-9_]: {bad[:5]}"


def test_names_parse_back(instances: tuple[Instance, ...]) -> None:
    """A stored winner is found again by name alone, with or without the catalogs."""
    failures = []
    for inst in instances:
        fields = parse_instance_name(inst.name)
        expected = {
            "op": inst.op, "ndim": inst.ndim, "layout": inst.layout, "dtype": inst.dtype,
            "family": inst.family, "suffix": inst.params.suffix(),
        }
        if fields != expected:
            failures.append(f"{inst.name}: parsed {fields}")
        elif instance_by_name(inst.name) != inst:
            failures.append(f"{inst.name}: instance_by_name returned {instance_by_name(inst.name)}")
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("name", ["", "conv_bwd_weight", "conv_bwd_weight_4d_nhwgc_fp16_dl_x",
                                  "conv_bwd_weight_2d_nchw_fp16_dl_x", "conv_bwd_weight_2d_nhwgc_fp64_dl_x"])
def test_malformed_names_are_catalog_errors(name: str) -> None:
    with pytest.raises(CatalogError):
        parse_instance_name(name)


def test_unknown_name_is_catalog_error(instances: tuple[Instance, ...]) -> None:
    with pytest.raises(CatalogError, match="no instance named"):
        instance_by_name(instances[0].name + "_x")


# --- cell coverage ---------------------------------------------------------------------------------


def covered_cells(instances: tuple[Instance, ...], op: Op, family: str | None = None) -> set[tuple[Layout, DType, int]]:
    """The cells of the instances, and those of catalog files whose points a problem fills (template points)."""
    listed = {(i.layout, i.dtype, i.ndim) for i in instances if i.op is op and (family is None or i.family == family)}
    templated = {cell for f in _files(str(instances_dir()))
                 if f.op is op and f.templates and (family is None or f.family.name == family) for cell in f.cells}
    return listed | templated


def cells_text(cells: set[tuple[Layout, DType, int]]) -> str:
    return supported_cells_text(cells)


@pytest.mark.parametrize("op, family", OP_FAMILIES, ids=OP_FAMILY_IDS)
def test_family_fills_exactly_its_supported_cells(instances: tuple[Instance, ...], op: Op, family: str) -> None:
    """What the solver claims for a family is what the catalog delivers, no more and no less."""
    covered = covered_cells(instances, op, family)
    supported = set(solver_for(op).supported_cells(family))
    assert covered == supported, (
        f"{op.value}/{family}: supported but without instances: {cells_text(supported - covered) or '-'}; "
        f"instances outside the supported cells: {cells_text(covered - supported) or '-'}"
    )


@pytest.mark.parametrize("op", implemented_ops(), ids=[op.value for op in implemented_ops()])
def test_op_fills_exactly_its_supported_cells(instances: tuple[Instance, ...], op: Op) -> None:
    """The selector refuses cells outside supported_cells(); every cell it accepts must have kernels."""
    covered = covered_cells(instances, op)
    supported = set(solver_for(op).supported_cells())
    assert covered == supported, (
        f"{op.value}: supported but without instances: {cells_text(supported - covered) or '-'}; "
        f"instances outside the supported cells: {cells_text(covered - supported) or '-'}"
    )


def test_conv_bwd_weight_dl_covers_every_layout_dtype_and_rank(instances: tuple[Instance, ...]) -> None:
    """The portable family is the fallback for every cell of the tables: 4 layouts x 5 dtypes x 3 ranks,
    and int8 with a saturated int8 result (fp16 computed as fp8 exists only where fp8 matrix
    instructions do)."""
    expected = set(itertools.product(Layout, (*TABLE_DTYPES, DType.INT8_SAT), (1, 2, 3)))
    assert len(expected) == 72
    assert covered_cells(instances, Op.CONV_BWD_WEIGHT, "dl") == expected


# --- applicability ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    layout: Layout
    dtype: DType
    spec: str
    must: frozenset[str]  # families that must have an applicable instance
    only: frozenset[str] | None = None  # when set, no other family may apply

    def problem(self) -> ConvProblem:
        return parse_conv_problem(self.spec, self.layout, self.dtype)


DEPTHWISE = frozenset({"dw"})
GEMM = frozenset({"dl", "mma"})  # the matrix-instruction family too
GEMM_CHANNELS_LAST = GEMM | {"gwl"}  # and, C and K multiples of 8 channels-last in 1-D/2-D, the windowed one
HOPPER = frozenset({"wgmma"})  # 16-bit operands on the default target (the H100's sm_90a): warpgroup MMA too
CASES = [
    Case("depthwise-2d", Layout.NHWGC, DType.FP16, "N=4,G=64,C=1,K=1,input=28x28,filter=3x3,pad=1",
         frozenset({"dl", "dw", "dwt"})),
    Case("depthwise-1d-strided", Layout.NGCHW, DType.BF16, "N=2,G=24,C=1,K=1,input=301,filter=7,stride=2,pad=3",
         frozenset({"dl", "dw"})),
    Case("depthwise-3d", Layout.NHWGC, DType.FP32, "N=2,G=16,C=1,K=1,input=4x9x9,filter=3x3x3,pad=1",
         frozenset({"dl", "dw"})),
    Case("grouped-2d-few-channels", Layout.NGCHW_GKYXC, DType.FP32,
         "N=2,G=8,C=2,K=2,input=15x15,filter=3x3,stride=2,pad=1", frozenset({"dl", "dw"}), frozenset({"dl", "dw", "mma"})),
    Case("grouped-3d", Layout.GNHWC, DType.INT8, "N=2,G=4,C=8,K=8,input=5x6x7,filter=3x3x3,pad=1",
         GEMM, GEMM),  # int8 on s8 matrix instructions
    Case("dense-2d-1x1", Layout.NHWGC, DType.BF16_FP32W, "N=2,G=1,C=64,K=32,input=14x14,filter=1x1",
         GEMM_CHANNELS_LAST | HOPPER | {"pw"}, GEMM_CHANNELS_LAST | HOPPER | {"pw"}),
    Case("dense-2d-large", Layout.NGCHW, DType.FP16, "N=256,G=1,C=256,K=256,input=56x56,filter=3x3,pad=1",
         GEMM | HOPPER, GEMM | HOPPER),
    Case("dense-1d-dilated", Layout.GNHWC, DType.FP16, "N=3,G=1,C=16,K=24,input=33,filter=5,pad=2,dilation=2",
         GEMM | HOPPER, GEMM_CHANNELS_LAST | HOPPER),
    # More groups than a grid's y dimension holds: the GEMM family must step aside.
    Case("depthwise-1d-many-groups", Layout.NHWGC, DType.FP16, "N=1,G=100000,C=1,K=1,input=16,filter=3,pad=1",
         DEPTHWISE),
    # One output position: most split-K points have nothing to split.
    Case("depthwise-2d-1x1", Layout.NHWGC, DType.BF16, "N=1,G=40,C=1,K=1,input=1x1,filter=1x1", DEPTHWISE),
    # Output epilogues: Bilinear (a D input) on an fp32 output, Scale on int8; every family still applies.
    Case("depthwise-2d-bilinear", Layout.NHWGC, DType.FP32,
         "N=4,G=64,C=1,K=1,input=28x28,filter=3x3,pad=1,alpha=0.5,beta=2", frozenset({"dl", "dw", "dwt", "dwr"})),
    Case("grouped-2d-int8-scale", Layout.NGCHW, DType.INT8, "N=2,G=8,C=2,K=2,input=15x15,filter=3x3,pad=1,alpha=-3",
         frozenset({"dl", "dw"})),
]
CASE_IDS = [c.id for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_lookup_returns_only_applicable_instances(instances: tuple[Instance, ...], case: Case) -> None:
    problem = case.problem()
    found = lookup(problem)
    assert found, f"no instance computes {problem.key}"
    cell = select_instances(problem.op, problem.layout, problem.dtype, problem.ndim, instances=instances)
    cell_names = {i.name for i in cell} | {i.name for i in specialized_instances(problem)}
    assert {i.name for i in found} <= cell_names, "lookup returned instances of another cell"
    wrong = [f"{i.name}: {i.why_not(problem)}" for i in found if i.why_not(problem) is not None]
    assert not wrong, "lookup returned instances that say they do not apply:\n" + "\n".join(wrong)
    families = {i.family for i in found}
    assert case.must <= families, f"expected families {sorted(case.must)} to apply, got {sorted(families)}"
    if case.only is not None:
        assert families <= case.only, f"only {sorted(case.only)} should apply, got {sorted(families)}"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_rejected_instances_of_the_cell_say_why(instances: tuple[Instance, ...], case: Case) -> None:
    problem = case.problem()
    applicable = {i.name for i in lookup(problem)}
    cell = select_instances(problem.op, problem.layout, problem.dtype, problem.ndim, instances=instances)
    rejected = [i for i in cell if i.name not in applicable]
    assert rejected, "every instance of the cell applies, so this case checks no rejection"
    silent = [i.name for i in rejected if not isinstance(i.why_not(problem), str) or not i.why_not(problem).strip()]
    assert not silent, f"rejected without a reason: {silent[:10]}"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_explain_gives_a_reason_for_every_other_instance(instances: tuple[Instance, ...], case: Case) -> None:
    """`kfactory list --why`: lookup and explain partition the op's instances (those specialized for
    the problem included), each rejection with its reason."""
    problem = case.problem()
    applicable = {i.name for i in lookup(problem)}
    rejections = explain(problem)
    rejected = [r.instance.name for r in rejections]
    assert len(rejected) == len(set(rejected)), "an instance is explained twice"
    assert not applicable & set(rejected), "an applicable instance is also explained away"
    op_names = {i.name for i in instances if i.op is problem.op} | {i.name for i in specialized_instances(problem)}
    assert applicable | set(rejected) == op_names
    bad = [f"{r.instance.name}: {r.reason!r}" for r in rejections
           if not r.reason or not r.reason.strip() or r.reason != r.instance.why_not(problem)]
    assert not bad, "reasons missing or not what why_not says:\n" + "\n".join(bad[:10])
    other_cell = [r for r in rejections if not r.instance.cell_matches(problem)]
    unnamed = [f"{r.instance.name}: {r.reason}" for r in other_cell
               if not any(word in r.reason for word in ("layout", "dtype", "rank"))]
    assert not unnamed, "instances of other cells rejected without naming the mismatch:\n" + "\n".join(unnamed[:10])


# --- launch plans ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelDecl:
    name: str
    params: tuple[str, ...]
    max_threads: int | None  # __launch_bounds__'s first argument, when it evaluates to a number


_KERNEL_HEAD = re.compile(r'extern\s+"C"\s+__global__\s+void\s+')
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)[ \t]+(.*?)\s*(?://.*)?$", re.MULTILINE)


def _balanced(text: str, open_at: int) -> tuple[str, int]:
    """The text inside the parentheses opening at `open_at`, and the index after the closing one."""
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1 : i], i + 1
    raise ValueError("unbalanced parentheses")


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1, "<": 1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _eval_macro(expr: str, defines: dict[str, str], depth: int = 0) -> int | None:
    """An integer macro expression (literals, + - * / %, parentheses, other macros), or None."""
    if depth > 16:
        return None
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in defines:
            value = _eval_macro(defines[node.id], defines, depth + 1)
            if value is None:
                raise ValueError(node.id)
            return value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                   ast.Div: lambda: a // b, ast.FloorDiv: lambda: a // b, ast.Mod: lambda: a % b}
            if type(node.op) in ops:
                return ops[type(node.op)]()
        raise ValueError(ast.dump(node))

    try:
        return ev(tree)
    except (ValueError, ZeroDivisionError):
        return None


@lru_cache(maxsize=None)
def kernel_decls(inst: Instance) -> dict[str, KernelDecl]:
    """The extern "C" kernels a rendered source defines: parameters and launch bound."""
    source = rendered(inst)
    defines = dict(_DEFINE.findall(source))
    decls: dict[str, KernelDecl] = {}
    for head in _KERNEL_HEAD.finditer(source):
        pos = head.end()
        max_threads = None
        bounds = re.match(r"__launch_bounds__\s*\(", source[pos:])
        if bounds:
            inside, pos = _balanced(source, pos + bounds.end() - 1)
            max_threads = _eval_macro(_split_top_level(inside)[0], defines)
        name = re.match(r"\s*([A-Za-z_]\w*)\s*\(", source[pos:])
        assert name, f"{inst.name}: cannot read the kernel name after {source[head.start():pos + 40]!r}"
        params, _ = _balanced(source, pos + name.end() - 1)
        decls[name[1]] = KernelDecl(name[1], tuple(_split_top_level(params)), max_threads)
    return decls


# --- the kernel ABI: argument structs of templates/common/args.h ------------------------------------

ABI_HEADER = Path(codegen.__file__).resolve().parents[1] / "templates" / "common" / "args.h"
_STRUCT = re.compile(r"^struct\s+([A-Za-z_]\w*)\s*\{(.*?)^\};", re.MULTILINE | re.DOTALL)


def _scalar_kind(decl: str) -> type:
    """The launch-argument kind a C declaration (parameter or field type) takes."""
    if "*" in decl:
        return Buf
    words = set(re.findall(r"\w+", decl))
    if words & {"float"}:
        return F32
    if words & {"int", "int32_t", "unsigned", "uint32_t"}:
        return I32
    raise AssertionError(f"{decl!r} has a type launch plans cannot pass")


def parse_abi_structs(text: str) -> dict[str, tuple[tuple[str, type], ...]]:
    """Each struct of an args.h text: its fields (name, Buf | I32 | F32) in declaration order."""
    structs: dict[str, tuple[tuple[str, type], ...]] = {}
    for match in _STRUCT.finditer(text):
        body = re.sub(r"//[^\n]*", "", match[2])
        fields: list[tuple[str, type]] = []
        for decl in filter(None, (d.strip() for d in body.split(";"))):
            head = re.match(r"((?:const\s+)?[A-Za-z_]\w*\s*\**)\s*(.*)", decl, re.DOTALL)
            assert head, f"cannot read field declaration {decl!r} of {match[1]}"
            names = [n.strip() for n in head[2].split(",")]
            stars = head[1].count("*")
            for name in names:
                assert re.fullmatch(r"\**[A-Za-z_]\w*", name), f"{match[1]}: unexpected declarator {name!r}"
                kind = _scalar_kind(head[1] + ("*" if name.startswith("*") or stars else ""))
                fields.append((name.lstrip("*"), kind))
        structs[match[1]] = tuple(fields)
    return structs


@lru_cache(maxsize=1)
def abi_structs() -> dict[str, tuple[tuple[str, type], ...]]:
    return parse_abi_structs(ABI_HEADER.read_text())


def struct_layout(arg: Struct) -> tuple[tuple[str, type], ...]:
    return tuple((name, type(value)) for name, value in arg.fields)


TENSOR_MAP_PARAM = "kf_tensor_map"  # common/tma.h: a TensorMap argument's kernel parameter


def _param_kind(decl: str) -> type | str:
    """Buf / I32 / F32 for a scalar parameter; the struct's name for an args.h struct taken by value, or a
    tensor map's."""
    words = re.findall(r"\w+", decl)
    if TENSOR_MAP_PARAM in words and "*" not in decl and "&" not in decl:
        return TENSOR_MAP_PARAM
    structs = [w for w in words if w in abi_structs()]
    if structs and "*" not in decl and "&" not in decl:
        return structs[0]
    return _scalar_kind(decl)


def _arg_kind(arg: object) -> type | str:
    if isinstance(arg, TensorMap):
        return TENSOR_MAP_PARAM
    return arg.ctype if isinstance(arg, Struct) else type(arg)


def _kind_name(kind: type | str) -> str:
    return kind if isinstance(kind, str) else kind.__name__


def plan_problems(inst: Instance, problem: ConvProblem, plan: LaunchPlan) -> list[str]:
    """Everything wrong with one plan: launch limits, buffers, workspace, and the kernels' signatures."""
    solver = solver_for(problem.op)
    tensors = {t.name: t for t in solver.tensors(problem)}
    sizes = {name: t.nbytes for name, t in tensors.items()} | {"workspace": plan.workspace_bytes}
    decls = kernel_decls(inst)
    errors: list[str] = []
    used: set[str] = set()
    launches = [s for s in plan.steps if isinstance(s, Launch)]
    if not launches:
        errors.append("plan launches nothing")
    if plan.workspace_bytes < 0:
        errors.append(f"workspace_bytes {plan.workspace_bytes} < 0")
    for step in plan.steps:
        if isinstance(step, Memset):
            used.add(step.buffer)
            if step.buffer not in sizes:
                errors.append(f"memset of unknown buffer {step.buffer!r}")
            elif not (0 < step.nbytes and 0 <= step.offset and step.offset + step.nbytes <= sizes[step.buffer]):
                errors.append(f"memset of {step.nbytes} bytes from byte {step.offset} on {step.buffer!r} of "
                              f"{sizes[step.buffer]}")
            continue
        assert isinstance(step, Launch), f"unknown step {step!r}"
        where = f"{step.entry} grid {step.grid} block {step.block}"
        gx, gy, gz = step.grid
        if min(step.grid) < 1 or gx > GRID_X_MAX or gy > GRID_YZ_MAX or gz > GRID_YZ_MAX:
            errors.append(f"{where}: grid outside CUDA limits")
        threads = math.prod(step.block)
        if min(step.block) < 1 or any(b > m for b, m in zip(step.block, BLOCK_DIM_MAX)) or threads > BLOCK_THREADS_MAX:
            errors.append(f"{where}: block outside CUDA limits")
        if not 0 <= step.shared_bytes <= SHARED_MAX:
            errors.append(f"{where}: {step.shared_bytes} bytes of dynamic shared memory")
        for arg in step.args:
            if isinstance(arg, Struct):
                declared = abi_structs().get(arg.ctype)
                if declared is None:
                    errors.append(f"{where}: struct {arg.ctype} is not declared in common/args.h")
                elif struct_layout(arg) != declared:
                    errors.append(f"{where}: {arg.ctype} fields {struct_layout(arg)} differ from args.h's {declared}")
        for arg in abi.flatten_args(step.args):
            if isinstance(arg, TensorMap):
                last = (arg.dims[0] - 1) * arg.element_bytes + sum((d - 1) * s for d, s in zip(arg.dims[1:], arg.strides))
                room = sizes.get(arg.buffer.name, 0) - arg.buffer.offset
                if last + arg.element_bytes > room:
                    errors.append(f"{where}: a tensor map over {arg.buffer.name!r} reaches byte "
                                  f"{last + arg.element_bytes} of the {room} it has")
                arg = arg.buffer  # its buffer is checked as a pointer argument's
            if isinstance(arg, Buf):
                used.add(arg.name)
                if arg.name not in sizes:
                    errors.append(f"{where}: argument names unknown buffer {arg.name!r}")
            elif isinstance(arg, I32) and arg.value not in INT32_RANGE:
                errors.append(f"{where}: I32 argument {arg.value} out of range")
            elif isinstance(arg, F32) and not math.isfinite(arg.value):
                errors.append(f"{where}: F32 argument {arg.value}")
        decl = decls.get(step.entry)
        if decl is None:
            errors.append(f"{where}: the source defines no kernel {step.entry!r} (it has {sorted(decls)})")
            continue
        kinds = [_arg_kind(a) for a in step.args]
        expected = [_param_kind(p) for p in decl.params]
        if kinds != expected:
            errors.append(f"{where}: passes {len(kinds)} args {[_kind_name(k) for k in kinds]}, "
                          f"kernel takes {len(expected)} {[_kind_name(k) for k in expected]}")
        if decl.max_threads is not None and threads > decl.max_threads:
            errors.append(f"{where}: {threads} threads over __launch_bounds__({decl.max_threads})")
    # A workspace is used by someone; the converse does not hold: an argument struct may carry the
    # workspace pointer to a kernel that does not touch it (GroupNorm's ws in a one-launch plan).
    if plan.workspace_bytes > 0 and "workspace" not in used:
        errors.append(f"workspace_bytes={plan.workspace_bytes} but no step uses the workspace")
    for t in tensors.values():
        if not any(b.name == t.name for s in launches for b in buffers_of(s.args)):
            errors.append(f"no kernel receives the {t.role.value} tensor {t.name!r}")
    return errors


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_launch_plans_of_applicable_instances_are_sane(case: Case) -> None:
    problem = case.problem()
    solver = solver_for(problem.op)
    found = lookup(problem)
    failures = []
    for inst in found:
        plan = solver.launch_plan(inst.family, inst.params, problem)
        failures += [f"{inst.name}: {e}" for e in plan_problems(inst, problem, plan)]
    assert not failures, f"{len(failures)} plan problems for {problem.key}:\n" + "\n".join(failures[:30])


def test_launch_bounds_are_read(instances: tuple[Instance, ...]) -> None:
    """The launch-bound check above is live: every family's kernels declare a bound it can evaluate."""
    first: dict[tuple[Op, str], Instance] = {}
    for inst in instances:
        first.setdefault((inst.op, inst.family), inst)
    unread = [f"{inst.name}:{d.name}" for inst in first.values() for d in kernel_decls(inst).values()
              if d.max_threads is None]
    assert all(kernel_decls(inst) for inst in first.values()), "a family's source defines no extern \"C\" kernel"
    assert not unread, f"kernels without a readable __launch_bounds__: {unread}"


def test_plan_checker_catches_a_broken_plan() -> None:
    """The plan checker must be able to fail: a plan with one argument too few and an oversized grid."""
    problem = CASES[0].problem()
    inst = lookup(problem)[0]
    plan = solver_for(problem.op).launch_plan(inst.family, inst.params, problem)
    launch = next(s for s in plan.steps if isinstance(s, Launch))
    broken = Launch(launch.entry, (launch.grid[0], 70000, 1), launch.block, launch.args[:-1], launch.shared_bytes)
    errors = plan_problems(inst, problem, LaunchPlan((broken,), plan.workspace_bytes))
    assert any("grid outside" in e for e in errors)
    assert any("kernel takes" in e for e in errors)
    # A struct whose fields differ from args.h (two swapped), and one args.h does not declare.
    struct = next(a for a in launch.args if isinstance(a, Struct))
    swapped = Struct(struct.ctype, (struct.fields[1], struct.fields[0], *struct.fields[2:]))
    unknown = Struct("kf_no_such_args", struct.fields)
    for bad, message in ((swapped, "differ from args.h"), (unknown, "not declared in common/args.h")):
        args = tuple(bad if a is struct else a for a in launch.args)
        errors = plan_problems(inst, problem, LaunchPlan((dataclasses.replace(launch, args=args),), plan.workspace_bytes))
        assert any(message in e for e in errors), (message, errors)


GN_PLAN_SPECS = [("N=2,C=64,G=8,input=9x7", Layout.NGCHW), ("N=3,C=48,G=6,input=5x6x7", Layout.NHWGC),
                 ("N=2,C=16,G=4,input=33,affine=0", Layout.NGCHW)]


@pytest.mark.parametrize("spec, layout", GN_PLAN_SPECS, ids=[s for s, _ in GN_PLAN_SPECS])
def test_groupnorm_launch_plans_match_the_kernels(spec: str, layout: Layout) -> None:
    """GroupNorm plans against their kernels' declarations: argument structs, plain parameters, limits."""
    solver = solver_for(Op.GROUPNORM_BWD)
    problem = solver.parse_problem(spec, layout, DType.FP16)
    found = lookup(problem)
    cell = (problem.layout, problem.dtype, problem.ndim)
    serving = {f for f in solver.families if cell in solver.supported_cells(f)}
    assert {i.family for i in found} == serving, "every family of the cell should take these problems"
    failures = [f"{inst.name}: {e}" for inst in found
                for e in plan_problems(inst, problem, solver.launch_plan(inst.family, inst.params, problem))]
    assert not failures, "\n".join(failures[:30])


# --- the kernel ABI: header and Python agree ------------------------------------------------------

def abi_builders() -> dict[str, Struct]:
    """One struct of each kind args.h declares, from the one place in Python that fills it."""
    from factory.ops.conv import epilogue_args, kernel_args
    from factory.ops.conv_bwd_weight.common import TENSORS, splitk_args
    from factory.ops.dwsep_conv_fwd.fused import dwsep_args
    from factory.ops.groupnorm_bwd import StreamParams, geometry
    from factory.ops.groupnorm_bwd.common import gn_args
    from factory.ops.groupnorm_bwd.stream import tiles_args

    conv = parse_conv_problem("N=2,G=2,C=3,K=4,input=9x7,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    gn = solver_for(Op.GROUPNORM_BWD).parse_problem("N=2,C=8,G=4,input=6x6", Layout.NGCHW, DType.FP16)
    built = [kernel_args(TENSORS, conv), epilogue_args(conv, "d", "grad_weight"),
             splitk_args("workspace", "grad_weight", 10, 2, 10), gn_args(gn),
             tiles_args(geometry(StreamParams(256, 4, 2, 1), gn)),
             dwsep_args(solver_for(Op.DWSEP_CONV_FWD).parse_problem("N=2,C=8,K=4,input=6x6,filter=3x3,bias_pw=1",
                                                                    Layout.NHWGC, DType.FP16))]
    return {b.ctype: b for b in built}


def test_abi_header_and_python_declare_the_same_structs() -> None:
    """Every struct of common/args.h, field by field (name, pointer / int / float, order), is what Python
    fills; a field added, dropped, renamed or moved on one side only fails here."""
    declared = abi_structs()
    built = abi_builders()
    assert set(declared) == set(built), (sorted(declared), sorted(built))
    for name, struct in built.items():
        assert struct_layout(struct) == declared[name], name
    # The parser reads what it should: the conv struct's first fields, and a changed header fails.
    assert declared["kf_conv_args"][:5] == (("in", Buf), ("out", Buf), ("wei", Buf), ("N", I32), ("G", I32))
    edited = ABI_HEADER.read_text().replace("int N, G, C, K;", "int N, C, G, K;")
    assert parse_abi_structs(edited)["kf_conv_args"] != struct_layout(built["kf_conv_args"])


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH")
def test_abi_structs_have_the_c_layout(tmp_path: Path) -> None:
    """ctypes (the packer) and a C++ compiler lay every args.h struct out alike: size, alignment, offsets.
    The device compilers follow the same rules for 64-bit pointers and 32-bit ints and floats."""
    built = abi_builders()
    lines = ['#include <cstddef>', '#include <cstdio>', '#define __device__', '#define __forceinline__ inline',
             ABI_HEADER.read_text(), 'int main() {']
    for name, struct in built.items():
        lines.append(f'  std::printf("{name} size %zu align %zu\\n", sizeof({name}), alignof({name}));')
        lines += [f'  std::printf("{name}.{f} %zu\\n", offsetof({name}, {f}));' for f, _ in struct.fields]
    lines.append("}")
    (tmp_path / "layout.cpp").write_text("\n".join(lines))
    subprocess.run(["g++", "-std=c++17", "-o", str(tmp_path / "layout"), str(tmp_path / "layout.cpp")], check=True)
    printed = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout
    expected = []
    for name, struct in built.items():
        ctype = abi.ctype_of(struct)
        expected.append(f"{name} size {ctypes.sizeof(ctype)} align {ctypes.alignment(ctype)}")
        expected += [f"{name}.{f} {getattr(ctype, f).offset}" for f, _ in struct.fields]
    assert printed.splitlines() == expected


# --- catalog file errors ---------------------------------------------------------------------------

def _valid_catalog_text(inst: Instance | None = None) -> tuple[str, Instance]:
    """A one-instance catalog rebuilt from a shipped instance's parameters (default: the first)."""
    inst = inst or all_instances()[0]
    lines = [f'op = "{inst.op.value}"', f'family = "{inst.family}"', f'layouts = ["{inst.layout.value}"]',
             f'dtypes = ["{inst.dtype.value}"]', f"ndims = [{inst.ndim}]", "", "[[point]]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in inst.params_dict().items()]
    return "\n".join(lines) + "\n", inst


def _required_point_field() -> str:
    """A tuning field without a default: leaving it out must be an error."""
    params = all_instances()[0].params
    return next(f.name for f in dataclasses.fields(params) if f.default is dataclasses.MISSING)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_valid_catalog_file_loads(tmp_path: Path) -> None:
    """The base for the error cases below loads cleanly, so their errors come from the one change each makes."""
    text, inst = _valid_catalog_text()
    loaded = load_catalog_file(_write(tmp_path, "ok.toml", text))
    assert [i.name for i in loaded] == [inst.name]


@pytest.mark.parametrize("change, message", [
    (lambda t: "bogus_field = 1\n" + t, "bogus_field"),
    (lambda t: t.replace("[[point]]\n", "[[point]]\nbogus_field = 1\n"), "bogus_field"),
    (lambda t: t.replace("\nndims = ", "\nndim = "), "ndim"),
    (lambda t: re.sub(rf"^{_required_point_field()} = .*\n", "", t, flags=re.MULTILINE), "missing"),
    (lambda t: t.replace("\nlayouts = ", "\n# layouts = "), "layouts"),
    (lambda t: re.sub(r'family = "\w+"', 'family = "no_such_family"', t), "no_such_family"),
    (lambda t: re.sub(r'layouts = \["\w+"\]', 'layouts = ["nchw9"]', t), "nchw9"),
    (lambda t: re.sub(r'dtypes = \["\w+"\]', 'dtypes = ["fp64"]', t), "fp64"),
    (lambda t: re.sub(r"ndims = \[\d\]", "ndims = [4]", t), "ndims"),
    (lambda t: re.sub(r'op = "\w+"', 'op = "no_such_op"', t), "no_such_op"),
    (lambda t: t + "[[point\n", "bad.toml"),
], ids=["unknown-top-level-field", "unknown-point-field", "misspelt-top-level-field", "missing-point-field",
        "missing-top-level-field", "unknown-family", "unknown-layout", "unknown-dtype", "bad-rank",
        "unknown-op", "toml-syntax"])
def test_bad_catalog_is_catalog_error_naming_the_file(tmp_path: Path, change, message: str) -> None:
    text, _ = _valid_catalog_text()
    changed = change(text)
    assert changed != text
    path = _write(tmp_path, "bad.toml", changed)
    with pytest.raises(CatalogError) as info:
        load_catalog_file(path)
    assert "bad.toml" in str(info.value)
    assert message in str(info.value)


def test_bad_enum_value_in_a_point_is_catalog_error(tmp_path: Path) -> None:
    """Enum-typed tuning fields (e.g. a split-K reduction) reject unknown values with the file named."""

    def enum_fields(inst: Instance) -> list[str]:
        return [f.name for f in dataclasses.fields(inst.params) if isinstance(getattr(inst.params, f.name), enum.Enum)]

    # The loader forces the reduction of split_k = 1 points to "direct", so take a point that splits.
    inst = next((i for i in all_instances() if enum_fields(i) and getattr(i.params, "split_k", 2) != 1), None)
    if inst is None:
        pytest.skip("no catalog instance has an enum-typed tuning field")
    text, _ = _valid_catalog_text(inst)
    field = enum_fields(inst)[0]
    changed = re.sub(rf"^{field} = .*$", f'{field} = "no_such_value"', text, flags=re.MULTILINE)
    assert changed != text
    with pytest.raises(CatalogError, match=r"bad\.toml point 0: .*no_such_value"):
        load_catalog_file(_write(tmp_path, "bad.toml", changed))
