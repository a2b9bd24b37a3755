"""factory.compile_cache: binaries on disk keyed by (source, arch, compiler version, options)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import platformdirs
import pytest

from factory import codegen, compile_cache
from factory.backends import BackendKind, CompiledBinary, CompileError, compiler_for
from factory.catalog import select_instances
from factory.compile_cache import CompileJob, CompileStream, cache_dir, cache_key, compile_cached, compile_many
from factory.problem import DType, Layout, Op


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path) -> Path:
    directory = tmp_path / "binaries"
    monkeypatch.setenv("KFACTORY_CACHE_DIR", str(directory))
    return directory


class CountingCompiler:
    """Wraps a compile function and counts the calls that reach it."""

    def __init__(self, compile_fn) -> None:
        self.compile_fn = compile_fn
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def __call__(self, source: str, arch: str, options=()) -> CompiledBinary:
        self.calls.append((arch, tuple(options)))
        return self.compile_fn(source, arch, options)


def fake_compile(source: str, arch: str, options=()) -> CompiledBinary:
    digest = hashlib.sha256("\0".join([source, arch, *options]).encode()).digest()
    return CompiledBinary(b"FAKEBIN" + digest * 8, arch, "fake 1.0")


@pytest.fixture
def real_compiler(monkeypatch) -> CountingCompiler:
    counter = CountingCompiler(compiler_for(BackendKind.CUDA))
    monkeypatch.setattr(compile_cache, "compiler_for", lambda kind: counter)
    return counter


@pytest.fixture
def fake_compiler(monkeypatch) -> CountingCompiler:
    counter = CountingCompiler(fake_compile)
    monkeypatch.setattr(compile_cache, "compiler_for", lambda kind: counter)
    monkeypatch.setattr(compile_cache, "compiler_version", lambda kind: "fake 1.0")
    return counter


def small_instances(count: int):
    found = select_instances(Op.CONV_BWD_WEIGHT, Layout.NHWGC, DType.FP32, 1, "dl")
    assert len(found) >= count
    return found[:count]


@pytest.fixture(scope="module")
def job() -> CompileJob:
    inst = small_instances(1)[0]
    return CompileJob(inst.name, codegen.render(inst), "sm_90")


def entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.bin"))


def assert_no_temp_files(directory: Path) -> None:
    assert [p.name for p in directory.iterdir() if not p.name.endswith((".bin", ".res.json"))] == []


# --- hits and misses -------------------------------------------------------------------------------
def test_second_compile_is_a_cache_hit(real_compiler, job, cache):
    first = compile_cached(BackendKind.CUDA, job)
    assert first.error is None and first.cached is False
    assert first.binary.startswith(b"\x7fELF")  # an sm_90 cubin
    assert real_compiler.calls == [("sm_90", ())]
    version = compile_cache.compiler_version(BackendKind.CUDA)
    assert [p.name for p in entries(cache)] == [f"{cache_key(job.source, 'sm_90', version, ())}.bin"]

    second = compile_cached(BackendKind.CUDA, job)
    assert second.cached is True and second.binary == first.binary and second.name == job.name
    assert len(real_compiler.calls) == 1
    assert_no_temp_files(cache)
    # The compiler's figures are kept beside the binary and come back with a hit, or alone.
    assert first.resources is not None and first.resources.registers > 0
    assert second.resources == first.resources == compile_cache.cached_resources(BackendKind.CUDA, job)


def test_truncated_entry_is_rebuilt_not_loaded(real_compiler, job, cache):
    good = compile_cached(BackendKind.CUDA, job).binary
    (entry,) = entries(cache)
    entry.write_bytes(entry.read_bytes()[:-100])

    rebuilt = compile_cached(BackendKind.CUDA, job)
    assert rebuilt.cached is False and rebuilt.binary == good
    assert len(real_compiler.calls) == 2
    assert compile_cached(BackendKind.CUDA, job).cached is True  # the entry was written again, whole
    assert len(real_compiler.calls) == 2


def _flip(offset: int):
    def corrupt(blob: bytes) -> bytes:
        data = bytearray(blob)
        data[offset] ^= 0x01
        return bytes(data)

    return corrupt


@pytest.mark.parametrize("corrupt", [
    pytest.param(_flip(-1), id="flipped-last-payload-bit"),
    pytest.param(_flip(compile_cache._HEADER.size + 3), id="flipped-first-payload-byte"),
    pytest.param(_flip(20), id="flipped-checksum"),
    pytest.param(_flip(0), id="flipped-magic"),
    pytest.param(_flip(compile_cache._HEADER.size - 2), id="flipped-length"),
    pytest.param(lambda blob: blob[: compile_cache._HEADER.size], id="header-only"),
    pytest.param(lambda blob: blob[:10], id="shorter-than-header"),
    pytest.param(lambda blob: b"", id="empty"),
    pytest.param(lambda blob: blob + b"\0", id="trailing-byte"),
])
def test_corrupt_entry_is_detected_and_rebuilt(fake_compiler, job, cache, corrupt):
    good = compile_cached(BackendKind.CUDA, job)
    (entry,) = entries(cache)
    damaged = corrupt(entry.read_bytes())
    entry.write_bytes(damaged)
    assert compile_cache._read_entry(entry) is None

    again = compile_cached(BackendKind.CUDA, job)
    assert again.cached is False and again.binary == good.binary
    assert len(fake_compiler.calls) == 2
    assert entry.read_bytes() != damaged and compile_cache._read_entry(entry) == good.binary


def test_failed_compile_is_reported_and_not_cached(monkeypatch, job, cache):
    def broken(source, arch, options=()):
        raise CompileError("NVRTC failed for sm_90: NVRTC_ERROR_COMPILATION", "kernel.cu(1): error: oops")

    counter = CountingCompiler(broken)
    monkeypatch.setattr(compile_cache, "compiler_for", lambda kind: counter)
    monkeypatch.setattr(compile_cache, "compiler_version", lambda kind: "fake 1.0")
    for attempt in (1, 2):
        outcome = compile_cached(BackendKind.CUDA, job)
        assert outcome.binary is None and outcome.cached is False
        assert outcome.error.startswith("CompileError: NVRTC failed for sm_90") and "oops" in outcome.error
        assert len(counter.calls) == attempt  # a failure is retried, never served from the cache
    assert list(cache.iterdir()) == []


# --- what the key depends on --------------------------------------------------------------------
def test_key_changes_with_source_arch_compiler_and_options():
    base = ("__global__ void k() {}", "sm_90", "nvrtc 13.0", ("-O3",))
    variants = [
        base,
        ("__global__ void k() { }", *base[1:]),
        (base[0], "sm_80", *base[2:]),
        (base[0], base[1], "nvrtc 13.1", base[3]),
        (*base[:3], ()),
        (*base[:3], ("-O2",)),
        (*base[:3], ("-O3", "-lineinfo")),
        # Field boundaries are kept: moving text between fields is another key.
        (base[0], "sm_9", "0nvrtc 13.0", base[3]),
    ]
    keys = [cache_key(*v) for v in variants]
    assert len(set(keys)) == len(keys)
    assert cache_key(*base) == keys[0]
    assert all(len(k) == 64 and int(k, 16) >= 0 for k in keys)


def test_changed_compiler_version_is_a_miss(fake_compiler, job, cache, monkeypatch):
    compile_cached(BackendKind.CUDA, job)
    monkeypatch.setattr(compile_cache, "compiler_version", lambda kind: "fake 2.0")
    assert compile_cached(BackendKind.CUDA, job).cached is False
    assert len(fake_compiler.calls) == 2 and len(entries(cache)) == 2


@pytest.mark.parametrize("change", [
    pytest.param(lambda j: CompileJob(j.name, j.source, "sm_80"), id="arch"),
    pytest.param(lambda j: CompileJob(j.name, j.source, j.arch, ("-lineinfo",)), id="options"),
    pytest.param(lambda j: CompileJob(j.name, j.source + "\n// edited\n", j.arch), id="source"),
])
def test_changed_job_is_a_miss_and_both_stay_cached(fake_compiler, job, cache, change):
    other = change(job)
    a = compile_cached(BackendKind.CUDA, job)
    b = compile_cached(BackendKind.CUDA, other)
    assert (a.cached, b.cached) == (False, False) and a.binary != b.binary
    assert len(entries(cache)) == 2
    assert compile_cached(BackendKind.CUDA, job).binary == a.binary
    assert compile_cached(BackendKind.CUDA, other).binary == b.binary
    assert len(fake_compiler.calls) == 2


def test_job_name_is_not_part_of_the_key(fake_compiler, job):
    compile_cached(BackendKind.CUDA, job)
    renamed = compile_cached(BackendKind.CUDA, CompileJob("another_name", job.source, job.arch))
    assert renamed.cached is True and renamed.name == "another_name"
    assert len(fake_compiler.calls) == 1


# --- where the cache lives ----------------------------------------------------------------------
def test_cache_dir_follows_the_environment(cache):
    assert cache_dir() == cache and cache.is_dir()


@pytest.mark.parametrize("value", [None, ""])
def test_default_cache_dir_is_the_user_cache_dir(monkeypatch, tmp_path, value):
    if value is None:
        monkeypatch.delenv("KFACTORY_CACHE_DIR")
    else:
        monkeypatch.setenv("KFACTORY_CACHE_DIR", value)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    expected = Path(platformdirs.user_cache_dir("kernel-factory")) / "binaries"
    assert cache_dir() == expected and expected.is_dir()
    if sys.platform.startswith("linux"):
        assert expected == tmp_path / "xdg" / "kernel-factory" / "binaries"
        monkeypatch.delenv("XDG_CACHE_HOME")
        assert cache_dir() == tmp_path / "home" / ".cache" / "kernel-factory" / "binaries"


# --- worker processes ---------------------------------------------------------------------------
def test_compile_many_in_workers_fills_the_shared_cache(cache, real_compiler):
    jobs = [CompileJob(i.name, codegen.render(i), "sm_90") for i in small_instances(2)]
    seen = []
    # Worker processes use the real compiler (the counting wrapper lives in this process only).
    outcomes = compile_many(BackendKind.CUDA, jobs, workers=2, on_done=seen.append)
    assert set(outcomes) == {j.name for j in jobs} and sorted(o.name for o in seen) == sorted(outcomes)
    assert all(o.error is None and o.binary.startswith(b"\x7fELF") and not o.cached for o in outcomes.values())
    assert len(entries(cache)) == 2
    assert_no_temp_files(cache)

    again = compile_many(BackendKind.CUDA, jobs, workers=1)
    assert all(o.cached and o.binary == outcomes[name].binary for name, o in again.items())
    assert real_compiler.calls == []


def test_a_compile_stream_hands_out_binaries_as_asked_while_the_rest_compile(cache, real_compiler):
    jobs = [CompileJob(i.name, codegen.render(i), "sm_90") for i in small_instances(3)]
    seen = []
    with CompileStream(BackendKind.CUDA, jobs, workers=2, on_done=seen.append) as stream:
        outcomes = [stream.result(j.name) for j in reversed(jobs)]  # any order the caller likes
        assert stream.result(jobs[0].name) is outcomes[-1]  # asked twice: the same outcome
    assert [o.name for o in outcomes] == [j.name for j in reversed(jobs)]
    assert all(o.error is None and o.binary.startswith(b"\x7fELF") for o in outcomes)
    assert sorted(o.name for o in seen) == sorted(j.name for j in jobs)  # each reported once, when it finished
    assert len(entries(cache)) == 3 and real_compiler.calls == []  # compiled in the workers, into the cache


def test_a_compile_stream_reads_cached_binaries_itself_and_sends_only_the_rest_to_workers(cache, fake_compiler,
                                                                                         monkeypatch):
    import factory.compile_cache as compile_cache

    jobs = [CompileJob(i.name, codegen.render(i), "sm_90") for i in small_instances(3)]
    compile_cached(BackendKind.CUDA, jobs[1])  # one binary in the cache already
    pools = []
    real_pool = compile_cache.ProcessPoolExecutor
    monkeypatch.setattr(compile_cache, "ProcessPoolExecutor",
                        lambda max_workers, mp_context: pools.append(max_workers) or real_pool(max_workers, mp_context))
    seen = []
    with CompileStream(BackendKind.CUDA, jobs, workers=4, on_done=seen.append) as stream:
        assert [o.name for o in seen] == [jobs[1].name] and seen[0].cached  # reported as the block starts
        assert set(stream.futures) == {jobs[0].name, jobs[2].name} and pools == [2]
        stream.futures.clear()  # (the workers' fake-compiler-free compiles are not this test's subject)
    assert len(fake_compiler.calls) == 1  # the cached one only, before the stream

    pools.clear()
    for job in jobs:
        compile_cached(BackendKind.CUDA, job)
    with CompileStream(BackendKind.CUDA, jobs, workers=4) as stream:
        assert all(stream.result(j.name).cached for j in jobs)
    assert pools == []  # every binary cached: no worker process started


def test_a_compile_stream_left_early_does_not_compile_what_it_never_started(cache, fake_compiler):
    jobs = [CompileJob(i.name, codegen.render(i), "sm_90") for i in small_instances(3)]
    with CompileStream(BackendKind.CUDA, jobs, workers=1) as stream:  # one worker: on demand, here
        first = stream.result(jobs[0].name)
    assert first.binary is not None and len(fake_compiler.calls) == 1 and len(entries(cache)) == 1
