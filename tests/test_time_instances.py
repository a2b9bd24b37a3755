"""scripts/time_instances.py's choice of candidates under --top K [--also REGEX] (the timing itself needs a GPU)."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "time_instances.py"
sys.path.insert(0, str(SCRIPT.parent))

from time_instances import first_and_also  # noqa: E402


@dataclass(frozen=True)
class Point:
    name: str
    score: float


POINTS = [Point("a_w1_k3", 3.0), Point("b_w2_mx_k3", 1.0), Point("c_w4_k3", 5.0), Point("d_w1_mx_k3", 0.5),
          Point("e_w8_k3", 2.0)]


def test_the_first_k_by_score_then_every_other_the_pattern_finds():
    chosen = first_and_also(POINTS, lambda p: p.score, 2, re.compile("_mx_"))
    assert [p.name for p in chosen] == ["c_w4_k3", "a_w1_k3", "b_w2_mx_k3", "d_w1_mx_k3"]
    assert [p.name for p in first_and_also(POINTS, lambda p: p.score, 2, None)] == ["c_w4_k3", "a_w1_k3"]
    # a point both among the first K and found by the pattern is timed once
    assert len(first_and_also(POINTS, lambda p: p.score, 4, re.compile("_k3"))) == len(POINTS)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_also_without_top_a_bad_pattern_and_a_negative_top_are_one_line_errors():
    spec = ("dwsep_conv_fwd", "NHWGC", "fp16", "N=1,C=8,K=8,input=9x9,filter=3x3,pad=1")
    alone = run(*spec, "--also", "_mx_")
    assert alone.returncode == 2 and "give --top" in alone.stderr and "Traceback" not in alone.stderr
    bad = run(*spec, "--top", "3", "--also", "(")
    assert bad.returncode == 2 and "not a regular expression" in bad.stderr and "Traceback" not in bad.stderr
    negative = run(*spec, "--top", "-2")
    assert negative.returncode == 2 and "--top takes 0" in negative.stderr and "Traceback" not in negative.stderr
