"""The torch engine's weights: one projection (dense, thresholded through the compiled kernel,
or 2:4 on sparse tensor cores), one decoder layer's, and where the layers live (on the device,
or offloaded to host memory and copied in ahead of use)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from zerolayer.engines.torch_engine.kernels import SparseInputKernel

__all__ = [
    "Proj",
    "Layer",
    "LayerStore",
    "dtype_name",
    "onednn_available",
    "onednn_linear",
    "sparse_hw_available",
]


def onednn_available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether float32 products on this device can run through oneDNN (a CPU build of torch
    with it: every x86 wheel)."""
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


def onednn_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T through oneDNN's inner product (weight out x in, contiguous, float32 on a
    CPU). With the weights cold in memory, as in a decode step over every layer, torch's matmul
    reaches 15-40 GFLOP/s at 8-32 rows on a 2-core AMD EPYC and this 20-65 (docs/benchmarks.md,
    "Batched products through oneDNN")."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, None, "none", [], "")


def dtype_name(dtype: torch.dtype) -> str:
    """A dtype as engine reports and tier cards write it: "bfloat16", not "torch.bfloat16"."""
    return str(dtype).removeprefix("torch.")


def sparse_hw_available(device: torch.device) -> bool:
    """True on an NVIDIA GPU with 2:4 sparse tensor cores (compute capability 8.0 or higher)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(device)[0] >= 8


def narrow_products(device: torch.device, dtype: torch.dtype) -> str:
    """Why weights in `dtype` would not pay on this device ('' when they do): a CPU computes
    bfloat16 products at its own rate only with AVX-512 BF16 or AMX; without them torch
    emulates the product, about 35 times slower than float32 at 32 rows on an AVX2 CPU, and
    the narrower weights would cost far more than the bytes they save."""
    if dtype == torch.float32:
        return ""
    if device.type == "cuda":
        if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
            return "this GPU has no bfloat16 products"
        return ""
    if dtype != torch.bfloat16:
        return f"no {dtype_name(dtype)} products on {device.type}"
    cpu = torch.cpu
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    if any(getattr(cpu, name, lambda: False)() for name in probes):
        return ""
    return "this CPU has no bfloat16 products (AVX-512 BF16 or AMX)"


class Proj:
    """y = x @ W.T for one (possibly fused) weight.

    With an input threshold (latency mode), entries of x with |x| <= threshold count as zero. On
    a CPU in float32 with the compiled kernels (kernels.py) every weight is kept
    transposed (in x out): the compiled single-stream step reads it in place, skipping the rows
    of inputs under the threshold (0 for a dense weight), a lone token's product outside that
    step runs the same kernel, and batches use one product over the zeroed input (through
    oneDNN over `batch` where it is set, else torch's matmul over the stored weight). Elsewhere
    weights keep torch's layout (out x in), with a 2:4 copy on sparse tensor cores used for
    steps of at least min_tokens tokens, where it pays.

    The weight may be stored in a lower precision than the activations (bfloat16 under float32):
    the kernel widens its rows as it reads them, and batches run the product in the weight's
    precision (on a CPU with AMX or AVX-512 BF16, about three times the float32 rate) and widen
    the result.

    `batch`: the weight output-major in float32 for products of several rows through oneDNN
    (onednn_linear): a second copy of an input-major weight (decode steps of 8-64 rows 1.3-1.9x
    as fast as torch's matmul over the input-major one, at the cost of the copy's memory), or
    the weight itself where it is stored output-major already (no compiled kernels)."""

    def __init__(
        self,
        weight: torch.Tensor,
        sparse: Any = None,
        min_tokens: int = 256,
        threshold: float | None = None,
        kernel: SparseInputKernel | None = None,
        batch: torch.Tensor | None = None,
    ):
        self.weight = weight
        self.sparse = sparse
        self.min_tokens = min_tokens
        self.threshold = threshold
        self.kernel = kernel
        self.batch = batch

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is not None and x.shape[0] == 1:
            return self.kernel.run(self.weight, x.contiguous(), self.threshold or 0.0)
        if self.threshold is not None:
            x = F.hardshrink(x, self.threshold)  # zero where |x| <= threshold, one op
        w = self.weight
        if w.dtype != x.dtype:  # lower-precision weights: the product in theirs, kept in x's
            return self._product(x.to(w.dtype)).to(x.dtype)
        return self._product(x)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        if self.batch is not None:
            return onednn_linear(x, self.batch)
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
        # the batch copy stays where it is (it exists on a CPU only, where no copy is made)
        return Proj(weight, self.sparse, self.min_tokens, self.threshold, self.kernel, self.batch)


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


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class LayerStore:
    """The decoder layers: on the device until a memory budget is spent (or all but the last
    `force` layers), the rest in host memory (pinned when CUDA is there) and copied to the
    device one layer ahead of use (CPU offload)."""

    def __init__(
        self,
        layers: list[Layer],
        device: torch.device,
        used: int,
        budget: int | None = None,
        force: int | None = None,
    ):
        """`used`: device bytes already taken (embeddings, output layer)."""
        self.device = device
        self.offloaded_bytes = 0
        self.layers: list[Layer] = []
        self.offloaded: set[int] = set()
        n = len(layers)
        for i, layer in enumerate(layers):
            size = _nbytes(list(layer.tensors().values()))
            over = budget is not None and used + size > budget
            if (force is not None and i >= n - force) or over:
                pin = device.type == "cuda"
                host = {
                    k: (t.pin_memory() if pin else t.contiguous())
                    for k, t in layer.tensors().items()
                }
                self.layers.append(layer.with_tensors(host))
                self.offloaded.add(i)
                self.offloaded_bytes += size
                continue
            moved = {k: t.to(device).contiguous() for k, t in layer.tensors().items()}
            self.layers.append(layer.with_tensors(moved))
            used += size
        self.resident_bytes = used
        self._prefetched: tuple[int, Layer, Any] | None = None
        self._copy_stream = torch.cuda.Stream(device) if device.type == "cuda" else None

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

    def get(self, i: int) -> Layer:
        """Layer i on the device (an offloaded one copied in; the next one's copy started)."""
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
        n = len(self.layers)
        nxt = i + 1
        while nxt < n and nxt not in self.offloaded:
            nxt += 1
        self._prefetched = (nxt, *self._fetch(nxt)) if nxt < n else None
        return layer
