"""Tune each listed problem (every candidate) into a DB until a time limit; print one line a problem."""
import subprocess, sys, time
db, listing, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
start = time.monotonic()
for line in open(listing):
    layout, dtype, spec = line.split()
    if time.monotonic() - start > limit:
        print("stopped at the time limit before", layout, dtype, spec, flush=True)
        break
    t = time.monotonic()
    r = subprocess.run(["build/kf", "tune", "--op", "conv_bwd_data", "--layout", layout, "--dtype", dtype,
                        "--problem", spec, "--db", db], capture_output=True, text=True, timeout=90)
    last = [l for l in r.stdout.splitlines() if "winner" in l.lower()][-1:] or r.stderr.splitlines()[-1:]
    print(f"{time.monotonic() - t:5.1f}s rc={r.returncode} {layout} {dtype} {spec} :: {' '.join(last)[:160]}", flush=True)
