"""Draw bench/suites/depthwise_heldout_bwd_data.toml: 12 depthwise backward-data layers (seed 4747)."""
import numpy as np

rng = np.random.default_rng(4747)
rows, seen = [], set()
while len(rows) < 12:
    N = int(rng.choice([8, 16, 32, 64, 128]))
    H = int(rng.integers(7, 41))
    W = H if rng.random() < 0.7 else int(rng.integers(7, 41))
    k = int(rng.choice([3, 3, 3, 5, 7]))
    s = int(rng.choice([1, 1, 1, 2]))
    G = int(rng.choice([32, 64, 96, 144, 192, 240, 384, 480, 576]))
    lay = str(rng.choice(["NGCHW", "NGCHW", "GNHWC"]))
    if N * G * H * W * 2 > 64 << 20 or N * G * H * W < 1 << 18:
        continue
    key = (N, H, W, k, s, G, lay)
    if key in seen:
        continue
    seen.add(key)
    rows.append(f'  {{ name = "dw{k}_{H}x{W}_g{G}_n{N}_s{s}", N = {N}, G = {G}, C = 1, K = 1, input = [{H}, {W}], '
                f'filter = [{k}, {k}], stride = [{s}, {s}], pad = [{k // 2}, {k // 2}], layouts = ["{lay}"] }},')
print("\n".join(rows))
