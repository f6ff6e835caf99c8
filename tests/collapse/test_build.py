"""`Builder` end to end on the real model with tiny settings: every tier artifact and its card."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from zerolayer.collapse.apply import (
    load_dynamic,
    load_masked,
    load_pruned,
    load_sparse24,
)
from zerolayer.collapse.model import load_model
from zerolayer.collapse.sparse24 import is_24, linear
from zerolayer.collapse.strategies import build

pytestmark = pytest.mark.integration  # runs the collapse compiler

CARD_FIELDS = {
    "tier",
    "method",
    "level",
    "quality",
    "bytes_on_disk",
    "calibration",
    "validation",
    "eval",
    "domains",
    "leave_one_domain_out",
    "flips",
    "flip_budget",
}


@pytest.fixture(scope="module")
def built(tiny_build: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ValueError, match="unknown tiers"):
        build(tiny_build["builder"], ["turbo"])
    return tiny_build


def test_every_tier_has_a_card_on_disk(built: dict[str, Any]) -> None:
    for tier, card in built["cards"].items():
        on_disk = json.loads((built["out"] / tier / "tier_card.json").read_text())
        assert on_disk == card
        assert CARD_FIELDS <= set(card), tier
        assert card["calibration"]["samples"] == 4 and card["bytes_on_disk"] > 0
        assert {"ppl", "dense_ppl", "ppl_delta", "kl"} <= set(card["quality"])
    assert (built["out"] / "silence_map" / "silence_map.html").exists()


def test_cards_list_every_domain_and_hold_the_budget_on_the_worst(
    built: dict[str, Any],
) -> None:
    from tests.conftest import TINY_DOMAINS

    for tier, card in built["cards"].items():
        q = card["quality"]
        assert card["domains"] == list(TINY_DOMAINS) == list(q["domains"]), tier
        deltas = {d: e["ppl_delta"] for d, e in q["domains"].items()}
        assert q["worst_domain"] == max(deltas, key=deltas.get), tier
        assert q["ppl_delta"] == max(deltas.values()) <= card["budget_ppl_delta"], tier
        assert q["kl"] == max(e["kl"] for e in q["domains"].values()), tier
        # each domain's source and licence are on the card, for every part
        for part in ("calibration", "validation", "eval"):
            listed = card[part]["corpus"]["parts"]
            assert [p["domain"] for p in listed] == list(TINY_DOMAINS), (tier, part)
            assert all(p["source"] and p["licence"] for p in listed), (tier, part)
        lodo = card["leave_one_domain_out"]
        assert set(lodo["domains"]) == set(TINY_DOMAINS) and lodo["recipe"], tier
        for d, row in lodo["domains"].items():
            # the estimate never says an unseen domain costs less than the card's own figure
            assert row["unseen_ppl_delta"] >= q["domains"][d]["ppl_delta"] - 1e-5, (tier, d)
        worst = max(lodo["domains"], key=lambda d: lodo["domains"][d]["unseen_ppl_delta"])
        assert lodo["worst_domain"] == worst, tier


def test_cards_count_changed_answers_on_every_domain(built: dict[str, Any]) -> None:
    """Each card's flips: every domain's held-out prompts (flip_prompts each), the worst domain
    at the top, and the confidence signals' AUC where answers both changed and held."""
    from tests.conftest import TINY_COLLAPSE, TINY_DOMAINS

    for tier, card in built["cards"].items():
        f = card["flips"]
        assert list(f["domains"]) == list(TINY_DOMAINS), tier
        assert all(v["prompts"] == TINY_COLLAPSE["flip_prompts"] for v in f["domains"].values())
        assert f["flips"] == f["domains"][f["worst_domain"]]["flips"], tier
        assert f["flips"] == max(v["flips"] for v in f["domains"].values()), tier
        assert f["tokens"] == TINY_COLLAPSE["flip_tokens"] and card["flip_budget"] is None
        conf = f["confidence"]
        assert conf["prompts"] == len(TINY_DOMAINS) * TINY_COLLAPSE["flip_prompts"]
        assert conf["flipped"] == round(f["overall"] * conf["prompts"]), tier
        rated = 0 < conf["flipped"] < conf["prompts"]
        assert (conf["auc"] is not None) == rated, tier
        assert set(conf["signals"]) == {"entropy", "margin", "silence"}, tier


def test_a_flip_budget_is_held(built: dict[str, Any], tmp_path: Path) -> None:
    """A tier over its flip budget gets no card (its build fails, saying so); a candidate cut
    over it is refused in the search's confirmation."""
    import shutil

    from zerolayer.artifacts import read_dynamic
    from zerolayer.errors import ArtifactError

    b = built["builder"]
    tier = max(built["cards"], key=lambda t: built["cards"][t]["flips"]["flips"])
    card = built["cards"][tier]
    assert card["flips"]["flips"] > 0, "no tiny tier changes an answer"
    folder = tmp_path / tier
    shutil.copytree(built["out"] / tier, folder)
    (folder / "tier_card.json").unlink()
    kind = {"pruned": "masked"}.get(tier, tier)
    settings = b.s
    try:
        b.s = settings.model_copy(update={"flip_budgets": {kind: 0.0}})
        with pytest.raises(ArtifactError, match="over its flip budget"):
            b.card(tier, card["method"], card["quality"], {}, folder)
        assert not (folder / "tier_card.json").exists()
        if built["cards"]["dynamic"]["flips"]["flips"] > 0:
            art = read_dynamic(built["out"] / "dynamic")
            b.s = settings.model_copy(update={"flip_budgets": {"dynamic": 0.0}})
            quality, over = b.confirm("dynamic", b.applied(art))
            # (its perplexity change may be under zero: distillation on two tiny domains)
            assert over is True and quality["worst_domain"] in quality["domains"]
            b.s = settings.model_copy(update={"flip_budgets": {"dynamic": 1.0}})
            assert b.confirm("dynamic", b.applied(art))[1] is False
        b.s = settings.model_copy(update={"flip_budgets": {kind: 1.0}})
        written = b.card(tier, card["method"], card["quality"], {}, folder)
        assert written["flip_budget"] == 1.0 and written["flips"] == card["flips"]
    finally:
        b.s = settings


def test_the_flips_command_counts_built_tiers_onto_their_cards(
    built: dict[str, Any], model_dir: Path, tmp_path: Path
) -> None:
    import shutil

    from tests.test_cli import zerolayer

    root = tmp_path / "artifacts"
    shutil.copytree(built["root"], root)
    env = {
        "ZEROLAYER_CACHE_DIR": str(model_dir.parent.parent),
        "ZEROLAYER_ARTIFACTS_DIR": str(root),
    }
    args = ["--tiers", "masked,dynamic", "--flip-prompts", "2", "--flip-tokens", "12"]
    args += ["--domains", "docs,zh"]
    run = zerolayer("collapse", "flips", *args, "--out", str(tmp_path), env=env)
    assert run.returncode == 0, run.stderr
    assert "masked " in run.stdout and "dynamic " in run.stdout and "AUC" in run.stdout
    report = json.loads((tmp_path / "flips.json").read_text())
    for tier in ("masked", "dynamic"):
        card = json.loads((root / "smollm2-135m" / tier / "tier_card.json").read_text())
        assert card["flips"] == report[tier]
        assert {d: v["prompts"] for d, v in card["flips"]["domains"].items()} == {
            "docs": 2,
            "zh": 2,
        }
        assert card["quality"] == built["cards"][tier]["quality"]  # the rest of the card kept
    assert (tmp_path / "flips_roc.png").read_bytes()[:4] == b"\x89PNG"
    missing = zerolayer("collapse", "flips", "--tiers", "turbo", env=env)
    assert missing.returncode != 0 and "unknown tier kinds" in missing.stderr


def _verified(built: dict[str, Any], model_dir: Path, kind: str, folder: Path | None = None):
    from zerolayer.collapse.verify import verify

    b = built["builder"]
    budget = built["cards"][kind]["budget_ppl_delta"]
    return verify(b.model, model_dir, folder or built["out"] / kind, b.eval_domains, budget)


def test_a_damaged_artifact_fails_its_budget(
    built: dict[str, Any], model_dir: Path, tmp_path: Path
) -> None:
    import shutil

    from tests.test_cli import zerolayer

    ok = _verified(built, model_dir, "dynamic")
    assert ok["passed"] and ok["quality"]["worst_domain"] in ok["quality"]["domains"]
    damaged = tmp_path / "dynamic"
    shutil.copytree(built["out"] / "dynamic", damaged)
    th = json.loads((damaged / "thresholds.json").read_text())
    # a threshold on every layer's MLP intermediate 40x the largest chosen: most of it zeroed
    top = max(th["thresholds"].values(), default=0.05)
    th["thresholds"] = {str(i): top * 40 for i in range(30)}
    (damaged / "thresholds.json").write_text(json.dumps(th))
    bad = _verified(built, model_dir, "dynamic", damaged)
    assert not bad["passed"] and bad["quality"]["ppl_delta"] > bad["budget_ppl_delta"]
    # the command says so with its exit status and names the worst domain
    env = {"ZEROLAYER_CACHE_DIR": str(model_dir.parent.parent)}
    args = ["--seq-len", "64", "--eval-samples", "1", "--domains", "docs,zh"]
    run = zerolayer("collapse", "verify", "dynamic", "--artifact", str(damaged), *args, env=env)
    assert run.returncode == 1, run.stderr
    assert "dynamic FAILS its budget" in run.stdout and "worst domain" in run.stdout
    good = zerolayer(
        "collapse",
        "verify",
        "dynamic",
        "--artifact",
        str(built["out"] / "dynamic"),
        *args,
        env=env,
    )
    assert good.returncode in (0, 1), good.stderr  # one window per domain: either verdict
    assert "zh" in good.stdout and "docs" in good.stdout


def test_masked_meets_its_budget_on_the_evaluation_corpus(
    built: dict[str, Any], model_dir: Path
) -> None:
    card = built["cards"]["masked"]
    assert card["quality"]["ppl_delta"] <= 0.03
    assert 0 <= card["mlp_flops_removed"] < 0.5
    # the artifact reproduces the evaluated cut: re-evaluate from disk, domain by domain
    again = _verified(built, model_dir, "masked")["quality"]
    for d, e in card["quality"]["domains"].items():
        assert again["domains"][d]["ppl"] == pytest.approx(e["ppl"], rel=1e-3), d


def test_pruned_checkpoint_matches_masked(built: dict[str, Any], model_dir: Path) -> None:
    pruned = load_pruned(built["out"] / "pruned")
    masked = load_masked(model_dir, built["out"] / "masked")
    widths = [layer.mlp.gate_proj.out_features for layer in pruned.model.layers]
    assert widths == built["cards"]["masked"]["intermediate_sizes"]
    x = torch.tensor([built["builder"].eval_windows[0]])
    with torch.no_grad():
        diff = (pruned(x, use_cache=False).logits - masked(x, use_cache=False).logits).abs().max()
    assert diff.item() < 1e-4


def test_sparse24_artifact_loads_with_the_pattern_and_meets_its_budget(
    built: dict[str, Any], model_dir: Path
) -> None:
    card = built["cards"]["sparse24"]
    assert card["quality"]["ppl_delta"] <= 0.10
    model = load_sparse24(load_model(model_dir), built["out"] / "sparse24")
    for name in card["projections_24"]:
        i, proj = name.split(".")
        assert is_24(linear(model.model.layers[int(i)], proj).weight), name
    assert 0 <= card["mlp_weights_24"] <= 1
    layers = model.model.layers
    sizes = {
        f"{i}.{p}": linear(layer, p).weight.numel()
        for i, layer in enumerate(layers)
        for p in ("gate_proj", "up_proj", "down_proj", "q_proj", "k_proj", "v_proj", "o_proj")
    }
    share = sum(sizes[n] for n in card["projections_24"]) / sum(sizes.values())
    assert card["weights_24"] == pytest.approx(share, abs=1e-5)


def test_dynamic_artifact_reproduces_its_card(built: dict[str, Any], model_dir: Path) -> None:
    card = built["cards"]["dynamic"]
    assert card["quality"]["ppl_delta"] <= 0.03
    assert 0 <= card["activation_sparsity"] < 1
    model, art = load_dynamic(model_dir, built["out"] / "dynamic")
    for kind, th in art.inputs().items():
        assert all(t > 0 for t in th.values()), kind
        if kind != "mlp":
            assert bool(th) == (card["level"][f"{kind}_share"] > 0), kind
            assert 0 <= card[f"{kind}_activation_sparsity"] < 1, kind
            # a share s of the input under its threshold on calibration text: about s zeroed
            share = card["level"][f"{kind}_share"]
            assert card[f"{kind}_activation_sparsity"] == pytest.approx(share, abs=0.15), kind
    again = _verified(built, model_dir, "dynamic")["quality"]
    for d, e in card["quality"]["domains"].items():
        assert again["domains"][d]["ppl"] == pytest.approx(e["ppl"], rel=1e-3), d


def test_a_dynamic_cut_changes_the_model_only_inside_its_body(
    built: dict[str, Any], model_dir: Path
) -> None:
    from zerolayer.artifacts import read_dynamic
    from zerolayer.collapse.ablate import Evaluator

    b = built["builder"]
    art = read_dynamic(built["out"] / "dynamic")
    x = torch.tensor([b.eval_windows[0][:64]])
    with torch.no_grad():
        dense = b.model(x, use_cache=False).logits
        applied = b.applied(art)  # made, not entered: the model is still dense
        assert torch.equal(b.model(x, use_cache=False).logits, dense)
        with applied:
            assert not torch.equal(b.model(x, use_cache=False).logits, dense)
        assert torch.equal(b.model(x, use_cache=False).logits, dense)
    # an evaluator's first call computes the dense reference before entering the cut it gets
    fresh = Evaluator(b.model, b.eval_windows[:2])
    cut = fresh.evaluate(b.applied(art))
    assert cut.dense_ppl == pytest.approx(Evaluator(b.model, b.eval_windows[:2]).dense())
    assert cut.kl > 0


def test_dynamic_card_lists_every_share_tried(built: dict[str, Any]) -> None:
    card = built["cards"]["dynamic"]
    trials = card["level"]["input_trials"]
    levels = built["builder"].s.input_levels
    assert [t["kind"] for t in trials] == sorted(
        (t["kind"] for t in trials), key=list(levels).index
    )
    for t in trials:
        assert t["share"] in levels[t["kind"]] and isinstance(t["validation"], float)
    for kind in levels:
        share = card["level"][f"{kind}_share"]
        if share > 0:  # the chosen share was confirmed on the evaluation corpus
            chosen = [t for t in trials if t["kind"] == kind and t["share"] == share]
            assert chosen and chosen[-1]["evaluation"] <= card["budget_ppl_delta"]


def test_distillation_trains_the_weights_reading_one_input(built: dict[str, Any]) -> None:
    from zerolayer.artifacts import Dynamic
    from zerolayer.collapse.ablate import Evaluator
    from zerolayer.collapse.strategies.dynamic import _distil, _weights_of

    b = built["builder"]
    dense_q = b.model.model.layers[1].self_attn.q_proj.weight.clone()
    trial = Dynamic(mlp={0: 0.05}, qkv={1: 0.3})  # layer 1's q/k/v input thresholded
    distilled = _distil(b, trial, "qkv")
    assert set(distilled.weights) == {(1, "q_proj"), (1, "k_proj"), (1, "v_proj")}
    assert not distilled.down  # down_proj's weights are distilled with the MLP thresholds
    assert _weights_of(distilled) == {"qkv": "distilled"}
    assert _weights_of(trial) == {"qkv": "dense"}
    on_train = Evaluator(b.model, b.calib_windows)
    assert on_train.evaluate(b.applied(distilled)).kl < on_train.evaluate(b.applied(trial)).kl
    assert torch.equal(b.model.model.layers[1].self_attn.q_proj.weight, dense_q)  # teacher kept
