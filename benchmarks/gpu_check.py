"""One script for a developer with an NVIDIA GPU (sm80+): everything GPU-only in one run.

1. Dense vs 2:4 sparse MLP block (gate, up, SiLU-gated product, down) at 16 to 16384 tokens per
   step, for SmolLM2-135M's shapes and a Llama-3-8B-shaped layer (random weights, bfloat16).
   Each path is captured in a CUDA graph (eager 2:4 calls pay ~0.5 ms of host overhead each), then
   replayed; eager timings are printed beside them. Also the GPU bytes of the 2:4 weights.
2. The torch engine's CPU offload: a random Llama of about 1.6 GB served under a 0.5 GiB device
   budget (most layers in pinned host memory, copied in one layer ahead) against the same model
   fully resident: the same greedy tokens, and tokens/s of both.
3. The dynamic tier's precision lever on the GPU path: the same random model's decode tokens/s at
   1 and 32 streams in float32, float32 with bfloat16 projection weights, and bfloat16.
Writes benchmarks/results/gpu.json: {"gpu", "speedup_256", "speedup_1024", "weight_bytes_ratio"}
for the 8B-shaped block, plus the full timing table and the offload run.

  .venv/bin/python benchmarks/gpu_check.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

RESULTS = Path(__file__).resolve().parent / "results" / "gpu.json"
SHAPES = {"smollm2-135m": (576, 1536), "llama-3-8b": (4096, 14336)}
TOKENS = (16, 64, 256, 1024, 4096, 16384)


def _prune_24(w: torch.Tensor) -> torch.Tensor:
    """Keep the 2 largest |w| of every 4 consecutive inputs (what the collapse compiler does,
    with unit activation norms)."""
    g = w.view(w.shape[0], -1, 4)
    top = g.abs().topk(2, dim=-1).indices
    keep = torch.zeros_like(g, dtype=torch.bool).scatter_(-1, top, True)
    return (g * keep).view_as(w)


def _bytes(t: Any) -> int:
    """GPU bytes of a dense tensor, or of a semi-structured one's packed data and metadata."""
    if hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(_bytes(getattr(t, n)) for n in names if getattr(t, n) is not None)
    return t.numel() * t.element_size()


def _time_graph(fn: Any, x: torch.Tensor, iters: int) -> float:
    """Median ms of one call, replayed from a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(x)
    return _time(lambda: graph.replay(), iters)


def _time(call: Any, iters: int) -> float:
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return statistics.median(times)


def _block(ws: list[Any]) -> Any:
    """The MLP block over weights ws = [gate, up, down] (dense or 2:4)."""

    def run(x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.silu(F.linear(x, ws[0])) * F.linear(x, ws[1]), ws[2])

    return run


def mlp_table(quick: bool) -> list[dict[str, Any]]:
    from torch.sparse import to_sparse_semi_structured

    rows = []
    dtype = torch.bfloat16
    for name, (hidden, inter) in SHAPES.items():
        gen = torch.Generator(device="cuda").manual_seed(0)

        def rand(o: int, i: int, gen: torch.Generator = gen) -> torch.Tensor:
            return torch.randn(o, i, device="cuda", dtype=dtype, generator=gen) * 0.02

        dense = [_prune_24(rand(inter, hidden)), _prune_24(rand(inter, hidden))]
        dense.append(_prune_24(rand(hidden, inter)))
        sparse = [to_sparse_semi_structured(w) for w in dense]
        ratio = sum(_bytes(s) for s in sparse) / sum(_bytes(w) for w in dense)

        for tokens in TOKENS[:3] if quick else TOKENS:
            x = torch.randn(tokens, hidden, device="cuda", dtype=dtype)
            iters = max(5, min(200, 2_000_000 // (tokens * hidden // 64 + 1)))
            fd, fs = _block(dense), _block(sparse)
            d = _time_graph(fd, x, iters)
            s = _time_graph(fs, x, iters)
            de = _time(lambda x=x, f=fd: f(x), iters)
            se = _time(lambda x=x, f=fs: f(x), iters)
            row = {
                "shape": name,
                "tokens": tokens,
                "dense_ms": round(d, 4),
                "sparse_ms": round(s, 4),
                "speedup": round(d / s, 3),
                "eager_dense_ms": round(de, 4),
                "eager_sparse_ms": round(se, 4),
                "eager_speedup": round(de / se, 3),
                "weight_bytes_ratio": round(ratio, 3),
            }
            rows.append(row)
            print(
                f"{name:13s} {tokens:6d} tok  graph dense {d:8.4f} ms  2:4 {s:8.4f} ms  "
                f"x{d / s:5.2f}   eager x{de / se:5.2f}   bytes x{ratio:.3f}",
                flush=True,
            )
    return rows


def _random_llama(layers: int) -> tuple[Any, dict[str, torch.Tensor]]:
    """A random Llama of TinyLlama-1.1B's layer shape (bfloat16 tensors) with `layers` layers."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))
    from zerolayer.engines.torch_engine import Shape

    hidden, inter, vocab = 2048, 5632, 32000
    shape = Shape(hidden, 32, 4, 64, layers, vocab, 1e-5, 10000.0, False, (inter,) * layers)
    gen = torch.Generator().manual_seed(0)

    def r(*s: int) -> torch.Tensor:
        return torch.randn(*s, generator=gen, dtype=torch.bfloat16) * 0.02

    state = {"model.embed_tokens.weight": r(vocab, hidden), "model.norm.weight": r(hidden) + 1}
    state["lm_head.weight"] = r(vocab, hidden)
    for i in range(layers):
        q = f"model.layers.{i}."
        state[q + "input_layernorm.weight"] = r(hidden) + 1
        state[q + "post_attention_layernorm.weight"] = r(hidden) + 1
        state[q + "self_attn.q_proj.weight"] = r(2048, hidden)
        state[q + "self_attn.k_proj.weight"] = r(256, hidden)
        state[q + "self_attn.v_proj.weight"] = r(256, hidden)
        state[q + "self_attn.o_proj.weight"] = r(hidden, 2048)
        state[q + "mlp.gate_proj.weight"] = r(inter, hidden)
        state[q + "mlp.up_proj.weight"] = r(inter, hidden)
        state[q + "mlp.down_proj.weight"] = r(hidden, inter)
    return shape, state


def precision_run(quick: bool, device: str = "cuda") -> dict[str, Any]:
    """The dynamic tier's precision lever on the GPU path: the random model's decode tokens/s
    at 1 and 32 streams in float32, float32 with bfloat16 projection weights (what a dynamic
    artifact with weight_dtype bfloat16 serves under a float32 tier), and bfloat16 throughout
    (a GPU tier's usual dtype), with how far each one's logits stray from float32's."""
    shape, state = _random_llama(4 if quick else 22)
    from zerolayer.engines.torch_engine import LlamaModel, SlotCache
    from zerolayer.engines.torch_engine.model import Prompt

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    variants = {
        "float32": (torch.float32, None),
        "float32+bf16 weights": (torch.float32, torch.bfloat16),
        "bfloat16": (torch.bfloat16, None),
    }
    out: dict[str, Any] = {}
    reference = None
    for name, (dtype, weights) in variants.items():
        model = LlamaModel(
            shape, state, device=device, dtype=dtype, weight_dtype=weights, max_len=512
        )
        row: dict[str, Any] = {}
        for streams in (1, 32):
            cache = SlotCache(shape, dtype, model.device, 512)
            cache.ensure(streams, 512)
            prompts = [list(range(1 + k, 33 + k)) for k in range(streams)]
            logits = model.prefill_many(
                [Prompt(p, k, 0) for k, p in enumerate(prompts)], cache
            ).float()
            if streams == 1:
                if reference is None:
                    reference = logits
                row["logits_off"] = round(float((logits - reference).abs().mean()), 4)
            tokens = logits.argmax(-1).tolist()
            sync()
            t0 = time.perf_counter()
            for pos in range(32, 96):
                step = model.decode(tokens, [pos] * streams, cache)
                tokens = step.argmax(-1).tolist()
            sync()
            row[f"tps_{streams}"] = round(64 * streams / (time.perf_counter() - t0), 1)
        out[name] = row
        print(f"precision {name}: {row}", flush=True)
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    return out


def offload_run(quick: bool) -> dict[str, Any]:
    layers = 8 if quick else 22
    shape, state = _random_llama(layers)
    from zerolayer.engines.torch_engine import LlamaModel, SlotCache

    weight_bytes = sum(t.numel() * t.element_size() for t in state.values())
    out: dict[str, Any] = {"weight_bytes": weight_bytes, "budget_bytes": 1 << 29}

    def serve(budget: int | None) -> tuple[list[int], float, dict[str, Any]]:
        model = LlamaModel(
            shape,
            state,
            device="cuda",
            dtype=torch.bfloat16,
            max_len=512,
            device_budget_bytes=budget,
        )
        cache = SlotCache(shape, torch.bfloat16, model.device, 512)
        cache.ensure(1, 512)
        prompt = list(range(1, 33))
        tokens = [int(model.prefill(prompt, 0, cache).argmax())]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        pos = len(prompt)
        for _ in range(63):
            tokens.append(int(model.decode([tokens[-1]], [pos], cache)[0].argmax()))
            pos += 1
        torch.cuda.synchronize()
        return tokens, 63 / (time.perf_counter() - t0), model.report.as_dict()

    full_tokens, full_tps, _ = serve(None)
    off_tokens, off_tps, report = serve(out["budget_bytes"])
    out.update(
        {
            "resident_tps": round(full_tps, 1),
            "offload_tps": round(off_tps, 1),
            "offload_vs_resident": round(off_tps / full_tps, 3),
            "same_tokens": off_tokens == full_tokens,
            "offloaded_layers": report["offloaded_layers"],
            "layers": layers,
        }
    )
    print(
        f"offload: {report['offloaded_layers']}/{layers} layers in pinned host memory, "
        f"{off_tps:.1f} tok/s vs {full_tps:.1f} resident; same tokens: {out['same_tokens']}",
        flush=True,
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer shapes and layers (smoke test)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA GPU here; nothing measured (results left as they were)")
    name = torch.cuda.get_device_name()
    cap = torch.cuda.get_device_capability()
    print(f"gpu: {name} (sm{cap[0]}{cap[1]}), torch {torch.__version__}", flush=True)
    result: dict[str, Any] = {"gpu": name, "capability": f"{cap[0]}.{cap[1]}"}
    if cap[0] < 8:
        sys.exit(f"gpu_check: {name} has no 2:4 sparse tensor cores (needs sm80+)")
    errors = {}
    try:
        rows = mlp_table(args.quick)
        big = {r["tokens"]: r for r in rows if r["shape"] == "llama-3-8b"}
        result.update(
            {
                "speedup_256": big.get(256, {}).get("speedup"),
                "speedup_1024": big.get(1024, {}).get("speedup"),
                "weight_bytes_ratio": next(iter(big.values()))["weight_bytes_ratio"],
                "mlp": rows,
            }
        )
    except Exception as exc:  # record and go on to the offload run
        errors["mlp"] = repr(exc)
    try:
        result["offload"] = offload_run(args.quick)
    except Exception as exc:
        errors["offload"] = repr(exc)
    try:
        result["precision"] = precision_run(args.quick)
    except Exception as exc:
        errors["precision"] = repr(exc)
    result["errors"] = errors
    result["command"] = "python benchmarks/gpu_check.py" + (" --quick" if args.quick else "")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result.get(k) for k in ("gpu", "speedup_256", "speedup_1024")}))
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
