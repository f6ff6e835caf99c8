"""Latency mode's kernel against the dense product at batch size 1, on this CPU.

A share of a projection's input is zeroed by per-token thresholds. Candidates for the product
over the remaining inputs, as speed relative to the dense GEMV over the zeroed input (torch's
F.linear), median of --repeats interleaved rounds:
  index_select  copy the active rows of W^T, then one GEMV (torch ops)
  embedding_bag torch's weighted sum over the active rows of W^T (torch ops)
  compiled      zerolayer's kernel (engines/torch_engine/kernel.c): reads the active rows in place
Two settings:
  hot   SmolLM2-135M's down_proj (1536 -> 576) alone, called over and over: its 3.5 MB of
        weights stay in the CPU caches
  model every projection shape of all 30 layers of SmolLM2-135M (q/k/v fused, o, gate/up
        fused, down; 30 different copies each) in turn, as a decode step reads them: the weights
        come from memory, which is what a real step pays

  .venv/bin/python benchmarks/latency_kernel.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from zerolayer.engines.torch_engine import kernels

LEVELS = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
# (inputs, outputs) of SmolLM2-135M's projections: q/k/v fused, o, gate/up fused, down
SHAPES = ((576, 960), (576, 576), (576, 3072), (1536, 576))
LAYERS = 30


def _time(fn: Callable[[], object], n: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def hot(kernel: kernels.SparseInputKernel, repeats: int, gen: torch.Generator) -> None:
    w = torch.randn(576, 1536, generator=gen)
    wt = w.t().contiguous()
    x = torch.randn(1, 1536, generator=gen)
    print("hot: down_proj 1536 -> 576 alone (weights in cache); speed vs dense, median")
    print("zeroed  dense_us  index_select  embedding_bag  compiled")
    for zeroed in LEVELS:
        t = float(x.abs().quantile(zeroed)) if zeroed else 0.0
        xs = torch.where(x.abs() < t, 0.0, x)

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

        def comp(t: float = t) -> torch.Tensor:
            return kernel(wt, x, t)

        assert torch.allclose(isel(), dense()[0], atol=1e-3)
        assert torch.allclose(comp(), dense(), atol=1e-3)
        rounds = [[_time(f, 300) for f in (dense, isel, ebag, comp)] for _ in range(repeats)]
        d = statistics.median(r[0] for r in rounds)
        s = [statistics.median(r[0] / r[k] for r in rounds) for k in (1, 2, 3)]
        print(f"{zeroed:5.0%}  {d:8.1f}  {s[0]:11.2f}x  {s[1]:12.2f}x  {s[2]:7.2f}x")


def model(kernel: kernels.SparseInputKernel, repeats: int, gen: torch.Generator) -> None:
    ws = {s: [torch.randn(s[1], s[0], generator=gen) for _ in range(LAYERS)] for s in SHAPES}
    wts = {s: [w.t().contiguous() for w in ws[s]] for s in SHAPES}
    xs = {s: torch.randn(1, s[0], generator=gen) for s in SHAPES}
    mb = sum(w.numel() * 4 for group in ws.values() for w in group) / 2**20
    print(f"\nmodel: all {LAYERS} layers' projections in turn ({mb:.0f} MiB of weights)")
    print("zeroed  dense_ms  compiled (speed vs dense, median [min-max])")

    def dense() -> None:
        for i in range(LAYERS):
            for s in SHAPES:
                F.linear(xs[s], ws[s][i])

    for zeroed in LEVELS:
        th = {s: float(xs[s].abs().quantile(zeroed)) if zeroed else 0.0 for s in SHAPES}

        def comp(th: dict[tuple[int, int], float] = th) -> None:
            for i in range(LAYERS):
                for s in SHAPES:
                    kernel(wts[s][i], xs[s], th[s])

        rounds = [(_time(dense, 5), _time(comp, 5)) for _ in range(repeats)]
        ratios = [a / b for a, b in rounds]
        d = statistics.median(a for a, _ in rounds) / 1000
        print(
            f"{zeroed:5.0%}  {d:8.2f}  {statistics.median(ratios):.2f}x "
            f"[{min(ratios):.2f}-{max(ratios):.2f}]"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    kernel = kernels.load()
    if kernel is None:
        raise SystemExit("the compiled kernel is unavailable here (no C compiler?)")
    gen = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    hot(kernel, args.repeats, gen)
    model(kernel, args.repeats, gen)


if __name__ == "__main__":
    main()
