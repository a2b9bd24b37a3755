"""Two suites of the shipped H200 dwsep layers rowtile serves (channels-last 16-bit): alternate layers in
sorted order go to the fitting suite and the held-out one. Writes bench/suites/rowtile_{fit,heldout}.toml.
python shipped_suites.py [SHIPPED.json]: the suites were drawn from shipped/sm_90.json as of commit 922b9b8."""
import json
import re
import sys
from pathlib import Path

from factory.selector import lookup, problem_from_key
from suite_rows import short_name, suite_row

doc = json.loads(Path(sys.argv[1] if len(sys.argv) > 1 else "shipped/sm_90.json").read_text())
h200 = next(i for i, d in enumerate(doc["devices"]) if d["name"] == "NVIDIA H200")
keys = sorted({w["problem_key"] for w in doc["winners"] if w["op"] == "dwsep_conv_fwd" and w["device"] == h200
               and ":nhwgc:" in w["problem_key"] and re.search(r":(fp16|bf16):", w["problem_key"])})
served = []
for key in keys:
    problem = problem_from_key(key)
    if any(i.family == "rowtile" for i in lookup(problem)):
        served.append(key)


for part, chosen in (("fit", served[0::2]), ("heldout", served[1::2])):
    head = (f"# The shipped H200 channels-last 16-bit dwsep layers `rowtile` serves ({len(served)}, drawn at random by\n"
            f"# earlier seeds), alternate ones in sorted order: this is the {part} half (bench/NOTES.md 94).\n"
            f"# `kfactory bench --suite bench/suites/rowtile_{part}.toml --dtypes {'fp16' if part == 'fit' else 'bf16'}`\n\n")
    rows = [suite_row(k, short_name("cl", i, k)) for i, k in enumerate(chosen)]
    Path(f"bench/suites/rowtile_{part}.toml").write_text(head + "dwsep_conv_fwd = [\n" + "\n".join(rows) + "\n]\n")
    print(part, len(rows))
