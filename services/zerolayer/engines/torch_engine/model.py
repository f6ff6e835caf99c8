"""A compact Llama decoder in plain torch: the model inside zerolayer's own engine.

It serves a Hugging Face Llama checkpoint (SmolLM2 and kin), or one with per-layer MLP widths
(pruned tier checkpoints), with a tier artifact applied at load (checkpoint.py):
  masked    the kept MLP channels only (gate/up rows and down columns of removed ones are dropped,
            so the computed function and cost equal the pruned checkpoint's)
  dynamic   per-token thresholds on the inputs of down_proj, o_proj, q/k/v, gate/up and the
            output layer, with the distilled weights; a single stream's decode step (latency
            mode) runs compiled and reads only the weight rows of the inputs that pass
            (kernels.py)
  sparse24  2:4 weights; on an NVIDIA GPU with compute capability >= 8.0 they also run on the
            sparse tensor cores for steps of at least `sparse_min_tokens` tokens
Layers beyond a device memory budget stay in host memory (pinned when CUDA is there) and are
copied to the device one layer ahead of use (CPU offload).

Entry points: prefill(tokens, slot) for one new sequence, prefill_many(prompts) for several in
one pass, decode(tokens, positions) for one token of each active sequence. All write keys and
values into a SlotCache, one slot per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from zerolayer.engines.torch_engine import kernels
from zerolayer.engines.torch_engine.cache import SlotCache
from zerolayer.engines.torch_engine.checkpoint import Shape, read_tier
from zerolayer.engines.torch_engine.kernels import SparseInputKernel
from zerolayer.engines.torch_engine.probe import Probe
from zerolayer.engines.torch_engine.weights import (
    Layer,
    LayerStore,
    Proj,
    dtype_name,
    narrow_products,
    onednn_available,
    onednn_linear,
    sparse_hw_available,
)

__all__ = ["LoadReport", "LlamaModel", "Prompt", "load_llama"]


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    if x.dtype == torch.float32:  # one fused op, the same result
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def _apply(p: Proj, x: torch.Tensor, probe: Probe | None) -> torch.Tensor:
    """p(x), its input counted by a sampled pass's probe."""
    if probe is not None:
        probe.inputs(p.threshold, x)
    return p(x)


def _seen(start: int, end: int, device: torch.device) -> torch.Tensor:
    """Which keys (0..end) each query of positions start..end sees: those up to it."""
    keys = torch.arange(end, device=device)
    return keys[None, :] <= keys[start:, None]


def _split(
    projs: list[Proj], x: torch.Tensor, sizes: list[int], probe: Probe | None
) -> list[torch.Tensor]:
    if len(projs) == 1:
        return list(_apply(projs[0], x, probe).split(sizes, dim=-1))
    return [_apply(p, x, probe) for p in projs]


@dataclass(slots=True)
class Prompt:
    """A new sequence's prompt tokens for prefill, into `slot`; its first `start` tokens' keys
    and values are there already (a prefix cache hit) and `tokens` are the rest."""

    tokens: list[int]
    slot: int
    start: int = 0

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)


@dataclass
class LoadReport:
    """What the load did, for the tier card: artifact, sparsity, offload."""

    artifact: str = "dense"
    device: str = "cpu"
    dtype: str = "float32"
    weight_dtype: str = "float32"
    weight_note: str = ""
    mlp_widths: list[int] = field(default_factory=list)
    sparse24_units: int = 0
    sparse24_hardware: bool = False
    sparse24_note: str = ""
    thresholds: int = 0
    latency_kernel: bool = False
    latency_note: str = ""
    offloaded_layers: int = 0
    resident_bytes: int = 0
    offloaded_bytes: int = 0
    batch_copy_bytes: int = 0  # output-major copies of input-major weights, for batches

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class LlamaModel:
    """Weights on a device (or offloaded), rotary tables, and the two forward passes.

    `thresholds` maps (layer, input) to latency mode's |x| threshold on that projection input,
    by the input kinds of zerolayer.artifacts (INPUT_KINDS): mlp (down_proj's), attn (o_proj's),
    qkv, gate_up, and head (the output layer's, layer 0)."""

    def __init__(
        self,
        shape: Shape,
        state: dict[str, torch.Tensor],
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        weight_dtype: torch.dtype | None = None,
        narrow: Literal["native", "always"] = "native",
        max_len: int = 2048,
        thresholds: dict[tuple[int, str], float] | None = None,
        sparse_units: set[tuple[int, str]] | None = None,
        sparse_min_tokens: int = 256,
        device_budget_bytes: int | None = None,
        offload_layers: int | None = None,
        report: LoadReport | None = None,
        compiler: kernels.Compiler | None = None,
        onednn: bool = True,
    ):
        """`onednn`: float32 products of several rows on a CPU through oneDNN, over an
        output-major copy of each input-major weight (those the compiled single-stream step
        reads; the copy costs their memory again); off, torch's matmul over the input-major
        weights (about 1.5x slower decode steps of 8-32 rows on a 2-core CPU)."""
        self.shape = shape
        self.device = torch.device(device)
        self.dtype = dtype
        self.max_len = max_len
        self.report = report or LoadReport()
        self.report.device, self.report.dtype = str(self.device), dtype_name(dtype)
        # the projections' and the output layer's weights (embeddings, norms, the KV cache and
        # the residual stream stay in dtype); narrower than dtype only where the device computes
        # products in them at its own rate (narrow="native"), or always (narrow="always": tests
        # of the narrow path on any machine)
        wdtype = weight_dtype or dtype
        why = narrow_products(self.device, wdtype) if wdtype != dtype else ""
        if why and narrow != "always":
            self.report.weight_note = (
                f"{dtype_name(wdtype)} weights served in {dtype_name(dtype)}: {why}"
            )
            wdtype = dtype
        self.report.weight_dtype = dtype_name(wdtype)
        self.report.mlp_widths = list(shape.widths)
        thresholds = thresholds or {}
        sparse_units = sparse_units or set()
        self.kernel = self._kernel(bool(thresholds), compiler)
        # float32 products of several rows through oneDNN where it runs (a CPU)
        self.onednn = onednn and wdtype == dtype and onednn_available(self.device, dtype)
        copies = self.onednn and self.kernel is not None
        hw = bool(sparse_units) and sparse_hw_available(self.device)
        self.report.sparse24_units = len(sparse_units)
        self.report.sparse24_hardware = hw
        if sparse_units and not hw:
            self.report.sparse24_note = (
                f"no 2:4 sparse tensor cores on {self.device.type}: the 2:4 weights run dense"
            )
        elif hw:
            self.report.sparse24_note = (
                f"2:4 weights on sparse tensor cores for steps of >= {sparse_min_tokens} tokens"
            )

        def dev(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=self.device, dtype=dtype).contiguous()

        p = "model."
        self.embed = dev(state[p + "embed_tokens.weight"])
        self.norm = dev(state[p + "norm.weight"])
        head = state.get("lm_head.weight")
        self.lm_head = self.embed if shape.tied or head is None else dev(head)
        # latency mode on the output layer's input: its single-token product reads only the rows
        # of the inputs that pass, so the layer is kept input-major (a tied embedding becomes a
        # view of the same tensor: its rows are gathered, no second copy, unless oneDNN's batches
        # keep the output-major one too); the same when the layer's weights are kept in a
        # narrower precision than the activations
        self.head: Proj | None = None  # the output layer as a thresholded or narrower projection
        head_threshold = thresholds.get((0, "head"))
        if head_threshold is not None or wdtype != dtype:
            transposed = self.kernel is not None  # the kernel reads the layer input-major
            stored = (self.lm_head.t() if transposed else self.lm_head).to(wdtype).contiguous()
            view = stored.t() if transposed else stored  # out x in, as the embedding reads it
            batch = self.lm_head if self.onednn else None  # out x in: oneDNN reads it so
            if batch is not None and transposed:
                self.report.batch_copy_bytes += batch.numel() * batch.element_size()
            elif self.lm_head is self.embed:
                self.embed = view
            self.lm_head = view
            self.head = Proj(stored, threshold=head_threshold, kernel=self.kernel, batch=batch)
        host_layers = []
        for i in range(shape.layers):
            q = f"{p}layers.{i}."

            def group(
                names: list[str], prefix: str, key: str, i: int = i, q: str = q
            ) -> list[Proj]:
                ws = [state[f"{q}{prefix}.{n}.weight"].to(wdtype) for n in names]
                if any((i, n) in sparse_units for n in names) and hw:
                    return [self._sparse(w, sparse_min_tokens) for w in ws]
                w = ws[0] if len(ws) == 1 else torch.cat(ws)
                t = thresholds.get((i, key))
                w = w.contiguous()
                if self.kernel is not None:
                    batch = w if copies else None
                    if batch is not None:
                        self.report.batch_copy_bytes += w.numel() * w.element_size()
                    return [Proj(w.t().contiguous(), threshold=t, kernel=self.kernel, batch=batch)]
                return [Proj(w, threshold=t, batch=w if self.onednn else None)]

            host_layers.append(
                Layer(
                    in_norm=state[f"{q}input_layernorm.weight"].to(dtype),
                    post_norm=state[f"{q}post_attention_layernorm.weight"].to(dtype),
                    qkv=group(["q_proj", "k_proj", "v_proj"], "self_attn", "qkv"),
                    o=group(["o_proj"], "self_attn", "attn")[0],
                    gate_up=group(["gate_proj", "up_proj"], "mlp", "gate_up"),
                    down=group(["down_proj"], "mlp", "mlp")[0],
                    width=shape.widths[i],
                )
            )
        self.report.thresholds = len(thresholds)
        tied = self.lm_head.data_ptr() == self.embed.data_ptr()  # one tensor, or views of one
        fixed = [self.embed, self.norm] + ([] if tied else [self.lm_head])
        used = sum(t.numel() * t.element_size() for t in fixed)
        self.store = LayerStore(host_layers, self.device, used, device_budget_bytes, offload_layers)
        self.layers = self.store.layers
        self.report.offloaded_layers = len(self.store.offloaded)
        self.report.offloaded_bytes = self.store.offloaded_bytes
        self.report.resident_bytes = self.store.resident_bytes
        inv = 1.0 / (
            shape.rope_theta
            ** (torch.arange(0, shape.head_dim, 2, dtype=torch.int64).float() / shape.head_dim)
        )
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = emb.cos().to(device=self.device, dtype=dtype)
        self.sin = emb.sin().to(device=self.device, dtype=dtype)
        self.q_size = shape.heads * shape.head_dim
        self.kv_size = shape.kv_heads * shape.head_dim
        self._layers_c = self._step_layers()

    def _step_layers(self) -> Any:
        """The layers as the compiled single-stream decode step reads them, or None where that
        step does not run (no kernel, offloaded layers)."""
        if self.kernel is None or self.store.offloaded:
            return None
        arr = (kernels.LayerC * self.shape.layers)()
        for c, layer in zip(arr, self.layers, strict=True):
            if len(layer.qkv) != 1 or len(layer.gate_up) != 1:
                return None
            c.in_norm, c.post_norm = layer.in_norm.data_ptr(), layer.post_norm.data_ptr()
            c.qkv, c.o = layer.qkv[0].weight.data_ptr(), layer.o.weight.data_ptr()
            c.gate_up, c.down = layer.gate_up[0].weight.data_ptr(), layer.down.weight.data_ptr()
            c.t_qkv = layer.qkv[0].threshold or 0.0
            c.t_o = layer.o.threshold or 0.0
            c.t_gate_up = layer.gate_up[0].threshold or 0.0
            c.t_down = layer.down.threshold or 0.0
            c.width = layer.width
            c.bf16 = int(layer.qkv[0].weight.dtype == torch.bfloat16)
        return arr

    # loading -----------------------------------------------------------------------------------
    def _kernel(
        self, thresholds: bool, compiler: kernels.Compiler | None
    ) -> SparseInputKernel | None:
        """The compiled kernels where they run (float32 on a CPU, a C compiler present): the
        single-stream decode step, and latency mode's products over the active inputs."""
        if self.device.type != "cpu" or self.dtype != torch.float32:
            if thresholds:
                self.report.latency_note = (
                    f"thresholds applied with torch ops on {self.device.type} "
                    f"({self.report.dtype}): every weight row is still read"
                )
            return None
        kernel = kernels.load(compiler)
        self.report.latency_kernel = kernel is not None
        if kernel is None:
            self.report.latency_note = (
                "no C compiler here (or kernels disabled): torch ops, every weight row read"
            )
        elif thresholds:
            self.report.latency_note = (
                "single-stream decode steps run compiled and read only the weight rows of the "
                "inputs that pass the thresholds"
            )
        else:
            self.report.latency_note = "single-stream decode steps run compiled"
        return kernel

    def _sparse(self, w: torch.Tensor, min_tokens: int) -> Proj:
        from torch.sparse import to_sparse_semi_structured

        wd = w.to(self.device)
        return Proj(wd, to_sparse_semi_structured(wd), min_tokens)

    # forward -----------------------------------------------------------------------------------
    def _mlp(self, layer: Layer, x: torch.Tensor, i: int, probe: Probe | None) -> torch.Tensor:
        gate, up = _split(layer.gate_up, x, [layer.width, layer.width], probe)
        a = F.silu(gate) * up
        if probe is not None:
            probe.mlp(i, a)
        return _apply(layer.down, a, probe)

    def _rope(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary tables of these positions, once per forward: [n, 1, head_dim] each."""
        return self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)

    def _qkv(
        self,
        layer: Layer,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        probe: Probe | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = self.shape
        n = x.shape[0]
        if len(layer.qkv) == 1:  # fused: queries and keys rotate as one tensor
            qkv = _apply(layer.qkv[0], x, probe).view(n, s.heads + 2 * s.kv_heads, s.head_dim)
            qk, v = qkv[:, : s.heads + s.kv_heads], qkv[:, s.heads + s.kv_heads :]
        else:
            q, k, v = (_apply(p, x, probe) for p in layer.qkv)
            qk = torch.cat((q.view(n, s.heads, s.head_dim), k.view(n, s.kv_heads, s.head_dim)), 1)
            v = v.view(n, s.kv_heads, s.head_dim)
        qk = _rotate(qk, *rope)
        return qk[:, : s.heads], qk[:, s.heads :], v

    @torch.inference_mode()
    def prefill(
        self,
        tokens: list[int],
        slot: int,
        cache: SlotCache,
        probe: Probe | None = None,
        every_position: bool = False,
        start: int = 0,
    ) -> torch.Tensor:
        """Run one new sequence's prompt into `slot`; logits of its last position [vocab] (of
        every position [t, vocab] with every_position). With `start`, the slot already holds
        the keys and values of the prompt's first `start` tokens (a prefix cache hit) and
        `tokens` are the rest of it. A probe counts what the pass saw."""
        x = self._prefill([Prompt(tokens, slot, start)], cache, probe)
        if every_position:
            return self._logits(x, probe)
        return self._logits(x[-1:], probe)[0]

    @torch.inference_mode()
    def prefill_many(
        self, prompts: list[Prompt], cache: SlotCache, probe: Probe | None = None
    ) -> torch.Tensor:
        """Several new sequences' prompts in one pass (each into its slot, as prefill() runs
        one): the projections and MLPs run once over all their tokens, attention per
        sequence. Logits of each one's last position [n, vocab]."""
        x = self._prefill(prompts, cache, probe)
        last = torch.tensor([len(p.tokens) for p in prompts], device=self.device).cumsum(0) - 1
        return self._logits(x[last], probe)

    def _prefill(
        self, prompts: list[Prompt], cache: SlotCache, probe: Probe | None
    ) -> torch.Tensor:
        """The last layer's output [tokens, hidden] of these prompts, their keys and values
        written into their slots."""
        s = self.shape
        sizes = [len(p.tokens) for p in prompts]
        if probe is not None:
            probe.step(sum(sizes))
        dev = self.device
        rope = self._rope(torch.cat([torch.arange(p.start, p.end, device=dev) for p in prompts]))
        x = self.embed[torch.tensor([t for p in prompts for t in p.tokens], device=dev)]
        x = x.to(self.dtype)
        # a query at position start + r sees every key up to it
        masks = [_seen(p.start, p.end, dev) if p.start else None for p in prompts]
        for i in range(s.layers):
            layer = self.store.get(i)
            h = _rms(x, layer.in_norm, s.eps)
            q, k, v = self._qkv(layer, h, rope, probe)
            outs = []
            for p, mask, qs, ks, vs in zip(
                prompts, masks, q.split(sizes), k.split(sizes), v.split(sizes), strict=True
            ):
                cache.k[i][p.slot, :, p.start : p.end] = ks.transpose(0, 1)
                cache.v[i][p.slot, :, p.start : p.end] = vs.transpose(0, 1)
                if p.start:
                    keys, values = cache.k[i][p.slot, :, : p.end], cache.v[i][p.slot, :, : p.end]
                else:
                    keys, values = ks.transpose(0, 1), vs.transpose(0, 1)
                a = F.scaled_dot_product_attention(
                    qs.transpose(0, 1).unsqueeze(0),
                    keys.unsqueeze(0),
                    values.unsqueeze(0),
                    attn_mask=mask,
                    is_causal=not p.start,
                    enable_gqa=True,
                )
                outs.append(a[0].transpose(0, 1).reshape(len(p.tokens), self.q_size))
            a = outs[0] if len(outs) == 1 else torch.cat(outs)
            x = x + _apply(layer.o, a, probe)
            x = x + self._mlp(layer, _rms(x, layer.post_norm, s.eps), i, probe)
        return x

    @torch.inference_mode()
    def decode(
        self,
        tokens: list[int],
        positions: list[int],
        cache: SlotCache,
        probe: Probe | None = None,
        slots: list[int] | None = None,
    ) -> torch.Tensor:
        """One token for each of the sequences in slots 0..n-1 (in `slots` when given); logits
        [n, vocab]. A sampled step (probe given) runs with torch ops, which the probe can
        watch."""
        s = self.shape
        n = len(tokens)
        if n == 1 and self._layers_c is not None and probe is None and slots in (None, [0]):
            return self._decode_one(tokens[0], positions[0], cache)
        if probe is not None:
            probe.step(n)
        pos = torch.tensor(positions, device=self.device)
        rows = torch.arange(n, device=self.device) if slots is None else torch.tensor(slots)
        pick = slice(0, n) if slots is None else rows
        length = max(positions) + 1
        visible = (torch.arange(length, device=self.device)[None, :] <= pos[:, None]).view(
            n, 1, 1, length
        )
        rope = self._rope(pos)
        x = self.embed[torch.tensor(tokens, device=self.device)].to(self.dtype)
        for i in range(s.layers):
            layer = self.store.get(i)
            h = _rms(x, layer.in_norm, s.eps)
            q, k, v = self._qkv(layer, h, rope, probe)
            kc, vc = cache.k[i], cache.v[i]
            kc[rows, :, pos] = k
            vc[rows, :, pos] = v
            a = F.scaled_dot_product_attention(
                q.unsqueeze(2),
                kc[pick, :, :length],
                vc[pick, :, :length],
                attn_mask=visible,
                enable_gqa=True,
            )
            x = x + _apply(layer.o, a.reshape(n, self.q_size), probe)
            x = x + self._mlp(layer, _rms(x, layer.post_norm, s.eps), i, probe)
        return self._logits(x, probe)

    def _decode_one(self, token: int, pos: int, cache: SlotCache) -> torch.Tensor:
        """decode() for one sequence (slot 0) as one compiled call through every layer."""
        s = self.shape
        arr, kernel = self._layers_c, self.kernel
        assert kernel is not None  # _layers_c exists only with the kernel
        for c, k, v in zip(arr, cache.k, cache.v, strict=True):  # the cache may have grown
            c.k, c.v = k.data_ptr(), v.data_ptr()
        x = self.embed[token].to(self.dtype, memory_format=torch.contiguous_format, copy=True)
        dims = (s.layers, s.hidden, s.heads, s.kv_heads, s.head_dim)
        kernel.decode_one(arr, dims, cache.capacity, pos, s.eps, self.cos[pos], self.sin[pos], x)
        return self._logits(x[None])

    def _logits(self, x: torch.Tensor, probe: Probe | None = None) -> torch.Tensor:
        """The output layer on the last layer's output x [n, hidden] (through its Proj where
        the tier thresholds its input: one token reads only the rows of the inputs that
        pass); [n, vocab]."""
        h = _rms(x, self.norm, self.shape.eps)
        if self.head is not None:
            return _apply(self.head, h, probe)
        return onednn_linear(h, self.lm_head) if self.onednn else F.linear(h, self.lm_head)


def load_llama(
    model_dir: str | Path,
    artifact: str = "dense",
    artifact_dir: str | Path | None = None,
    **options: Any,
) -> LlamaModel:
    """A LlamaModel for one tier: the dense checkpoint in model_dir with the tier's artifact
    (from artifact_dir) applied; options go to LlamaModel."""
    tier = read_tier(model_dir, artifact, artifact_dir)
    if options.get("weight_dtype") is None:  # the artifact's precision, unless the caller's
        options["weight_dtype"] = tier.weight_dtype
    return LlamaModel(
        tier.shape,
        tier.state,
        thresholds=tier.thresholds,
        sparse_units=tier.sparse_units,
        report=LoadReport(artifact=artifact),
        **options,
    )
