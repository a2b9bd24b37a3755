"""How long `kfactory tune` takes: a problem of each op, each tuned cold (empty compile cache and
DB), warm (binaries cached, every candidate measured again with --fresh) and warm with --host-verify (every
candidate's outputs read back and checked in numpy), through the CLI as a user runs it.

    python3 scripts/tune_timings.py [--out tune_timings.json] [--reps 25] [--runs cold,warm] [--ops conv_bwd_weight,...]

Prints a table (outer wall clock, the tune's own phase split, candidates measured / pruned) and writes every
run's `tune --json` summary to --out. Needs a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Case:
    op: str
    layout: str
    dtype: str
    problem: str


CASES = (  # >= 200 candidates on >= 100 MB tensors; a dense backward-data; a large GroupNorm; the fused suite row
    Case("conv_bwd_weight", "NHWGC", "fp16", "N=64,G=512,C=1,K=1,input=56x56,filter=3x3,stride=1,pad=1"),
    Case("conv_bwd_data", "NHWGC", "bf16", "N=64,G=1,C=256,K=256,input=28x28,filter=3x3,stride=1,pad=1"),
    Case("groupnorm_bwd", "NHWGC", "fp16", "N=16,C=256,G=32,input=128x128"),
    Case("dwsep_conv_fwd", "NHWGC", "fp16", "N=64,C=64,K=128,input=112x112,filter=3x3,stride=1,pad=1"),
)
RUNS = {  # --runs name: (label, extra tune arguments)
    "cold": ("cold", ()),
    "warm": ("warm", ("--fresh",)),
    "host": ("warm, host verify", ("--fresh", "--host-verify")),
}


def tune(case: Case, extra: tuple[str, ...], env: dict[str, str], db: Path, reps: int) -> dict:
    command = [sys.executable, "-m", "factory.cli", "tune", "--op", case.op, "--layout", case.layout,
               "--dtype", case.dtype, "--problem", case.problem, "--db", str(db), "--reps", str(reps), "--json", *extra]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if not done.stdout.strip():
        return {"wall_clock_s": wall, "error": done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]}
    result = json.loads(done.stdout)
    candidates = len(result["measurements"]) + result["pruned"]
    return {"wall_clock_s": round(wall, 2), "tune_s": result["wall_s"], "candidates": candidates,
            "measured": result["measured"], "pruned": result["pruned"], "reused": result["reused"],
            "verified": sum(1 for m in result["measurements"] if m["verified"]),
            "winner": result["winner"],
            "winner_us": min((m["median_us"] for m in result["measurements"] if m["verified"]), default=None)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="build/tune_timings.json")
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--runs", default=",".join(RUNS),
                        help="which runs, in order: cold, warm, host (a warm run with --host-verify)")
    parser.add_argument("--ops", default=",".join(c.op for c in CASES), help="the cases of these ops only")
    args = parser.parse_args()
    chosen = args.runs.split(",")
    if unknown := [r for r in chosen if r not in RUNS]:
        parser.error(f"unknown run {unknown[0]!r}: choose among {', '.join(RUNS)}")
    ops = {c.op for c in CASES}
    if unknown := [o for o in args.ops.split(",") if o not in ops]:
        parser.error(f"no case of op {unknown[0]!r}: choose among {', '.join(sorted(ops))}")
    try:  # before the first tune, not after it: its record would be lost
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).touch()
    except OSError as exc:
        parser.error(f"--out {args.out}: cannot write there ({exc.strerror})")
    records = []
    for case in (c for c in CASES if c.op in args.ops.split(",")):
        with tempfile.TemporaryDirectory() as scratch:
            env = dict(os.environ, KFACTORY_CACHE_DIR=str(Path(scratch) / "cache"))
            db = Path(scratch) / "tuning.db"
            for label, extra in (RUNS[r] for r in chosen):
                record = {"case": case.__dict__, "run": label} | tune(case, extra, env, db, args.reps)
                records.append(record)
                split = record.get("tune_s", {})
                print(f"{case.op:16} {label:18} {record['wall_clock_s']:7.1f} s wall  "
                      f"{record.get('measured', '-')}/{record.get('candidates', '-')} measured  "
                      f"compile {split.get('compile_s', 0):.1f} reference {split.get('reference_s', 0):.1f} "
                      f"verify {split.get('verify_s', 0):.1f} time {split.get('time_s', 0):.1f} "
                      f"workers {split.get('workers_s', 0):.1f}  winner {record.get('winner_us') or record.get('error')}",
                      flush=True)
                Path(args.out).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
