"""Bad-input fuzzing of every op: problem strings, problem sizes and command lines.

Property everywhere: an input either works or fails with the documented error — a KernelFactoryError
subclass in the library (ProblemSyntaxError for text that does not parse, InvalidProblem naming a real
field for impossible sizes, UnsupportedProblem for ops or cells without kernels), exit 2 with one line on
stderr in the CLI — never a stray ValueError / KeyError / IndexError / ZeroDivisionError / OverflowError
or a traceback.

The examples are derandomized and few, so CI is fast and reproducible. For a deeper search (random
seeds, 50x the examples):

    HYPOTHESIS_PROFILE=thorough .venv/bin/python -m pytest -q tests/test_fuzz_inputs.py
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, assume, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

import factory.backends
from factory import cli
from factory.backends import BackendError, BackendKind
from factory.ops import SOLVERS, implemented_ops, solver_for
from factory.ops.base import Buf, I32, Launch, Memset
from factory.ops.groupnorm_bwd import GroupNormProblem, parse_groupnorm_problem
from factory.problem import (
    ConvProblem,
    DType,
    InvalidProblem,
    KernelFactoryError,
    Layout,
    Op,
    ProblemSyntaxError,
    UnsupportedProblem,
    parse_conv_problem,
)
from factory.selector import check_supported, lookup

# --- settings ------------------------------------------------------------------------------------
THOROUGH = os.environ.get("HYPOTHESIS_PROFILE", "") == "thorough"
_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


def fuzz(examples: int) -> settings:
    """Per-test settings: `examples` reproducible examples in CI, 50x as many random ones when thorough."""
    return settings(max_examples=examples * (50 if THOROUGH else 1), deadline=None, derandomize=not THOROUGH,
                    database=None, suppress_health_check=_SUPPRESSED)


# --- vocabulary ----------------------------------------------------------------------------------
PROBLEM_TYPES: dict[Op, type] = {Op.CONV_BWD_WEIGHT: ConvProblem, Op.CONV_BWD_DATA: ConvProblem,
                                 Op.GROUPNORM_BWD: GroupNormProblem}
NON_SIZE = ("layout", "dtype", "op")


def size_fields(cls: type) -> tuple[str, ...]:
    """The --problem field names of a problem type: its dataclass fields other than layout/dtype/op."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in NON_SIZE)


def fields_of_op(op: Op) -> tuple[str, ...]:
    """Field names to build strings from; ops without kernels get the convolution's."""
    return size_fields(PROBLEM_TYPES.get(op, ConvProblem))


ALL_FIELD_NAMES = frozenset(f.name for cls in PROBLEM_TYPES.values() for f in dataclasses.fields(cls))
FAMILIES = sorted({f for solver in SOLVERS.values() for f in solver.families})
LAYOUT_SPELLINGS = ["NHWGC", "nhwgc", "NWGC", "NDHWGC", "NGCHW", "ngchw", "NGCDHW", "NGCHW/GKCYX/NGKHW",
                    "NGCHW_GKYXC", "ngchw-gkyxc", "NGCHW/GKYXC/NGKHW", "GNHWC", "GNDHWC", " nhwgc "]
DTYPE_SPELLINGS = [d.value for d in DType] + ["FP16", " bf16 ", "Bf16_Fp32W"]
OP_SPELLINGS = [o.value for o in Op] + ["CONV_BWD_WEIGHT", " groupnorm_bwd "]

# Text that int() or the tokenizer could trip over: signs, separators, non-ASCII digits, floats, hex.
TRICKY_INTS = ["0", "-0", "+3", "-1", "1_0", "٣", "５", "²", "½", "1.5", "1e3", "0x10", "", " ", "nan", "inf",
               " 3", "3 ", "--1", "=3", "3=3", "9" * 5000]
JUNK = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=8)
BAD_INT = st.one_of(st.integers(-3, 0).map(str), st.integers(2**31 - 2, 2**80).map(str),
                    st.sampled_from(TRICKY_INTS), JUNK)


@st.composite
def bad_dims(draw: st.DrawFn, ndim: int) -> str:
    """Spatial sizes gone wrong: the wrong number of entries, a bad entry, or odd separators."""
    good = [str(draw(st.integers(1, 9))) for _ in range(ndim)]
    kind = draw(st.integers(0, 3))
    if kind == 0:  # wrong dim count, e.g. input=5x5x5 with filter=3x3
        n = draw(st.sampled_from([0, 4, 5] + [k for k in (1, 2, 3) if k != ndim]))
        return "x".join(str(draw(st.integers(1, 9))) for _ in range(n))
    if kind == 1:
        good[draw(st.integers(0, ndim - 1))] = draw(BAD_INT)
        return "x".join(good)
    if kind == 2:
        return draw(st.sampled_from(["X".join(good), "x".join(good) + "x", "x" + "x".join(good), "xx".join(good),
                                     "*".join(good), " x ".join(good)]))
    return draw(JUNK)


def baseline(draw: st.DrawFn, names: tuple[str, ...], ndim: int) -> dict[str, str]:
    """Values of a valid problem (most of the time) for the field names of one op."""
    dims = lambda lo, hi, n: "x".join(str(draw(st.integers(lo, hi))) for _ in range(n))  # noqa: E731
    values: dict[str, str] = {}
    G = draw(st.integers(1, 8))
    for name in names:
        if name == "G":
            values[name] = str(G)
        elif name == "C" and "K" not in names:  # GroupNorm: C counts all channels, a multiple of G
            values[name] = str(G * draw(st.integers(1, 8)))
        elif name in ("N", "C", "K"):
            values[name] = str(draw(st.integers(1, 8)))
        elif name == "input":
            values[name] = dims(3, 12, ndim)
        elif name == "filter":
            values[name] = dims(1, 3, draw(st.sampled_from([1, ndim])))
        elif name == "affine":
            values[name] = draw(st.sampled_from(["0", "1"]))
        elif name in ("alpha", "beta"):  # the conv epilogue: optional decimal numbers
            if draw(st.booleans()):
                values[name] = draw(st.sampled_from(["0", "1", "-2", "0.5", "1e-3", "+.25", "3E1", "-0"]))
        else:  # stride, pad, dilation: optional, one entry for every dim or one per dim
            if draw(st.booleans()):
                values[name] = dims(0 if name == "pad" else 1, 2, draw(st.sampled_from([1, ndim])))
    return values


@st.composite
def problem_specs(draw: st.DrawFn, names: tuple[str, ...]) -> str:
    """A near-valid --problem string over `names`: a valid problem's fields, then 0-3 mutations (a junk,
    zero, negative or huge value; a wrong dim count; a missing, repeated, unknown or bare token; a re-cased
    name) and stray commas and whitespace."""
    ndim = draw(st.integers(1, 3))
    values = baseline(draw, names, ndim)
    tokens = [f"{n}={v}" for n, v in values.items()]
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))):
        kind = draw(st.integers(0, 6))
        name = draw(st.sampled_from(names))
        token = f"{name}={values[name]}" if name in values and f"{name}={values[name]}" in tokens else None
        if kind <= 1:  # a bad value
            bad = draw(bad_dims(ndim)) if name in ("input", "filter", "stride", "pad", "dilation") else draw(BAD_INT)
            tokens = [t for t in tokens if t != token] + [f"{name}={bad}"]
        elif kind == 2 and token:  # missing
            tokens.remove(token)
        elif kind == 3:  # repeated
            tokens.append(f"{name}={draw(st.integers(1, 8))}")
        elif kind == 4:  # unknown field, or a field of another op
            tokens.append(f"{draw(st.sampled_from(sorted(ALL_FIELD_NAMES | {'bias', 'groups', ''})))}=1")
        elif kind == 5:  # not name=value
            tokens.append(draw(st.one_of(st.sampled_from(names), JUNK)))
        elif token:  # re-cased name, or whitespace around '='
            tokens[tokens.index(token)] = draw(st.sampled_from([token.upper(), token.lower(), token.replace("=", " = ")]))
    order = draw(st.permutations(range(len(tokens)))) if tokens else []
    sep = draw(st.sampled_from([",", ",", ",", ", ", " , ", ",,"]))
    body = sep.join(tokens[i] for i in order)
    return draw(st.sampled_from(["", "", " ", "\t"])) + body + draw(st.sampled_from(["", "", ",", " "]))


# --- shared checks -------------------------------------------------------------------------------
def check_problem(problem: Any, op: Op) -> None:
    """A parsed or built problem: the op's type, positive sizes, a key that parses back to it."""
    assert isinstance(problem, PROBLEM_TYPES[op]) and problem.op is op
    for name in ("N", "G", "C"):
        assert getattr(problem, name) >= 1
    assert 1 <= problem.ndim <= 3 and all(s >= 1 for s in problem.input)
    again = solver_for(op).parse_problem(problem.spec(), problem.layout, problem.dtype)
    assert again == problem and again.key == problem.key


def check_invalid(exc: InvalidProblem, cls: type) -> None:
    """InvalidProblem names a real field of the problem's dataclass, in a one-line message."""
    assert exc.field in {f.name for f in dataclasses.fields(cls)}, exc.field
    assert "\n" not in str(exc)


def check_lookup(problem: Any) -> list[Any]:
    """lookup returns a list (then a few launch plans build and make sense) or says UnsupportedProblem."""
    try:
        found = lookup(problem)
    except UnsupportedProblem as exc:
        event("unsupported cell")
        assert "\n" not in str(exc)
        return []
    assert isinstance(found, list)
    event("instances found" if found else "no instance applies")
    solver = solver_for(problem.op)
    for inst in {id(i): i for i in (found[:1] + found[len(found) // 2:][:1] + found[-1:])}.values():
        check_plan(solver, inst, problem)
    return found


def check_plan(solver: Any, inst: Any, problem: Any) -> None:
    """A launch plan that a GPU could run: known buffers, positive grids within the hardware limits,
    32-bit scalars that fit."""
    plan = solver.launch_plan(inst.family, inst.params, problem)
    names = {t.name for t in solver.tensors(problem)} | {"workspace"}
    assert plan.steps and plan.workspace_bytes >= 0
    for step in plan.steps:
        if isinstance(step, Memset):
            assert step.buffer in names and step.nbytes >= 0 and 0 <= step.byte <= 255
            continue
        assert isinstance(step, Launch)
        gx, gy, gz = step.grid
        bx, by, bz = step.block
        assert 1 <= gx <= 2**31 - 1 and 1 <= gy <= 65535 and 1 <= gz <= 65535, (inst.name, step.grid)
        assert min(bx, by, bz) >= 1 and bx * by * bz <= 1024, (inst.name, step.block)
        assert step.shared_bytes >= 0
        for arg in step.args:
            if isinstance(arg, Buf):
                assert arg.name in names, (inst.name, arg.name)
            elif isinstance(arg, I32):
                assert -(2**31) <= arg.value < 2**31, (inst.name, step.entry, arg.value)


PARSE_ERRORS = (ProblemSyntaxError, InvalidProblem, UnsupportedProblem)


def parse_any(op: Op, spec: str, layout: Layout, dtype: DType) -> Any:
    """What the CLI does with --op/--problem: the op's solver parses; ops without one are refused."""
    return solver_for(op).parse_problem(spec, layout, dtype)


# --- problem strings -----------------------------------------------------------------------------
@st.composite
def op_and_spec(draw: st.DrawFn) -> tuple[Op, str]:
    op = draw(st.sampled_from([*implemented_ops(), *implemented_ops(), *Op]))
    return op, draw(problem_specs(fields_of_op(op)))


@fuzz(300)
@given(case=op_and_spec(), layout=st.sampled_from(list(Layout)), dtype=st.sampled_from(list(DType)))
def test_problem_strings_parse_or_raise_the_documented_error(case: tuple[Op, str], layout: Layout, dtype: DType) -> None:
    op, spec = case
    try:
        problem = parse_any(op, spec, layout, dtype)
    except PARSE_ERRORS as exc:
        event(type(exc).__name__)
        assert "\n" not in str(exc)
        if isinstance(exc, InvalidProblem):
            check_invalid(exc, PROBLEM_TYPES[op])
        if isinstance(exc, UnsupportedProblem):
            assert op not in SOLVERS
        return
    event("parsed")
    check_problem(problem, op)
    check_lookup(problem)


def test_ops_without_kernels_are_unsupported_naming_the_implemented_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every op has a solver today; an op whose solver is not registered must still be refused by name.
    op = Op.CONV_BWD_DATA
    monkeypatch.delitem(SOLVERS, op)
    with pytest.raises(UnsupportedProblem) as info:
        solver_for(op)
    assert f"{op.value} has no kernels yet" in str(info.value)
    assert all(o.value in str(info.value) for o in implemented_ops())
    # A well-formed convolution addressed to such an op parses, and lookup refuses it the same way.
    problem = parse_conv_problem("N=1,G=1,C=1,K=1,input=5,filter=3", Layout.NHWGC, DType.FP16, op)
    with pytest.raises(UnsupportedProblem, match="implemented: " + ", ".join(o.value for o in implemented_ops())):
        lookup(problem)


@fuzz(150)
@given(text=st.one_of(st.sampled_from(LAYOUT_SPELLINGS + DTYPE_SPELLINGS + OP_SPELLINGS), JUNK,
                      st.sampled_from(LAYOUT_SPELLINGS + DTYPE_SPELLINGS).map(lambda s: s + "x")))
def test_layout_dtype_and_op_strings_parse_or_list_the_choices(text: str) -> None:
    for cls in (Layout, DType, Op):
        try:
            member = cls.parse(text)
        except ProblemSyntaxError as exc:
            message = str(exc)
            assert "\n" not in message and all(m.value in message for m in cls)
        else:
            assert isinstance(member, cls)


@pytest.mark.parametrize("text", LAYOUT_SPELLINGS + DTYPE_SPELLINGS + OP_SPELLINGS)
def test_every_listed_spelling_parses(text: str) -> None:
    assert any(_parses(cls, text) for cls in (Layout, DType, Op))


def _parses(cls: Any, text: str) -> bool:
    try:
        return isinstance(cls.parse(text), cls)
    except ProblemSyntaxError:
        return False


# --- sizes: direct construction ------------------------------------------------------------------
# Sizes gone wrong: zero, negative, or far past what 32-bit indexing covers.
BAD_SIZE = st.one_of(st.integers(-2, 0), st.integers(2**31 - 2, 2**64), st.integers(13, 2**20))
SPATIAL = ("input", "filter", "stride", "pad", "dilation")


@st.composite
def mutated(draw: st.DrawFn, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A valid problem's keyword arguments with 0-3 fields set to a bad size or a wrong dim count."""
    kwargs = dict(kwargs)
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        name = draw(st.sampled_from(sorted(k for k in kwargs if k not in NON_SIZE + ("affine",))))
        if name in SPATIAL:
            old = kwargs[name]
            if draw(st.booleans()):
                n = draw(st.sampled_from([0, 1, 2, 3, 4]))
                kwargs[name] = tuple(draw(st.integers(1, 3)) for _ in range(n))
            else:
                k = draw(st.integers(0, len(old) - 1)) if old else 0
                kwargs[name] = old[:k] + (draw(BAD_SIZE),) + old[k + 1:]
        else:
            kwargs[name] = draw(BAD_SIZE)
    return kwargs


@st.composite
def conv_kwargs(draw: st.DrawFn) -> dict[str, Any]:
    ndim = draw(st.integers(1, 3))
    dims = lambda lo, hi: tuple(draw(st.integers(lo, hi)) for _ in range(ndim))  # noqa: E731
    return draw(mutated(dict(
        N=draw(st.integers(1, 8)), G=draw(st.integers(1, 8)), C=draw(st.integers(1, 8)), K=draw(st.integers(1, 8)),
        input=dims(3, 12), filter=dims(1, 3), stride=dims(1, 2), pad=dims(0, 2), dilation=dims(1, 2),
        layout=draw(st.sampled_from(list(Layout))), dtype=draw(st.sampled_from(list(DType))),
    )))


@fuzz(150)
@given(kwargs=conv_kwargs())
def test_conv_problem_sizes_validate_or_name_the_field(kwargs: dict[str, Any]) -> None:
    try:
        problem = ConvProblem(**kwargs)
    except InvalidProblem as exc:
        event(f"invalid {exc.field}")
        check_invalid(exc, ConvProblem)
        assert exc.field not in NON_SIZE
        return
    check_problem(problem, Op.CONV_BWD_WEIGHT)
    assert problem.output and all(o >= 1 for o in problem.output)
    check_lookup(problem)


@st.composite
def groupnorm_kwargs(draw: st.DrawFn) -> dict[str, Any]:
    G = draw(st.integers(1, 32))
    ndim = draw(st.integers(1, 3))
    return draw(mutated(dict(
        N=draw(st.integers(1, 8)), C=G * draw(st.integers(1, 8)), G=G,
        input=tuple(draw(st.integers(1, 12)) for _ in range(ndim)),
        layout=draw(st.sampled_from([Layout.NGCHW, Layout.NHWGC, *Layout])),
        dtype=draw(st.sampled_from([DType.FP16, DType.BF16, DType.FP32, *DType])),
        affine=draw(st.booleans()),
    )))


@fuzz(150)
@given(kwargs=groupnorm_kwargs())
def test_groupnorm_problem_sizes_validate_or_name_the_field(kwargs: dict[str, Any]) -> None:
    try:
        problem = GroupNormProblem(**kwargs)
    except InvalidProblem as exc:
        event(f"invalid {exc.field}")
        check_invalid(exc, GroupNormProblem)
        assert exc.field not in NON_SIZE
        return
    check_problem(problem, Op.GROUPNORM_BWD)
    check_lookup(problem)


def wrong_values(cls: type, name: str) -> list[Any]:
    """Values of the wrong type (or a foreign op) for one field of a problem dataclass."""
    if name in ("N", "G", "C", "K"):
        return ["5", 5.0, True, None, (5,)]
    if name == "layout":
        return ["nhwgc", None, DType.FP16]
    if name == "dtype":
        return ["fp16", None, Layout.NHWGC]
    if name == "affine":
        return [1, 0, "yes", None]
    if name == "op":
        return ["conv_bwd_weight", None, Op.CONV_BWD_DATA if cls is GroupNormProblem else Op.GROUPNORM_BWD]
    if name in ("alpha", "beta"):  # any finite real number is valid there
        return ["5", None, True, (1.0,), float("nan"), float("inf")]
    if name == "pad_right":  # None is valid there: the same as pad
        return [5, [5], "5", (5.0,), (True,), ("5",)]
    return [5, [5], "5", None, (5.0,), (True,), ("5",)]  # spatial tuples


@pytest.mark.parametrize("cls, base", [
    (ConvProblem, dict(N=1, G=1, C=1, K=1, input=(5,), filter=(3,), stride=(1,), pad=(0,), dilation=(1,))),
    (GroupNormProblem, dict(N=1, C=4, G=2, input=(5,))),
], ids=["conv", "groupnorm"])
def test_wrongly_typed_fields_are_invalid_problems(cls: type, base: dict[str, Any]) -> None:
    """Every field given a wrong type is refused as InvalidProblem naming it (no TypeError from len(), no
    unhashable problem, no solver of another op reading it)."""
    cls(**base)
    for f in dataclasses.fields(cls):
        for value in wrong_values(cls, f.name):
            with pytest.raises(InvalidProblem) as info:
                cls(**{**base, f.name: value})
            assert info.value.field == f.name, (f.name, value, info.value)


# --- regressions ---------------------------------------------------------------------------------
def test_conv_problem_with_a_bare_int_or_list_input_is_invalid_not_a_type_error() -> None:
    with pytest.raises(InvalidProblem) as info:
        ConvProblem(N=1, G=1, C=1, K=1, input=5, filter=(3,), stride=(1,), pad=(0,), dilation=(1,))  # type: ignore[arg-type]
    assert info.value.field == "input"
    with pytest.raises(InvalidProblem) as info:  # a list would make the frozen problem unhashable
        ConvProblem(N=1, G=1, C=1, K=1, input=(5,), filter=[3], stride=(1,), pad=(0,), dilation=(1,))  # type: ignore[arg-type]
    assert info.value.field == "filter"


def test_conv_problem_for_groupnorm_is_invalid_not_an_attribute_error_in_lookup() -> None:
    for op in (Op.GROUPNORM_BWD, "conv_bwd_weight"):
        with pytest.raises(InvalidProblem) as info:
            ConvProblem(N=1, G=1, C=1, K=1, input=(5,), filter=(3,), stride=(1,), pad=(0,), dilation=(1,),
                        layout=Layout.NGCHW, op=op)  # type: ignore[arg-type]
        assert info.value.field == "op"


@pytest.mark.parametrize("text", ["1_0", "٣", "５", "²", "0o7", "1.0", "9" * 5000])
def test_problem_integers_are_plain_ascii_decimals(text: str) -> None:
    with pytest.raises(ProblemSyntaxError, match="bad token N="):
        parse_conv_problem(f"N={text},G=1,C=1,K=1,input=5,filter=3", Layout.NHWGC, DType.FP16)
    with pytest.raises(ProblemSyntaxError, match="bad token input="):
        parse_conv_problem(f"N=1,G=1,C=1,K=1,input=5x{text},filter=3", Layout.NHWGC, DType.FP16)
    with pytest.raises(ProblemSyntaxError, match="bad token C="):
        parse_groupnorm_problem(f"N=1,C={text},G=1,input=5", Layout.NGCHW, DType.FP16)


def test_problem_integers_keep_signs_and_surrounding_spaces() -> None:
    p = parse_conv_problem("N=+2, G = 1 ,C=1,K=1,input= 5 x 6 ,filter=3", Layout.NHWGC, DType.FP16)
    assert (p.N, p.input) == (2, (5, 6))
    with pytest.raises(InvalidProblem) as info:
        parse_conv_problem("N=1,G=1,C=1,K=1,input=5,filter=3,pad=-1", Layout.NHWGC, DType.FP16)
    assert info.value.field == "pad"


# --- command line --------------------------------------------------------------------------------
class _NoGPU(Exception):
    pass


@pytest.fixture(scope="module")
def cli_env() -> Iterator[Path]:
    """A private DB and cache, and a machine whose runtimes all report no device (as test_cli's no_gpu)."""

    def construct(kind: BackendKind, device: int) -> Any:
        raise BackendError(f"{kind.value} runtime found no device")

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setenv("KFACTORY_DB", str(Path(tmp) / "default.sqlite"))
        mp.setenv("KFACTORY_CACHE_DIR", str(Path(tmp) / "cache"))
        mp.delenv("KFACTORY_BACKEND", raising=False)
        mp.setattr(factory.backends, "_ACTIVE", {})
        mp.setattr(factory.backends, "_construct", construct)
        yield Path(tmp)


def run_cli(*argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one in-process kfactory call; any other exception propagates."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:  # argparse errors and --help leave through SystemExit
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def assert_clean_exit(code: int, out: str, err: str) -> None:
    """Exit 0, or exit 2 with exactly one line on stderr, nothing on stdout, no traceback."""
    if currently_in_test_context():
        event(f"exit {code}")
    assert "Traceback" not in err, err
    assert code in (0, 2), (code, err)
    if code == 2:
        assert len(err.splitlines()) == 1, f"expected one line on stderr:\n{err}"
        assert err.startswith("kfactory"), err
        assert out == "", out


# Argument text for the CLI: anything but line breaks and NUL (which no real argv holds); a value that
# argparse reports as an unrecognized argument is escaped to stay on one line (tested below).
ARG_JUNK = st.text(alphabet=st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp")), max_size=8)


@st.composite
def cli_args(draw: st.DrawFn, flags: tuple[str, ...], switches: tuple[str, ...] = (), min_mutations: int = 0) -> list[str]:
    """A valid command line's flags in random order, then 0-2 mutations: a junk value, an op that does not
    exist, a family of another op, a dropped flag, an unknown flag, a flag without its value, a stray
    argument."""
    op = draw(st.sampled_from(implemented_ops()))
    solver = SOLVERS[op]
    cells = sorted(solver.supported_cells(), key=lambda c: (c[0].value, c[1].value, c[2]))
    layout, dtype, ndim = draw(st.sampled_from(cells))
    good: dict[str, st.SearchStrategy[str]] = {
        "--op": st.sampled_from([op.value, op.value.upper()]),
        "--layout": st.sampled_from([layout.value, layout.value.upper(), layout.spelled(ndim)]),
        "--dtype": st.sampled_from([dtype.value, dtype.value.upper()]),
        "--ndim": st.just(str(ndim)),
        "--family": st.sampled_from(sorted(solver.families)),
        "--problem": problem_specs(fields_of_op(op)),
        "--reps": st.sampled_from(["5", "25"]),
    }
    bad: dict[str, st.SearchStrategy[str]] = {
        "--op": st.one_of(st.sampled_from(["conv_fwd", "conv_bwd", "dwsep", "groupnorm_fwd"]), ARG_JUNK),
        "--layout": st.one_of(st.sampled_from(["NCHW", "nhwc", "NHWGC/GKYXC", ""]), ARG_JUNK),
        "--dtype": st.one_of(st.sampled_from(["fp64", "int4", "bf16_fp32", ""]), ARG_JUNK),
        "--ndim": st.sampled_from(["0", "4", "-1", "x", "", "2.0", "1_0"]),
        "--family": st.one_of(st.sampled_from(FAMILIES), ARG_JUNK),
        "--problem": st.one_of(problem_specs(fields_of_op(Op.CONV_BWD_WEIGHT if op is not Op.CONV_BWD_WEIGHT
                                                         else Op.GROUPNORM_BWD)), ARG_JUNK),
        "--reps": st.sampled_from(["x", "", "2.5"]),
    }
    values = {flag: draw(good[flag]) for flag in flags}
    extra: list[list[str]] = []
    for _ in range(draw(st.sampled_from([min_mutations, min_mutations, min_mutations + 1, min_mutations + 2]))):
        kind = draw(st.integers(0, 5))
        flag = draw(st.sampled_from(flags))
        if kind <= 2:
            values[flag] = draw(bad[flag])
        elif kind == 3:
            values.pop(flag, None)
        elif kind == 4:
            extra.append([draw(st.sampled_from(["--bogus", "-x", "--op", "--layout", "--problem"]))])  # no value
        else:
            extra.append([draw(st.one_of(st.sampled_from(["--bogus", "stray"]), ARG_JUNK))])
    pairs = [[flag, value] for flag, value in values.items()] + [[s] for s in switches if draw(st.booleans())]
    order = draw(st.permutations(range(len(pairs)))) if pairs else []
    return [token for i in order for token in pairs[i]] + [token for group in extra for token in group]


CONFIG = ("--layout", "--dtype", "--ndim")


@fuzz(60)
@given(args=st.one_of(cli_args(CONFIG + ("--op", "--family"), ("--json",)),
                      cli_args(CONFIG + ("--op", "--problem"), ("--why", "--json"))))
def test_cli_list_exits_0_or_2_with_one_line(cli_env: Path, args: list[str]) -> None:
    assert_clean_exit(*run_cli("list", *args))


@fuzz(12)
@given(args=cli_args(CONFIG + ("--op", "--family")))
def test_cli_generate_exits_0_or_2_with_one_line(cli_env: Path, args: list[str]) -> None:
    with tempfile.TemporaryDirectory(dir=cli_env) as tmp:
        out_dir = Path(tmp) / "out"
        code, out, err = run_cli("generate", *args, "--out", str(out_dir))
        assert_clean_exit(code, out, err)
        if code == 2:
            assert not out_dir.exists()
        else:
            assert (out_dir / "manifest.json").is_file()


@fuzz(50)
@given(args=cli_args(("--op", "--layout", "--dtype", "--problem"), ("--json",)))
def test_cli_query_exits_0_or_2_with_one_line(cli_env: Path, args: list[str]) -> None:
    with tempfile.TemporaryDirectory(dir=cli_env) as tmp:
        assert_clean_exit(*run_cli("query", *args, "--db", str(Path(tmp) / "q.sqlite")))


SQLITE_HEADER = b"SQLite format 3\x00"


@fuzz(25)
@given(content=st.one_of(st.binary(max_size=256), st.binary(max_size=256).map(lambda b: SQLITE_HEADER + b)),
       via_env=st.booleans())
def test_cli_query_on_a_file_that_is_not_a_db_is_one_line_naming_it(cli_env: Path, content: bytes, via_env: bool) -> None:
    with tempfile.TemporaryDirectory(dir=cli_env) as tmp, pytest.MonkeyPatch.context() as mp:
        db = Path(tmp) / "junk.db"
        db.write_bytes(content)
        argv = ["query", "--layout", "NHWGC", "--dtype", "fp16", "--problem", "N=1,G=1,C=1,K=1,input=5,filter=3"]
        if via_env:
            mp.setenv("KFACTORY_DB", str(db))
        else:
            argv += ["--db", str(db)]
        code, out, err = run_cli(*argv)
        assert_clean_exit(code, out, err)
        if code == 2:
            assert str(db) in err and db.read_bytes() == content  # named, and left alone


def tune_would_reach_the_gpu(args: list[str]) -> bool:
    """Whether `tune args` is valid input (so it would go on to compile and measure on a GPU): the CLI's
    own parser, then the op's problem parser and the supported-cell check."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            ns = cli.build_parser().parse_args(["tune", *args])
        except SystemExit:
            return False
    try:
        check_supported(parse_any(ns.op, ns.problem, ns.layout, ns.dtype))
    except KernelFactoryError:
        return False
    return True


@fuzz(40)
@given(args=cli_args(("--op", "--layout", "--dtype", "--problem", "--reps"), min_mutations=1))
def test_cli_tune_refuses_bad_input_before_touching_the_gpu(cli_env: Path, args: list[str]) -> None:
    assume(not tune_would_reach_the_gpu(args))

    def no_gpu_please(*_: Any, **__: Any) -> Any:
        raise _NoGPU("tune reached the GPU with bad input")

    with tempfile.TemporaryDirectory(dir=cli_env) as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(factory.backends, "get_backend", no_gpu_please)
        db = Path(tmp) / "t.sqlite"
        code, out, err = run_cli("tune", *args, "--db", str(db))
        assert code == 2, (code, err)
        assert_clean_exit(code, out, err)
        assert not db.exists()


# --- command-line cases that once escaped the one-line rule -------------------------------------
def test_cli_unrecognized_argument_with_a_line_break_is_one_line(cli_env: Path) -> None:
    assert_clean_exit(*run_cli("list", "--json", "a\nb"))


def test_cli_generate_into_a_file_is_one_line(cli_env: Path) -> None:
    with tempfile.TemporaryDirectory(dir=cli_env) as tmp:
        blocker = Path(tmp) / "file"
        blocker.write_text("")
        code, out, err = run_cli("generate", "--layout", "GNHWC", "--dtype", "fp16", "--ndim", "1",
                                 "--family", "dw", "--out", str(blocker))
        assert code == 2
        assert_clean_exit(code, out, err)


@pytest.mark.parametrize("reps", ["0", "-3"])
def test_cli_tune_refuses_a_non_positive_reps_before_the_gpu(cli_env: Path, reps: str) -> None:
    def no_gpu_please(*_: Any, **__: Any) -> Any:
        raise _NoGPU("tune reached the GPU with bad input")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(factory.backends, "get_backend", no_gpu_please)
        code, out, err = run_cli("tune", "--layout", "NHWGC", "--dtype", "fp16", "--problem",
                                 "N=1,G=1,C=1,K=1,input=5,filter=3", "--reps", reps, "--db", str(cli_env / "r.sqlite"))
    assert code == 2
    assert_clean_exit(code, out, err)
