"""Tune every mma / wgmma instance on the suite's dense and grouped backward-weight problems (fp16) and
print the fastest two, and with NGCHW the best transposed and direct ones: the A/B runs behind
bench/NOTES.md (run once before and once after a change).

    python3 scripts/ab_tune_matrix.py LABEL [LAYOUT]      # LAYOUT: nhwgc (default) or ngchw
"""

from __future__ import annotations

import sys

from factory.backends import BackendError, get_backend
from factory.device import target_for
from factory.problem import DType, KernelFactoryError, Layout, parse_conv_problem
from factory.selector import lookup
from factory.tuner import TuneSettings, tune

SPECS = {
    "resnext101_s2": "N=32,G=32,C=16,K=16,input=28x28,filter=3x3,pad=1",
    "regnety_gw24": "N=32,G=14,C=24,K=24,input=28x28,filter=3x3,pad=1",
    "resnet_1x1": "N=32,G=1,C=512,K=128,input=28x28,filter=1x1",
    "r2plus1d_t3": "N=4,G=1,C=64,K=64,input=16x28x28,filter=3x1x1,pad=1x0x0",
}


def _transposed(name: str) -> bool:
    """Whether an instance name carries the transposing pass (`_tr`, maybe followed by `_gt...`)."""
    return name.endswith("_tr") or "_tr_" in name


def main() -> None:
    """Tune and print; argv: label, optional layout. Bad arguments or no GPU: one line, exit 2."""
    if len(sys.argv) not in (2, 3):
        print("usage: ab_tune_matrix.py LABEL [LAYOUT]", file=sys.stderr)
        raise SystemExit(2)
    label = sys.argv[1]
    try:
        layout = Layout.parse(sys.argv[2]) if len(sys.argv) > 2 else Layout.NHWGC
        backend = get_backend()
    except (KernelFactoryError, BackendError) as exc:
        print(f"ab_tune_matrix: {str(exc).splitlines()[0]}", file=sys.stderr)
        raise SystemExit(2) from None
    target = target_for(backend.device_info())
    for name, spec in SPECS.items():
        problem = parse_conv_problem(spec, layout, DType.FP16)
        if layout is not Layout.NHWGC and name == "r2plus1d_t3":
            continue
        cands = [c for c in lookup(problem, target=target) if c.family in ("mma", "wgmma")]
        ms = tune(problem, cands, backend, TuneSettings(reps=20, warmup=3, seed=1))
        ok = sorted((m for m in ms if m.verified), key=lambda m: m.median_us)
        bad = [m for m in ms if not m.verified]
        print(f"{label} {name}: {len(ok)}/{len(ms)} verified; best {ok[0].median_us:.1f} us {ok[0].instance}; "
              f"2nd {ok[1].median_us:.1f} {ok[1].instance}", flush=True)
        tr = [m for m in ok if _transposed(m.instance)]
        rows = [m for m in ok if not _transposed(m.instance)]
        if tr and rows:
            print(f"   best transposed {tr[0].median_us:.1f} us {tr[0].instance}; best direct {rows[0].median_us:.1f} us {rows[0].instance}")
        for m in bad[:3]:
            print("   FAIL", m.instance, m.error)


if __name__ == "__main__":
    main()
