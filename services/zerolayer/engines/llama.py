"""A compact Llama decoder in plain torch: the model inside zerolayer's own engine.

It reads a Hugging Face Llama checkpoint (SmolLM2 and kin), or one with per-layer MLP widths
(collapse pruned checkpoints), and applies tier artifacts at load:
  masked    the kept MLP channels only (gate/up rows and down columns of removed ones are dropped,
            so the computed function and cost equal the pruned checkpoint's)
  dynamic   per-token thresholds on the inputs of down_proj, o_proj, q/k/v and gate/up, with the
            distilled down_proj weights; a single stream's decode step (latency mode) runs
            compiled and reads only the weight rows of the inputs that pass (engines/kernels.py)
  sparse24  2:4 weights; on an NVIDIA GPU with compute capability >= 8.0 they also run on the
            sparse tensor cores for steps of at least `sparse_min_tokens` tokens
Layers beyond a device memory budget stay in host memory (pinned when CUDA is there) and are
copied to the device one layer ahead of use (CPU offload).

Two entry points: prefill(tokens, slot) for one new sequence, decode(tokens, positions) for one
token of each active sequence. Both write keys and values into a SlotCache, one slot per sequence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from zerolayer.config import ARTIFACTS
from zerolayer.engines import kernels
from zerolayer.engines.kernels import SparseInputKernel

__all__ = ["Shape", "SlotCache", "LlamaModel", "read_state", "sparse_hw_available"]


@dataclass(frozen=True)
class Shape:
    """The dimensions a Llama checkpoint's config.json declares."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    vocab: int
    eps: float
    rope_theta: float
    tied: bool
    widths: tuple[int, ...]

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Shape:
        if cfg.get("model_type") not in ("llama", None):
            raise ValueError(f"the torch engine serves Llama models, not {cfg.get('model_type')}")
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
            raise ValueError(f"unsupported rope type {rope.get('rope_type')}")
        heads = int(cfg["num_attention_heads"])
        layers = int(cfg["num_hidden_layers"])
        widths = (cfg.get("zerolayer") or {}).get("intermediate_sizes") or [
            int(cfg["intermediate_size"])
        ] * layers
        return cls(
            hidden=int(cfg["hidden_size"]),
            heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
            layers=layers,
            vocab=int(cfg["vocab_size"]),
            eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
            tied=bool(cfg.get("tie_word_embeddings", False)),
            widths=tuple(int(w) for w in widths),
        )


def read_state(model_dir: Path) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors checkpoint (one file or an index of shards)."""
    from safetensors.torch import load_file

    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(str(model_dir / name)))
    return state


def sparse_hw_available(device: torch.device) -> bool:
    """True on an NVIDIA GPU with 2:4 sparse tensor cores (compute capability 8.0 or higher)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(device)[0] >= 8


class Proj:
    """y = x @ W.T for one (possibly fused) weight.

    With an input threshold (latency mode), entries of x with |x| <= threshold count as zero. On
    a CPU in float32 with the compiled kernels (engines/kernels.py) every weight is kept
    transposed (in x out): the compiled single-stream step reads it in place, skipping the rows
    of inputs under the threshold (0 for a dense weight), a lone token's product outside that
    step runs the same kernel, and batches use one matmul over the zeroed input. Elsewhere
    weights keep torch's layout (out x in), with a 2:4 copy on sparse tensor cores used for
    steps of at least min_tokens tokens, where it pays."""

    def __init__(
        self,
        weight: torch.Tensor,
        sparse: Any = None,
        min_tokens: int = 256,
        threshold: float | None = None,
        kernel: SparseInputKernel | None = None,
    ):
        self.weight = weight
        self.sparse = sparse
        self.min_tokens = min_tokens
        self.threshold = threshold
        self.kernel = kernel

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is not None and x.shape[0] == 1:
            return self.kernel.run(self.weight, x.contiguous(), self.threshold or 0.0)
        if self.threshold is not None:
            x = F.hardshrink(x, self.threshold)  # zero where |x| <= threshold, one op
        if self.kernel is not None:  # the weight is stored transposed
            return x @ self.weight
        if self.sparse is not None and x.shape[0] >= self.min_tokens:
            return F.linear(x, self.sparse)
        return F.linear(x, self.weight)

    def matrix(self) -> torch.Tensor:
        """The weight in torch's layout (out x in), whichever way it is stored."""
        return self.weight.t() if self.kernel is not None else self.weight

    def like(self, weight: torch.Tensor) -> Proj:
        """The same projection over another copy of its weight (offload: a device copy)."""
        return Proj(weight, self.sparse, self.min_tokens, self.threshold, self.kernel)


@dataclass
class Layer:
    """One decoder layer's weights (fused q/k/v and gate/up when none of them is sparse)."""

    in_norm: torch.Tensor
    post_norm: torch.Tensor
    qkv: list[Proj]
    o: Proj
    gate_up: list[Proj]
    down: Proj
    width: int

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {"in_norm": self.in_norm, "post_norm": self.post_norm}
        for group, projs in (("qkv", self.qkv), ("gate_up", self.gate_up)):
            for j, p in enumerate(projs):
                out[f"{group}.{j}"] = p.weight
        out["o"], out["down"] = self.o.weight, self.down.weight
        return out

    def with_tensors(self, t: dict[str, torch.Tensor]) -> Layer:
        """The same layer over other copies of its tensors (offload: a device copy)."""

        def group(name: str, projs: list[Proj]) -> list[Proj]:
            return [p.like(t[f"{name}.{j}"]) for j, p in enumerate(projs)]

        # a projection's 2:4 copy lives on the device already and goes along unchanged
        return Layer(
            t["in_norm"],
            t["post_norm"],
            group("qkv", self.qkv),
            self.o.like(t["o"]),
            group("gate_up", self.gate_up),
            self.down.like(t["down"]),
            self.width,
        )


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


def _split(projs: list[Proj], x: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    if len(projs) == 1:
        return list(projs[0](x).split(sizes, dim=-1))
    return [p(x) for p in projs]


class SlotCache:
    """Keys and values of up to `slots` sequences, one slot each, per layer:
    [slots, kv_heads, capacity, head_dim]. Grows (doubling) as sequences and lengths need."""

    def __init__(self, shape: Shape, dtype: torch.dtype, device: torch.device, max_len: int):
        self.shape, self.dtype, self.device, self.max_len = shape, dtype, device, max_len
        self.slots = 0
        self.capacity = 0
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []

    def bytes_for(self, slots: int, length: int) -> int:
        s = self.shape
        per = 2 * s.layers * s.kv_heads * s.head_dim * torch.finfo(self.dtype).bits // 8
        return _pow2(slots) * min(_pow2(length), self.max_len) * per

    def ensure(self, slots: int, length: int) -> None:
        """Room for `slots` sequences of up to `length` tokens."""
        want_s = max(self.slots, _pow2(slots))
        want_c = max(self.capacity, min(_pow2(length), self.max_len))
        if want_s == self.slots and want_c == self.capacity:
            return
        s = self.shape
        size = (want_s, s.kv_heads, want_c, s.head_dim)
        for store in (self.k, self.v):
            for i in range(s.layers):
                new = torch.zeros(size, dtype=self.dtype, device=self.device)
                if store:
                    new[: self.slots, :, : self.capacity] = store[i]
                    store[i] = new
            if not store:
                store.extend(
                    torch.zeros(size, dtype=self.dtype, device=self.device) for _ in range(s.layers)
                )
        self.slots, self.capacity = want_s, want_c

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy one sequence's keys and values to another slot."""
        for store in (self.k, self.v):
            for t in store:
                t[dst, :, :length] = t[src, :, :length]


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@dataclass
class LoadReport:
    """What the load did, for the tier card: artifact, sparsity, offload."""

    artifact: str = "dense"
    device: str = "cpu"
    dtype: str = "float32"
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

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class LlamaModel:
    """Weights on a device (or offloaded), rotary tables, and the two forward passes.

    `thresholds` maps (layer, input) to latency mode's |x| threshold on that projection input,
    named as collapse.model.projections names them: mlp (down_proj's), attn (o_proj's), qkv and
    gate_up."""

    def __init__(
        self,
        shape: Shape,
        state: dict[str, torch.Tensor],
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        max_len: int = 2048,
        thresholds: dict[tuple[int, str], float] | None = None,
        sparse_units: set[tuple[int, str]] | None = None,
        sparse_min_tokens: int = 256,
        device_budget_bytes: int | None = None,
        offload_layers: int | None = None,
        report: LoadReport | None = None,
    ):
        self.shape = shape
        self.device = torch.device(device)
        self.dtype = dtype
        self.max_len = max_len
        self.report = report or LoadReport()
        self.report.device, self.report.dtype = str(self.device), str(dtype).replace("torch.", "")
        self.report.mlp_widths = list(shape.widths)
        thresholds = thresholds or {}
        sparse_units = sparse_units or set()
        self.kernel = self._kernel(bool(thresholds))
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
        host_layers = []
        for i in range(shape.layers):
            q = f"{p}layers.{i}."

            def group(
                names: list[str], prefix: str, key: str, i: int = i, q: str = q
            ) -> list[Proj]:
                ws = [state[f"{q}{prefix}.{n}.weight"].to(dtype) for n in names]
                if any((i, n) in sparse_units for n in names) and hw:
                    return [self._sparse(w, sparse_min_tokens) for w in ws]
                w = ws[0] if len(ws) == 1 else torch.cat(ws)
                t = thresholds.get((i, key))
                if self.kernel is not None:
                    return [Proj(w.t().contiguous(), threshold=t, kernel=self.kernel)]
                return [Proj(w.contiguous(), threshold=t)]

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
        self.layers, self.offloaded = self._place(host_layers, device_budget_bytes, offload_layers)
        self._prefetched: tuple[int, Layer, Any] | None = None
        self._copy_stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
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
        if self.kernel is None or self.offloaded:
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
        return arr

    # loading -----------------------------------------------------------------------------------
    def _kernel(self, thresholds: bool) -> SparseInputKernel | None:
        """The compiled kernels where they run (float32 on a CPU, a C compiler present): the
        single-stream decode step, and latency mode's products over the active inputs."""
        if self.device.type != "cpu" or self.dtype != torch.float32:
            if thresholds:
                self.report.latency_note = (
                    f"thresholds applied with torch ops on {self.device.type} "
                    f"({self.report.dtype}): every weight row is still read"
                )
            return None
        kernel = kernels.load()
        self.report.latency_kernel = kernel is not None
        if kernel is None:
            self.report.latency_note = "no C compiler here: torch ops, every weight row read"
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

    def _place(
        self, layers: list[Layer], budget: int | None, force: int | None
    ) -> tuple[list[Layer], set[int]]:
        """Move layers to the device until the budget is spent; the rest stay on the host."""
        used = sum(t.numel() * t.element_size() for t in (self.embed, self.norm))
        if self.lm_head is not self.embed:
            used += self.lm_head.numel() * self.lm_head.element_size()
        placed, offloaded = [], set()
        n = len(layers)
        for i, layer in enumerate(layers):
            size = sum(t.numel() * t.element_size() for t in layer.tensors().values())
            over = budget is not None and used + size > budget
            if (force is not None and i >= n - force) or over:
                pin = self.device.type == "cuda"
                host = {
                    k: (t.pin_memory() if pin else t.contiguous())
                    for k, t in layer.tensors().items()
                }
                placed.append(layer.with_tensors(host))
                offloaded.add(i)
                self.report.offloaded_bytes += size
                continue
            moved = layer.with_tensors(
                {k: t.to(self.device).contiguous() for k, t in layer.tensors().items()}
            )
            placed.append(moved)
            used += size
        self.report.offloaded_layers = len(offloaded)
        self.report.resident_bytes = used
        return placed, offloaded

    # offload -----------------------------------------------------------------------------------
    def _fetch(self, i: int) -> tuple[Layer, Any]:
        """Start copying an offloaded layer to the device; (the device copy, its ready event)."""
        layer = self.layers[i]
        if self._copy_stream is None:
            # no copy engine on a CPU: a plain copy keeps the same code path (used by tests)
            return layer.with_tensors({k: t.clone() for k, t in layer.tensors().items()}), None
        with torch.cuda.stream(self._copy_stream):
            t = {k: v.to(self.device, non_blocking=True) for k, v in layer.tensors().items()}
            ev = torch.cuda.Event()
            ev.record(self._copy_stream)
        return layer.with_tensors(t), ev

    def _layer(self, i: int) -> Layer:
        if i not in self.offloaded:
            return self.layers[i]
        if self._prefetched is not None and self._prefetched[0] == i:
            layer, ev = self._prefetched[1], self._prefetched[2]
        else:
            layer, ev = self._fetch(i)
        if ev is not None:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_event(ev)
            for t in layer.tensors().values():
                t.record_stream(compute)  # made on the copy stream, used on this one
        nxt = i + 1
        while nxt < self.shape.layers and nxt not in self.offloaded:
            nxt += 1
        self._prefetched = (nxt, *self._fetch(nxt)) if nxt < self.shape.layers else None
        return layer

    # forward -----------------------------------------------------------------------------------
    def _mlp(self, layer: Layer, x: torch.Tensor) -> torch.Tensor:
        gate, up = _split(layer.gate_up, x, [layer.width, layer.width])
        return layer.down(F.silu(gate) * up)

    def _rope(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary tables of these positions, once per forward: [n, 1, head_dim] each."""
        return self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)

    def _qkv(
        self, layer: Layer, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = self.shape
        n = x.shape[0]
        if len(layer.qkv) == 1:  # fused: queries and keys rotate as one tensor
            qkv = layer.qkv[0](x).view(n, s.heads + 2 * s.kv_heads, s.head_dim)
            qk, v = qkv[:, : s.heads + s.kv_heads], qkv[:, s.heads + s.kv_heads :]
        else:
            q, k, v = (p(x) for p in layer.qkv)
            qk = torch.cat((q.view(n, s.heads, s.head_dim), k.view(n, s.kv_heads, s.head_dim)), 1)
            v = v.view(n, s.kv_heads, s.head_dim)
        qk = _rotate(qk, *rope)
        return qk[:, : s.heads], qk[:, s.heads :], v

    @torch.inference_mode()
    def prefill(self, tokens: list[int], slot: int, cache: SlotCache) -> torch.Tensor:
        """Run one new sequence's prompt into `slot`; logits of its last position [vocab]."""
        s = self.shape
        t = len(tokens)
        rope = self._rope(torch.arange(t, device=self.device))
        x = self.embed[torch.tensor(tokens, device=self.device)]
        for i in range(s.layers):
            layer = self._layer(i)
            h = _rms(x, layer.in_norm, s.eps)
            q, k, v = self._qkv(layer, h, rope)
            cache.k[i][slot, :, :t] = k.transpose(0, 1)
            cache.v[i][slot, :, :t] = v.transpose(0, 1)
            a = F.scaled_dot_product_attention(
                q.transpose(0, 1).unsqueeze(0),
                k.transpose(0, 1).unsqueeze(0),
                v.transpose(0, 1).unsqueeze(0),
                is_causal=True,
                enable_gqa=True,
            )
            x = x + layer.o(a[0].transpose(0, 1).reshape(t, self.q_size))
            x = x + self._mlp(layer, _rms(x, layer.post_norm, s.eps))
        return F.linear(_rms(x[-1:], self.norm, s.eps), self.lm_head)[0]

    @torch.inference_mode()
    def decode(self, tokens: list[int], positions: list[int], cache: SlotCache) -> torch.Tensor:
        """One token for each of the sequences in slots 0..n-1; logits [n, vocab]."""
        s = self.shape
        n = len(tokens)
        if n == 1 and self._layers_c is not None:
            return self._decode_one(tokens[0], positions[0], cache)
        pos = torch.tensor(positions, device=self.device)
        rows = torch.arange(n, device=self.device)
        length = max(positions) + 1
        visible = (torch.arange(length, device=self.device)[None, :] <= pos[:, None]).view(
            n, 1, 1, length
        )
        rope = self._rope(pos)
        x = self.embed[torch.tensor(tokens, device=self.device)]
        for i in range(s.layers):
            layer = self._layer(i)
            h = _rms(x, layer.in_norm, s.eps)
            q, k, v = self._qkv(layer, h, rope)
            kc, vc = cache.k[i], cache.v[i]
            kc[rows, :, pos] = k
            vc[rows, :, pos] = v
            a = F.scaled_dot_product_attention(
                q.unsqueeze(2),
                kc[:n, :, :length],
                vc[:n, :, :length],
                attn_mask=visible,
                enable_gqa=True,
            )
            x = x + layer.o(a.reshape(n, self.q_size))
            x = x + self._mlp(layer, _rms(x, layer.post_norm, s.eps))
        return F.linear(_rms(x, self.norm, s.eps), self.lm_head)

    def _decode_one(self, token: int, pos: int, cache: SlotCache) -> torch.Tensor:
        """decode() for one sequence (slot 0) as one compiled call through every layer."""
        s = self.shape
        arr, kernel = self._layers_c, self.kernel
        assert kernel is not None  # _layers_c exists only with the kernel
        for c, k, v in zip(arr, cache.k, cache.v, strict=True):  # the cache may have grown
            c.k, c.v = k.data_ptr(), v.data_ptr()
        x = self.embed[token].clone()
        dims = (s.layers, s.hidden, s.heads, s.kv_heads, s.head_dim)
        kernel.decode_one(arr, dims, cache.capacity, pos, s.eps, self.cos[pos], self.sin[pos], x)
        return F.linear(_rms(x[None], self.norm, s.eps), self.lm_head)


def load_llama(
    model_dir: str | Path,
    artifact: str = "dense",
    artifact_dir: str | Path | None = None,
    **options: Any,
) -> LlamaModel:
    """A LlamaModel for one tier: the dense checkpoint in model_dir with the tier's artifact
    (from artifact_dir) applied; options go to LlamaModel."""
    from zerolayer.collapse.artifacts import (
        narrow_state,
        read_dynamic,
        read_masks,
        read_sparse24,
    )
    from zerolayer.collapse.sparse24 import MLP_PROJ

    if artifact not in ARTIFACTS:
        raise ValueError(f"unknown artifact {artifact!r}; known: {', '.join(ARTIFACTS)}")
    if artifact != "dense" and artifact_dir is None:
        raise ValueError(f"artifact {artifact!r} needs its folder")
    source = Path(artifact_dir) if artifact == "pruned" else Path(model_dir)
    cfg = json.loads((source / "config.json").read_text())
    state = read_state(source)
    thresholds: dict[tuple[int, str], float] = {}
    units: set[tuple[int, str]] = set()
    if artifact == "masked":
        keep, down = read_masks(Path(artifact_dir or ""))
        widths = narrow_state(
            state, keep, down, int(cfg["intermediate_size"]), int(cfg["num_hidden_layers"])
        )
        cfg["zerolayer"] = {"intermediate_sizes": widths}
    elif artifact == "dynamic":
        art = read_dynamic(Path(artifact_dir or ""))
        for i, w in art.down.items():
            state[f"model.layers.{i}.mlp.down_proj.weight"] = w
        thresholds = {(i, kind): t for kind, th in art.inputs().items() for i, t in th.items()}
    elif artifact == "sparse24":
        for (i, p), w in read_sparse24(Path(artifact_dir or "")).items():
            part = "mlp" if p in MLP_PROJ else "self_attn"
            state[f"model.layers.{i}.{part}.{p}.weight"] = w
            units.add((i, p))
    report = LoadReport(artifact=artifact)
    return LlamaModel(
        Shape.from_config(cfg),
        state,
        thresholds=thresholds,
        sparse_units=units,
        report=report,
        **options,
    )
