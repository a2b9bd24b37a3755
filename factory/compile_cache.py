"""Compiled binaries on disk, keyed by (source hash, arch, compiler version, options).

Default location: platformdirs' user cache dir for "kernel-factory" (e.g. ~/.cache/kernel-factory/binaries);
$KFACTORY_CACHE_DIR moves it. Each entry carries a checksum of its payload: a truncated or corrupt
entry is rebuilt, never loaded. Entries are written to a temp name and published with os.replace,
so concurrent processes never see half a file.

The cache only saves time: a directory that cannot be created, read or written never fails a
candidate. The binary is compiled in memory and used, and a CacheWarning says so once per directory.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import struct
import tempfile
import warnings
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import platformdirs

from .backends import BackendKind, CompiledBinary, compiler_for, compiler_version
from .kernel_resources import KernelResources, from_compile

CACHE_ENV = "KFACTORY_CACHE_DIR"
_MAGIC = b"KFBIN001"
_HEADER = struct.Struct("<8s32sQ")  # magic, sha256 of payload, payload length


class CacheWarning(UserWarning):
    """The compile cache cannot be used; compiles go on in memory."""


_warned: set[str] = set()


def cache_dir() -> Path:
    """The cache directory, created if missing; raises OSError when it cannot be."""
    env = os.environ.get(CACHE_ENV)
    path = Path(env) if env else Path(platformdirs.user_cache_dir("kernel-factory")) / "binaries"
    path.mkdir(parents=True, exist_ok=True)
    return path


def usable_cache_dir() -> Path | None:
    """cache_dir(), or None (after one warning) when it cannot be created."""
    try:
        return cache_dir()
    except (OSError, ValueError) as exc:
        where = os.environ.get(CACHE_ENV) or "the user cache directory"
        warn_once(where, f"compile cache {where} is unusable ({_reason(exc)}); compiling without it")
        return None


def warn_once(key: str, message: str) -> None:
    """One CacheWarning per key and process: a tune of 100 candidates says it once."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, CacheWarning, stacklevel=3)


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


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
    cache_error: str | None = None  # the binary is good, but could not be stored in the cache
    resources: KernelResources | None = None  # what the compiler reported; None when it reported nothing


def _resources_path(binary_path: Path) -> Path:
    return binary_path.with_suffix(".res.json")


def _read_resources(binary_path: Path) -> KernelResources | None:
    payload = _read_entry(_resources_path(binary_path))
    return None if payload is None else KernelResources.from_json(payload.decode(errors="replace"))


def cached_resources(kind: BackendKind, job: CompileJob, directory: Path | None = None) -> KernelResources | None:
    """The figures the compile cache keeps for `job`'s binary, without compiling; None if it has none."""
    directory = directory if directory is not None else usable_cache_dir()
    if directory is None:
        return None
    try:
        key = cache_key(job.source, job.arch, compiler_version(kind), job.options)
    except Exception:  # noqa: BLE001 - no compiler here: nothing was cached by it either
        return None
    return _read_resources(directory / f"{key}.bin")


def compile_cached(kind: BackendKind, job: CompileJob, directory: Path | None = None) -> CompileOutcome:
    """Compile one job through the cache (default: cache_dir(), or no cache when it is unusable)."""
    return _compile_one(kind, job, directory if directory is not None else usable_cache_dir())


def _cache_path(kind: BackendKind, job: CompileJob, directory: Path | None) -> Path | None:
    """Where the cache keeps `job`'s binary (None without a cache); raises when no compiler is here."""
    if directory is None:
        return None
    return directory / f"{cache_key(job.source, job.arch, compiler_version(kind), job.options)}.bin"


def _read_cached(job: CompileJob, path: Path | None) -> CompileOutcome | None:
    payload = None if path is None else _read_entry(path)
    return None if payload is None else CompileOutcome(job.name, payload, None, True, resources=_read_resources(path))


def _cached_outcome(kind: BackendKind, job: CompileJob, directory: Path | None) -> CompileOutcome | None:
    """The cache's binary for `job` (with its figures), or None when it has none (or no compiler is here)."""
    try:
        path = _cache_path(kind, job, directory)
    except Exception:  # noqa: BLE001 - no compiler: _compile_one reports that as the job's error
        return None
    return _read_cached(job, path)


def _compile_one(kind: BackendKind, job: CompileJob, directory: Path | None) -> CompileOutcome:
    """The unit of work of a worker process; `directory` None compiles without the cache."""
    try:
        path = _cache_path(kind, job, directory)
        cached = _read_cached(job, path)
        if cached is not None:
            return cached
        result: CompiledBinary = compiler_for(kind)(job.source, job.arch, job.options)
    except Exception as exc:  # noqa: BLE001 - a failed candidate is recorded with its error, never fatal
        return CompileOutcome(job.name, None, f"{type(exc).__name__}: {exc}", False)
    resources = from_compile(result.binary, result.log)
    if path is None:
        return CompileOutcome(job.name, result.binary, None, False, resources=resources)
    try:
        if resources is not None:  # first: a binary in the cache always has its figures beside it
            _write_entry(_resources_path(path), resources.to_json().encode())
        _write_entry(path, result.binary)
    except OSError as exc:
        return CompileOutcome(job.name, result.binary, None, False, f"{directory}: {_reason(exc)}", resources)
    return CompileOutcome(job.name, result.binary, None, False, resources=resources)


class CompileStream:
    """Jobs compiled in worker processes, in the order given, while the caller uses each binary as it
    is ready: a tune measures candidate i while i + 1, i + 2, ... compile. `result(name)` waits for
    one job; leaving the `with` block cancels the jobs not started (a tune stopped by its time budget
    does not compile the rest). One worker or one job compiles in this process, on demand.

    Jobs the cache already holds are read here when the block starts and never reach a worker; a tune
    whose binaries are all cached starts no worker process at all (starting them took longer than
    reading every binary: bench/NOTES.md 47).
    """

    def __init__(self, kind: BackendKind, jobs: Sequence[CompileJob], workers: int | None = None,
                 on_done: Callable[[CompileOutcome], None] | None = None) -> None:
        self.kind = kind
        self.jobs = {job.name: job for job in jobs}
        self.directory = usable_cache_dir()
        self.on_done = on_done
        self.outcomes: dict[str, CompileOutcome] = {}
        self.workers = workers or min(len(jobs), os.cpu_count() or 1)
        self.pool: ProcessPoolExecutor | None = None
        self.futures: dict[str, Future] = {}

    def __enter__(self) -> "CompileStream":
        for name, job in self.jobs.items():
            cached = _cached_outcome(self.kind, job, self.directory)
            if cached is not None:
                self.outcomes[name] = cached
                self._report(cached)
        to_compile = [job for name, job in self.jobs.items() if name not in self.outcomes]
        if self.workers > 1 and len(to_compile) > 1:
            context = multiprocessing.get_context("spawn")  # never fork a process that holds a GPU context
            self.pool = ProcessPoolExecutor(max_workers=min(self.workers, len(to_compile)), mp_context=context)
            for job in to_compile:  # the pool starts them in this order
                future = self.pool.submit(_compile_one, self.kind, job, self.directory)
                future.add_done_callback(self._finished)  # progress as compiles finish, not as they are used
                self.futures[job.name] = future
        return self

    def result(self, name: str) -> CompileOutcome:
        if name not in self.outcomes:
            future = self.futures.get(name)
            if future is not None:
                try:
                    self.outcomes[name] = future.result()
                except Exception as exc:  # noqa: BLE001 - a compiler process that died fails its job only
                    self.outcomes[name] = CompileOutcome(name, None, f"compiler process lost: {type(exc).__name__}: {exc}", False)
            else:
                self.outcomes[name] = _compile_one(self.kind, self.jobs[name], self.directory)
                self._report(self.outcomes[name])
        return self.outcomes[name]

    def _finished(self, future: Future) -> None:
        """A pool thread's call when a job ends; cancelled jobs are not reported."""
        if not future.cancelled() and future.exception() is None:
            self._report(future.result())

    def _report(self, outcome: CompileOutcome) -> None:
        if outcome.cache_error is not None:
            warn_once(str(self.directory), f"compile cache cannot be written ({outcome.cache_error}); compiling without it")
        if self.on_done:
            self.on_done(outcome)

    def __exit__(self, *_: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def compile_many(
    kind: BackendKind,
    jobs: Sequence[CompileJob],
    workers: int | None = None,
    on_done: Callable[[CompileOutcome], None] | None = None,
) -> dict[str, CompileOutcome]:
    """Compile jobs in worker processes (runtime compilers scale poorly across threads)."""
    directory = usable_cache_dir()
    outcomes: dict[str, CompileOutcome] = {}

    def done(outcome: CompileOutcome) -> None:
        outcomes[outcome.name] = outcome
        if outcome.cache_error is not None:
            warn_once(str(directory), f"compile cache cannot be written ({outcome.cache_error}); compiling without it")
        if on_done:
            on_done(outcome)

    workers = workers or min(len(jobs), os.cpu_count() or 1)
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            done(_compile_one(kind, job, directory))
        return outcomes
    context = multiprocessing.get_context("spawn")  # never fork a process that holds a GPU context
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(_compile_one, kind, job, directory) for job in jobs]
        for future in as_completed(futures):
            done(future.result())
    return outcomes
