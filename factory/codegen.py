"""Render an Instance to one self-contained HIP source, and hash it.

Templates hold kernels, Python holds decisions: every value a template needs is computed by the
op module and passed in; StrictUndefined turns a missing one into an error. Quoted includes of
templates/common headers are inlined so the source (and its hash) is complete on its own.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

import jinja2

from .catalog import Instance
from .ops import solver_for
from .resources import templates_dir

_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_./]+)"\s*$', re.MULTILINE)


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
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


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()
