"""A/B on the H100: each shipped matrix backward-weight winner that splits K (twostage / atomic) against
its serial twin (same params, Reduction.SERIAL), both verified and timed in one tune, fixed reps."""
import json, os, re, sys, time
from factory.backends import get_backend
from factory.device import target_for
from factory.selector import lookup, problem_from_key
from factory.tuner import TuneSettings, tune

def main():
    deadline = time.time() + float(sys.argv[1])
    which = sys.argv[2]  # twostage | atomic
    out = open(os.path.join(os.environ["OUT"], f"serial_ab_{which}.jsonl"), "a")
    backend = get_backend()
    target = target_for(backend.device_info())
    d = json.load(open("shipped/sm_90.json"))
    rows = [m for m in d["measurements"] if m["op"] == "conv_bwd_weight" and re.search(r"_(mma|wgmma)_", m["instance"])
            and f"_{which}" in m["instance"]]
    rows.sort(key=lambda m: m["median_us"])
    print(len(rows), "winners", flush=True)
    settings = TuneSettings(reps=30, warmup=5, adaptive=False, seed=1)
    for m in rows:
        if time.time() > deadline:
            print("deadline", flush=True); break
        p = problem_from_key(m["problem_key"])
        twin = m["instance"].replace(f"_{which}", "_serial")
        by = {c.name: c for c in lookup(p, target=target)}
        if twin not in by or m["instance"] not in by:
            print("missing", twin, flush=True); continue
        ms = tune(p, [by[twin], by[m["instance"]]], backend, settings)
        r = {x.instance: (x.median_us, x.verified, x.error) for x in ms}
        rec = dict(key=m["problem_key"], winner=m["instance"], shipped_us=m["median_us"], twin=twin,
                   serial=r[twin], base=r[m["instance"]])
        out.write(json.dumps(rec) + "\n"); out.flush()
        print(f"{r[twin][0] / r[m['instance']][0]:.3f} {r[twin][1]} {r[m['instance']][0]:.1f} {m['instance'][-50:]}", flush=True)

if __name__ == "__main__":
    main()
