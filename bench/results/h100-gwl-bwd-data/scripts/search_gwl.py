"""Random search of bwd-data gwl's within-family prior weights: the pick (highest score) against each problem's
best, geomean over the sweeps, with leave-one-out."""
import glob, math, re, sys
import numpy as np
from factory.device import TARGETS
from factory.problem import parse_conv_problem, Layout, DType, Op
from factory.ops.conv_bwd_data import SOLVER
from factory.ops.conv_bwd_data.gwl import chunks_of, tiles_of, plane_cover, shared_bytes, MAX_ACC, ACC_PER_TILE, TILE_N
T = TARGETS["sm_90a"]; fam = SOLVER.family("gwl")

def feats(p, prob):
    blocks = chunks_of(p, prob) * p.walkers
    mmax = max(m for m in (1, 2, 4) if ACC_PER_TILE * m * (p.c // TILE_N) <= MAX_ACC and p.row_tiles() % m == 0)
    uhb, uwb = p.block_window()
    sh = shared_bytes(p, prob.dtype.tensor.nbytes)
    per_sm = min((228 * 1024) // (sh + 1024), 2048 // p.threads, 32)
    active = min(blocks / T.processors, per_sm) * p.threads / 32
    return [abs(math.log2(p.rows * p.cols / 128)), math.log2(mmax / p.warp_tiles),
            abs(math.log2(blocks / (2 * T.processors))), -math.log2(plane_cover(p, prob)),
            math.log2(uhb * uwb / (p.rows * p.cols)), math.log2(p.groups), 1.0 if p.stages == 3 else 0.0,
            -math.log2(min(1.0, active / 8))]
NAMES = ["tile_off_128", "below_max_warp_tiles", "blocks_off_2_per_sm", "outside_plane", "halo", "groups", "three_stages", "few_warps"]
probs = []
for f in sorted(glob.glob(sys.argv[1] + "/p*.log")):
    lines = open(f).read().splitlines()
    op, lay, dt, nd, spec = lines[0].split(":", 4)
    prob = parse_conv_problem(spec, Layout(lay), DType(dt), Op.CONV_BWD_DATA)
    pts = []
    for ln in lines[2:]:
        m = re.match(r"\s+([\d.]+) us .*(conv_bwd_data_\S+)", ln)
        if m:
            p = fam.parse_suffix(m[2].split("_gwl_")[1])
            if fam.why_not(p, prob, T) is None:  # the catalog's refusals as they stand now
                pts.append((float(m[1]), np.array(feats(p, prob)), p))
    pts.sort(key=lambda v: v[2].suffix())  # the logs list the fastest first: ties must not pick by time
    best = min(t for t, _, _ in pts)
    probs.append((f.split("/")[-1], best, np.array([t for t, _, _ in pts]), np.stack([x for _, x, _ in pts]), [p for *_, p in pts]))

def ratios(w, subset):
    out = []
    for i in subset:
        name, best, ts, X, ps = probs[i]
        out.append(ts[int(np.argmax(-(X @ w)))] / best)
    return np.array(out)

def gm(r): return float(np.exp(np.mean(np.log(r))))
GRID = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2]
def objective(w, subset):
    r = ratios(w, subset)
    return gm(r) + 0.02 * r.max()
def search(subset, n=0):
    """Coordinate descent over GRID from every weight 0.1, four sweeps."""
    w = np.full(len(NAMES), 0.1)
    for _ in range(4):
        for j in range(len(NAMES)):
            vals = []
            for g in GRID:
                w2 = w.copy(); w2[j] = g; vals.append((objective(w2, subset), g))
            w[j] = min(vals)[1]
    return w
allp = list(range(len(probs)))
w = search(allp)
print({n: round(x, 3) for n, x in zip(NAMES, w)})
r = ratios(w, allp); print("in-sample geomean", round(gm(r), 3), "worst", round(r.max(), 3), [round(x, 2) for x in r])
loo = []
for i in allp:
    wi = search([j for j in allp if j != i], 2000)
    loo.append(ratios(wi, [i])[0])
print("leave-one-out geomean", round(gm(np.array(loo)), 3), "worst", round(max(loo), 3), [round(x, 2) for x in loo])
for i in allp:
    name, best, ts, X, ps = probs[i]; k = int(np.argmax(-(X @ w))); print(name, ps[k].suffix(), round(ts[k], 1), best)
