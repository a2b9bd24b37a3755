"""A suite of fresh channels-last dwsep layers rowtile serves, for a clean check of the prior fitted on the fit and
held-out halves: `kfactory bench --random`'s network-like draws of seed 65 (fp16/bf16), in order, the first 18
channels-last ones rowtile serves. Writes bench/suites/rowtile_fresh.toml."""
from pathlib import Path

from factory.bench.random_cases import draw
from factory.problem import DType, Layout, Op
from factory.selector import lookup
from suite_rows import short_name, suite_row

SEED, WANTED = 65, 18
rows = []
for item in draw(400, SEED, [Op.DWSEP_CONV_FWD], [DType.FP16, DType.BF16]):
    p = item.problem
    if p.layout is not Layout.NHWGC or not any(i.family == "rowtile" for i in lookup(p)):
        continue
    rows.append(suite_row(p.key, short_name("fresh", len(rows), p.key)))
    if len(rows) == WANTED:
        break
head = (f"# Fresh channels-last dwsep layers rowtile serves, drawn after its prior was fitted (bench/NOTES.md 94): the\n"
        f"# first {WANTED} of `kfactory bench --random` seed {SEED}'s network-like draws.\n"
        "# `kfactory bench --suite bench/suites/rowtile_fresh.toml --dtypes fp16`\n\n")
Path("bench/suites/rowtile_fresh.toml").write_text(head + "dwsep_conv_fwd = [\n" + "\n".join(rows) + "\n]\n")
print(len(rows))
