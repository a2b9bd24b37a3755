import glob, math, re, sys
from factory.device import TARGETS
from factory.problem import parse_conv_problem, Layout, DType, Op
from factory.ops.conv_bwd_data import SOLVER
from factory.ops.conv_bwd_data.gwl import chunks_of
T = TARGETS["sm_90a"]; fam = SOLVER.family("gwl")
for per in (1.5, 2, 3, 4, 6):
    rs = []
    for f in sorted(glob.glob(sys.argv[1] + "/p*.log")):
        lines = open(f).read().splitlines()
        op, lay, dt, nd, spec = lines[0].split(":", 4)
        prob = parse_conv_problem(spec, Layout(lay), DType(dt), Op.CONV_BWD_DATA)
        pts = []
        for ln in lines[2:]:
            m = re.match(r"\s+([\d.]+) us .*(conv_bwd_data_\S+)", ln)
            if m: pts.append((float(m[1]), fam.parse_suffix(m[2].split("_gwl_")[1])))
        best = min(t for t, _ in pts)
        def off(p): return abs(math.log2(chunks_of(p, prob) * p.walkers / (per * T.processors)))
        # per other-params group, keep the walkers nearest the target
        groups = {}
        for t, p in pts:
            key = (p.groups, p.warp_tiles, p.rows, p.cols, p.stages)
            groups.setdefault(key, []).append((off(p), t))
        kept = [min(v)[1] for v in groups.values()]
        rs.append(min(kept) / best)
    g = math.exp(sum(map(math.log, rs)) / len(rs))
    print(per, round(g, 3), round(max(rs), 3), [round(r, 2) for r in rs])
print("refuse off > lim (target 2 an SM):")
for lim in (0.75, 1.0, 1.5):
    rs, kept_n, all_n = [], 0, 0
    for f in sorted(glob.glob(sys.argv[1] + "/p*.log")):
        lines = open(f).read().splitlines()
        op, lay, dt, nd, spec = lines[0].split(":", 4)
        prob = parse_conv_problem(spec, Layout(lay), DType(dt), Op.CONV_BWD_DATA)
        pts = []
        for ln in lines[2:]:
            m = re.match(r"\s+([\d.]+) us .*(conv_bwd_data_\S+)", ln)
            if m: pts.append((float(m[1]), fam.parse_suffix(m[2].split("_gwl_")[1])))
        best = min(t for t, _ in pts)
        kept = [t for t, p in pts if abs(math.log2(chunks_of(p, prob) * p.walkers / (2 * T.processors))) <= lim]
        if not kept:  # fewest-off walkers
            o = min(abs(math.log2(chunks_of(p, prob) * p.walkers / (2 * T.processors))) for t, p in pts)
            kept = [t for t, p in pts if abs(math.log2(chunks_of(p, prob) * p.walkers / (2 * T.processors))) <= o + 1e-9]
        kept_n += len(kept); all_n += len(pts)
        rs.append(min(kept) / best)
    print(lim, kept_n, all_n, [round(r, 2) for r in rs])
