"""docs/decisions.md's index (scripts/decisions_index.py): every decision is numbered and listed
with its date and status, and a new decision gets the next number and today's date."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "decisions_index", ROOT / "scripts/decisions_index.py"
)
assert _spec and _spec.loader
index = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(index)


def test_the_index_is_in_step_with_the_decisions() -> None:
    text = (ROOT / "docs" / "decisions.md").read_text()
    assert index.build(text, "2099-01-01") == text, "run scripts/decisions_index.py"
    rows = [line for line in text.splitlines() if index.ROW.match(line)]
    bullets = [line for line in text.splitlines() if index.NUMBER.match(line)]
    assert len(rows) == len(bullets) > 150
    assert all(r.endswith(("| in force |", "| superseded |")) for r in rows)


def test_a_new_decision_is_numbered_and_dated_today() -> None:
    text = (ROOT / "docs" / "decisions.md").read_text()
    n = len([line for line in text.splitlines() if index.NUMBER.match(line)])
    added = text + "\n- **A new rule.** Superseded by nothing yet, said for the test.\n"
    new = index.build(added, "2099-01-01")
    assert f'- <a id="d{n + 1}"></a>**D{n + 1}.** **A new rule.**' in new
    area = [line[3:] for line in text.splitlines() if line.startswith("## ")][-1]  # the last
    anchor = re.sub(r"[^a-z0-9 -]", "", area.lower()).replace(" ", "-")
    row = f"| [D{n + 1}](#d{n + 1}) | [{area}](#{anchor}) | A new rule | 2099-01-01 |"
    assert row + " superseded |" in new
    assert index.build(new, "2100-01-01") == new  # numbered: its date stays
