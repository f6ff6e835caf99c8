"""Promotion and rollback on disk: a candidate that failed its gate is refused and nothing
moves; a promoted one is served from the kind's folder with the old one in history; rollbacks
walk back one step at a time; every step is in the log."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from zerolayer.artifacts import card_stamp, read_card, write_card
from zerolayer.collapse.promote import history, promote, rollback
from zerolayer.errors import ArtifactError

pytestmark = pytest.mark.integration  # the compiler's artifacts (tiny_build)

PASSED = {"passed": True, "quality": {"domains": {"docs": {"ppl_delta": 0.01}}}}


def _candidate(src: Path, where: Path, note: str) -> Path:
    shutil.copytree(src, where)
    write_card(where, {**read_card(where), "note": note})
    return where


def test_promote_refuse_and_roll_back(tiny_build: dict[str, Any], tmp_path: Path) -> None:
    root = tmp_path / "smollm2-135m"
    src = tiny_build["out"] / "dynamic"
    shutil.copytree(src, root / "dynamic")
    first = card_stamp(root / "dynamic")

    bad = _candidate(src, root / "candidates" / "bad", "bad")
    failed = {"passed": False, "budget_ppl_delta": 0.03, "quality": {"worst_domain": "zh"}}
    with pytest.raises(ArtifactError, match="fails its budget"):
        promote(root, "dynamic", bad, failed)
    assert bad.exists() and card_stamp(root / "dynamic") == first  # nothing moved
    with pytest.raises(ArtifactError, match="not 'dynamic'"):
        promote(root, "dynamic", _candidate(tiny_build["out"] / "sparse24", root / "s", "x"), None)

    a = promote(root, "dynamic", _candidate(src, root / "candidates" / "a", "a"), PASSED)
    assert read_card(root / "dynamic")["note"] == "a" and a["previous"]
    assert card_stamp(root / "history" / a["previous"]) == first
    promote(root, "dynamic", _candidate(src, tmp_path / "elsewhere-b", "b"), PASSED)
    assert read_card(root / "dynamic")["note"] == "b"

    rollback(root, "dynamic")
    assert read_card(root / "dynamic")["note"] == "a"
    rollback(root, "dynamic")
    assert card_stamp(root / "dynamic") == first  # the original again
    with pytest.raises(ArtifactError, match="no earlier"):
        rollback(root, "dynamic")
    assert [e["action"] for e in history(root, "dynamic")] == [
        "promote",
        "promote",
        "rollback",
        "rollback",
    ]
