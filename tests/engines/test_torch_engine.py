"""zerolayer's torch engine on the real model: the same tokens as transformers for the dense model
and every artifact kind, batching that does not change results, streaming, stops, cancellation,
CPU offload, and 2:4 weights that keep their pattern after load."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from zerolayer.artifacts import Dynamic, save_dynamic, save_sparse24
from zerolayer.collapse.apply import dynamic_cut, load_dynamic, load_masked, load_sparse24
from zerolayer.collapse.model import decoder_layers, load_model
from zerolayer.collapse.sparse24 import is_24, linear, mask_24
from zerolayer.engines.base import SamplingSpec
from zerolayer.engines.torch_engine import TorchEngine, kernels

from tests.engines.conftest import NEW_TOKENS, greedy

SPARSE_UNITS = [(0, "gate_proj"), (1, "down_proj"), (2, "q_proj"), (3, "o_proj"), (4, "up_proj")]


@pytest.fixture(scope="module")
def chats(prompts: Any) -> list[list[int]]:
    return [
        prompts.chat([{"role": "user", "content": "What is the capital of France?"}]),
        prompts.completion("def fibonacci(n):"),
    ]


@pytest.fixture(scope="module")
def dense(model_dir: Path) -> Any:
    return load_model(model_dir)


async def _collect(engine: TorchEngine, spec: SamplingSpec) -> tuple[list[int], str, str, int]:
    tokens: list[int] = []
    text, finish, deltas = "", "", 0
    async for d in engine.generate(spec):
        tokens += d.token_ids
        text += d.text
        deltas += 1
        finish = d.finish_reason or finish
    return tokens, text, finish, deltas


def _run(engine: TorchEngine, specs: list[SamplingSpec]) -> list[tuple[list[int], str, str, int]]:
    """Start the engine, run the requests concurrently, shut it down."""

    async def go() -> list[tuple[list[int], str, str, int]]:
        await engine.start()
        try:
            return await asyncio.gather(*(_collect(engine, s) for s in specs))
        finally:
            await engine.shutdown()

    return asyncio.run(go())


def _greedy_specs(chats: list[list[int]], n: int = NEW_TOKENS) -> list[SamplingSpec]:
    return [SamplingSpec(f"r{i}", ids, n, temperature=0.0) for i, ids in enumerate(chats)]


def _tokens(engine: TorchEngine, chats: list[list[int]]) -> list[list[int]]:
    return [r[0] for r in _run(engine, _greedy_specs(chats))]


def test_dense_tokens_equal_transformers(model_dir: Path, dense: Any, chats: Any) -> None:
    expected = [greedy(dense, ids, stop_at_eos=True) for ids in chats]
    assert _tokens(TorchEngine(str(model_dir), max_model_len=512), chats) == expected


def test_masked_and_pruned_give_the_masked_models_tokens(
    model_dir: Path, pruned_dir: Path, chats: Any
) -> None:
    masked_dir = pruned_dir.parent / "masked"
    expected = [greedy(load_masked(model_dir, masked_dir), ids, stop_at_eos=True) for ids in chats]
    masked = TorchEngine(
        str(model_dir), artifact="masked", artifact_dir=str(masked_dir), max_model_len=512
    )
    pruned = TorchEngine(
        str(model_dir), artifact="pruned", artifact_dir=str(pruned_dir), max_model_len=512
    )
    assert _tokens(masked, chats) == expected
    assert _tokens(pruned, chats) == expected


def test_concurrent_requests_batch_without_changing_results(model_dir: Path, prompts: Any) -> None:
    questions = ["Name three colours.", "What is 2+2?", "Say hello.", "Who wrote Hamlet?"]
    ids = [prompts.chat([{"role": "user", "content": q}]) for q in questions]
    specs = _greedy_specs(ids * 3, 16)
    engine = TorchEngine(str(model_dir), max_model_len=512, max_num_seqs=8)
    together = _run(engine, specs)
    alone = [_run(TorchEngine(str(model_dir), max_model_len=512), [s])[0] for s in specs[:4]]
    assert [r[0] for r in together] == [r[0] for r in alone] * 3
    assert engine.counters["max_batch"] > 1  # they really shared decode steps
    assert all(r[3] > 1 for r in together)  # streamed, one delta per token or so


def test_stops_seeds_and_cancellation(model_dir: Path, prompts: Any) -> None:
    ids = prompts.chat([{"role": "user", "content": "Count from 1 to 20, separated by commas."}])

    async def go() -> None:
        engine = TorchEngine(str(model_dir), max_model_len=512)
        await engine.start()
        try:
            full = await _collect(engine, SamplingSpec("a", ids, 40, temperature=0.0))
            assert full[2] == "length" and len(full[0]) == 40
            cut_at = full[1].index("5")
            stopped = await _collect(engine, SamplingSpec("b", ids, 40, 0.0, stop=["5"]))
            assert stopped[2] == "stop" and stopped[1] == full[1][:cut_at]
            # a stop string over several tokens: none of its start is streamed before the
            # engine knows (the line break came as its own token and leaked before)
            cut_at = full[1].index("\n5")
            spanning = await _collect(engine, SamplingSpec("e", ids, 40, 0.0, stop=["\n5"]))
            assert spanning[2] == "stop" and spanning[1] == full[1][:cut_at]
            seeded = [
                await _collect(engine, SamplingSpec(f"s{i}", ids, 12, 1.0, seed=7))
                for i in range(2)
            ]
            assert seeded[0][0] == seeded[1][0]
            # a request closed after two deltas frees its slot; the engine keeps serving
            gen = engine.generate(SamplingSpec("c", ids, 200, temperature=0.0))
            for _ in range(2):
                await gen.__anext__()
            await gen.aclose()
            again = await _collect(engine, SamplingSpec("d", ids, 40, temperature=0.0))
            assert again[0] == full[0]
            await engine.check_health()
        finally:
            await engine.shutdown()

    asyncio.run(go())


def test_cpu_offload_gives_the_same_tokens(model_dir: Path, chats: Any) -> None:
    base = _tokens(TorchEngine(str(model_dir), max_model_len=512), chats)
    engine = TorchEngine(str(model_dir), max_model_len=512, offload_layers=20)
    assert _tokens(engine, chats) == base
    budget = TorchEngine(str(model_dir), max_model_len=512, device_budget_gib=0.2)
    assert _tokens(budget, chats) == base

    async def info() -> dict[str, Any]:
        await budget.start()
        try:
            return budget.info()
        finally:
            await budget.shutdown()

    got = asyncio.run(info())
    assert got["offload"] and got["offloaded_layers"] > 0


@pytest.fixture(scope="module")
def sparse24_dir(dense: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    layers = decoder_layers(dense)
    weights = {}
    for i, p in SPARSE_UNITS:
        w = linear(layers[i], p).weight.detach()
        weights[(i, p)] = w * mask_24(w, torch.ones(w.shape[1]))
    out = tmp_path_factory.mktemp("sparse24")
    save_sparse24(out, weights)
    return out


def test_sparse24_keeps_the_pattern_and_says_it_runs_dense_on_cpu(
    model_dir: Path, sparse24_dir: Path, chats: Any
) -> None:
    engine = TorchEngine(
        str(model_dir), artifact="sparse24", artifact_dir=str(sparse24_dir), max_model_len=512
    )
    asyncio.run(engine.start())
    try:
        model = engine.model
        sizes = {"q_proj": (0, model.q_size), "k_proj": (model.q_size, model.kv_size)}
        for i, p in SPARSE_UNITS:
            layer = model.layers[i]
            if p in sizes:
                lo, n = sizes[p]
                w = layer.qkv[0].matrix()[lo : lo + n]
            elif p in ("gate_proj", "up_proj"):
                lo = 0 if p == "gate_proj" else layer.width
                w = layer.gate_up[0].matrix()[lo : lo + layer.width]
            else:
                w = (layer.o if p == "o_proj" else layer.down).matrix()
            assert is_24(w), (i, p)
        assert not is_24(model.layers[5].down.matrix())  # untouched layers stay dense
        info = engine.info()
        assert info["hardware_sparsity"] is False and "run dense" in info["sparsity_note"]
    finally:
        asyncio.run(engine.shutdown())
    reference = load_sparse24(load_model(model_dir), sparse24_dir)
    expected = [greedy(reference, ids, stop_at_eos=True) for ids in chats]
    again = TorchEngine(
        str(model_dir), artifact="sparse24", artifact_dir=str(sparse24_dir), max_model_len=512
    )
    assert _tokens(again, chats) == expected


def test_dynamic_thresholds_match_the_hooked_model(
    model_dir: Path, dense: Any, chats: Any, tmp_path: Path
) -> None:
    # thresholds on |a| of every projection's input, measured on the prompts
    inputs: dict[tuple[int, str], torch.Tensor] = {}
    hooks = [
        proj.register_forward_pre_hook(
            lambda _m, a, key=(i, kind): inputs.__setitem__(key, a[0].detach().abs().flatten())
        )
        for i, layer in enumerate(decoder_layers(dense)[:20])
        for kind, proj in (
            ("mlp", layer.mlp.down_proj),
            ("attn", layer.self_attn.o_proj),
            ("qkv", layer.self_attn.q_proj),
            ("gate_up", layer.mlp.gate_proj),
        )
    ]
    with torch.no_grad():
        dense(torch.tensor([chats[0] + chats[1]]), use_cache=False)
    for h in hooks:
        h.remove()
    # 90% of down_proj's inputs under the threshold in even layers, 40% in odd ones; half of
    # o_proj's in every layer from 5 on; 20% of gate/up's in layers 0-9, of q/k/v's in 10-19
    mlp = {
        i: float(a.quantile(0.9 if i % 2 == 0 else 0.4))
        for (i, k), a in inputs.items()
        if k == "mlp"
    }
    attn = {i: float(a.quantile(0.5)) for (i, k), a in inputs.items() if k == "attn" and i >= 5}
    gate_up = {
        i: float(a.quantile(0.2)) for (i, k), a in inputs.items() if k == "gate_up" and i < 10
    }
    qkv = {i: float(a.quantile(0.2)) for (i, k), a in inputs.items() if k == "qkv" and i >= 10}
    # distilled weights of some projections (format 2): here the dense ones, scaled
    layers = decoder_layers(dense)
    weights = {
        (3, "up_proj"): layers[3].mlp.up_proj.weight.detach() * 0.9,
        (12, "k_proj"): layers[12].self_attn.k_proj.weight.detach() * 1.1,
        (7, "o_proj"): layers[7].self_attn.o_proj.weight.detach() * 0.9,
    }
    save_dynamic(tmp_path, Dynamic(mlp, attn, {}, qkv, gate_up, weights))
    model, loaded = load_dynamic(model_dir, tmp_path)
    assert (loaded.mlp, loaded.attn, loaded.qkv, loaded.gate_up) == (mlp, attn, qkv, gate_up)
    with dynamic_cut(model, loaded):
        expected = [greedy(model, ids, stop_at_eos=True) for ids in chats]
    with dynamic_cut(dense, loaded):  # the same thresholds on the dense weights
        assert [greedy(dense, ids, stop_at_eos=True) for ids in chats] != expected
    engine = TorchEngine(
        str(model_dir), artifact="dynamic", artifact_dir=str(tmp_path), max_model_len=512
    )

    async def one_at_a_time() -> tuple[list[list[int]], dict[str, Any], dict[str, Any]]:
        await engine.start()
        try:
            got = [(await _collect(engine, s))[0] for s in _greedy_specs(chats)]
            return got, await engine.stats(), engine.info()
        finally:
            await engine.shutdown()

    # one request at a time: every decode step runs the compiled kernel (only the rows of the
    # inputs that pass are read), prefill the zeroed dense product
    got, stats, info = asyncio.run(one_at_a_time())
    assert got == expected
    assert stats["thresholds"] == len(mlp) + len(attn) + len(qkv) + len(gate_up)
    assert info["latency_mode"]
    if kernels.load() is None:  # no C compiler: the same tokens through torch ops, and said so
        assert not info["latency_kernel"] and "no C compiler" in info["latency_note"], info
        return
    assert info["latency_kernel"], info
    # the kernel saw the thresholds: a mix of 10%, 50%, 60% and 80% passing
    assert 0.1 < stats["latency_active_share"] < 0.8


def test_a_bfloat16_dynamic_artifact_is_judged_as_the_engine_runs_it(
    model_dir: Path, dense: Any, chats: Any, tmp_path: Path
) -> None:
    """A dynamic artifact served with bfloat16 weights: the engine loads them in bfloat16, and
    the compiler's view of it (weights_in, inside dynamic_cut) rounds where the engine's batch
    steps round, so it strays from float32 as far as the engine does (rounding noise is not
    bit-exact between two bfloat16 paths: one ulp upstream flips roundings downstream, so the
    two land apart at that same distance); the model's own weights come back afterwards."""
    from zerolayer.artifacts import read_dynamic
    from zerolayer.engines.torch_engine import SlotCache, load_llama

    layer = decoder_layers(dense)[4]
    th = {4: float(layer.mlp.down_proj.weight.detach().abs().mean())}
    save_dynamic(tmp_path, Dynamic(th, weight_dtype="bfloat16"))
    art = read_dynamic(tmp_path)
    assert art.weight_dtype == "bfloat16"
    before = layer.mlp.up_proj.weight.detach().clone()
    ids = chats[0] + chats[1]
    with torch.no_grad():
        with dynamic_cut(dense, Dynamic(th)):
            full = dense(torch.tensor([ids]), use_cache=False).logits[0]
        with dynamic_cut(dense, art):
            w = layer.mlp.up_proj.weight
            assert torch.equal(w, w.bfloat16().float()) and not torch.equal(w, before)
            judged = dense(torch.tensor([ids]), use_cache=False).logits[0]
    assert torch.equal(layer.mlp.up_proj.weight, before)
    model = load_llama(model_dir, artifact="dynamic", artifact_dir=tmp_path, narrow="always")
    assert model.report.weight_dtype == "bfloat16"
    cache = SlotCache(model.shape, torch.float32, model.device, 512)
    cache.ensure(1, len(ids))
    served = model.prefill(ids, 0, cache, every_position=True)  # a batch step: every position
    engine_off, judged_off = (served - full).abs().mean(), (judged - full).abs().mean()
    # rounding only the weights and inputs strays about half as far: that would not do
    assert 0.67 < judged_off / engine_off < 1.5, (float(judged_off), float(engine_off))


def test_the_output_layers_threshold_matches_the_hooked_model(
    model_dir: Path, dense: Any, chats: Any, tmp_path: Path
) -> None:
    """A threshold on the output layer's input (format 3): 30% of it zeroed, the rest of the
    model dense (with every layer thresholded too, a rounding difference at a threshold can
    change a later token, so each input kind is checked on its own against the hooked model)."""
    seen: list[torch.Tensor] = []
    hook = dense.lm_head.register_forward_pre_hook(lambda _m, a: seen.append(a[0].detach()))
    with torch.no_grad():
        dense(torch.tensor([chats[0] + chats[1]]), use_cache=False)
    hook.remove()
    head = {0: float(seen[0].abs().flatten().quantile(0.3))}
    save_dynamic(tmp_path, Dynamic(mlp={}, head=head))
    model, loaded = load_dynamic(model_dir, tmp_path)
    assert loaded.head == head
    with dynamic_cut(model, loaded):
        expected = [greedy(model, ids, stop_at_eos=True) for ids in chats]
    assert expected != [greedy(dense, ids, stop_at_eos=True) for ids in chats]
    engine = TorchEngine(
        str(model_dir), artifact="dynamic", artifact_dir=str(tmp_path), max_model_len=512
    )

    async def go() -> tuple[list[list[int]], list[list[int]], dict[str, Any]]:
        await engine.start()
        try:
            alone = [(await _collect(engine, s))[0] for s in _greedy_specs(chats)]
            stats = await engine.stats()
            together = [
                r[0]
                for r in await asyncio.gather(*(_collect(engine, s) for s in _greedy_specs(chats)))
            ]
            return alone, together, stats
        finally:
            await engine.shutdown()

    k = kernels.load()
    before = (k.active, k.total) if k is not None else (0, 0)
    alone, together, stats = asyncio.run(go())
    assert alone == expected and together == expected  # the kernel, and batches' torch ops
    assert stats["thresholds"] == 1
    if k is not None:  # 30% zeroed: about 70% of the output layer's rows read (the counters
        # are the process's, so only this engine's steps count here)
        share = (k.active - before[0]) / (k.total - before[1])
        assert 0.6 < share < 0.8, share


@pytest.fixture(scope="module")
def kernel() -> kernels.SparseInputKernel:
    """The compiled kernels; their tests skip where no C compiler can build them."""
    loaded = kernels.load()
    if loaded is None:
        pytest.skip("no C compiler here: latency mode serves through torch ops")
    return loaded


def test_the_kernel_matches_the_zeroed_dense_product(kernel: kernels.SparseInputKernel) -> None:
    gen = torch.Generator().manual_seed(0)
    for rows, cols in ((576, 3072), (1536, 576), (7, 5)):
        w = torch.randn(cols, rows, generator=gen)
        x = torch.randn(1, rows, generator=gen)
        for t in (0.0, 0.5, 1.5, 10.0):
            expected = torch.where(x.abs() <= t, 0.0, x) @ w.t()
            got = kernel(w.t().contiguous(), x, t)
            assert torch.allclose(got, expected, atol=1e-4), (rows, cols, t)
        # bfloat16 weights: widened as read, the same sum as over the rounded float32 weights
        wb = w.t().contiguous().bfloat16()
        for t in (0.0, 0.5):
            expected = torch.where(x.abs() <= t, 0.0, x) @ wb.float()
            got = kernel(wb, x, t)
            assert torch.allclose(got, expected, atol=1e-4), ("bf16", rows, cols, t)
    with pytest.raises(ValueError, match="do not fit"):
        kernel(torch.zeros(4, 3), torch.zeros(1, 5), 0.1)
    with pytest.raises(ValueError, match="float32"):
        kernel(torch.zeros(4, 3), torch.zeros(1, 4, dtype=torch.float64), 0.1)


def test_a_failing_model_errors_every_request_instead_of_hanging(
    model_dir: Path, chats: Any
) -> None:
    async def go() -> None:
        engine = TorchEngine(str(model_dir), max_model_len=512)
        await engine.start()

        def broken(*_: Any) -> None:
            raise RuntimeError("kernel exploded")

        engine.model.decode = broken
        try:
            results = await asyncio.wait_for(
                asyncio.gather(
                    *(_collect(engine, s) for s in _greedy_specs(chats)), return_exceptions=True
                ),
                timeout=60,
            )
            assert all(isinstance(r, RuntimeError) for r in results)
            with pytest.raises(RuntimeError, match="kernel exploded"):
                await engine.check_health()
            with pytest.raises(RuntimeError, match="engine loop stopped"):
                await _collect(engine, _greedy_specs(chats)[0])
        finally:
            await engine.shutdown()

    asyncio.run(go())


def test_the_model_loads_and_steps_on_one_thread_and_a_failed_load_raises(
    model_dir: Path, chats: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every torch op of an engine runs on its worker thread (one OpenMP thread pool: a second
    one makes each parallel region wait for a sleeping thread on a machine this small)."""
    from zerolayer.engines.torch_engine import engine as engine_module

    loads: list[int] = []
    decodes: set[int] = set()
    real_load = engine_module.load_llama

    def load(*args: Any, **kwargs: Any) -> Any:
        loads.append(threading.get_ident())
        model = real_load(*args, **kwargs)
        real_decode = model.decode

        def decode(*a: Any) -> Any:
            decodes.add(threading.get_ident())
            return real_decode(*a)

        model.decode = decode
        return model

    monkeypatch.setattr(engine_module, "load_llama", load)

    async def go() -> None:
        engine = TorchEngine(str(model_dir), max_model_len=512)
        await engine.start()
        try:
            await _collect(engine, _greedy_specs(chats, 4)[0])
        finally:
            await engine.shutdown()
        broken = TorchEngine(str(model_dir / "missing"), max_model_len=512)
        with pytest.raises(OSError):
            await asyncio.wait_for(broken.start(), timeout=60)
        with pytest.raises(RuntimeError, match="not started"):
            await _collect(broken, _greedy_specs(chats, 4)[0])

    asyncio.run(go())
    assert len(loads) == 2  # the working engine's load and the broken one's
    assert decodes == {loads[0]} and threading.get_ident() not in loads


def test_the_compiled_decode_step_matches_the_torch_ops(
    model_dir: Path, chats: Any, kernel: kernels.SparseInputKernel
) -> None:
    from zerolayer.engines.torch_engine import SlotCache, load_llama

    model = load_llama(model_dir)
    assert model.report.latency_kernel and model._layers_c is not None
    compiled = model._layers_c

    def steps(use_compiled: bool) -> tuple[list[int], torch.Tensor]:
        model._layers_c = compiled if use_compiled else None
        cache = SlotCache(model.shape, torch.float32, model.device, 512)
        cache.ensure(1, len(chats[0]) + 1)  # too small for the steps: it grows on the way
        logits = model.prefill(chats[0], 0, cache)
        tokens, seen = [], []
        for i in range(12):
            tokens.append(int(logits.argmax()))
            cache.ensure(1, len(chats[0]) + i + 1)
            logits = model.decode([tokens[-1]], [len(chats[0]) + i], cache)[0]
            seen.append(logits)
        return tokens, torch.stack(seen)

    fast_tokens, fast = steps(True)
    slow_tokens, slow = steps(False)
    model._layers_c = compiled
    assert fast_tokens == slow_tokens
    assert torch.allclose(fast, slow, atol=1e-3, rtol=0), float((fast - slow).abs().max())


def test_batches_through_onednn_match_torchs_matmul(
    model_dir: Path, chats: Any, kernel: kernels.SparseInputKernel, tmp_path: Path
) -> None:
    """Products of several rows run through oneDNN over output-major copies of the input-major
    weights (the output layer thresholded too): the same greedy tokens and logits within float
    tolerance as torch's matmul over the input-major weights, for a batch step and a prefill;
    the copies are counted and the single-stream step still reads the input-major weights."""
    from zerolayer.engines.torch_engine import SlotCache, load_llama
    from zerolayer.engines.torch_engine.model import Prompt

    save_dynamic(tmp_path, Dynamic(mlp={3: 0.05}, head={0: 0.1}))
    on = load_llama(model_dir, artifact="dynamic", artifact_dir=tmp_path)
    off = load_llama(model_dir, artifact="dynamic", artifact_dir=tmp_path, onednn=False)
    if not on.onednn:
        pytest.skip("no oneDNN in this torch build")
    assert not off.onednn and off.report.batch_copy_bytes == 0
    engine = TorchEngine(str(model_dir), onednn=False)  # a tier's engine_args turn it off
    engine._load()
    assert engine.model is not None and not engine.model.onednn
    proj = on.layers[0].gate_up[0]
    assert proj.batch is not None and proj.batch.shape == proj.weight.t().shape
    assert on.head is not None and on.head.batch is not None
    projs = [p for layer in on.layers for p in (*layer.qkv, *layer.gate_up, layer.o, layer.down)]
    copies = sum(p.weight.numel() * 4 for p in projs) + on.head.weight.numel() * 4
    assert on.report.batch_copy_bytes == copies
    prompts = [chats[0], chats[1], chats[1] + chats[0]]

    def run(model: Any) -> tuple[list[list[int]], torch.Tensor]:
        cache = SlotCache(model.shape, torch.float32, model.device, 512)
        cache.ensure(3, 512)
        logits = model.prefill_many([Prompt(ids, n) for n, ids in enumerate(prompts)], cache)
        positions = [len(ids) for ids in prompts]
        tokens: list[list[int]] = [[] for _ in range(3)]
        seen = [logits]
        for i in range(8):
            for row, t in zip(tokens, logits.argmax(-1).tolist(), strict=True):
                row.append(t)
            logits = model.decode([row[-1] for row in tokens], [p + i for p in positions], cache)
            seen.append(logits)
        return tokens, torch.stack(seen)

    fast_tokens, fast = run(on)
    slow_tokens, slow = run(off)
    assert fast_tokens == slow_tokens
    assert torch.allclose(fast, slow, atol=1e-3, rtol=0), float((fast - slow).abs().max())


def test_bfloat16_weights_keep_the_tokens_in_both_decode_paths(
    model_dir: Path, chats: Any, kernel: kernels.SparseInputKernel
) -> None:
    """Projections and the output layer in bfloat16 under float32 activations: the compiled
    single-stream step and the torch ops of a batch step agree, and greedy tokens stay the
    float32 model's over a short answer (the weights are half the bytes)."""
    from zerolayer.engines.torch_engine import SlotCache, load_llama

    full = load_llama(model_dir)
    half = load_llama(model_dir, weight_dtype=torch.bfloat16, narrow="always")
    assert half.report.weight_dtype == "bfloat16" and half._layers_c is not None
    assert half.layers[0].down.weight.dtype == torch.bfloat16
    assert half.head is not None and half.head.weight.dtype == torch.bfloat16
    assert half.store.resident_bytes < 0.6 * full.store.resident_bytes

    def steps(model: Any, compiled: bool, prompt: list[int]) -> tuple[list[int], torch.Tensor]:
        keep = model._layers_c
        model._layers_c = keep if compiled else None
        cache = SlotCache(model.shape, torch.float32, model.device, 512)
        cache.ensure(1, len(prompt) + 8)
        logits = model.prefill(prompt, 0, cache)
        tokens, seen = [], []
        for i in range(8):
            tokens.append(int(logits.argmax()))
            logits = model.decode([tokens[-1]], [len(prompt) + i], cache)[0]
            seen.append(logits)
        model._layers_c = keep
        return tokens, torch.stack(seen)

    for prompt in chats[:2]:
        fast_tokens, fast = steps(half, True, prompt)
        slow_tokens, slow = steps(half, False, prompt)
        assert fast_tokens == slow_tokens
        assert torch.allclose(fast, slow, atol=0.5, rtol=0), float((fast - slow).abs().max())
        assert fast_tokens == steps(full, True, prompt)[0]


def test_bfloat16_weights_only_where_the_cpu_multiplies_in_bfloat16(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPU without AVX-512 BF16 or AMX emulates bfloat16 products (tens of times slower than
    float32): there the artifact's bfloat16 weights are served in float32 and the engine says
    why; with either unit they stay bfloat16."""
    from zerolayer.engines.torch_engine import load_llama

    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    for unit in probes:
        for probe in probes:
            monkeypatch.setattr(torch.cpu, probe, lambda: False, raising=False)
        without = load_llama(model_dir, weight_dtype=torch.bfloat16)
        assert without.report.weight_dtype == "float32"
        assert without.layers[0].down.weight.dtype == torch.float32 and without.head is None
        assert "no bfloat16 products" in without.report.weight_note
        monkeypatch.setattr(torch.cpu, unit, lambda: True, raising=False)
        native_model = load_llama(model_dir, weight_dtype=torch.bfloat16)
        assert native_model.report.weight_dtype == "bfloat16", unit
        assert native_model.layers[0].down.weight.dtype == torch.bfloat16
        assert native_model.report.weight_note == ""


def test_streamed_text_is_the_whole_decode(model_dir: Path) -> None:
    from transformers import AutoTokenizer
    from zerolayer.engines.torch_engine.engine import _decode_window, _Request

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    for text in (
        " Hello, world! 世界 🎉 naïve café — ok\n  two  spaces\tand a tab",
        "🎉🎉🎉",
        "def f(x):\n    return x ** 2  # ÷ ≤ ∑",
    ):
        ids = tok.encode(text, add_special_tokens=False)
        req = _Request(SamplingSpec("t", [1], len(ids)), asyncio.new_event_loop(), asyncio.Queue())
        pieces = []
        for n, t in enumerate(ids, 1):
            req.output.append(t)
            piece = _decode_window(tok, req, flush=n == len(ids))
            assert "\ufffd" not in piece, (text, n)  # half a character is never sent
            pieces.append(piece)
        assert "".join(pieces) == tok.decode(ids), text
        req.loop.close()


def test_without_a_compiler_the_tier_serves_through_torch_ops_and_says_so(
    model_dir: Path, chats: Any
) -> None:
    from zerolayer.engines.torch_engine import Compiler, load_llama

    missing = Compiler(cc="/nonexistent/cc")
    assert kernels.load(missing) is None
    model = load_llama(model_dir, compiler=missing)
    assert model.kernel is None and model._layers_c is None
    assert not model.report.latency_kernel and "no C compiler" in model.report.latency_note
    engine = TorchEngine(str(model_dir), max_model_len=512, compiler=missing)

    async def run() -> tuple[list[list[int]], dict[str, Any]]:
        await engine.start()
        try:
            return [(await _collect(engine, s))[0] for s in _greedy_specs(chats[:1])], engine.info()
        finally:
            await engine.shutdown()

    got, info = asyncio.run(run())
    assert got == [greedy(load_model(model_dir), ids, stop_at_eos=True) for ids in chats[:1]]
    assert not info["latency_kernel"] and "no C compiler" in info["latency_note"]


def test_text_that_may_start_a_stop_string_is_held_back() -> None:
    from zerolayer.engines.torch_engine.engine import _stop_prefix

    assert _stop_prefix(" Paris", ["s."]) == 1  # "s" may be the start of "s."
    assert _stop_prefix(" Pari", ["s."]) == 0
    assert _stop_prefix("1, 2, 3, 4,", [", 5", "xyz"]) == 1
    assert _stop_prefix("1, 2, 3, 4, ", [", 5"]) == 2
    assert _stop_prefix("abc", []) == 0


def test_the_prefix_cache_skips_a_known_prefix_and_keeps_the_tokens(
    model_dir: Path, prompts: Any
) -> None:
    """A second turn that begins with the first turn's prompt and answer is prefilled from the
    first block it lacks and answers as an engine without a cache does; another tenant's salt
    finds nothing; the cache stays within its limit."""
    system = "You are a careful assistant. Answer in full sentences and explain your reasoning."
    first = [
        {"role": "system", "content": system},
        {"role": "user", "content": "What is the capital of France, and why is it famous?"},
    ]

    async def turns(engine: TorchEngine) -> list[tuple[int | None, list[int]]]:
        await engine.start()
        try:
            out = []
            one = prompts.chat(first)
            deltas = [
                d async for d in engine.generate(SamplingSpec("a", one, 24, 0.0, cache_salt="t1"))
            ]
            answer = "".join(d.text for d in deltas)
            out.append((deltas[0].cached_tokens, [t for d in deltas for t in d.token_ids]))
            two = prompts.chat(
                [
                    *first,
                    {"role": "assistant", "content": answer},
                    {"role": "user", "content": "And Spain?"},
                ]
            )
            for salt in ("t1", "t2"):
                deltas = [
                    d
                    async for d in engine.generate(SamplingSpec("b", two, 24, 0.0, cache_salt=salt))
                ]
                out.append((deltas[0].cached_tokens, [t for d in deltas for t in d.token_ids]))
            return out
        finally:
            await engine.shutdown()

    cached = TorchEngine(str(model_dir), max_model_len=512)
    plain = TorchEngine(str(model_dir), max_model_len=512, prefix_cache_gib=0)
    (c1, a1), (c2, a2), (c3, a3) = asyncio.run(turns(cached))
    (p1, b1), (p2, b2), _ = asyncio.run(turns(plain))
    assert c1 == 0 and p1 == 0 and p2 == 0
    two_len = len(prompts.chat([*first, {"role": "user", "content": "x"}]))  # a lower bound
    # the first turn's prompt and answer, whole blocks of them, came from the cache
    assert c2 is not None and c2 >= len(prompts.chat(first)) // 16 * 16 and c2 % 16 == 0
    assert c2 >= two_len // 2
    assert c3 == 0  # another tenant's salt: nothing shared
    assert (a1, a2, a3) == (b1, b2, b2)
    assert cached.counters["prefix_hits"] == c2
    assert plain.counters["prefix_hits"] == 0


def test_prompts_prefilled_in_one_pass_equal_each_prefilled_alone(
    model_dir: Path, chats: Any
) -> None:
    """prefill_many: the logits of each prompt's last position and the keys and values it
    writes into its slot are those of prefill() run on it alone, a prompt after a prefix hit
    (its first tokens' keys and values in the slot already) included."""
    from zerolayer.engines.torch_engine.cache import SlotCache
    from zerolayer.engines.torch_engine.model import Prompt, load_llama

    model = load_llama(model_dir, max_len=256)
    layers = range(model.shape.layers)
    third = list(range(300, 340))
    alone = SlotCache(model.shape, torch.float32, torch.device("cpu"), 256)
    alone.ensure(3, 256)
    singles = [model.prefill(c, j, alone) for j, c in enumerate([chats[0], chats[1]])]
    singles.append(model.prefill(third, 2, alone))
    joint = SlotCache(model.shape, torch.float32, torch.device("cpu"), 256)
    joint.ensure(3, 256)
    # slot 2 holds the first 16 tokens of the third prompt already (as a prefix hit leaves it)
    for i in layers:
        joint.k[i][2, :, :16] = alone.k[i][2, :, :16]
        joint.v[i][2, :, :16] = alone.v[i][2, :, :16]
    prompts = [Prompt(chats[0], 0), Prompt(chats[1], 1), Prompt(third[16:], 2, start=16)]
    many = model.prefill_many(prompts, joint)
    assert many.shape == (3, model.shape.vocab)
    for j, single in enumerate(singles):
        assert torch.allclose(many[j], single, atol=1e-4), float((many[j] - single).abs().max())
        assert int(many[j].argmax()) == int(single.argmax())
    # float32 rounding only: another BLAS blocking (an AVX2 CPU's) puts keys of magnitude ~20
    # up to 2.4e-5 apart; a wrong position or slot would put them units apart
    for j, p in enumerate(prompts):
        assert all(
            torch.allclose(joint.k[i][j, :, : p.end], alone.k[i][j, :, : p.end], atol=1e-4)
            and torch.allclose(joint.v[i][j, :, : p.end], alone.v[i][j, :, : p.end], atol=1e-4)
            for i in layers
        )


def test_a_decode_step_over_some_slots_equals_those_rows_of_the_whole_step(
    model_dir: Path, chats: Any
) -> None:
    """decode(..., slots): the rows it runs (any slots, not only 0..n-1) give the logits and
    write the keys and values that a step over every slot gives those rows; the other slots
    are left as they were."""
    from zerolayer.engines.torch_engine.cache import SlotCache
    from zerolayer.engines.torch_engine.model import load_llama

    model = load_llama(model_dir, max_len=256)
    prompts = [chats[0], chats[1], list(range(300, 340))]
    caches = []
    for _ in range(2):
        cache = SlotCache(model.shape, torch.float32, torch.device("cpu"), 256)
        cache.ensure(3, 256)
        firsts = [int(model.prefill(p, j, cache).argmax()) for j, p in enumerate(prompts)]
        caches.append(cache)
    whole, part = caches
    positions = [len(p) for p in prompts]
    every = model.decode(firsts, positions, whole)
    before = [part.k[i][1].clone() for i in range(model.shape.layers)]
    some = model.decode([firsts[0], firsts[2]], [positions[0], positions[2]], part, slots=[0, 2])
    assert some.shape == (2, model.shape.vocab)
    for row, j in enumerate([0, 2]):
        assert torch.allclose(some[row], every[j], atol=1e-4)
        end = positions[j] + 1
        assert all(
            torch.allclose(part.k[i][j, :, :end], whole.k[i][j, :, :end], atol=1e-5)
            for i in range(model.shape.layers)
        )
    assert all(torch.equal(part.k[i][1], before[i]) for i in range(model.shape.layers))
    # one row in a slot other than 0 (the compiled single-row step serves slot 0 only)
    one = model.decode([firsts[1]], [positions[1]], part, slots=[1])
    assert torch.allclose(one[0], every[1], atol=1e-4)


def test_requests_admitted_together_share_a_pass_and_a_common_prefix_waits_for_it(
    model_dir: Path, prompts: Any
) -> None:
    """Requests that arrive together are prefilled in one pass and answer as they do alone;
    one whose prompt begins as another's of that pass waits a step and reads the shared blocks
    from the prefix cache instead of computing them again."""
    system = "You are a careful assistant. Answer in full sentences and explain your reasoning."
    asks = [
        prompts.chat([{"role": "system", "content": system}, {"role": "user", "content": q}])
        for q in ("Name a river.", "Name a lake.")
    ]
    asks.append(prompts.chat([{"role": "user", "content": "What is the capital of Italy?"}]))
    specs = [SamplingSpec(f"r{i}", ids, 8, 0.0, cache_salt="t") for i, ids in enumerate(asks)]

    async def together(engine: TorchEngine) -> list[tuple[list[int], int | None]]:
        await engine.start()
        try:

            async def one(spec: SamplingSpec) -> tuple[list[int], int | None]:
                got = [d async for d in engine.generate(spec)]
                return [t for d in got for t in d.token_ids], got[0].cached_tokens

            return list(await asyncio.gather(*(one(s) for s in specs)))
        finally:
            await engine.shutdown()

    engine = TorchEngine(str(model_dir), max_model_len=512)
    got = asyncio.run(together(engine))
    alone = [r[0] for r in _run(TorchEngine(str(model_dir), max_model_len=512), specs[:1])]
    alone += [r[0] for r in _run(TorchEngine(str(model_dir), max_model_len=512), specs[1:2])]
    alone += [r[0] for r in _run(TorchEngine(str(model_dir), max_model_len=512), specs[2:])]
    assert [g[0] for g in got] == alone
    shared = next(j for j, (a, b) in enumerate(zip(asks[0], asks[1], strict=False)) if a != b)
    assert got[0][1] == 0 and got[2][1] == 0
    assert got[1][1] == shared // 16 * 16 > 0  # the whole blocks of the system prompt
    # the first and third ran in one pass, the second a step later
    assert engine.counters["prefills"] == 3 and engine.counters["prefill_passes"] == 2


def test_the_prefix_cache_evicts_least_recently_used_within_its_limit(model_dir: Path) -> None:
    from zerolayer.engines.torch_engine.cache import SlotCache
    from zerolayer.engines.torch_engine.model import load_llama
    from zerolayer.engines.torch_engine.prefix import PrefixCache, block_names

    model = load_llama(model_dir, max_len=256)
    cache = SlotCache(model.shape, torch.float32, torch.device("cpu"), 256)
    cache.ensure(1, 256)
    probe = PrefixCache(model.shape, torch.float32, torch.device("cpu"), 1)
    limit = 5 * probe.block_bytes
    prefix = PrefixCache(model.shape, torch.float32, torch.device("cpu"), limit)
    a, b = list(range(100, 164)), list(range(200, 264))  # four blocks each
    for tokens in (a, b):
        model.prefill(tokens, 0, cache)
        prefix.save(block_names(tokens, "t"), cache, 0)
        assert prefix.held_bytes <= limit
    # b's chain is whole; a kept its first block (evicted from its end) and nothing after it
    assert prefix.match(block_names(b, "t"), 4) == 4
    assert prefix.match(block_names(a, "t"), 4) == 1
    # a hit's keys and values are the ones a full prefill writes
    full = [cache.k[i][0, :, :64].clone() for i in range(model.shape.layers)]
    other = SlotCache(model.shape, torch.float32, torch.device("cpu"), 256)
    other.ensure(1, 256)
    prefix.load(block_names(b, "t"), other, 0)
    assert all(torch.equal(other.k[i][0, :, :64], full[i]) for i in range(model.shape.layers))
    # the rest of a prompt run after a hit gives the logits of a whole prefill
    longer = b + [7, 8, 9]
    whole = model.prefill(longer, 0, cache)
    rest = model.prefill(longer[64:], 0, other, start=64)
    assert torch.allclose(whole, rest, atol=1e-4)


def test_an_interactive_request_preempts_batch_rows_that_resume_unchanged(
    model_dir: Path, prompts: Any
) -> None:
    """Batch requests (priority 1) may fill every slot; an interactive request arriving then
    starts at once, the batch rows past batch_rows_busy are pre-empted, and they resume from
    the same token: each batch answer is the one it gives run alone."""
    ids = prompts.chat([{"role": "user", "content": "Count from 1 to 50."}])

    async def go() -> tuple[dict[str, list[int]], dict[str, float], list[int], int, int]:
        engine = TorchEngine(
            str(model_dir), max_model_len=512, max_num_seqs=4, batch_rows_busy=1, busy_hold_s=0.2
        )
        await engine.start()
        try:
            waits: dict[str, float] = {}
            tokens: dict[str, list[int]] = {}

            async def one(name: str, n: int, priority: int) -> None:
                spec = SamplingSpec(name, ids, n, 0.0, priority=priority)
                tokens[name] = []
                async for d in engine.generate(spec):
                    tokens[name] += d.token_ids
                    if d.queue_s is not None:
                        waits[name] = d.queue_s

            batch = [asyncio.ensure_future(one(f"b{i}", 40, 1)) for i in range(5)]
            while len(waits) < 4 or min(len(tokens[f"b{i}"]) for i in range(4)) < 5:
                await asyncio.sleep(0.01)
            assert len(waits) == 4  # every slot holds a batch request
            await one("live", 4, 0)  # starts at once: three batch rows leave
            preempted = engine.counters["preempted"]
            assert engine.counters["rows_sat_out"] >= 1  # the step that prefilled it
            await asyncio.gather(*batch)
            await one("alone", 40, 1)
            return tokens, waits, tokens["alone"], preempted, engine._swapped
        finally:
            await engine.shutdown()

    tokens, waits, alone, preempted, swapped = asyncio.run(go())
    assert waits["live"] < 0.5, waits
    assert preempted == 3, preempted
    assert swapped == 0  # every pre-empted row's host copy was given back
    assert len(alone) == 40
    assert all(tokens[f"b{i}"] == alone for i in range(5)), tokens


def test_batch_requests_start_into_few_rows_while_interactive_ones_run(
    model_dir: Path, prompts: Any
) -> None:
    """While an interactive request runs, batch requests start into at most batch_rows_busy
    rows; once it is done (and busy_hold_s past) they fill every slot again."""
    ids = prompts.chat([{"role": "user", "content": "Count from 1 to 50."}])

    async def go() -> tuple[int, int]:
        engine = TorchEngine(
            str(model_dir), max_model_len=512, max_num_seqs=8, batch_rows_busy=2, busy_hold_s=0.2
        )
        await engine.start()
        try:
            started: list[str] = []
            seen: list[int] = []  # batch requests started, at the interactive one's 20th token

            async def one(name: str, n: int, priority: int) -> None:
                spec = SamplingSpec(name, ids, n, 0.0, priority=priority)
                k = 0
                async for d in engine.generate(spec):
                    if d.queue_s is not None:
                        started.append(name)
                    k += len(d.token_ids)
                    if name == "live" and k >= 20 and not seen:
                        seen.append(len(started) - 1)

            live = asyncio.ensure_future(one("live", 30, 0))
            while "live" not in started:
                await asyncio.sleep(0.01)
            batch = [asyncio.ensure_future(one(f"b{i}", 60, 1)) for i in range(8)]
            await live
            while len(started) < 9:  # then all 8 run at once
                await asyncio.sleep(0.01)
            await asyncio.gather(*batch)
            return seen[0], len(started) - 1
        finally:
            await engine.shutdown()

    during, after = asyncio.run(go())
    assert during == 2, during  # none of them ends within 60 tokens: two rows while it ran
    assert after == 8


def test_a_long_prompt_is_prefilled_in_parts_while_other_streams_go_on(
    model_dir: Path, prompts: Any
) -> None:
    """Chunked prefill: with prefill_tokens_busy 32 a prompt of about 200 tokens that comes while
    another stream decodes is prefilled over several steps, each of which also decodes that
    stream, so it never waits for the whole prompt; the first prompt, alone, is prefilled whole
    (prefill_tokens); both answers are the ones each gives alone."""
    long_text = " ".join(f"Item {i} is a fruit or a vegetable." for i in range(20))
    long_ids = prompts.chat([{"role": "user", "content": long_text + " Which item is first?"}])
    short_ids = prompts.chat([{"role": "user", "content": "Count from 1 to 50."}])
    parts = -(-len(long_ids) // 32)
    assert parts >= 5, len(long_ids)

    async def go() -> tuple[list[int], list[int], int, dict[str, int]]:
        engine = TorchEngine(
            str(model_dir), max_model_len=512, prefill_tokens=1024, prefill_tokens_busy=32
        )
        await engine.start()
        try:
            short: list[int] = []
            seen: list[int] = []

            async def stream() -> None:
                async for d in engine.generate(SamplingSpec("s", short_ids, 60, 0.0)):
                    short.extend(d.token_ids)

            running = asyncio.ensure_future(stream())
            while len(short) < 3:
                await asyncio.sleep(0.005)
            before = len(short)
            long_tokens: list[int] = []
            async for d in engine.generate(SamplingSpec("l", long_ids, 8, 0.0)):
                if not long_tokens:
                    seen.append(len(short) - before)  # the short stream's tokens meanwhile
                long_tokens.extend(d.token_ids)
            await running
            return short, long_tokens, seen[0], dict(engine.counters)
        finally:
            await engine.shutdown()

    short, long_tokens, meanwhile, counters = asyncio.run(go())
    # every part of the long prompt but its last (the short one's is whole); it starts after
    # the blocks it shares with the short one's prompt (the chat template's system prompt)
    long_parts = -(-(len(long_ids) - counters["prefix_hits"]) // 32)
    assert counters["prefill_chunks"] == long_parts - 1, (counters, parts)
    assert counters["prefills"] == 2
    assert meanwhile >= long_parts - 1, (meanwhile, long_parts)
    whole = _run(TorchEngine(str(model_dir), max_model_len=512), _greedy_specs([long_ids], 8))
    assert long_tokens == whole[0][0]
    alone = _run(TorchEngine(str(model_dir), max_model_len=512), _greedy_specs([short_ids], 60))
    assert short == alone[0][0]
