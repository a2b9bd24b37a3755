"""bf16 dx of GroupNorm `group` through packed cvt.rn.bf16x2.f32 (two elements an instruction) against
the prelude's per-element integer rounding: the shipped bf16 winners with vector >= 2, stock, patched,
stock again, in one process (verified, 20 reps, no early stop)."""
import json, os
import factory.tuner as tuner
from factory.backends import get_backend
from factory.codegen import source_hash
from factory.device import target_for
from factory.selector import lookup, problem_from_key
from factory.sources import Source

OLD = """          for (int q = 0; q < VEC; ++q) {
            o.v[q] = kf_from_float<T>(fmaf(ca, kf_to_float(dv[u].v[q]), fmaf(cb, kf_to_float(xv[u].v[q]), ce)));
          }"""
NEW = """          for (int q = 0; q < VEC; q += 2) {
            const float f0 = fmaf(ca, kf_to_float(dv[u].v[q]), fmaf(cb, kf_to_float(xv[u].v[q]), ce));
            const float f1 = fmaf(ca, kf_to_float(dv[u].v[q + 1]), fmaf(cb, kf_to_float(xv[u].v[q + 1]), ce));
            unsigned int pk;
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(pk) : "f"(f1), "f"(f0));
            o.v[q].bits = (unsigned short)(pk & 0xffffu);
            o.v[q + 1].bits = (unsigned short)(pk >> 16);
          }"""
stock = tuner.source_of
PATCH = {"on": False}

def patched(inst):
    s = stock(inst)
    if not PATCH["on"]:
        return s
    assert OLD in s.text, inst.name
    text = s.text.replace(OLD, NEW)
    return Source(text, source_hash(text))

tuner.source_of = patched
S = tuner.TuneSettings(reps=20, warmup=5, seed=1, isolation=tuner.Isolation.IN_PROCESS, adaptive=False)

def main():
    out = open(os.path.join(os.environ["OUT"], "exp3.jsonl"), "a")
    backend = get_backend(); target = target_for(backend.device_info())
    ship = {m["problem_key"]: m["instance"] for m in json.load(open("shipped/sm_90.json"))["measurements"]}
    keys = [k for k in ship if k.startswith("groupnorm_bwd:ngchw:bf16") and "_group_" in ship[k]
            and "_v1_" not in ship[k]]
    for k in keys:
        p = problem_from_key(k); inst = {c.name: c for c in lookup(p, target=target)}[ship[k]]
        r = {}
        for on in (False, True, False):
            PATCH["on"] = on
            m = tuner.tune(p, [inst], backend, S)[0]
            r.setdefault(str(on), []).append((m.median_us, m.verified, m.error))
        PATCH["on"] = False
        out.write(json.dumps(dict(key=k, inst=inst.name, r=r)) + "\n"); out.flush()
        print(f"{r['True'][0][0] / min(x[0] for x in r['False']):.3f} {r['True'][0][1]} {r['False'][0][0]:.1f} "
              f"{inst.name[-40:]} {k[14:70]}", flush=True)

if __name__ == "__main__":
    main()
