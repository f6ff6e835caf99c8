"""Background builds of missing tier artifacts while the platform serves: one worker process
(collapse.worker) per model at a time, at a lower CPU priority than serving, its progress on the
tier board and the console, and each tier deployed as soon as its artifact is ready.

A worker that dies (killed, out of memory) fails the kind it was building, with the reason, and
a new worker takes the kinds it had not reached. A failed kind is not retried until the next
start of the platform, which finds its artifact still missing and builds it again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from zerolayer.collapse.missing import tiers_of_kind
from zerolayer.config import PlatformConfig
from zerolayer.store.embedded import private_dir
from zerolayer.store.tiers import TierState

__all__ = ["Builds", "exit_reason"]

Deploy = Callable[[str, str], None]  # (model, tier): deploy it and mark it ready or failed


def exit_reason(rc: int) -> str:
    """A worker's exit status in words."""
    if rc < 0:
        try:
            return f"the build process was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"the build process was killed by signal {-rc}"
    return f"the build process exited with status {rc}"


class StateBoard(Protocol):
    """Where builds report each tier's state: the tier board in Redis (zerolayer.store.tiers),
    or a cluster's prepare step's own record."""

    def set(self, tier: str, state: TierState) -> None: ...


class Builds:
    """Builds the given kinds of each model in the background, in order, and deploys the tiers
    each one serves when it is done."""

    def __init__(
        self,
        cfg: PlatformConfig,
        board: StateBoard,
        deploy: Deploy,
        say: Callable[[str], None],
        log_every_s: float = 30.0,
    ):
        self.cfg = cfg
        self.board = board
        self.deploy = deploy
        self.say = say
        self.log_every_s = log_every_s
        self.log_dir = private_dir(Path(cfg.cache_dir) / "logs")
        self._stop = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self._deploys: list[threading.Thread] = []

    def queue(self, todo: dict[str, list[str]]) -> None:
        """Mark every tier these kinds serve as building (queued), before anything starts."""
        for model, kinds in todo.items():
            for kind in kinds:
                for tier in tiers_of_kind(self.cfg, model, kind):
                    self.board.set(f"{model}:{tier}", TierState("building", step="queued"))

    def start(self, todo: dict[str, list[str]]) -> None:
        """Build them in a thread of its own."""
        self._thread = threading.Thread(target=self.run, args=(todo,), daemon=True)
        self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the worker (SIGTERM, then SIGKILL) and wait for deploys under way."""
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._thread is not None:
            self._thread.join(grace_s + 5)
        for t in self._deploys:
            t.join(grace_s)

    def run(self, todo: dict[str, list[str]]) -> None:
        """Build them here, one model after another; returns when every kind is built or
        failed."""
        for model, kinds in todo.items():
            left = list(kinds)
            while left and not self._stop.is_set():
                self._worker(model, left)  # removes what it built or failed from `left`

    def _set(self, model: str, kind: str, state: TierState) -> None:
        for tier in tiers_of_kind(self.cfg, model, kind):
            self.board.set(f"{model}:{tier}", state)

    def _worker(self, model: str, left: list[str]) -> None:
        """One worker process over the kinds left; returns when it ends."""
        log = self.log_dir / f"build-{model}.log"
        cmd = [sys.executable, "-m", "zerolayer.collapse.worker", model, *left]
        nice = self.cfg.build_nice
        self.say(f"build: {', '.join(left)} of {model} in the background (log: {log})")
        with open(log, "a") as err:
            self._proc = proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                # below serving's CPU priority from its first instruction (imports included)
                preexec_fn=(lambda: os.nice(nice)) if nice else None,
            )
            assert proc.stdin is not None and proc.stdout is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(self.cfg.model_dump_json())
                proc.stdin.close()
            current, started, said = left[0], time.monotonic(), ("", 0.0)
            for line in proc.stdout:
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue
                kind = ev.get("kind") or current
                if ev.get("event") == "step":
                    if kind != current:
                        current, started = kind, time.monotonic()
                    state = TierState("building", ev.get("step"), ev.get("progress"))
                    self._set(model, kind, state)
                    said = self._progress(model, kind, state, started, said)
                elif ev.get("event") == "done" and kind in left:
                    left.remove(kind)
                    took = time.monotonic() - started
                    self.say(
                        f"build: {model} {kind} ready in {took:.0f} s "
                        f"(perplexity {ev.get('ppl_delta', 0):+.2%}); deploying its tiers"
                    )
                    self._deploy(model, kind)
                elif ev.get("event") == "failed" and kind in left:
                    left.remove(kind)
                    self._fail(model, kind, str(ev.get("reason")))
            rc = proc.wait()
        self._proc = None
        if rc != 0 and not self._stop.is_set() and current in left:
            # it died while building `current`: that kind fails, the rest get a new worker
            left.remove(current)
            self._fail(model, current, f"{exit_reason(rc)} (log: {log})")

    def _progress(
        self, model: str, kind: str, state: TierState, started: float, said: tuple[str, float]
    ) -> tuple[str, float]:
        """A console line when the step changes, and every log_every_s within a step."""
        now = time.monotonic()
        if state.step == said[0] and now - said[1] < self.log_every_s:
            return said
        share = f" {state.progress:.0%}" if state.progress is not None else ""
        self.say(f"  [build {model} {kind} {now - started:5.0f}s] {state.step}{share}")
        return str(state.step), now

    def _fail(self, model: str, kind: str, reason: str) -> None:
        self.say(f"build: {model} {kind} failed: {reason}; the next start tries again")
        self._set(model, kind, TierState("failed", reason=reason))

    def _deploy(self, model: str, kind: str) -> None:
        """Deploy the kind's tiers in a thread of their own (the worker's events keep flowing
        while a replica loads)."""
        for tier in tiers_of_kind(self.cfg, model, kind):
            t = threading.Thread(target=self.deploy, args=(model, tier), daemon=True)
            self._deploys.append(t)
            t.start()
