"""Check a built artifact against its tier's budget, domain by domain: the artifact is loaded
from its folder as the engines would load it (not the builder's in-memory cut), scored against
the dense model on each domain's evaluation windows, and passes only if its worst domain is
within the budget. `zerolayer collapse verify TIER` runs it; a candidate artifact must pass it
before it replaces a served one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zerolayer.artifacts import read_card
from zerolayer.collapse.ablate import DomainEvaluator

__all__ = ["artifact_model", "verify"]

# which budget each artifact kind answers to (pruned is the masked cut, applied physically)
BUDGET_OF = {"masked": "masked", "pruned": "masked", "dynamic": "dynamic", "sparse24": "sparse24"}


def artifact_model(dense_dir: Path, folder: Path, kind: str) -> tuple[Any, Any]:
    """The artifact of the given kind loaded on its own, and the cut its thresholds need while
    it runs (None for the static kinds)."""
    from zerolayer.collapse.apply import (
        dynamic_cut,
        load_dynamic,
        load_masked,
        load_pruned,
        load_sparse24,
    )
    from zerolayer.collapse.model import load_model

    if kind == "masked":
        return load_masked(dense_dir, folder), None
    if kind == "pruned":
        return load_pruned(folder), None
    if kind == "dynamic":
        model, art = load_dynamic(dense_dir, folder)
        return model, dynamic_cut(model, art)
    if kind == "sparse24":
        return load_sparse24(load_model(dense_dir), folder), None
    raise ValueError(f"unknown artifact kind {kind!r}; known: {', '.join(BUDGET_OF)}")


def verify(
    dense: Any,
    dense_dir: Path,
    folder: Path,
    windows: dict[str, list[list[int]]],
    budget: float,
    kind: str | None = None,
) -> dict[str, Any]:
    """Score the artifact in `folder` against the loaded dense model on every domain's windows:
    its quality (the worst domain's at the top), the budget and whether it passed."""
    folder = Path(folder)
    kind = kind or read_card(folder).get("tier") or folder.name
    model, cut = artifact_model(Path(dense_dir), folder, kind)
    evaluator = DomainEvaluator(dense, windows, progress=True)
    quality = evaluator.evaluate(cut, desc=f"verify {kind}", model=model).as_dict()
    return {
        "artifact": str(folder),
        "kind": kind,
        "quality": quality,
        "budget_ppl_delta": budget,
        "passed": quality["ppl_delta"] <= budget,
    }
