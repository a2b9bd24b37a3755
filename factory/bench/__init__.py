"""`kfactory bench`: our kernels against PyTorch on a suite of real-network shapes.

suite (TOML -> cases -> items) -> runner (check against PyTorch, time both with one timer) ->
report (table, CSV, JSON, PNGs); ceilings give the roofline denominators; compare diffs two runs.
"""

from .command import add_bench_parser, cmd_bench
from .model import BenchError

__all__ = ["add_bench_parser", "cmd_bench", "BenchError"]
