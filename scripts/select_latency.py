"""How long select() takes on a tuning-DB hit: the first call and repeated calls, CPU or GPU.

    python scripts/select_latency.py            # a stand-in backend: no GPU, no compiler needed
    python scripts/select_latency.py --gpu      # this machine's GPU (cuda-python + NVRTC)

Setup (untimed, in this process): a private tuning DB holding a winner, of current code, for each of
three problems, and their binaries in a private compile cache (a tuned problem has both). Then a
fresh child process measures, in this order:

  cold    the first select() of the process: loads the catalog, opens the DB, renders and hashes
          the winner's source, reads its binary from the compile cache, loads the module
  first   the first select() of another problem whose winner is of another family (its template
          is compiled by Jinja now), then of a third problem served by another instance of the
          first winner's family (template already compiled)
  repeat  select() of the first problem again, --reps times: p50 / p90 / max
  written select() after each of --writes commits to the DB by another connection (the memo must
          read the DB again, the Kernel stays cached)
  run     Kernel.run_pointers host cost per call (the GPU's queue drained every 16 calls, not timed)

Prints one line per measurement and a JSON summary last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONV = "conv_bwd_weight"
PROBLEMS = {  # name: (layout, dtype, --problem spec)
    "a": ("NHWGC", "fp16", "N=32,G=32,C=4,K=4,input=56x56,filter=3x3,pad=1"),
    "b": ("NHWGC", "fp16", "N=8,G=1,C=64,K=64,input=28x28,filter=3x3,pad=1"),
    "c": ("NHWGC", "fp16", "N=16,G=32,C=4,K=4,input=28x28,filter=3x3,pad=1"),
}


def parse(name: str) -> Any:
    from factory.ops import solver_for
    from factory.problem import DType, Layout, Op

    layout, dtype, spec = PROBLEMS[name]
    return solver_for(Op(CONV)).parse_problem(spec, Layout.parse(layout), DType.parse(dtype))


class StandInBackend:
    """Loads, allocates and launches nothing; what select() and run_pointers() cost on the host."""

    from factory.backends import BackendKind as _Kind

    kind = _Kind.CUDA

    def __init__(self) -> None:
        from factory.backends import BackendKind, DeviceInfo

        self._info = DeviceInfo(BackendKind.CUDA, "sm_90", "stand-in", 132, "13000", "stand-in compiler 1")
        self._next = 0x7000_0000

    def device_info(self) -> Any:
        return self._info

    def load(self, binary: bytes, entry: str) -> str:
        return entry

    def prepare_args(self, args: Any) -> Any:
        return args

    def launch_prepared(self, *args: Any, **kwargs: Any) -> None:
        pass

    def memset_async(self, *args: Any, **kwargs: Any) -> None:
        pass

    def alloc(self, nbytes: int) -> int:
        self._next += 1 << 20
        return self._next

    def free(self, ptr: int) -> None:
        pass


def use_stand_in_compiler() -> None:
    """Binaries by hashing the source: the compile cache is still read and checked for real."""
    import hashlib

    import factory.compile_cache as cache
    from factory.backends import CompiledBinary

    def compile_source(source: str, arch: str, options: Any = ()) -> CompiledBinary:
        return CompiledBinary(b"STAND-IN" + hashlib.sha256(source.encode()).digest(), arch, "stand-in compiler 1")

    cache.compiler_for = lambda kind: compile_source
    cache.compiler_version = lambda kind: "stand-in compiler 1"


def backend(gpu: bool) -> Any:
    if gpu:
        from factory.backends import get_backend

        return get_backend()
    use_stand_in_compiler()
    return StandInBackend()


def winners(problem: Any) -> list[Any]:
    from factory.selector import heuristic_pick, lookup

    return [heuristic_pick(problem), *lookup(problem)]


def setup(gpu: bool) -> None:
    """Store a winner per problem (a, b of different families; c another instance of a's family) and
    put their binaries in the compile cache."""
    from factory.api import _binary
    from factory.sources import hash_of
    from tuning_db import Measurement, TuningDB

    gpu_backend = backend(gpu)
    device = gpu_backend.device_info()
    a = winners(parse("a"))[0]
    b = next(i for i in winners(parse("b")) if i.family != a.family)
    c = next((i for i in winners(parse("c")) if i.family == a.family and i.name != a.name), None)
    if c is None:
        c = next(i for i in winners(parse("c")) if i.family == a.family)
    with TuningDB() as db:
        for name, inst in (("a", a), ("b", b), ("c", c)):
            problem = parse(name)
            db.record(problem.key, CONV, device, [Measurement(inst.name, 10.0, 0.1, 25, True, source_hash=hash_of(inst))])
            _binary(inst, gpu_backend)
            print(f"setup: {name} {problem.key} -> {inst.name}", flush=True)


def timed(call: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = call()
    return (time.perf_counter() - start) * 1e6, result


def measure(gpu: bool, reps: int, writes: int) -> dict[str, Any]:
    start = time.perf_counter()
    from factory.api import SelectMode, select
    from tuning_db import Measurement, TuningDB

    import_us = (time.perf_counter() - start) * 1e6
    gpu_backend = backend(gpu)
    a, b, c = parse("a"), parse("b"), parse("c")
    mode = SelectMode.DB
    cold_us, kernel = timed(lambda: select(a, mode=mode, backend=gpu_backend))
    first_new_family_us, _ = timed(lambda: select(b, mode=mode, backend=gpu_backend))
    first_same_family_us, _ = timed(lambda: select(c, mode=mode, backend=gpu_backend))
    repeat = [timed(lambda: select(a, mode=mode, backend=gpu_backend))[0] for _ in range(reps)]
    same = all(select(a, mode=mode, backend=gpu_backend) is kernel for _ in range(3))

    writer = TuningDB()
    device = gpu_backend.device_info()
    after_write = []
    for i in range(writes):
        writer.record("conv_bwd_weight:unrelated", CONV, device, [Measurement(f"x{i}", None, None, 0, False, "n/a")])
        after_write.append(timed(lambda: select(a, mode=mode, backend=gpu_backend))[0])

    pointers = {name: gpu_backend.alloc(spec.nbytes) for name, spec in kernel.specs.items()}
    kernel.run_pointers(pointers)
    run = []
    for i in range(reps):
        if gpu and i % 16 == 0:
            # Drain the launch queue now and then: a full queue makes a launch wait for the GPU, and the
            # host cost would read as the kernel's own time.
            gpu_backend.synchronize()
        run.append(timed(lambda: kernel.run_pointers(pointers))[0])
    if gpu:
        gpu_backend.synchronize()

    def stats(samples: list[float]) -> dict[str, float]:
        ordered = sorted(samples)
        return {"p50_us": statistics.median(ordered), "p90_us": ordered[int(0.9 * (len(ordered) - 1))],
                "max_us": ordered[-1], "n": len(ordered)}

    return {
        "device": device.name, "import_us": import_us, "cold_first_select_us": cold_us,
        "first_select_new_family_us": first_new_family_us, "first_select_same_family_us": first_same_family_us,
        "repeated_select": stats(repeat), "repeated_returns_same_kernel": same,
        "select_after_another_connection_wrote": stats(after_write), "run_pointers_host": stats(run),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="use this machine's GPU instead of the stand-in backend")
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.gpu, args.reps, args.writes)), flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="select-latency-") as scratch:
        os.environ["KFACTORY_DB"] = str(Path(scratch) / "tuning.db")
        os.environ["KFACTORY_CACHE_DIR"] = str(Path(scratch) / "cache")
        setup(args.gpu)
        argv = [sys.executable, __file__, "--child", "--reps", str(args.reps), "--writes", str(args.writes)]
        child = subprocess.run(argv + (["--gpu"] if args.gpu else []), capture_output=True, text=True, env=os.environ)
        if child.returncode != 0:
            print(child.stdout + child.stderr, file=sys.stderr)
            return 1
    result = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"device: {result['device']}")
    print(f"import factory.api:                     {result['import_us'] / 1000:8.1f} ms")
    print(f"cold: first select() of the process:    {result['cold_first_select_us'] / 1000:8.2f} ms  (catalog load included)")
    print(f"first select(), template not compiled:  {result['first_select_new_family_us'] / 1000:8.2f} ms")
    print(f"first select(), template compiled:      {result['first_select_same_family_us'] / 1000:8.2f} ms")
    r = result["repeated_select"]
    print(f"repeated select(): p50 {r['p50_us']:.1f} µs  p90 {r['p90_us']:.1f} µs  max {r['max_us']:.0f} µs  (n={r['n']}; same Kernel: {result['repeated_returns_same_kernel']})")
    w = result["select_after_another_connection_wrote"]
    print(f"select() after another connection wrote: p50 {w['p50_us']:.1f} µs  p90 {w['p90_us']:.1f} µs  (n={w['n']})")
    k = result["run_pointers_host"]
    print(f"Kernel.run_pointers host: p50 {k['p50_us']:.1f} µs  p90 {k['p90_us']:.1f} µs")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
