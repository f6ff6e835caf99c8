"""The chart's prepare step: import the models and build the missing tier artifacts into the
shared model cache, once (a second run finds them and ends in seconds); and the Ray pods' wait
for it (`--wait`), so that no tier replica starts before its artifact is there."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO

from zerolayer.collapse import missing_kinds
from zerolayer.config import PlatformConfig
from zerolayer.config.pricing import Prices
from zerolayer.models.importer import ensure_model, is_imported
from zerolayer.serve.builds import Builds
from zerolayer.store.tiers import TierState

__all__ = ["prepare", "wait_prepared", "missing"]


class _Board:
    """Where the builds' states go in a prepare run: kept here, printed by Builds."""

    def __init__(self) -> None:
        self.states: dict[str, TierState] = {}

    def set(self, tier: str, state: TierState) -> None:
        self.states[tier] = state


def prepare(cfg: PlatformConfig, out: IO[str] = sys.stderr) -> int:
    """Import every model and build every missing artifact; 0 when all are there, 1 when a
    build failed (its reason printed)."""

    def say(msg: str) -> None:
        print(msg, file=out, flush=True)

    todo: dict[str, list[str]] = {}
    for name in cfg.models:
        say(f"model {name}: {ensure_model(cfg, name)}")
        kinds = missing_kinds(cfg, name)
        if kinds:
            todo[name] = kinds
        else:
            say(f"model {name}: every tier artifact is there")
    if not todo:
        return 0 if _priced(cfg, say) else 1
    board = _Board()
    Builds(cfg, board, lambda _m, _t: None, say).run(todo)
    failed = {t: s.reason for t, s in board.states.items() if s.status == "failed"}
    for tier, reason in failed.items():
        say(f"tier {tier}: its artifact failed to build: {reason}")
    return 1 if failed or not _priced(cfg, say) else 0


def _priced(cfg: PlatformConfig, say: Callable[[str], None]) -> bool:
    """False (each said) when a plan sells a tier under its measured cost (config.pricing)."""
    problems = Prices(cfg).below_cost()
    for problem in problems:
        say(f"price: {problem}")
    return not problems


def missing(cfg: PlatformConfig) -> list[str]:
    """What the platform still lacks: models not imported, artifact kinds not built."""
    out = []
    for name in cfg.models:
        if not is_imported(cfg.model_dir(name)):
            out.append(f"model {name}")
            continue
        out += [f"{name} {kind}" for kind in missing_kinds(cfg, name)]
    return out


def wait_prepared(
    cfg: PlatformConfig,
    timeout_s: float,
    poll_s: float = 10.0,
    out: IO[str] = sys.stderr,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Wait until every model is imported and every artifact built (by the prepare Job): 0, or
    1 past timeout_s, saying what is still missing every poll."""
    deadline = clock() + timeout_s
    while True:
        left = missing(cfg)
        if not left:
            print("prepared: every model and tier artifact is in the cache", file=out, flush=True)
            return 0
        if clock() >= deadline:
            print(f"still missing after {timeout_s:.0f} s: {', '.join(left)}", file=out, flush=True)
            return 1
        print(f"waiting for the prepare job: missing {', '.join(left)}", file=out, flush=True)
        time.sleep(poll_s)
