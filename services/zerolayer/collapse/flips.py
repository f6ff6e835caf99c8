"""Changed answers ("flips"): how often a tier's greedy answer differs from the dense model's,
and whether the tier can tell beforehand.

Perplexity can hold while answers change, so a tier card also counts answers. For each domain
of the collapse corpora, held-out prompts: for the chat domain, chat-style questions in the
model's chat template (the evaluation split of collapse.chat's prompts and QUESTIONS below,
none of them ever calibrated on); for every other domain, continuations: PROMPT_TOKENS-token
windows drawn from the domain's evaluation part (text calibration never reads). Each is
answered greedily for FLIP_TOKENS tokens (the collapse setting flip_tokens) by the dense model
and by the tier. A flip is a prompt whose answers differ anywhere in those tokens (an answer
ends at its end-of-sequence token); the mean KL(dense || tier) is over the dense answer's
tokens, the tier reading the dense answer.

Per prompt, the tier's own confidence signals, from its prefill of the prompt alone (what a
replica would know before it answers):
  entropy   entropy of the tier's next-token distribution at the prompt's last position
  margin    1 - (p1 - p2) there: how close its first and second choices are
  silence   the mean over layers of |s_l - r_l|, s_l the share of down_proj's inputs over the
            prompt at or under the silence map's threshold of layer l, r_l the tier's
            calibrated share (its card's live reference): an unusual silence rate
For each, the ROC AUC of predicting a flip (1.0: it ranks every flip above every kept answer;
0.5: no better than chance), with the curve's points for drawing.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from zerolayer.collapse.chat import chat_prompts
from zerolayer.collapse.corpus import Corpus, token_windows
from zerolayer.collapse.model import decoder_layers
from zerolayer.collapse.progress import bar

__all__ = [
    "FLIP_TOKENS",
    "PROMPT_TOKENS",
    "SIGNALS",
    "QUESTIONS",
    "FlipEvaluator",
    "heldout_prompts",
    "roc",
    "draw_roc",
    "share_over",
]

FLIP_TOKENS = 32  # answer tokens compared
PROMPT_TOKENS = 48  # tokens of a continuation prompt
SIGNALS = ("entropy", "margin", "silence")
# Held-out chat questions written for this measurement (with collapse.chat's evaluation split):
# no template or filler of its calibration split.
QUESTIONS = (
    "How do bees make honey?",
    "Why is the sky blue?",
    "What causes a rainbow?",
    "How does a refrigerator keep food cold?",
    "What is the difference between weather and climate?",
    "Give me a recipe for a simple tomato soup.",
    "How many legs does a spider have?",
    "What is the tallest mountain in Africa?",
    "Why do we need sleep?",
    "Write a haiku about the ocean.",
    "What does a bank do with the money people deposit?",
    "How do I change a flat tyre on a bicycle?",
    "Summarize the story of Romeo and Juliet in two sentences.",
    "What is a prime number? Give two examples.",
    "Translate 'good morning' into Spanish.",
    "Name three instruments in an orchestra.",
    "What is the boiling point of water at sea level?",
    "How do airplanes stay in the air?",
    "What should I pack for a weekend hiking trip?",
    "Explain what a noun is, with an example.",
    "Who wrote the play Hamlet?",
    "How can I make my passwords more secure?",
    "What is the largest planet in the solar system?",
    "Why do cats purr?",
    "Write a Python function that counts the vowels in a string.",
    "What is 17 times 3?",
    "How long does it take light from the Sun to reach Earth?",
    "Describe a cat to someone who has never seen one.",
    "What are two benefits of drinking water?",
    "Which ocean is the largest?",
)


def _chat_ids(tokenizer: Any, question: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


def heldout_prompts(
    tokenizer: Any, evaluation: Corpus, per_domain: int, seed: int = 0
) -> dict[str, list[list[int]]]:
    """Per domain of the evaluation corpus, up to `per_domain` held-out prompts (module doc)."""
    out: dict[str, list[list[int]]] = {}
    for domain, corpus in evaluation.domains():
        if domain == "chat":
            questions = chat_prompts("evaluation") + list(QUESTIONS)
            random.Random(seed).shuffle(questions)
            out[domain] = [_chat_ids(tokenizer, q) for q in questions[:per_domain]]
        else:  # a seed of its own: not the evaluation windows' cuts
            out[domain] = token_windows(tokenizer, corpus, per_domain, PROMPT_TOKENS, seed + 101)
    return {d: p for d, p in out.items() if p}


def _until_end(tokens: list[int], eos: set[int]) -> list[int]:
    for j, t in enumerate(tokens):
        if t in eos:
            return tokens[: j + 1]
    return tokens


@torch.no_grad()
def greedy(model: Any, prompts: list[list[int]], steps: int, eos: set[int]) -> list[list[int]]:
    """Each prompt's greedy answer of at most `steps` tokens (through its end-of-sequence
    token). Prompts of equal length run as one batch: no padding, so every answer is the one
    its prompt gets alone."""
    answers: dict[int, list[int]] = {}
    by_length: dict[int, list[int]] = {}
    for j, p in enumerate(prompts):
        by_length.setdefault(len(p), []).append(j)
    pad = min(eos) if eos else 0
    for group in by_length.values():
        for start in range(0, len(group), 32):
            rows = group[start : start + 32]
            x = torch.tensor([prompts[j] for j in rows])
            out = model.generate(
                input_ids=x,
                attention_mask=torch.ones_like(x),
                max_new_tokens=steps,
                min_new_tokens=0,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                pad_token_id=pad,
                eos_token_id=sorted(eos) or None,
            )
            for j, row in zip(rows, out[:, x.shape[1] :].tolist(), strict=True):
                answers[j] = _until_end(row, eos)
    return [answers[j] for j in range(len(prompts))]


@contextmanager
def _silence_counter(
    model: Any, thresholds: list[float], shares: list[float], prompt_len: int
) -> Iterator[None]:
    """Collect into `shares`, per layer, the share of down_proj's inputs at or under its
    threshold in the next forward pass, over the prompt's first `prompt_len` positions."""
    handles = []
    for i, layer in enumerate(decoder_layers(model)):
        if i >= len(thresholds):
            break

        def pre(_m: Any, args: tuple[Any, ...], i: int = i) -> None:
            a = args[0][0, :prompt_len]  # the prompt's positions only
            shares[i] = float((a.abs() <= thresholds[i]).float().mean())

        handles.append(layer.mlp.down_proj.register_forward_pre_hook(pre))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@dataclass
class _Dense:
    answers: list[list[int]]
    logprobs: list[torch.Tensor]  # [answer tokens, vocab] per prompt, float16


class FlipEvaluator:
    """Flips, KL and confidence signals of a tier against the dense model on fixed held-out
    prompts. The dense answers and their log-probabilities are computed once and kept."""

    def __init__(
        self,
        model: Any,
        prompts: dict[str, list[list[int]]],
        eos: set[int],
        tokens: int = FLIP_TOKENS,
        progress: bool = False,
    ):
        self.model, self.eos, self.tokens, self.progress = model, eos, tokens, progress
        self.prompts = {d: p for d, p in prompts.items() if p}
        if not self.prompts:
            raise ValueError("no held-out prompts")
        self._dense: dict[str, _Dense] | None = None

    def dense(self) -> dict[str, _Dense]:
        """The dense model's answers and log-probabilities (computed on first use)."""
        if self._dense is None:
            self._dense = {}
            for d, prompts in bar(
                list(self.prompts.items()), desc="dense answers", disable=not self.progress
            ):
                answers = greedy(self.model, prompts, self.tokens, self.eos)
                logps = [
                    self._logprobs(self.model, p, a)[0].half()
                    for p, a in zip(prompts, answers, strict=True)
                ]
                self._dense[d] = _Dense(answers, logps)
        return self._dense

    @torch.no_grad()
    def _logprobs(
        self, model: Any, prompt: list[int], answer: list[int], silence: list[float] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of the positions that predict each answer token [len(answer),
        vocab], and the next-token distribution after the prompt alone [vocab]."""
        x = torch.tensor([prompt + answer[:-1]]) if answer else torch.tensor([prompt])
        logits = model(x, use_cache=False).logits[0].float()
        logp = F.log_softmax(logits, dim=-1)
        n = len(prompt)
        return logp[n - 1 : n - 1 + len(answer)], logp[n - 1]

    def _read(
        self,
        tier: Any,
        prompt: list[int],
        answer: list[int],
        dense_logp: torch.Tensor,
        reference: dict[str, Any] | None,
    ) -> tuple[float, int, dict[str, float]]:
        """One prompt through the tier, reading the dense answer: the KL summed over the
        answer's tokens, how many of them the tier also ranks first (what a draft by the tier
        would get accepted by the dense model, token by token), and the prompt's confidence
        signals (silence only with a reference that has calibrated shares for every layer)."""
        thresholds = list((reference or {}).get("thresholds") or [])
        calibrated = list((reference or {}).get("sparsity") or [])
        silence = bool(thresholds) and len(calibrated) == len(thresholds)
        shares = [0.0] * len(thresholds)
        counter = _silence_counter(tier, thresholds, shares, len(prompt))
        with counter if silence else nullcontext():
            logp, nxt = self._logprobs(tier, prompt, answer)
        p_ref = dense_logp.float()
        kl = float((p_ref.exp() * (p_ref - logp)).sum())
        agree = int((logp.argmax(dim=-1) == torch.tensor(answer)).sum()) if answer else 0
        probs = nxt.exp()
        top = probs.topk(2).values
        signals = {
            "entropy": float(-(probs * nxt).sum()),
            "margin": 1.0 - float(top[0] - top[1]),
        }
        if silence:
            dev = [
                abs(got - want)
                for got, want in zip(shares, calibrated, strict=True)
                if want is not None
            ]
            signals["silence"] = sum(dev) / max(1, len(dev))
        return kl, agree, signals

    @torch.no_grad()
    def evaluate(
        self,
        cut: AbstractContextManager[None] | None = None,
        model: Any = None,
        reference: dict[str, Any] | None = None,
        desc: str = "flips",
    ) -> dict[str, Any]:
        """The tier's figures: per domain its flips (share) and mean KL, the worst domain's
        flips at the top, and per confidence signal its ROC AUC over every prompt. `model`: an
        artifact loaded on its own (else the evaluator's with `cut` applied); `reference`: the
        tier's live reference (per-layer thresholds and calibrated shares; without it, no
        silence signal)."""
        dense = self.dense()
        tier = model or self.model
        domains: dict[str, Any] = {}
        labels: list[int] = []
        agreed = 0  # dense answer tokens the tier ranks first too, all domains
        scores: dict[str, list[float]] = {s: [] for s in SIGNALS}
        with cut or nullcontext():
            for d, prompts in bar(list(self.prompts.items()), desc=desc, disable=not self.progress):
                ref = dense[d]
                answers = greedy(tier, prompts, self.tokens, self.eos)
                flips, kl_sum, kl_n, agree = 0, 0.0, 0, 0
                for p, a, ra, rl in zip(prompts, answers, ref.answers, ref.logprobs, strict=True):
                    kl, same, signals = self._read(tier, p, ra, rl, reference)
                    flips += int(a != ra)
                    labels.append(int(a != ra))
                    kl_sum, kl_n, agree = kl_sum + kl, kl_n + len(ra), agree + same
                    for name, value in signals.items():
                        scores[name].append(value)
                agreed += agree
                domains[d] = {
                    "prompts": len(prompts),
                    "flips": round(flips / len(prompts), 4),
                    "kl": round(kl_sum / max(1, kl_n), 6),
                    "agreement": round(agree / max(1, kl_n), 4),
                    "tokens": kl_n,
                }
        worst = max(domains, key=lambda d: (domains[d]["flips"], domains[d]["kl"]))
        total = sum(v["prompts"] for v in domains.values())
        confidence: dict[str, Any] = {}
        for s in SIGNALS:
            if len(scores[s]) == len(labels):
                auc, curve = roc(labels, scores[s])
                confidence[s] = {"auc": None if auc is None else round(auc, 4), "curve": curve}
        rated = {s: v["auc"] for s, v in confidence.items() if v["auc"] is not None}
        best = max(rated, key=lambda s: rated[s]) if rated else None
        return {
            "tokens": self.tokens,
            "flips": domains[worst]["flips"],
            "kl": domains[worst]["kl"],
            "worst_domain": worst,
            "overall": round(sum(labels) / max(1, total), 4),
            # share of the dense answers' tokens the tier ranks first too (all domains)
            "agreement": round(agreed / max(1, sum(v["tokens"] for v in domains.values())), 4),
            "domains": domains,
            "confidence": {
                "best": best,
                "auc": rated.get(best) if best else None,
                "signals": confidence,
                "prompts": total,
                "flipped": sum(labels),
            },
        }


def roc(labels: list[int], scores: list[float]) -> tuple[float | None, list[list[float]]]:
    """ROC AUC of `scores` predicting the positive labels (ties count half; None without both
    kinds of label), and the curve's points [false positive rate, true positive rate]."""
    pos = sum(labels)
    neg = len(labels) - pos
    if not pos or not neg:
        return None, []
    order = sorted(range(len(labels)), key=lambda j: -scores[j])
    # rank statistic with ties averaged (Mann-Whitney U / (pos * neg))
    ranks = [0.0] * len(labels)
    asc = sorted(range(len(labels)), key=lambda j: scores[j])
    j = 0
    while j < len(asc):
        k = j
        while k + 1 < len(asc) and scores[asc[k + 1]] == scores[asc[j]]:
            k += 1
        for m in range(j, k + 1):
            ranks[asc[m]] = (j + k) / 2 + 1
        j = k + 1
    u = sum(r for r, y in zip(ranks, labels, strict=True) if y) - pos * (pos + 1) / 2
    curve = [[0.0, 0.0]]
    tp = fp = 0
    for j, idx in enumerate(order):
        tp += labels[idx]
        fp += 1 - labels[idx]
        if j + 1 == len(order) or scores[order[j + 1]] != scores[idx]:
            curve.append([round(fp / neg, 4), round(tp / pos, 4)])
    return u / (pos * neg), curve


def draw_roc(cards: dict[str, dict[str, Any]], path: Path) -> Path:
    """The ROC curves of every tier's confidence signals (one panel per tier), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tiers = [t for t, f in cards.items() if f.get("confidence", {}).get("signals")]
    fig, axes = plt.subplots(1, max(1, len(tiers)), figsize=(4.2 * max(1, len(tiers)), 4.2))
    axes = list(axes) if len(tiers) > 1 else [axes]
    for ax, tier in zip(axes, tiers, strict=False):
        conf = cards[tier]["confidence"]
        for name, sig in conf["signals"].items():
            if sig["curve"]:
                xs, ys = zip(*sig["curve"], strict=True)
                ax.plot(xs, ys, label=f"{name} (AUC {sig['auc']:.2f})")
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"{tier}: {conf['flipped']} of {conf['prompts']} answers changed")
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate (changed answers caught)")
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def share_over(flips: dict[str, Any], budget: float | None) -> bool:
    """True when a tier's worst-domain flips exceed its budget (None: no budget held)."""
    return budget is not None and flips["flips"] > budget
