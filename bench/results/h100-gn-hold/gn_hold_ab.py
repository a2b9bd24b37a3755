"""Every candidate of GroupNorm problems where `group` can hold its rows, tuned on the H100; one JSON line
per problem with every candidate's median (µs)."""
import gzip, json, os, sys, time
from factory.backends import get_backend
from factory.device import target_for
from factory.selector import lookup, problem_from_key
from factory.tuner import TuneSettings, tune

def main():
    deadline = time.time() + float(sys.argv[1])
    min_mb = float(sys.argv[2])
    out = open(os.path.join(os.environ["OUT"], "gn_hold_ab.jsonl"), "a")
    backend = get_backend()
    target = target_for(backend.device_info())
    keys = set()
    for f in ["random_s31", "random_s33", "suite"]:
        for w in json.load(gzip.open(f"bench/results/h100-gn-resident/{f}.db.json.gz"))["winners"]:
            keys.add(w["problem_key"])
    todo = []
    for k in keys:
        p = problem_from_key(k)
        cands = lookup(p, target=target)
        mb = p.numel * p.dtype.tensor.nbytes / 1e6
        if mb >= min_mb and any(c.family == "group" and c.params.hold for c in cands):
            todo.append((-mb, k, p, cands))
    todo.sort(key=lambda t: t[0])
    print(len(todo), "problems", flush=True)
    for _, k, p, cands in todo:
        if time.time() > deadline:
            print("deadline", flush=True); break
        t0 = time.time()
        ms = tune(p, cands, backend, TuneSettings(reps=20, warmup=5, seed=1))
        times = {m.instance: m.median_us for m in ms if m.verified}
        bad = [m.instance for m in ms if not m.verified and m.error and "slower" not in m.error]
        out.write(json.dumps(dict(key=k, times=times, failed=bad)) + "\n"); out.flush()
        hold = min((t, n) for n, t in times.items() if n.endswith("_hold"))
        rest = min((t, n) for n, t in times.items() if not n.endswith("_hold"))
        print(f"{hold[0] / rest[0]:.3f} hold {hold[0]:.1f} best-other {rest[0]:.1f} {rest[1][14:60]} {k[14:]} "
              f"failed={len(bad)} {time.time() - t0:.0f}s", flush=True)

if __name__ == "__main__":
    main()
