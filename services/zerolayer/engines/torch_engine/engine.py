"""zerolayer's own engine: the torch Llama (model.py) behind the engine protocol.

One worker thread owns the model and runs a continuous-batching loop: each step first prefills
at most prefill_tokens prompt tokens, prefill_tokens_busy while any stream is decoding (the rest
of prompts begun in earlier steps first, then waiting requests; all of them in one forward pass,
the projections and MLPs over all their tokens at once), then decodes one token for every
running sequence whose prompt is all in, in a single batched forward. A prompt longer than what
is left of the step's budget is prefilled in parts over several steps (chunked prefill): the
streams already decoding wait at most one budget of prefill for their next token.
Keys and values stay in a slot cache, one slot per running sequence; finished sequences give
their slot to the last one, so running slots are always 0..n-1. Tokens reach each request's
async iterator through its event loop as soon as they are sampled.
Admission is bounded by max_num_seqs and by the KV cache budget (each request's prompt plus
max_tokens is reserved up front, so no running sequence is ever pre-empted for memory). Waiting
interactive requests start before waiting batch requests (SamplingSpec.priority). Batch
requests (priority above 0) may fill every slot while no interactive request is here; while one
runs or waits, or did within busy_hold_s, they hold at most batch_rows_busy slots: every row
more makes each step, and so every interactive token, slower. The rows past that are
pre-empted: their keys and values are copied to host memory (at most swap_gib in all) and the
request waits, first among the batch requests, to be copied back into a slot and go on from the
same token, no prefill run again. A step that prefills interactive prompts decodes only the
interactive rows: requests arriving together (clients in lockstep) then wait for a shorter step
(benchmarks/batch.py measures interactive time to first token with a batch running and
without).

A prefix cache (prefix.py) keeps the keys and values of whole blocks of finished sequences
(prompt and output) in the part of the KV budget the slots do not use, so a prompt that begins
as an earlier one did (the next turn of a conversation, a shared system prompt) is prefilled
from the first block it lacks; the slots take memory back from it, least recently used first,
whenever a request needs room. A prompt whose next block another prompt of the same pass
computes waits one step for it instead of computing it too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from zerolayer.engines.base import SamplingSpec, TokenDelta
from zerolayer.engines.grammar import (
    Grammars,
    Guide,
    apply_masks,
    bitmask,
    entries,
    token_logprobs,
)
from zerolayer.engines.torch_engine.cache import SlotCache
from zerolayer.engines.torch_engine.kernels import Compiler
from zerolayer.engines.torch_engine.model import Prompt, load_llama
from zerolayer.engines.torch_engine.prefix import PrefixCache, block_names
from zerolayer.engines.torch_engine.probe import Probe

__all__ = ["TorchEngine"]

log = logging.getLogger(__name__)

_GREEDY_BELOW = 1e-5


@dataclass
class _Job:
    """Low-priority work on the worker thread (the canary): run when no request is running or
    waiting, or between steps once it has waited `defer_s`."""

    run: Any  # callable returning the result
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future
    queued_at: float = field(default_factory=time.monotonic)


@dataclass
class _Request:
    spec: SamplingSpec
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue
    generator: torch.Generator | None = None
    guide: Guide | None = None  # the request's grammar state (constrained decoding)
    output: list[int] = field(default_factory=list)
    sent_text: str = ""  # all text decoded so far
    emitted: int = 0  # characters of it sent (the rest may be the start of a stop string)
    prefix_at: int = 0  # incremental detokenizing: output[prefix_at:read_at] is decoded context
    read_at: int = 0
    position: int = 0  # tokens in the cache (under the prompt's length: still prefilling)
    names: list[bytes] = field(default_factory=list)  # the prompt's block names (prefix cache)
    cached: int = 0  # prompt tokens read from the prefix cache
    cancelled: bool = False
    finished: bool = False
    queued_at: float = field(default_factory=time.monotonic)
    queue_s: float | None = None  # set when the engine takes it in, sent with the first token
    saved: list[torch.Tensor] | None = None  # a pre-empted sequence's keys and values (host)

    def worst_length(self) -> int:
        return len(self.spec.prompt_token_ids) + self.spec.max_tokens

    @property
    def prefilling(self) -> bool:
        """Part of its prompt is still to be prefilled (chunked prefill)."""
        return self.position < len(self.spec.prompt_token_ids)

    def send(self, item: Any) -> None:
        self.loop.call_soon_threadsafe(self.out.put_nowait, item)


class TorchEngine:
    """Serves one tier artifact with the torch Llama; see the module doc for the scheduling."""

    def __init__(
        self,
        model_dir: str,
        *,
        artifact: str = "dense",
        artifact_dir: str | None = None,
        dtype: str = "float32",
        weight_dtype: str | None = None,
        device: str = "auto",
        max_model_len: int = 2048,
        max_num_seqs: int = 32,
        kv_cache_gib: float = 2.0,
        threads: int | None = None,
        prefill_tokens: int = 1024,
        prefill_tokens_busy: int | None = None,
        device_budget_gib: float | None = None,
        offload_layers: int | None = None,
        sparse_min_tokens: int = 256,
        compiler: Compiler | None = None,
        live_sample_rate: float = 0.0,
        live_thresholds: list[float] | None = None,
        job_defer_s: float = 30.0,
        prefix_cache_gib: float = 0.5,
        batch_rows_busy: int = 4,
        busy_hold_s: float = 0.5,
        swap_gib: float = 0.5,
        onednn: bool = True,
    ):
        self.model_dir = model_dir
        # batches through oneDNN over output-major weight copies on a CPU (LlamaModel's onednn)
        self.onednn = onednn
        self.artifact = artifact
        self.artifact_dir = artifact_dir
        self.dtype = getattr(torch, dtype)
        # the projections' precision: None keeps the artifact's (a benchmark sets one to
        # measure the precision lever apart from the artifact's cut)
        self.weight_dtype = getattr(torch, weight_dtype) if weight_dtype else None
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.kv_bytes = int(kv_cache_gib * (1 << 30))
        # the prefix cache's most, within the KV budget (0: no prefix cache)
        self.prefix_bytes = min(int(prefix_cache_gib * (1 << 30)), self.kv_bytes)
        self.prefix: PrefixCache | None = None
        self.threads = threads
        self.prefill_tokens = prefill_tokens
        # the most a step prefills while streams are decoding (None: 128 on a CPU, where a
        # token of prefill costs about what a token of decode does; prefill_tokens on a GPU)
        if prefill_tokens_busy is None:
            prefill_tokens_busy = prefill_tokens if self.device.type == "cuda" else 128
        self.prefill_tokens_busy = min(prefill_tokens, prefill_tokens_busy)
        # rows batch requests may start into while interactive ones run or wait (module doc)
        self.batch_rows_busy = batch_rows_busy
        self._burst = False  # this step prefilled interactive prompts (_decoding)
        self.busy_hold_s = busy_hold_s
        self.swap_bytes = int(swap_gib * (1 << 30))  # pre-empted rows' keys and values, at most
        self._swapped = 0
        self._interactive_at = float("-inf")  # when an interactive request was last here
        self.device_budget = None if device_budget_gib is None else int(device_budget_gib * 2**30)
        self.offload_layers = offload_layers
        self.sparse_min_tokens = sparse_min_tokens
        self.compiler = compiler
        self.model: Any = None
        self.tokenizer: Any = None
        self.eos: set[int] = set()
        self.grammars: Grammars | None = None
        self._masks: torch.Tensor | None = None  # the batch's grammar bitmask, reused
        self._inbox: queue.Queue[_Request | _Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        # held while a request is queued and while a failed loop drains the queue, so no
        # request can be queued unseen after the loop died
        self._queue_lock = threading.Lock()
        self.counters = {
            "requests": 0,
            "steps": 0,
            "prefills": 0,
            "prefill_passes": 0,  # forward passes that ran them (several prompts at once)
            "prefill_chunks": 0,  # parts of prompts prefilled in a step before their last part
            "generated": 0,
            "max_batch": 0,
            "masks": 0,  # grammar masks computed (rows; a token the grammar takes needs none)
            "prefix_queries": 0,  # prompt tokens looked up in the prefix cache
            "prefix_hits": 0,  # of those, found there (their prefill skipped)
            "preempted": 0,  # batch rows moved out of their slot for interactive requests
            "rows_sat_out": 0,  # batch rows left out of a step that prefilled interactive ones
        }
        self._prefix_seen = {"queries": 0, "hits": 0}  # the counts signals() last reported
        self.live_thresholds = live_thresholds
        self.set_sample_rate(live_sample_rate)
        self.job_defer_s = job_defer_s
        self._probe: Probe | None = None
        self._live_lock = threading.Lock()
        self._live: dict[str, dict[str, Any]] = {}
        self._jobs: list[_Job] = []

    # lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the model and start the worker loop, both on the worker thread: every OpenMP
        parallel region of this engine (the load's torch ops, the steps) then comes from one
        thread and one OpenMP thread pool. A second pool (a load on another thread leaves one
        behind) makes GNU OpenMP count more threads than cores and stop spinning between
        regions: each of the ~150 regions of a decode step then waits for a sleeping thread,
        measured at 24.6 us a region instead of 8.3 (benchmarks/omp_pools.py)."""
        loop = asyncio.get_running_loop()
        loaded: asyncio.Future[None] = loop.create_future()

        def settle(exc: BaseException | None) -> None:
            if loaded.done():  # a cancelled start() leaves nobody waiting
                return
            if exc is None:
                loaded.set_result(None)
            else:
                loaded.set_exception(exc)

        def main() -> None:
            try:
                self._load()
            except BaseException as exc:  # reported to start()'s caller
                loop.call_soon_threadsafe(settle, exc)
                return
            loop.call_soon_threadsafe(settle, None)
            self._run()

        thread = threading.Thread(target=main, name="torch-engine", daemon=True)
        thread.start()
        await loaded
        self._thread = thread

    def _load(self) -> None:
        from transformers import AutoTokenizer

        if self.threads:
            torch.set_num_threads(self.threads)
        self.model = load_llama(
            self.model_dir,
            self.artifact,
            self.artifact_dir,
            device=self.device,
            dtype=self.dtype,
            max_len=self.max_model_len,
            weight_dtype=self.weight_dtype,
            sparse_min_tokens=self.sparse_min_tokens,
            device_budget_bytes=self.device_budget,
            offload_layers=self.offload_layers,
            compiler=self.compiler,
            onednn=self.onednn,
        )
        tok_dir = self.artifact_dir if self.artifact == "pruned" else self.model_dir
        self.tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
        self.eos = _eos_ids(Path(str(tok_dir)), self.tokenizer)
        self.grammars = Grammars(self.tokenizer, self.model.shape.vocab, self.eos)
        self._probe = Probe(self.live_thresholds, self.model.shape.layers)

    async def shutdown(self) -> None:
        if self._thread is not None:
            self._inbox.put(None)
            await asyncio.to_thread(self._thread.join, 30)
            self._thread = None
        self.model = None

    async def check_health(self) -> None:
        if self.model is None or self._thread is None:
            raise RuntimeError("engine not started")
        if self._failure is not None or not self._thread.is_alive():
            raise RuntimeError(f"engine loop stopped: {self._failure!r}")

    def set_sample_rate(self, rate: float) -> None:
        """Run every round(1 / rate)-th decode step and prefill under the probe (0: none)."""
        self._every = round(1 / rate) if rate > 0 else 0

    async def signals(self) -> dict[str, Any]:
        """What the sampled passes saw since the last call (then zeroed): per phase (decode,
        prefill) the probe's counts (Probe.drain), and the sampling rate."""
        with self._live_lock:
            live, self._live = self._live, {}
        queries, hits = self.counters["prefix_queries"], self.counters["prefix_hits"]
        seen = self._prefix_seen
        prefix = {"queries": queries - seen["queries"], "hits": hits - seen["hits"]}
        self._prefix_seen = {"queries": queries, "hits": hits}
        return {
            "sample_rate": 1 / self._every if self._every else 0.0,
            **live,
            "prefix_cache": prefix,
        }

    async def canary(
        self, texts: list[str], top_k: int = 20, max_tokens: int = 128
    ) -> list[dict[str, Any]]:
        """Per text (its first max_tokens tokens, teacher forced): the tokens and, for each
        position after the first, the top_k most likely token ids with their log-probabilities.
        Low priority: the worker runs it when no request is running or waiting, or between
        steps once it has waited job_defer_s."""
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"][:max_tokens] for t in texts]
        return await self._submit(lambda: [self._score(x, top_k) for x in ids if len(x) > 1])

    def _score(self, ids: list[int], top_k: int) -> dict[str, Any]:
        cache = SlotCache(self.model.shape, self.dtype, self.device, len(ids))
        cache.ensure(1, len(ids))
        logits = self.model.prefill(ids, 0, cache, every_position=True)[:-1]
        top = torch.log_softmax(logits.float(), -1).topk(top_k, -1)
        return {"tokens": ids, "top_ids": top.indices.tolist(), "top_logprobs": top.values.tolist()}

    async def _submit(self, run: Any) -> Any:
        """Run `run()` on the worker thread as a low-priority job; its result."""
        if self._thread is None:
            raise RuntimeError("engine not started")
        loop = asyncio.get_running_loop()
        job = _Job(run, loop, loop.create_future())
        with self._queue_lock:
            if self._failure is not None:
                raise RuntimeError(f"engine loop stopped: {self._failure!r}")
            self._inbox.put(job)
        return await job.done

    async def stats(self) -> dict[str, Any]:
        report = self.model.report.as_dict() if self.model is not None else {}
        kernel = self.model.kernel if self.model is not None else None
        if kernel is not None and kernel.total:
            # share of thresholded inputs that passed, over this process's single-token steps
            report["latency_active_share"] = round(kernel.active / kernel.total, 4)
        prefix = self.prefix
        held = {"prefix_blocks": len(prefix), "prefix_bytes": prefix.held_bytes} if prefix else {}
        return {"engine": "torch", "model_dir": self.model_dir, **report, **self.counters, **held}

    def info(self) -> dict[str, Any]:
        """What the tier card shows about this engine on this machine."""
        r = self.model.report
        return {
            "engine": "torch",
            "device": r.device,
            "dtype": r.dtype,
            "weight_dtype": r.weight_dtype,
            "weight_note": r.weight_note,
            "hardware_sparsity": r.sparse24_hardware,
            "sparsity_note": r.sparse24_note,
            "offload": r.offloaded_layers > 0,
            "offloaded_layers": r.offloaded_layers,
            "latency_mode": r.thresholds > 0,
            "latency_kernel": r.latency_kernel,
            "latency_note": r.latency_note,
        }

    # requests ----------------------------------------------------------------------------------
    async def generate(self, spec: SamplingSpec) -> AsyncIterator[TokenDelta]:
        if self._thread is None:
            raise RuntimeError("engine not started")
        req = _Request(spec, asyncio.get_running_loop(), asyncio.Queue())
        if spec.constraint is not None:
            assert self.grammars is not None
            req.guide = self.grammars.guide(spec.constraint)
        if spec.temperature >= _GREEDY_BELOW:
            req.generator = torch.Generator()
            req.generator.manual_seed(
                spec.seed if spec.seed is not None else int.from_bytes(os.urandom(8), "little")
            )
        with self._queue_lock:
            if self._failure is not None:
                raise RuntimeError(f"engine loop stopped: {self._failure!r}")
            self._inbox.put(req)
        self.counters["requests"] += 1
        try:
            while True:
                item = await req.out.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish_reason is not None:
                    return
        finally:
            req.cancelled = True  # the worker drops it at its next step

    # worker ------------------------------------------------------------------------------------
    def _run(self) -> None:
        cache = SlotCache(self.model.shape, self.dtype, self.device, self.max_model_len)
        self.prefix = PrefixCache(self.model.shape, self.dtype, self.device, self.prefix_bytes)
        running: list[_Request] = []
        waiting: list[_Request] = []
        try:
            while True:
                if not self._take(waiting, block=not running and not waiting and not self._jobs):
                    break
                self._run_job(idle=not running and not waiting)
                self._admit(waiting, running, cache)
                running[:] = self._drop(running, cache)
                if running:
                    self._decode(*self._decoding(running), cache)
                    running[:] = self._drop(running, cache)
        except BaseException as exc:  # report to every caller, never hang them
            log.exception("torch engine loop failed")
            self._abandon(exc, running + waiting, f"engine failure: {exc!r}")
            return
        # asked to stop: what is still queued (a canary job, a request that came too late) is
        # answered, never left waiting
        self._abandon(RuntimeError("engine shut down"), running + waiting, "engine shut down")

    def _abandon(self, exc: BaseException, pending: list[_Request], why: str) -> None:
        """Answer every request and job still here or queued with an error; from now on
        generate() and _submit() refuse instead of queueing."""
        late: list[_Request] = []
        with self._queue_lock:
            self._failure = exc
            while True:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, _Job):
                    self._jobs.append(item)
                elif item is not None:
                    late.append(item)
        for req in pending + late:
            req.send(RuntimeError(why))
        for job in self._jobs:
            _settle(job, None, RuntimeError(why))
        self._jobs.clear()

    def _take(self, waiting: list[_Request], block: bool) -> bool:
        """Move new requests into waiting; False when asked to stop."""
        try:
            item = self._inbox.get(timeout=1.0) if block else self._inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            if item is None:
                return False
            if isinstance(item, _Job):
                self._jobs.append(item)
            else:
                waiting.append(item)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return True

    def _run_job(self, idle: bool) -> None:
        """The oldest low-priority job, when the engine is idle or the job waited too long."""
        if not self._jobs:
            return
        job = self._jobs[0]
        if not idle and time.monotonic() - job.queued_at < self.job_defer_s:
            return
        self._jobs.pop(0)
        try:
            result = job.run()
        except Exception as exc:  # reported to the job's caller; the loop goes on
            _settle(job, None, exc)
            return
        _settle(job, result, None)

    def _sampled(self, counter: str) -> Probe | None:
        """The probe when this step (counted by `counter`) is one of the sampled ones."""
        if self._probe is None or not self._every or self.counters[counter] % self._every:
            return None
        return self._probe

    def _keep(self, phase: str, probe: Probe | None) -> None:
        """Move a sampled pass's counts to where signals() collects them."""
        if probe is None:
            return
        counts = probe.drain()
        with self._live_lock:
            self._live[phase] = Probe.merge(self._live.get(phase), counts)

    def _admit(self, waiting: list[_Request], running: list[_Request], cache: Any) -> None:
        # every stream already decoding waits for this step's prefill: while there is one, the
        # step prefills less (chunked prefill)
        decoding = any(not r.prefilling for r in running)
        budget = self.prefill_tokens_busy if decoding else self.prefill_tokens
        prefix = self.prefix
        assert prefix is not None
        for r in waiting:
            if r.cancelled and r.saved is not None:
                self._unsave(r)
        # slots batch requests may hold: all while no interactive request is here, and
        # batch_rows_busy while one runs or waits, or did a moment ago (module doc); the rows
        # past that are pre-empted
        now = time.monotonic()
        if any(r.spec.priority == 0 for r in running + waiting):
            self._interactive_at = now
        busy = now - self._interactive_at < self.busy_hold_s
        low_most = max(1, self.batch_rows_busy) if busy else self.max_num_seqs
        if busy:
            self._preempt(running, waiting, cache, low_most)
        # interactive first (a stable sort: arrival order within a priority, pre-empted first)
        waiting[:] = sorted((r for r in waiting if not r.cancelled), key=lambda r: r.spec.priority)
        fresh: list[tuple[_Request, Prompt]] = []  # prefilled together below
        coming: set[bytes] = set()  # the blocks their passes compute, this step or later
        # prompts prefilled in part go on first, oldest first (chunked prefill)
        for slot, req in enumerate(running):
            if not req.prefilling or req.cancelled:
                continue
            coming.update(req.names[req.position // prefix.block :])
            if budget > 0:
                budget -= self._chunk(req, slot, budget, fresh)
        while waiting and len(running) < self.max_num_seqs:
            req = waiting[0]
            if req.spec.priority > 0:
                low = sum(1 for r in running if r.spec.priority > 0)
                if low >= low_most:
                    break  # the rest of the slots wait for interactive requests
            n = len(req.spec.prompt_token_ids)
            if req.saved is None and budget <= 0:
                break  # the step's prefill budget is spent
            longest = max([r.worst_length() for r in running] + [req.worst_length()])
            need = cache.bytes_for(len(running) + 1, longest)
            if running and need > self.kv_bytes:
                break
            waiting.pop(0)
            slot = len(running)
            cache.ensure(slot + 1, min(longest, self.max_model_len))
            # the slots come first: the prefix cache keeps only what they leave of the budget
            prefix.evict_to(min(self.prefix_bytes, self.kv_bytes - max(need, cache.held_bytes)))
            if req.saved is not None:  # pre-empted: back into a slot, on from the same token
                cache.put_back(slot, req.saved)
                self._unsave(req)
                running.append(req)
                continue
            prompt = req.spec.prompt_token_ids
            names = block_names(prompt, req.spec.cache_salt, prefix.block)
            # at least the last prompt token is run: its logits pick the first output token
            hit = prefix.match(names, (n - 1) // prefix.block) * prefix.block
            first = hit // prefix.block  # the first block it computes
            if first < len(names) and names[first] in coming:
                # its next block is one another prompt of this pass computes: it comes next
                # step, and reads that block (and what follows of the shared prefix) cached
                waiting.insert(0, req)
                break
            coming.update(names[first:])
            req.queue_s = time.monotonic() - req.queued_at
            prefix.load(names[:first], cache, slot)
            self.counters["prefix_queries"] += n
            self.counters["prefix_hits"] += hit
            req.cached = hit
            req.position = hit
            req.names = names
            running.append(req)
            budget -= self._chunk(req, slot, budget, fresh)
        self._prefill(fresh, cache)

    def _chunk(
        self, req: _Request, slot: int, budget: int, fresh: list[tuple[_Request, Prompt]]
    ) -> int:
        """Queue the next part of a prompt for this step's pass: all that is left, or `budget`
        tokens of it (the rest goes on in later steps); returns the tokens taken."""
        prompt = req.spec.prompt_token_ids
        end = min(len(prompt), req.position + budget)
        fresh.append((req, Prompt(prompt[req.position : end], slot, req.position)))
        taken = end - req.position
        req.position = end  # the pass below writes their keys and values
        return taken

    def _prefill(self, fresh: list[tuple[_Request, Prompt]], cache: Any) -> None:
        """The prompt parts queued this step, in one pass; for each prompt it completes, the
        request's first token, and the prompt's whole blocks kept in the prefix cache."""
        self._burst = any(req.spec.priority == 0 for req, _ in fresh)
        if not fresh:
            return
        probe = self._sampled("prefills")
        logits = self.model.prefill_many([p for _, p in fresh], cache, probe)
        self._keep("prefill", probe)
        self.counters["prefill_passes"] += 1
        assert self.prefix is not None
        for j, (req, p) in enumerate(fresh):
            if p.end < len(req.spec.prompt_token_ids):
                self.counters["prefill_chunks"] += 1
                continue
            self.counters["prefills"] += 1
            self.prefix.save(req.names, cache, p.slot)
            self._emit(req, *self._choose(req, logits[j]))

    def _decoding(self, running: list[_Request]) -> tuple[list[_Request], list[int] | None]:
        """The rows this step decodes and their slots (None: all, slots 0..n-1): not those
        whose prompt is still being prefilled. A step that prefilled interactive prompts also
        leaves the batch rows out: their requests' clients wait for the step's end, the batch
        rows lose one step."""
        slots = [
            j
            for j, r in enumerate(running)
            if not r.prefilling and (not self._burst or r.spec.priority == 0)
        ]
        if len(slots) == len(running):
            return running, None
        if self._burst:
            self.counters["rows_sat_out"] += sum(
                1 for r in running if r.spec.priority > 0 and not r.prefilling
            )
        return [running[j] for j in slots], slots

    def _decode(self, running: list[_Request], slots: list[int] | None, cache: Any) -> None:
        if not running:
            return  # every row is still prefilling
        tokens = [r.output[-1] for r in running]
        positions = [r.position for r in running]
        probe = self._sampled("steps")
        logits = self.model.decode(tokens, positions, cache, probe, slots)
        self._keep("decode", probe)
        self.counters["steps"] += 1
        self.counters["max_batch"] = max(self.counters["max_batch"], len(running))
        # log-probabilities of the model's own distribution (before any mask), for the rows
        # that asked; then each constrained row masked to its grammar, all in one pass
        want = [j for j, r in enumerate(running) if r.spec.logprobs is not None]
        logp = torch.log_softmax(logits[want].float(), -1) if want else None
        # a constrained row offers its grammar the token it picks unmasked and is masked only
        # when the grammar refuses it (Guide.offer: the same distribution); rows sampled with
        # top_p are masked first (top_p's nucleus depends on the mask)
        guided = [j for j, r in enumerate(running) if r.guide is not None]
        first = [j for j in guided if _masked_first(running[j])]
        if guided:
            logits = logits.float()
        if first:
            self._mask_rows(running, logits, first)
        greedy = logits.argmax(-1).tolist()
        rows = {j: n for n, j in enumerate(want)}
        for j, req in enumerate(running):
            req.position += 1
            tok = int(greedy[j] if req.generator is None else self._sample(req, logits[j]))
            if req.guide is not None and j not in first and not req.guide.offer(tok):
                self._mask_rows(running, logits, [j])
                tok = int(
                    logits[j].argmax() if req.generator is None else self._sample(req, logits[j])
                )
            lp = None
            if logp is not None and j in rows:
                assert self.grammars is not None and req.spec.logprobs is not None
                lp = entries(self.grammars.vocab, logp[rows[j]][None], [tok], req.spec.logprobs)
            self._emit(req, tok, lp)

    def _mask_rows(self, running: list[_Request], logits: torch.Tensor, rows: list[int]) -> None:
        """Set the tokens each of these rows' grammar forbids next to -inf (in place)."""
        if self._masks is None or self._masks.shape[0] < len(running):
            self._masks = bitmask(self.max_num_seqs, self.model.shape.vocab)
        self.counters["masks"] += len(rows)
        for j in rows:
            guide = running[j].guide
            assert guide is not None
            guide.fill(self._masks, j)
        apply_masks(logits, self._masks, rows)

    def _preempt(
        self, running: list[_Request], waiting: list[_Request], cache: Any, most: int
    ) -> None:
        """Move batch rows past `most` out of their slots: their keys and values to host memory
        (within swap_bytes), the requests to the front of `waiting`. The rows with the fewest
        tokens go first: the least to copy, and the furthest from their end."""
        low = [r for r in running if r.spec.priority > 0 and not (r.finished or r.cancelled)]
        per = cache.token_bytes()
        out: list[_Request] = []
        for r in sorted(low, key=lambda r: r.position)[: max(0, len(low) - most)]:
            if self._swapped + r.position * per > self.swap_bytes:
                break
            self._swapped += r.position * per
            out.append(r)
        if not out:
            return
        leaving = {id(r) for r in out}

        def save(req: _Request, cache: Any, slot: int) -> None:
            req.saved = cache.take_out(slot, req.position)

        running[:] = self._compact(running, cache, lambda r: id(r) in leaving, save)
        waiting[:0] = out
        self.counters["preempted"] += len(out)

    def _unsave(self, req: _Request) -> None:
        assert req.saved is not None
        self._swapped -= sum(t.nbytes for t in req.saved)
        req.saved = None

    def _drop(self, running: list[_Request], cache: Any) -> list[_Request]:
        """Remove finished and cancelled sequences."""
        return self._compact(running, cache, lambda r: r.finished or r.cancelled, self._remember)

    def _compact(
        self,
        running: list[_Request],
        cache: Any,
        leaving: Callable[[_Request], bool],
        on_leave: Callable[[_Request, Any, int], None],
    ) -> list[_Request]:
        """Remove the sequences `leaving` picks (on_leave(req, cache, slot) first), moving the
        last slot into each hole."""
        out = list(running)
        j = 0
        while j < len(out):
            if leaving(out[j]):
                on_leave(out[j], cache, j)
                last = out.pop()
                if j < len(out):
                    cache.move(len(out), j, last.position)
                    out[j] = last
                continue
            j += 1
        return out

    def _remember(self, req: _Request, cache: Any, slot: int) -> None:
        """Keep the whole blocks of an ending sequence (its prompt and the output the cache
        holds) in the prefix cache: the next turn of a conversation begins with them."""
        if self.prefix is None or not self.prefix.limit:
            return
        spec = req.spec
        n = len(spec.prompt_token_ids)
        held = (spec.prompt_token_ids + req.output)[: req.position]
        names = block_names(held, spec.cache_salt, self.prefix.block)
        if len(names) * self.prefix.block > n:  # the prompt's own blocks were kept at prefill
            self.prefix.save(names, cache, slot)

    def _choose(self, req: _Request, logits: torch.Tensor) -> tuple[int, Any]:
        """The next token of one sequence from its logits (one row): masked by its grammar,
        sampled or greedy; with its log-probabilities when the request asked for them (of the
        model's own distribution: before the mask and the temperature)."""
        raw = logits
        first = req.guide is not None and _masked_first(req)
        if first:
            assert req.guide is not None
            self.counters["masks"] += 1
            logits = req.guide.mask(logits.float().cpu().clone())
        token = self._sample(req, logits)
        if req.guide is not None and not first and not req.guide.offer(token):
            self.counters["masks"] += 1
            token = self._sample(req, req.guide.mask(logits.float().cpu().clone()))
        lp = None
        if req.spec.logprobs is not None:
            assert self.grammars is not None
            lp = token_logprobs(self.grammars.vocab, raw, [token], req.spec.logprobs)
        return token, lp

    def _sample(self, req: _Request, logits: torch.Tensor) -> int:
        s = req.spec
        if req.generator is None:
            return int(logits.argmax())
        probs = torch.softmax(logits.float() / s.temperature, dim=-1)
        if s.top_p < 1.0:
            sorted_p, order = probs.sort(descending=True)
            drop = sorted_p.cumsum(0) - sorted_p > s.top_p
            sorted_p[drop] = 0
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_p)
        return int(torch.multinomial(probs.cpu(), 1, generator=req.generator))

    def _emit(self, req: _Request, token: int, logprobs: Any = None) -> None:
        if req.cancelled:
            req.finished = True
            return
        req.output.append(token)
        self.counters["generated"] += 1
        finish = None
        if token in self.eos or (req.guide is not None and req.guide.advance(token)):
            finish = "stop"
        elif len(req.output) >= req.spec.max_tokens or req.position + 1 >= self.max_model_len:
            finish = "length"
        text = req.sent_text + _decode_window(self.tokenizer, req, flush=finish is not None)
        hit = _first_stop(text, req.spec.stop, req.emitted)
        if hit is not None:
            text, finish = text[:hit], "stop"
        # text that may be the start of a stop string waits until the next token decides
        ready = len(text) if finish is not None else len(text) - _stop_prefix(text, req.spec.stop)
        ready = max(ready, req.emitted)
        new = text[req.emitted : ready]
        req.emitted = ready
        req.sent_text = text
        if finish is not None:
            req.finished = True
        first = len(req.output) == 1
        req.send(
            TokenDelta(
                new,
                [token],
                finish,
                req.queue_s if first else None,
                req.cached if first else None,
                logprobs,
            )
        )


def _masked_first(req: _Request) -> bool:
    """Whether a constrained request's logits are masked before its token is picked: when it
    samples with top_p (else its pick is offered to the grammar first, Guide.offer)."""
    return req.generator is not None and req.spec.top_p < 1.0


def _settle(job: _Job, result: Any, exc: BaseException | None) -> None:
    """Hand a job's result (or failure) to its caller's event loop."""

    def done() -> None:
        if job.done.done():  # the caller gave up waiting
            return
        if exc is None:
            job.done.set_result(result)
        else:
            job.done.set_exception(exc)

    job.loop.call_soon_threadsafe(done)


def _decode_window(tokenizer: Any, req: _Request, flush: bool) -> str:
    """The text the newest tokens add, decoding only a few tokens: the ones since the last piece
    of text plus the piece before them as context (so a leading space or a character split over
    tokens comes out as a whole decode would give it). An incomplete UTF-8 character waits for
    the next token unless `flush`. Linear in the output, not quadratic."""
    before = tokenizer.decode(req.output[req.prefix_at : req.read_at], skip_special_tokens=True)
    now = tokenizer.decode(req.output[req.prefix_at :], skip_special_tokens=True)
    if len(now) <= len(before) or (now.endswith("\ufffd") and not flush):
        return ""
    req.prefix_at, req.read_at = req.read_at, len(req.output)
    return now[len(before) :]


def _stop_prefix(text: str, stops: list[str]) -> int:
    """The length of the longest end of text that begins some stop string (0 if none)."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best


def _first_stop(text: str, stops: list[str], sent: int) -> int | None:
    """Where the earliest stop string begins, if one ends past what was already sent."""
    best = None
    for s in stops:
        at = text.find(s, max(0, sent - len(s) + 1))
        if at >= 0 and (best is None or at < best):
            best = at
    return best


def _eos_ids(folder: Path, tokenizer: Any) -> set[int]:
    """End-of-sequence ids from generation_config.json, config.json and the tokenizer."""
    import json

    ids: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.exists():
            value = json.loads(path.read_text()).get("eos_token_id")
            ids.update(value if isinstance(value, list) else [value] if value is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
