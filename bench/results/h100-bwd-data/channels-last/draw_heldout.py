"""Draw bench/suites/channels_last_heldout_bwd_data.toml: 14 channels-last depthwise backward-data layers
(seed 4848), drawn before any `dwc` time was measured: 2-D 3x3-7x7 (stride 1 or 2) and 1-D layers."""
import numpy as np

rng = np.random.default_rng(4848)
rows, seen = [], set()
while len(rows) < 14:
    N = int(rng.choice([8, 16, 32, 64, 128]))
    G = int(rng.choice([32, 48, 64, 96, 120, 144, 192, 240, 288, 384, 480, 576, 672, 960]))
    if rng.random() < 0.2:  # 1-D: a sequence model's depthwise layer
        L = int(rng.integers(100, 4000))
        k = int(rng.choice([3, 5, 7, 15, 31]))
        s = 1
        size, filt, pad = [L], [k], [k // 2]
        elems = N * G * L
    else:
        H = int(rng.integers(7, 64))
        W = H if rng.random() < 0.7 else int(rng.integers(7, 64))
        k = int(rng.choice([3, 3, 3, 5, 7]))
        s = int(rng.choice([1, 1, 1, 2]))
        size, filt, pad = [H, W], [k, k], [k // 2, k // 2]
        elems = N * G * H * W
    if elems * 2 > 64 << 20 or elems < 1 << 18:
        continue
    key = (N, G, tuple(size), k, s)
    if key in seen:
        continue
    seen.add(key)
    dims = "x".join(map(str, size))
    rows.append(f'  {{ name = "dw{k}_{dims}_g{G}_n{N}_s{s}", N = {N}, G = {G}, C = 1, K = 1, input = {size}, '
                f'filter = {filt}, stride = {[s] * len(size)}, pad = {pad}, layouts = ["NHWGC"] }},')
print("\n".join(rows))
