"""The compiler as a worker process of `zerolayer up`: builds a model's missing tier artifacts,
one after another, at a lower CPU priority than serving, and reports each step on its stdout as
one JSON line per event (everything else it prints goes to stderr):

  {"event": "step", "kind": K, "step": "distillation", "progress": 0.42}
  {"event": "done", "kind": K, "ppl_delta": 0.0123}
  {"event": "failed", "kind": K, "reason": "..."}

A kind's card is written last (artifacts.card), and any card left in its folder is removed
before it builds: a worker killed half way leaves a folder that no start takes as finished.
With the model's `price_after_build`, the cost of the tiers a kind makes is measured
(collapse.price) before its "done", and that of dense tiers never measured after the last kind.

  python -m zerolayer.collapse.worker MODEL KIND [KIND...] < platform-config.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

from zerolayer.collapse import progress
from zerolayer.collapse.missing import clear_cards
from zerolayer.config import PlatformConfig

__all__ = ["units", "main"]


def units(kinds: list[str]) -> list[list[str]]:
    """The kinds in build order, grouped where one build makes several (pruned is the masked
    cut applied physically, so masked and pruned build together)."""
    if "pruned" in kinds:
        rest = [k for k in kinds if k not in ("masked", "pruned")]
        return [["masked", "pruned"] if "masked" in kinds else ["pruned"], *[[k] for k in rest]]
    return [[k] for k in kinds]


class _Events:
    """Events on the launcher's pipe; steps at most every `every_s` unless the step changes."""

    def __init__(self, out: IO[str], every_s: float = 1.0):
        self.out, self.every_s = out, every_s
        self.kind = ""
        self._last = ("", float("-inf"))

    def emit(self, event: str, **fields: Any) -> None:
        self.out.write(json.dumps({"event": event, "kind": self.kind, **fields}) + "\n")
        self.out.flush()

    def step(self, step: str, done: int = 0, total: int | None = None) -> None:
        now = time.monotonic()
        if step == self._last[0] and now - self._last[1] < self.every_s and done != total:
            return
        self._last = (step, now)
        share = round(done / total, 4) if total else None
        self.emit("step", step=step, progress=share)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zerolayer.collapse.worker")
    parser.add_argument("model")
    parser.add_argument("kinds", nargs="+")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="lower its CPU priority by this (zerolayer up lowers it before the process starts)",
    )
    args = parser.parse_args(argv)
    # the events keep the real stdout; anything else printed goes to stderr (the build log)
    events = _Events(os.fdopen(os.dup(1), "w", buffering=1))
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if args.nice:
        os.nice(args.nice)
    cfg = PlatformConfig.model_validate(json.loads(sys.stdin.read()))
    progress.listen(events.step)
    try:
        builder = _builder(cfg, args.model, events, args.kinds[0])
    except Exception as exc:  # every kind waits on the shared set-up: all of them fail
        traceback.print_exc()
        for kind in args.kinds:
            events.kind = kind
            events.emit("failed", reason=f"set-up failed: {type(exc).__name__}: {exc}")
        return 1
    from zerolayer.collapse.strategies import build

    failed = 0
    for unit in units(args.kinds):
        events.kind = unit[-1]
        clear_cards(builder.out, unit)
        try:
            cards = build(builder, unit)
        except Exception as exc:
            traceback.print_exc()
            failed += 1
            for kind in unit:
                events.kind = kind
                events.emit("failed", reason=f"{type(exc).__name__}: {exc}")
            continue
        # the cost of the tiers it makes, before they serve (their replicas start on "done")
        _price(cfg, args.model, set(unit), args.nice, events.step)
        for kind in unit:
            events.kind = kind
            events.emit("done", ppl_delta=cards[kind]["quality"]["ppl_delta"])
    # the dense tiers never measured: no step event (its kind would read as building again)
    _price(cfg, args.model, set(), args.nice, None)
    return 1 if failed else 0


def _price(cfg: PlatformConfig, model: str, kinds: set[str], nice: int, step: Any | None) -> None:
    """Measure the cost of the tiers these kinds make (with no kinds: of the dense tiers never
    measured), when the model's settings ask for it, saying each as a step when `step` is given;
    a failure is logged, not fatal: the tier serves without a measured cost."""
    from zerolayer.collapse.price import price_tiers, tiers_to_price

    if not cfg.models[model].collapse.price_after_build:
        return
    for tier in tiers_to_price(cfg, model, kinds, dense=not kinds):
        if step is not None:
            step(f"measuring the cost of {tier}")
        try:
            settings = cfg.models[model].collapse
            price_tiers(
                cfg,
                model,
                [tier],
                settings.price_streams,
                settings.price_tokens,
                progress=lambda line: print(line, file=sys.stderr),
                measured_by=f"zerolayer up's background build (nice {nice}, while serving)",
            )
        except Exception:
            traceback.print_exc()


def _builder(cfg: PlatformConfig, model: str, events: _Events, first: str) -> Any:
    """The Builder every kind of the model shares (the model, corpora, windows)."""
    from zerolayer.collapse.build import Builder
    from zerolayer.collapse.domains import standard_corpora
    from zerolayer.models.importer import ensure_model

    events.kind = first
    events.step("preparing the model and corpora")
    corpora = Path(cfg.cache_dir) / "corpora"
    model_dir = ensure_model(cfg, model)
    return Builder(
        model_dir,
        cfg.artifact_root(model),
        standard_corpora(model_dir, corpora, cfg.models[model].collapse.domains),
        cfg.models[model].collapse,
        model,
    )


if __name__ == "__main__":
    sys.exit(main())
