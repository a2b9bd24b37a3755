"""The code an instance stands for: its rendered source and that source's hash, once per process.

Results are keyed by code: every measurement stores the hash of the source it timed, and a stored
result is served only while the catalog still renders the same source. Rendering goes through
Jinja (hundreds of microseconds, milliseconds for a template's first use), so the hash is kept per
instance for the life of the process; the source text, needed only to compile (the compile cache
keys by it), is kept for the few most recently used instances.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from .catalog import Instance
from .codegen import render, source_hash

# Sources are ~10-50 KB. A served Kernel needs its text once, to hit the compile cache; a tune needs every
# candidate's twice (its hash for the DB, then its text to compile), so the cache holds a large tune's
# candidates (499 for a channels-last depthwise problem) instead of rendering each again.
_TEXTS_KEPT = 1024


@dataclass(frozen=True)
class Source:
    """An instance's rendered source and its sha256 hex digest."""

    text: str
    hash: str


_hashes: dict[str, str] = {}
_generation = 0  # bumped by forget(): what was decided from older hashes must be decided again
_texts: OrderedDict[str, Source] = OrderedDict()
_lock = threading.Lock()


def source_of(instance: Instance) -> Source:
    """The instance's source (rendered at most once per process while recently used)."""
    name = instance.name
    with _lock:
        cached = _texts.get(name)
        if cached is not None:
            _texts.move_to_end(name)
            return cached
    text = render(instance)
    found = Source(text, source_hash(text))
    with _lock:
        _hashes[name] = found.hash
        _texts[name] = found
        while len(_texts) > _TEXTS_KEPT:
            _texts.popitem(last=False)
    return found


def hash_of(instance: Instance) -> str:
    """sha256 of the instance's rendered source; rendered once per process per instance."""
    known = _hashes.get(instance.name)
    return known if known is not None else source_of(instance).hash


def generation() -> int:
    """Changes whenever the cached hashes are dropped; caches built on hashes key by it."""
    return _generation


def forget() -> None:
    """Drop every cached source (tests that edit a template in-process)."""
    global _generation
    with _lock:
        _hashes.clear()
        _texts.clear()
        _generation += 1
