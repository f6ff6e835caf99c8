"""Promotion and rollback of a tier's artifact, on disk.

The served artifact of a kind is the folder <artifacts>/MODEL/KIND. Promotion moves it to
<artifacts>/MODEL/history/KIND-<time> and the candidate into its place; rollback moves the
served one to history as rolled back and the newest earlier one back. Every step is a rename on
one filesystem (a candidate elsewhere is copied next to the folder first), logged to
history/log.jsonl. A running platform notices the new card within seconds and its replicas
swap to the artifact in place (serve.launcher, replicas.deployment)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from zerolayer.artifacts import read_card
from zerolayer.errors import ArtifactError

__all__ = ["HISTORY", "promote", "rollback", "history"]

HISTORY = "history"
_ROLLED_BACK = "-rolled-back"


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{time.time_ns() % 10**9:09d}"


def _log(root: Path, entry: dict[str, Any]) -> dict[str, Any]:
    folder = root / HISTORY
    folder.mkdir(parents=True, exist_ok=True)
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **entry}
    with (folder / "log.jsonl").open("a") as f:
        f.write(json.dumps(entry) + "\n")
    return entry


def history(root: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The promotion log, oldest first (of one kind, or of all)."""
    path = Path(root) / HISTORY / "log.jsonl"
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in entries if kind is None or e["kind"] == kind]


def promote(
    root: Path, kind: str, candidate: Path, report: dict[str, Any] | None
) -> dict[str, Any]:
    """Serve `candidate` as the kind's artifact; the served one goes to history. `report` is
    the gate's verdict (collapse.verify): a candidate that did not pass is refused."""
    root, candidate = Path(root), Path(candidate)
    card = read_card(candidate)  # ArtifactError: not a finished artifact
    if card.get("tier") not in (None, kind):
        raise ArtifactError(f"{candidate} is a {card.get('tier')!r} artifact, not {kind!r}")
    if report is not None and not report.get("passed"):
        q = report.get("quality", {})
        raise ArtifactError(
            f"the candidate fails its budget {report.get('budget_ppl_delta', 0):+.1%} on "
            f"{q.get('worst_domain')} ({q.get('ppl_delta', 0):+.2%}): not promoted"
        )
    served = root / kind
    stamp = _stamp()
    if not _same_fs(candidate, root):
        incoming = root / f".incoming-{kind}-{stamp}"
        shutil.copytree(candidate, incoming)
        candidate = incoming
    previous = None
    if served.exists():
        previous = root / HISTORY / f"{kind}-{stamp}"
        previous.parent.mkdir(parents=True, exist_ok=True)
        served.rename(previous)
    candidate.rename(served)
    return _log(
        root,
        {
            "action": "promote",
            "kind": kind,
            "from": str(candidate),
            "previous": previous.name if previous else None,
            "quality": (report or {}).get("quality", {}).get("domains"),
            "passed": None if report is None else bool(report.get("passed")),
        },
    )


def rollback(root: Path, kind: str) -> dict[str, Any]:
    """Serve the kind's newest earlier artifact again; the served one goes to history, marked
    rolled back (a second rollback goes one further back)."""
    root = Path(root)
    earlier = sorted(
        p
        for p in (root / HISTORY).glob(f"{kind}-*")
        if p.is_dir() and not p.name.endswith(_ROLLED_BACK)
    )
    if not earlier:
        raise ArtifactError(f"no earlier {kind!r} artifact in {root / HISTORY} to roll back to")
    restore, served = earlier[-1], root / kind
    dropped = None
    if served.exists():
        dropped = root / HISTORY / f"{kind}-{_stamp()}{_ROLLED_BACK}"
        served.rename(dropped)
    restore.rename(served)
    return _log(
        root,
        {
            "action": "rollback",
            "kind": kind,
            "restored": restore.name,
            "rolled_back": dropped.name if dropped else None,
        },
    )


def _same_fs(a: Path, b: Path) -> bool:
    b.mkdir(parents=True, exist_ok=True)
    return a.stat().st_dev == b.stat().st_dev
