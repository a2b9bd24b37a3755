"""Render an Instance to one self-contained HIP source, and hash it.

Templates hold kernels, Python holds decisions: every value a template needs is computed by the
op module and passed in; StrictUndefined turns a missing one into an error. Quoted includes of
templates/common headers are inlined so the source (and its hash) is complete on its own.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.bccache

from . import compile_cache

from .catalog import Instance
from .ops import solver_for
from .resources import templates_dir

_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_./]+)"\s*$', re.MULTILINE)


class _TemplateCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept across processes, so the first render of a family in a process (the
    first select() of a problem it serves) skips Jinja's compile. Only a speed-up: a cache that
    cannot be read or written is passed over."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, EOFError, ValueError):
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _template_cache() -> jinja2.BytecodeCache | None:
    """A `templates` folder in the compile cache, or None when there is no usable place."""
    try:
        directory = compile_cache.cache_dir() / "templates"
        directory.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError):
        return None
    return _TemplateCache(str(directory))


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        bytecode_cache=_template_cache(),
    )


def _inline_common_headers(source: str) -> str:
    common = templates_dir() / "common"

    def replace(match: re.Match[str]) -> str:
        path = common / match.group(1)
        if not path.is_file():
            return match.group(0)  # a system header of the target compiler
        return _inline_common_headers(path.read_text())

    return _QUOTED_INCLUDE.sub(replace, source)


def render(instance: Instance) -> str:
    solver = solver_for(instance.op)
    values = solver.template_values(instance.family, instance.params, instance.layout, instance.dtype, instance.ndim)
    template = environment().get_template(instance.template)
    return _inline_common_headers(template.render(name=instance.name, ndim=instance.ndim, **values))


def render_common(template: str, **values: Any) -> str:
    """A kernel of the runtime's own (templates/common/<template>, not an instance), headers inlined."""
    return _inline_common_headers(environment().get_template(f"common/{template}").render(**values))


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()
