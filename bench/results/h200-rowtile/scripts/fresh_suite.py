"""A suite of fresh channels-last dwsep layers rowtile serves, for a clean check of the prior fitted on the fit and
held-out halves: `kfactory bench --random`'s network-like draws of seed 65 (fp16/bf16), in order, the first 18
channels-last ones rowtile serves. Writes bench/suites/rowtile_fresh.toml."""
from pathlib import Path

from factory.bench.random_cases import draw
from factory.problem import DType, Layout, Op
from factory.selector import lookup

SEED, WANTED = 65, 18
rows = []
for item in draw(400, SEED, [Op.DWSEP_CONV_FWD], [DType.FP16, DType.BF16]):
    p = item.problem
    if p.layout is not Layout.NHWGC or not any(i.family == "rowtile" for i in lookup(p)):
        continue
    sizes = item.problem.key.split(":")[4]
    fields = []
    for part in sizes.split(","):
        name, value = part.split("=")
        if name in ("input", "filter", "stride", "pad", "dilation"):
            value = "[" + ", ".join(value.split("x")) + "]"
        elif not value.isdigit():
            value = f'"{value}"'
        fields.append(f"{name} = {value}")
    name = f"fresh{len(rows):02d}_{len(p.input)}d_c{p.C}_k{p.K}_f{p.filter[-1]}"
    rows.append("  { name = \"" + name + "\", " + ", ".join(fields) + ', layouts = ["NHWGC"] },')
    if len(rows) == WANTED:
        break
head = (f"# Fresh channels-last dwsep layers rowtile serves, drawn after its prior was fitted (bench/NOTES.md 94): the\n"
        f"# first {WANTED} of `kfactory bench --random` seed {SEED}'s network-like draws.\n"
        "# `kfactory bench --suite bench/suites/rowtile_fresh.toml --dtypes fp16`\n\n")
Path("bench/suites/rowtile_fresh.toml").write_text(head + "dwsep_conv_fwd = [\n" + "\n".join(rows) + "\n]\n")
print(len(rows))
