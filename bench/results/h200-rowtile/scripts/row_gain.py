"""Rows of a bench run against PyTorch with and without rowtile: the row's tuned winner (ours) and the best
verified time among the other families' candidates in the same tune. python row_gain.py RESULTS.csv DB"""
import csv
import math
import sys

from tuning_db import TuningDB

db = TuningDB(sys.argv[2])
best_other = {}
for w in db.winners():
    times = [m.median_us for m, _, _ in db.measurements(w.problem_key)
             if m.verified and m.median_us and "_rowtile_" not in m.instance]
    best_other[w.problem_key] = min(times)
with_rt, without, below_with, below_without = [], [], 0, 0
for row in csv.DictReader(open(sys.argv[1])):
    if row["status"] != "ok":
        continue
    key = row["problem"]
    torch_us = float(row["torch_us"])
    with_rt.append(torch_us / float(row["ours_us"]))
    without.append(torch_us / best_other[key])
    below_with += with_rt[-1] < 1
    below_without += without[-1] < 1
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
print(f"{len(with_rt)} rows: against PyTorch {gm(with_rt):.2f}x geomean with rowtile ({below_with} below 1x), "
      f"{gm(without):.2f}x with the other families' best ({below_without} below 1x)")
