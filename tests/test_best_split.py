"""scripts/best_split.py: a layer's best point with a name fragment against its best other point."""

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from best_split import best_split  # noqa: E402

LISTING = """=== NGCHW fp16 A
dwsep_conv_fwd:ngchw:fp16:2d:A
floor 1.0 us; PyTorch 20.0 us (5 % of floor)
      10.0 us   2.00x    10 %  dwsep_conv_fwd_2d_ngchw_fp16_twopass_b64_tl_k3
      12.0 us   1.67x     8 %  dwsep_conv_fwd_2d_ngchw_fp16_twopass_b64_k3
      11.0 us   1.80x     9 %  dwsep_conv_fwd_2d_ngchw_fp16_twopass_b128_tl_k3
=== NGCHW fp16 B
      30.0 us   1.00x     3 %  dwsep_conv_fwd_2d_ngchw_fp16_twopass_b64_k3
=== NGCHW fp16 C
      40.0 us   1.00x     3 %  dwsep_conv_fwd_2d_ngchw_fp16_twopass_b64_k3
      20.0 us   2.00x     6 %  dwsep_conv_fwd_2d_ngchw_fp16_twopass_b64_tl_k3
"""


def test_each_layer_with_both_kinds_gets_one_line_of_the_first_listed_of_each():
    lines = best_split(LISTING.splitlines(), "_tl_")
    assert lines == ["1.20x  without 12.0 us (1.67x PyTorch) with _tl_ 10.0 us (2.00x)  NGCHW fp16 A",
                     "2.00x  without 40.0 us (1.00x PyTorch) with _tl_ 20.0 us (2.00x)  NGCHW fp16 C"]


def test_a_missing_listing_is_one_line_and_exit_2(tmp_path):
    script = Path(__file__).resolve().parents[1] / "scripts" / "best_split.py"
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "none.txt"), "_tl_"], capture_output=True, text=True)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
