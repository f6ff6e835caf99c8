"""When does reading only the active rows of down_proj^T beat the dense product, at batch size 1?

For SmolLM2-135M's down_proj (1536 -> 576) with a share of its input zeroed by per-token
thresholds: the dense GEMV over the zeroed input, against two kernels that read only the active
rows (index_select + GEMV; embedding_bag's weighted sum). Rounds interleave the kernels; the
median of --repeats rounds is printed as speed relative to dense. This sets the torch engine's
LATENCY_MAX_ACTIVE (engines/llama.py).

  .venv/bin/python benchmarks/latency_kernel.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def _time(fn, n: int = 300) -> float:
    for _ in range(10):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(576, 1536, generator=gen)
    wt = w.t().contiguous()
    x = torch.randn(1, 1536, generator=gen)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("zeroed  dense_us  index_select  embedding_bag   (speed vs dense, median)")
    for zeroed in (0.4, 0.5, 0.6, 0.7, 0.8):
        keep = torch.rand(1536, generator=gen) >= zeroed
        xs = x * keep

        def dense(xs: torch.Tensor = xs) -> torch.Tensor:
            return F.linear(xs, w)

        def isel(xs: torch.Tensor = xs) -> torch.Tensor:
            idx = xs[0].nonzero().squeeze(1)
            return xs[0, idx] @ wt.index_select(0, idx)

        def ebag(xs: torch.Tensor = xs) -> torch.Tensor:
            idx = xs[0].nonzero().squeeze(1)
            return F.embedding_bag(
                idx.unsqueeze(0), wt, per_sample_weights=xs[0, idx].unsqueeze(0), mode="sum"
            )

        assert torch.allclose(isel(), dense()[0], atol=1e-3)
        rounds = [(_time(dense), _time(isel), _time(ebag)) for _ in range(args.repeats)]
        d = statistics.median(r[0] for r in rounds)
        si = statistics.median(r[0] / r[1] for r in rounds)
        se = statistics.median(r[0] / r[2] for r in rounds)
        print(f"{zeroed:5.0%}  {d:8.1f}  {si:12.2f}x  {se:13.2f}x")


if __name__ == "__main__":
    main()
