"""Template variants of the backward-weight matrix kernel, timed on the GPU (bench/results/h100-epilogue).

Each variant is a text patch of the rendered source of templates/conv_bwd_weight/mma.hip.j2 as it was at
commit b1d280b (before the epilogue change); run from the repository root at that commit:
    python3 gemm_variants.py "SPEC;SPEC" stock,linear,... ["TILE,TILE"]   (NHWGC fp16 problems)
    python3 ab.py pairs.txt stock,epicol                                 (problem key + instance per line)
"""
import dataclasses, re, statistics, sys, time
import torch
import factory.sources as sources
import factory.api as api
from factory.backends import get_backend
from factory.bench.check import agreement_floor, compare_outputs
from factory.bench.runner import make_tensors, poison
from factory.catalog import instance_by_name
from factory.ops import solver_for
from factory.ops.base import Role
from factory.problem import DType, Layout, Op
from factory.codegen import render as stock_render

POS = re.compile(r"__device__ __forceinline__ Pos pos\(int r\) const \{.*?return p;\n  \}", re.S)
LINEAR_POS = ("__device__ __forceinline__ Pos pos(int r) const {\n    Pos p; p.out_off = (IDX)r * a.out_w; "
              "p.in_off = (IDX)r * a.in_w; p.di = 0; p.hi = 0; p.wi = 0; return p;\n  }")
BOUNDS = re.compile(r"ok = ok && s\.ok && \(unsigned\)\(p\.di.*?\(unsigned\)a\.Wi;", re.S)


def patch(text: str, variant: str) -> str:
    if "linear" in variant:
        text, n1 = POS.subn(LINEAR_POS, text)
        text, n2 = BOUNDS.subn("ok = ok && s.ok;", text)
        assert n1 == 1 and n2 == 1, (n1, n2)
    if "defer" in variant:
        n = text.count("wait_all();\n#elif")
        text = text.replace("    commit();\n    wait_all();\n#elif", "    commit();\n    asm volatile(\"wgmma.wait_group.sync.aligned 1;\" ::: \"memory\");\n#elif")
        text = text.replace("for (int t = 0; t < Cfg::STAGES - 1; ++t) {", "for (int t = 0; t < Cfg::STAGES - 2; ++t) {")
        text = text.replace("wait<Cfg::STAGES - 2>();", "wait<Cfg::STAGES - 3>();")
        text = text.replace("const int next = t + Cfg::STAGES - 1;", "const int next = t + Cfg::STAGES - 2;")
        text = text.replace("  if constexpr (Cfg::SLICES > 1) {\n    if (!sum_slices",
                            "  asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n  if constexpr (Cfg::SLICES > 1) {\n    if (!sum_slices")
        assert n == 1
    if "noload" in variant:
        text, n = re.subn(r"chunks\.load\(op, [^;]*;", ";", text)
        assert n == 2, n
    if "nocompute" in variant:
        n = text.count("Cfg::compute(smem + (t % Cfg::STAGES) * Cfg::STAGE, acc, wm, wn);")
        text = text.replace("Cfg::compute(smem + (t % Cfg::STAGES) * Cfg::STAGE, acc, wm, wn);", ";")
        assert n == 1
    if "fastcol" in variant:
        old_col = ("    const int c = j % a.C, gl = (j / a.C) % GT, f = j / (a.C * GT);\n"
                   "    const int x = f % a.X, y = (f / a.X) % a.Y, z = f / (a.X * a.Y);\n")
        new_col = ("    int c; const int cq = by_c.divmod(j, c); const int gl = cq % GT, f = cq / GT;\n"
                   "    int x; const int fx = by_x.divmod(f, x); int y; const int z = by_y.divmod(fx, y);\n")
        assert text.count(old_col) == 2
        text = text.replace(old_col, new_col)
        old_row = "    const int gl = m / a.K, k = m % a.K;\n"
        assert text.count(old_row) == 2
        text = text.replace(old_row, "    int k; const int gl = by_k.divmod(m, k);\n")
        text = text.replace("kf_divider by_wo, by_ho, by_do;", "kf_divider by_wo, by_ho, by_do, by_c, by_x, by_y, by_k;")
        assert text.count("    by_do.init(a.Do);\n") == 1
        text = text.replace("    by_do.init(a.Do);\n", "    by_do.init(a.Do);\n    by_c.init(a.C);\n    by_x.init(a.X);\n    by_y.init(a.Y);\n    by_k.init(a.K);\n")
    if "epicol" in variant:
        old_col = ("    const int c = j % a.C, gl = (j / a.C) % GT, f = j / (a.C * GT);\n"
                   "    const int x = f % a.X, y = (f / a.X) % a.Y, z = f / (a.X * a.Y);\n")
        new_col = ("    int c; const int cq = by_c.divmod(j, c); const int gl = cq % GT, f = cq / GT;\n"
                   "    int x; const int fx = by_x.divmod(f, x); int y; const int z = by_y.divmod(fx, y);\n")
        i = text.index("  __device__ __forceinline__ CCol c_col(int j) const {")
        assert text.count(old_col, i) == 1
        text = text[:i] + text[i:].replace(old_col, new_col)
        old_row = "    const int gl = m / a.K, k = m % a.K;\n"
        i = text.index("  __device__ __forceinline__ CRow c_row(int m) const {")
        text = text[:i] + text[i:].replace(old_row, "    int k; const int gl = by_k.divmod(m, k);\n")
        text = text.replace("kf_divider by_wo, by_ho, by_do;", "kf_divider by_wo, by_ho, by_do, by_c, by_x, by_y, by_k;")
        text = text.replace("    by_do.init(a.Do);\n", "    by_do.init(a.Do);\n    by_c.init(a.C);\n    by_x.init(a.X);\n    by_y.init(a.Y);\n    by_k.init(a.K);\n")
    if "rowsflag" in variant:
        text = text.replace("kf_divider by_wo, by_ho, by_do", "bool rows;\n  kf_divider by_wo, by_ho, by_do")
        text = text.replace("    by_do.init(a.Do);\n", "    by_do.init(a.Do);\n    rows = F == 1 && a.sd == 1 && a.sh == 1 && a.sw == 1 && a.pd == 0 && a.ph == 0 && a.pw == 0 && "
            "(a.Ho == 1 || a.out_h == a.Wo * a.out_w) && (a.Do == 1 || a.out_d == a.Ho * a.Wo * a.out_w) && (a.N == 1 || a.out_n == a.Do * a.Ho * a.Wo * a.out_w) && "
            "(a.Hi == 1 || a.in_h == a.Wi * a.in_w) && (a.Di == 1 || a.in_d == a.Hi * a.Wi * a.in_w) && (a.N == 1 || a.in_n == a.Di * a.Hi * a.Wi * a.in_w);\n")
        key = "  __device__ __forceinline__ Pos pos(int r) const {\n"
        assert text.count(key) == 1
        text = text.replace(key, key + "    if (rows) return {(IDX)r * a.out_w, (IDX)r * a.in_w, 0, 0, 0};\n")
        text, n = BOUNDS.subn("ok = ok && s.ok && (rows || ((unsigned)(p.di + s.dz) < (unsigned)a.Di && (unsigned)(p.hi + s.dy) < (unsigned)a.Hi && (unsigned)(p.wi + s.dx) < (unsigned)a.Wi));", text)
        assert n == 1
    if "empty" in variant:
        key = "  extern __shared__ unsigned char kf_dynamic_smem[];\n  const BwdWeightGemm op("
        assert text.count(key) == 1
        text = text.replace(key, "  if (blockIdx.x < 1000000) return;\n" + key)
    if "noepi" in variant:
        key = "  // A lane's accumulators cover a few rows"
        assert text.count(key) == 1
        text = text.replace(key, "  if (r_end >= 0) return;\n" + key)
    if "nosync" in variant:
        n = text.count("__syncthreads();  // stage t is complete")
        text = text.replace("__syncthreads();  // stage t is complete", "// ")
        assert n == 1
    return text


def gpu_us(fn, flush, reps=30):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.zero_()
        torch.cuda._sleep(1_000_000)
        s.record(); fn(); e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1000)
    return statistics.median(ts)


def main():
    backend = get_backend()
    from factory.device import target_for
    target = target_for(backend.device_info())
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    base = instance_by_name("conv_bwd_weight_2d_nhwgc_fp16_wgmma_b64x64x32_g1x1_sl4_p3_v8x8_i32_sk8_twostage")
    R = lambda **kw: dataclasses.replace(base, params=dataclasses.replace(base.params, **kw))
    at = type(base.params.reduction)("atomic")
    tiles = {
        "64x64 sl4 p3 sk8 two": R(),
        "64x64 sl4 p4 sk8 two": R(stages=4),
        "64x64 sl4 p4 sk16 at": R(stages=4, split_k=16, reduction=type(base.params.reduction)("atomic")),
        "128x128 p4 sk16 two": R(block_m=128, block_n=128, groups_m=2, slices=1, stages=4, split_k=16),
        "128x128 p4 sk32 at": R(block_m=128, block_n=128, groups_m=2, slices=1, stages=4, split_k=32, reduction=type(base.params.reduction)("atomic")),
        "128x128 sl2 p4 sk16 two": R(block_m=128, block_n=128, groups_m=2, slices=2, stages=4, split_k=16),
        "128x128x64 p4 sk32 two": R(block_m=128, block_n=128, block_k=64, groups_m=2, slices=1, stages=4, split_k=32),
        "64x256 p4 sk32 two": R(block_n=256, slices=1, stages=4, split_k=32),
        "128x256 p4 sk33 two": R(block_m=128, block_n=256, groups_m=2, slices=1, stages=4, split_k=33),
        "128x256 p4 sk66 at": R(block_m=128, block_n=256, groups_m=2, slices=1, stages=4, split_k=66, reduction=type(base.params.reduction)("atomic")),
        "128x256 p5 sk33 two": R(block_m=128, block_n=256, groups_m=2, slices=1, stages=5, split_k=33),
    }
    if len(sys.argv) > 3:
        tiles = {k: v for k, v in tiles.items() if k in sys.argv[3].split(",")}
        tiles.update({
            "64x64 p4 sk48 at": R(slices=1, stages=4, split_k=48, reduction=at),
            "64x64 p4 sk32 two": R(slices=1, stages=4, split_k=32),
            "64x64x64 p4 sk32 two": R(block_k=64, slices=1, stages=4, split_k=32),
            "64x128x64 p4 sk32 two": R(block_n=128, block_k=64, slices=1, stages=4, split_k=32),
            "64x64 gt2 p4 sk16 two": R(slices=1, stages=4, split_k=16, groups_per_tile=2),
            "64x64 gt2 p4 sk16 at": R(slices=1, stages=4, split_k=16, groups_per_tile=2, reduction=at),
            "64x128 gt4 p4 sk8 two": R(block_n=128, slices=1, stages=4, split_k=8, groups_per_tile=4),
        })
    variants = sys.argv[2].split(",") if len(sys.argv) > 2 else ["stock", "linear", "defer", "linear+defer"]
    specs_list = sys.argv[1].split(";")
    for spec in specs_list:
        problem = solver_for(Op.CONV_BWD_WEIGHT).parse_problem(spec, Layout.NHWGC, DType.FP16)
        nd = problem.ndim
        tiles_here = {k: dataclasses.replace(v, ndim=nd) for k, v in tiles.items()}
        solver = solver_for(problem.op)
        specs = list(solver.tensors(problem))
        tensors = make_tensors(specs, torch.device("cuda"), 7)
        baseline = solver.torch_baseline(problem, {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT})
        t_torch = gpu_us(baseline.run, flush)
        print(f"== {spec}: PyTorch {t_torch:.1f} us", flush=True)
        pointwise = "filter=1x1," in spec and "stride=1x1," in spec and "pad=0x0," in spec
        for variant in variants:
            if "linear" in variant and not pointwise:
                continue
            sources.render = lambda inst, v=variant: patch(stock_render(inst), v)
            sources.forget()
            api.KERNELS.clear()
            for label, inst in tiles_here.items():
                if inst.why_not(problem, target) is not None:
                    print(f"  {variant:14s} {label:24s} n/a: {inst.why_not(problem, target)}")
                    continue
                try:
                    k = api.kernel_for(inst, problem, backend)
                    poison(specs, tensors)
                    k.run(**tensors)
                    baseline.run()
                    torch.cuda.synchronize()
                    agree = compare_outputs(specs, tensors, baseline.outputs(), agreement_floor(problem.dtype))
                    t = gpu_us(lambda: k.run(**tensors), flush)
                    print(f"  {variant:14s} {label:24s} {t:7.1f} us  {t_torch / t:5.2f}x  {'ok' if agree.ok else 'WRONG ' + agree.message}", flush=True)
                except Exception as e:
                    print(f"  {variant:14s} {label:24s} failed: {str(e)[:300]}", flush=True)


main()
