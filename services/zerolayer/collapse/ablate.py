"""Ablation: apply a candidate cut to the dense model and measure perplexity and the mean KL
divergence of next-token distributions against the dense model, on held-out windows.

A cut is an intervention: a context manager that installs forward pre-hooks on the measured
projections and removes them on exit, so the same loaded model serves dense and cut runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from zerolayer.collapse.model import decoder_layers, input_modules, projection, removing
from zerolayer.collapse.progress import bar

__all__ = [
    "Evaluation",
    "Evaluator",
    "DomainEvaluation",
    "DomainEvaluator",
    "channel_mask",
    "activation_threshold",
]


@dataclass(frozen=True)
class Evaluation:
    """Quality of one candidate against the dense model."""

    ppl: float
    dense_ppl: float
    kl: float

    @property
    def ppl_delta(self) -> float:
        """Relative perplexity change (0.03 = +3%)."""
        return self.ppl / self.dense_ppl - 1.0

    def as_dict(self) -> dict[str, float]:
        return {
            "ppl": round(self.ppl, 4),
            "dense_ppl": round(self.dense_ppl, 4),
            "ppl_delta": round(self.ppl_delta, 5),
            "kl": round(self.kl, 6),
        }


@contextmanager
def channel_mask(
    model: Any,
    keep: dict[int, torch.Tensor],
    kind: str = "mlp",
    compensate: dict[int, torch.Tensor] | None = None,
) -> Iterator[None]:
    """Zero the input channels of down_proj (or o_proj) not in keep[layer] (a bool mask).

    compensate[layer], when given, is each channel's mean activation: the removed channels' mean
    contribution W[:, removed] @ mean[removed] is added back as a bias (as FLAP does)."""
    handles = []
    layers = decoder_layers(model)
    for i, mask in keep.items():
        proj = projection(layers[i], kind)
        m = mask.to(proj.weight.dtype)

        def pre(
            _m: Any, args: tuple[torch.Tensor, ...], m: torch.Tensor = m
        ) -> tuple[torch.Tensor]:
            return (args[0] * m,)

        handles.append(proj.register_forward_pre_hook(pre))
        if compensate is not None:
            removed = (~mask).to(proj.weight.dtype)
            bias = proj.weight.detach() @ (compensate[i].to(proj.weight.dtype) * removed)

            def post(
                _m: Any, _a: Any, out: torch.Tensor, bias: torch.Tensor = bias
            ) -> torch.Tensor:
                return out + bias

            handles.append(proj.register_forward_hook(post))
    with removing(handles):
        yield


@contextmanager
def activation_threshold(
    model: Any, thresholds: dict[int, float], kind: str = "mlp"
) -> Iterator[None]:
    """Input-dependent masking: per token, zero the entries with |a| at or under the layer's
    threshold."""
    handles = []
    for i, _, modules in input_modules(model, [kind]):
        if i not in thresholds:
            continue

        def pre(
            _m: Any, args: tuple[torch.Tensor, ...], t: float = thresholds[i]
        ) -> tuple[torch.Tensor]:
            x = args[0]
            return (F.hardshrink(x, t),)  # zero where |x| <= t

        handles += [m.register_forward_pre_hook(pre) for m in modules]
    with removing(handles):
        yield


class Evaluator:
    """Perplexity and KL against the dense model on fixed windows. The dense log-probabilities are
    computed once and kept (float16), so each candidate costs one forward per window."""

    def __init__(self, model: Any, windows: list[list[int]], progress: bool = False):
        if not windows:
            raise ValueError("no evaluation windows")
        self.model = model
        self.inputs = [torch.tensor([w]) for w in windows]
        self.progress = progress
        self._dense: list[torch.Tensor] | None = None
        self._dense_ppl: float | None = None

    @torch.no_grad()
    def _logprobs(self, x: torch.Tensor, model: Any = None) -> torch.Tensor:
        logits = (model or self.model)(x, use_cache=False).logits
        return F.log_softmax(logits[0, :-1].float(), dim=-1)

    def _nll(self, logp: torch.Tensor, x: torch.Tensor) -> tuple[float, int]:
        target = x[0, 1:]
        return float(-logp.gather(1, target.view(-1, 1)).sum()), target.numel()

    def dense(self) -> float:
        """Dense perplexity (computed on first use)."""
        if self._dense is None or self._dense_ppl is None:
            self._dense, total, count = [], 0.0, 0
            for x in bar(self.inputs, desc="dense reference", disable=not self.progress):
                logp = self._logprobs(x)
                nll, n = self._nll(logp, x)
                total, count = total + nll, count + n
                self._dense.append(logp.half())
            self._dense_ppl = math.exp(total / count)
            return self._dense_ppl
        return self._dense_ppl

    @torch.no_grad()
    def evaluate(
        self,
        cut: AbstractContextManager[None] | None = None,
        desc: str = "ablation",
        model: Any = None,
    ) -> Evaluation:
        """Perplexity and mean per-token KL(dense || cut) with the cut applied; of `model` (an
        artifact loaded on its own) instead of the evaluator's, when given."""
        dense_ppl = self.dense()
        assert self._dense is not None
        total, count, kl_sum = 0.0, 0, 0.0
        with cut or nullcontext():
            for x, ref in bar(
                list(zip(self.inputs, self._dense, strict=True)),
                desc=desc,
                disable=not self.progress,
            ):
                logp = self._logprobs(x, model)
                nll, n = self._nll(logp, x)
                total, count = total + nll, count + n
                p_ref = ref.float()
                kl_sum += float((p_ref.exp() * (p_ref - logp)).sum())
        return Evaluation(math.exp(total / count), dense_ppl, kl_sum / count)


@dataclass(frozen=True)
class DomainEvaluation:
    """Quality of one candidate on each domain. What a budget checks is the worst domain:
    `ppl_delta` is the largest of the domains' perplexity changes and `kl` the largest KL."""

    domains: dict[str, Evaluation]

    @property
    def worst(self) -> str:
        """The domain with the largest perplexity change."""
        return max(self.domains, key=lambda d: self.domains[d].ppl_delta)

    @property
    def ppl_delta(self) -> float:
        return self.domains[self.worst].ppl_delta

    @property
    def kl(self) -> float:
        return max(e.kl for e in self.domains.values())

    @property
    def ppl(self) -> float:
        return self.domains[self.worst].ppl

    @property
    def dense_ppl(self) -> float:
        return self.domains[self.worst].dense_ppl

    def as_dict(self) -> dict[str, Any]:
        """The worst domain's figures at the top (kl: the largest of any domain), then every
        domain's."""
        worst = self.domains[self.worst]
        return {
            "ppl": round(worst.ppl, 4),
            "dense_ppl": round(worst.dense_ppl, 4),
            "ppl_delta": round(worst.ppl_delta, 5),
            "kl": round(self.kl, 6),
            "worst_domain": self.worst,
            "domains": {d: e.as_dict() for d, e in self.domains.items()},
        }


class DomainEvaluator:
    """One Evaluator per domain; a candidate cut is applied once and scored on every domain."""

    def __init__(self, model: Any, windows: dict[str, list[list[int]]], progress: bool = False):
        windows = {d: w for d, w in windows.items() if w}
        if not windows:
            raise ValueError("no evaluation windows")
        self.model = model
        self.progress = progress
        self.evaluators = {d: Evaluator(model, w) for d, w in windows.items()}

    def dense(self) -> dict[str, float]:
        """Dense perplexity per domain (computed on first use)."""
        return {d: e.dense() for d, e in self.evaluators.items()}

    @torch.no_grad()
    def evaluate(
        self,
        cut: AbstractContextManager[None] | None = None,
        desc: str = "ablation",
        model: Any = None,
    ) -> DomainEvaluation:
        """Every domain's perplexity and KL with the cut applied (entered once); of `model`
        instead of the evaluator's, when given."""
        self.dense()  # the dense references first, outside the cut
        out: dict[str, Evaluation] = {}
        with cut or nullcontext():
            for d, e in bar(
                list(self.evaluators.items()), desc=desc, unit="domain", disable=not self.progress
            ):
                out[d] = e.evaluate(model=model)
        return DomainEvaluation(out)
