"""Compiled binaries on disk, keyed by (source hash, arch, compiler version, options).

Default location: platformdirs' user cache dir for "kernel-factory" (e.g. ~/.cache/kernel-factory/binaries);
$KFACTORY_CACHE_DIR moves it. Each entry carries a checksum of its payload: a truncated or corrupt
entry is rebuilt, never loaded. Entries are written to a temp name and published with os.replace,
so concurrent processes never see half a file.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import struct
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import platformdirs

from .backends import BackendKind, CompiledBinary, compiler_for, compiler_version

CACHE_ENV = "KFACTORY_CACHE_DIR"
_MAGIC = b"KFBIN001"
_HEADER = struct.Struct("<8s32sQ")  # magic, sha256 of payload, payload length


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    path = Path(env) if env else Path(platformdirs.user_cache_dir("kernel-factory")) / "binaries"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_key(source: str, arch: str, compiler: str, options: Sequence[str]) -> str:
    text = "\0".join([hashlib.sha256(source.encode()).hexdigest(), arch, compiler, *options])
    return hashlib.sha256(text.encode()).hexdigest()


def _read_entry(path: Path) -> bytes | None:
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    if len(blob) < _HEADER.size:
        return None
    magic, digest, length = _HEADER.unpack_from(blob)
    payload = blob[_HEADER.size :]
    if magic != _MAGIC or length != len(payload) or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def _write_entry(path: Path, payload: bytes) -> None:
    header = _HEADER.pack(_MAGIC, hashlib.sha256(payload).digest(), len(payload))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header + payload)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class CompileJob:
    name: str
    source: str
    arch: str
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompileOutcome:
    name: str
    binary: bytes | None
    error: str | None
    cached: bool


def compile_cached(kind: BackendKind, job: CompileJob, directory: Path | None = None) -> CompileOutcome:
    """Compile one job through the cache (the unit of work of a worker process)."""
    directory = directory or cache_dir()
    try:
        compiler = compiler_version(kind)
        path = directory / f"{cache_key(job.source, job.arch, compiler, job.options)}.bin"
        payload = _read_entry(path)
        if payload is not None:
            return CompileOutcome(job.name, payload, None, True)
        result: CompiledBinary = compiler_for(kind)(job.source, job.arch, job.options)
        _write_entry(path, result.binary)
        return CompileOutcome(job.name, result.binary, None, False)
    except Exception as exc:  # noqa: BLE001 - a failed candidate is recorded with its error, never fatal
        return CompileOutcome(job.name, None, f"{type(exc).__name__}: {exc}", False)


def compile_many(
    kind: BackendKind,
    jobs: Sequence[CompileJob],
    workers: int | None = None,
    on_done: Callable[[CompileOutcome], None] | None = None,
) -> dict[str, CompileOutcome]:
    """Compile jobs in worker processes (runtime compilers scale poorly across threads)."""
    directory = cache_dir()
    outcomes: dict[str, CompileOutcome] = {}
    workers = workers or min(len(jobs), os.cpu_count() or 1)
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            outcome = compile_cached(kind, job, directory)
            outcomes[job.name] = outcome
            if on_done:
                on_done(outcome)
        return outcomes
    context = multiprocessing.get_context("spawn")  # never fork a process that holds a GPU context
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(compile_cached, kind, job, directory) for job in jobs]
        for future in as_completed(futures):
            outcome = future.result()
            outcomes[outcome.name] = outcome
            if on_done:
                on_done(outcome)
    return outcomes
