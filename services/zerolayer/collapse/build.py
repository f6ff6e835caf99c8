"""Build every tier artifact of a model within its quality budgets, each with a tier card.

The Builder holds what all tiers of one build share (the loaded model, the calibration,
validation and evaluation windows, the silence map, the Gram matrices) and the steps every
strategy uses: allocate on the validation windows, recover by distillation, confirm on the
evaluation corpus, write the card. Each tier's strategy is a module of collapse/strategies/,
and `collapse.strategies.build(builder, tiers)` runs the ones asked for.

Layout under <cache>/artifacts/<model>/:
  silence_map/   silence_map.safetensors, .json, .png, .html
  masked/        masks.safetensors + tier_card.json (static MLP channel cut, repaired down_proj)
  pruned/        a checkpoint with per-layer MLP widths + tier_card.json
  dynamic/       thresholds.json, down_proj.safetensors, inputs.safetensors + tier_card.json
                 (per-token thresholds, and weights distilled with them in place)
  sparse24/      sparse24.safetensors (2:4 values + indices) + tier_card.json
A tier's card is written last: a folder without one is an unfinished build.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from zerolayer.artifacts import Dynamic, write_card
from zerolayer.collapse.ablate import DomainEvaluator
from zerolayer.collapse.allocate import Choice, Sensitivity, choose
from zerolayer.collapse.apply import dynamic_cut
from zerolayer.collapse.calibrate import calibrate
from zerolayer.collapse.corpus import domain_windows, labelled_windows
from zerolayer.collapse.domains import Corpora
from zerolayer.collapse.draw import draw_html, draw_png
from zerolayer.collapse.flips import FlipEvaluator, heldout_prompts, share_over
from zerolayer.collapse.model import decoder_layers, load_model
from zerolayer.collapse.progress import bar
from zerolayer.collapse.reconstruct import gram_matrices, swapped, swapped_named
from zerolayer.collapse.recover import distill
from zerolayer.collapse.reference import live_reference
from zerolayer.collapse.silence_map import SilenceMap
from zerolayer.collapse.verify import BUDGET_OF, artifact_model
from zerolayer.config import CollapseConfig
from zerolayer.errors import ArtifactError

__all__ = ["Builder", "Weights", "dynamic_applied", "eos_ids"]

Weights = dict[int, torch.Tensor]


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


class Builder:
    """Holds the loaded model, windows and evaluators shared by all tiers of one build."""

    def __init__(
        self,
        model_dir: Path,
        out: Path,
        corpora: Corpora,
        settings: CollapseConfig,
        model_name: str,
    ):
        from transformers import AutoTokenizer

        self.model_dir, self.out, self.s, self.name = (
            Path(model_dir),
            Path(out),
            settings,
            model_name,
        )
        self.model = load_model(model_dir)
        self.tokenizer = tok = AutoTokenizer.from_pretrained(str(model_dir))
        s = settings
        self.corpora = corpora
        self.calib, self.evaluation = corpora.calibration, corpora.evaluation
        labelled = labelled_windows(tok, self.calib, s.samples, s.seq_len, s.seed)
        self.calib_windows = [w for _, w in labelled]
        self.calib_labels = [d for d, _ in labelled]  # the domain of each calibration window
        # per domain: validation_samples windows steer the choices, eval_samples confirm them
        self.val_domains = domain_windows(
            tok, corpora.validation, s.validation_samples, s.seq_len, s.seed
        )
        self.eval_domains = domain_windows(
            tok, self.evaluation, s.eval_samples, s.seq_len, s.seed + 1
        )
        self.val_windows = [w for ws in self.val_domains.values() for w in ws]
        self.eval_windows = [w for ws in self.eval_domains.values() for w in ws]
        self.validator = DomainEvaluator(self.model, self.val_domains)
        # the sensitivity sweeps (hundreds of candidates) measure on the first windows only
        self.sensor = DomainEvaluator(
            self.model, {d: w[: s.sensitivity_samples] for d, w in self.val_domains.items()}
        )
        self.evaluator = DomainEvaluator(self.model, self.eval_domains, progress=True)
        self.layers = len(decoder_layers(self.model))
        self.cut_layers = list(range(self.layers - settings.dense_layers))
        self._map: SilenceMap | None = None
        self._grams: list[torch.Tensor] | None = None
        self._flips: FlipEvaluator | None = None

    # shared measurements --------------------------------------------------------------------
    def silence_map(self) -> SilenceMap:
        """The silence map of the calibration windows (measured once, saved and drawn)."""
        if self._map is None:
            meta = {"model": self.name, "corpus": self.calib.describe(), "seed": self.s.seed}
            self._map = calibrate(
                self.model, self.calib_windows, quantile=self.s.quantile, meta=meta
            )
            folder = self._map.save(self.out / "silence_map")
            draw_png(self._map, folder / "silence_map.png")
            draw_html(self._map, folder / "silence_map.html")
            ref = self.live_reference("dense", None)
            (folder / "live_reference.json").write_text(json.dumps(ref, indent=1) + "\n")
        return self._map

    def live_reference(self, kind: str, folder: Path | None) -> dict[str, Any]:
        """The calibrated side of a tier's live signals (collapse.reference), against the
        silence map's per-layer thresholds on down_proj's inputs."""
        smap = self.silence_map()
        q = smap.meta.get("quantile", self.s.quantile)
        thresholds = smap.stats["mlp"].thresholds(q).tolist()
        return live_reference(self.model_dir, kind, folder, thresholds, self.val_windows)

    def flipper(self) -> FlipEvaluator:
        """Changed answers against dense on held-out prompts per domain (collapse.flips)."""
        if self._flips is None:
            prompts = heldout_prompts(
                self.tokenizer, self.evaluation, self.s.flip_prompts, self.s.seed
            )
            eos = eos_ids(self.model, self.tokenizer)
            self._flips = FlipEvaluator(self.model, prompts, eos, self.s.flip_tokens)
        return self._flips

    def confirm(
        self, tier: str, applied: AbstractContextManager[None]
    ) -> tuple[dict[str, Any], bool]:
        """A candidate cut's quality on the evaluation corpus, and whether it changes more
        held-out answers than the tier's flip budget allows (False when it holds none); the
        cut (entered once) covers both."""
        budget = self.s.flip_budget(BUDGET_OF[tier])
        if budget is None:
            return self.evaluator.evaluate(applied, desc=f"{tier} on eval").as_dict(), False
        self.evaluator.dense()  # the dense references first, outside the cut
        self.flipper().dense()
        with applied:
            quality = self.evaluator.evaluate(desc=f"{tier} on eval").as_dict()
            flips = self.flipper().evaluate(desc=f"{tier} flips")
        return quality, share_over(flips, budget)

    def grams(self) -> list[torch.Tensor]:
        """Per layer, the Gram matrix of the MLP intermediate on the calibration windows."""
        if self._grams is None:
            self._grams = gram_matrices(self.model, self.calib_windows)
        return self._grams

    # steps every strategy uses ---------------------------------------------------------------
    def card(
        self, tier: str, method: str, quality: dict[str, float], extra: dict[str, Any], folder: Path
    ) -> dict[str, Any]:
        """Write the tier's card into its folder (the build's last step) and return it."""
        card = {
            "tier": tier,
            "model": self.name,
            "method": method,
            **extra,
            "quality": quality,
            "budget_ppl_delta": self.s.budget(BUDGET_OF[tier]),
            "budget_applies_to": "the worst domain on the evaluation parts",
            "domains": list(self.eval_domains),
            "eval": {
                "corpus": self.evaluation.describe(),
                "windows": {d: len(w) for d, w in self.eval_domains.items()},
                "seq_len": self.s.seq_len,
            },
            "validation": {
                "corpus": self.corpora.validation.describe(),
                "windows": {d: len(w) for d, w in self.val_domains.items()},
            },
            "calibration": {
                "corpus": self.calib.describe(),
                "samples": len(self.calib_windows),
                "seq_len": self.s.seq_len,
                "seed": self.s.seed,
            },
        }
        card["live_reference"] = self.live_reference(tier, folder)
        # changed answers, of the artifact loaded from its folder as the engines load it
        model, cut = artifact_model(self.model_dir, folder, tier)
        card["flips"] = self.flipper().evaluate(
            cut, model, card["live_reference"], desc=f"{tier} flips"
        )
        card["flip_budget"] = budget = self.s.flip_budget(BUDGET_OF[tier])
        if share_over(card["flips"], budget):
            f = card["flips"]
            raise ArtifactError(
                f"tier {tier} changes {f['flips']:.0%} of the held-out answers on "
                f"{f['worst_domain']}, over its flip budget of {budget:.0%}: raise "
                f"flip_budgets.{BUDGET_OF[tier]} in models.yaml or lower its perplexity budget"
            )
        card["bytes_on_disk"] = _bytes(folder)
        return write_card(folder, card)

    def fit(
        self,
        sens: Sensitivity,
        cut: Callable[[dict[int, float]], AbstractContextManager[None]],
        removed: Callable[[dict[int, float]], float],
        tier: str,
        recover: Callable[[Choice], tuple[Weights, AbstractContextManager[None], bool]],
        max_share: float = 0.75,
    ) -> tuple[Choice, Weights, dict[str, float], bool]:
        """Allocate on the validation windows (the cut alone), recover (distillation), then keep
        the result only if the evaluation corpus confirms the budget; otherwise tighten the
        validation target and allocate again. Returns the choice, its down_proj weights, its
        quality on the evaluation corpus and whether those weights are distilled."""
        budget = self.s.budget(tier)
        headroom = self.s.distill_headroom.get(tier, 1.0) if self.s.distill_epochs else 1.0
        target = budget * headroom
        for _ in range(4):
            choice = choose(
                sens, self.validator, target, cut, removed, self.s.search_tries, max_share
            )
            down, applied, distilled = recover(choice)
            quality, over = self.confirm(tier, applied)
            if quality["ppl_delta"] <= budget and not over:
                return choice, down, quality, distilled
            target *= 0.75
        # Nothing confirmed: no cut at all, which meets any budget. (A search at a zero
        # allowance could still take layers whose measured cost was noise.)
        choice = Choice({i: 0.0 for i in sens.layers}, 0.0, 0.0)
        return choice, {}, self.evaluator.evaluate(desc=f"{tier} on eval").as_dict(), False

    def distilled(
        self,
        choice: Choice,
        start: Weights,
        keep: dict[int, torch.Tensor] | None,
        apply: Callable[[Weights], AbstractContextManager[None]],
        student_cut: Callable[[Any], AbstractContextManager[None]] | None = None,
    ) -> Weights:
        """Distilled down_proj weights for a chosen cut, or `start` when distillation is off or
        does not improve the validation windows."""
        if self.s.distill_epochs <= 0 or not start:
            return start
        down = distill(
            self.model,
            start,
            keep,
            self.calib_windows,
            epochs=self.s.distill_epochs,
            lr=self.s.distill_lr,
            seed=self.s.seed,
            student_cut=student_cut,
        )
        if self.validator.evaluate(apply(down)).ppl_delta > choice.val_delta:
            return start
        return down

    def calib_of(self, domains: set[str]) -> list[list[int]]:
        """The calibration windows of the given domains, in build order."""
        pairs = zip(self.calib_windows, self.calib_labels, strict=True)
        return [w for w, d in pairs if d in domains]

    def leave_one_out(
        self,
        quality: dict[str, Any],
        rederive: Callable[[str | None], AbstractContextManager[None]],
        recipe: str,
    ) -> dict[str, Any]:
        """What a domain the compiler never saw costs, estimated per domain with calibration
        text: `rederive(domain)` makes the cut's data-dependent choices again from the
        calibration windows of every other domain (same shares; `recipe` says what is re-made;
        None: from every domain) and it is scored on the left-out domain's evaluation windows,
        beside the same recipe on all windows. The estimate for an unseen domain is the card's
        figure on it plus what leaving it out added."""
        domains = [d for d in dict.fromkeys(self.calib_labels) if d in self.eval_domains]
        if len(domains) < 2:
            return {"recipe": recipe, "domains": {}, "note": "fewer than two domains"}
        seen = self.evaluator.evaluate(rederive(None), desc="recipe on every domain")
        out: dict[str, Any] = {}
        for d in bar(domains, desc="leave one domain out", unit="domain"):
            without = self.evaluator.evaluators[d].evaluate(rederive(d))
            added = without.ppl_delta - seen.domains[d].ppl_delta
            out[d] = {
                "ppl_delta_left_out": round(without.ppl_delta, 5),
                "kl_left_out": round(without.kl, 6),
                "ppl_delta_seen": round(seen.domains[d].ppl_delta, 5),
                "unseen_ppl_delta": round(quality["domains"][d]["ppl_delta"] + max(0.0, added), 5),
            }
        worst = max(out, key=lambda d: out[d]["unseen_ppl_delta"])
        return {
            "recipe": recipe,
            "domains": out,
            "worst_domain": worst,
            "unseen_ppl_delta": out[worst]["unseen_ppl_delta"],
        }

    def windows_without(self, domain: str | None) -> list[list[int]]:
        """The calibration windows of every domain but one (None: all)."""
        return self.calib_of(set(self.calib_labels) - {domain})

    def silence_map_without(self, domain: str | None) -> SilenceMap:
        """The silence map of every domain's calibration windows but one (None: the build's)."""
        if domain is None:
            return self.silence_map()
        windows = self.windows_without(domain)
        return calibrate(self.model, windows, quantile=self.s.quantile, progress=False)

    def applied(self, art: Dynamic) -> AbstractContextManager[None]:
        """A dynamic artifact on the loaded model: its weights and its thresholds, in the
        weight precision the build serves it in (every candidate is judged as it will run)."""
        return dynamic_applied(self.model, replace(art, weight_dtype=self.s.dynamic_weight_dtype))


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """The tokens that end an answer: the tokenizer's and the model's generation config's."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    found = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(found) if isinstance(found, list) else {found} if found is not None else set()
    return ids


@contextmanager
def dynamic_applied(model: Any, art: Dynamic) -> Iterator[None]:
    """A dynamic artifact's weights and thresholds on a model while the body runs (applied
    when the body starts, not before: an Evaluator computes its dense reference before it
    enters the cut it is given)."""
    with swapped(model, art.down), swapped_named(model, art.weights), dynamic_cut(model, art):
        yield
