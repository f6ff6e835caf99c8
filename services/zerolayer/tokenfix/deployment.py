"""The Ray Serve deployment of tokenfix (one tokenizer per served model)."""

from __future__ import annotations

from typing import Any

from ray import serve

from zerolayer.config import PlatformConfig
from zerolayer.protocol import Failed, Prompt, PromptInput
from zerolayer.tokenfix.service import Tokenfix

__all__ = ["TokenfixDeployment", "tokenfix_deployment"]


class TokenfixDeployment:
    """Cleans, templates and counts prompts for the gateway."""

    def __init__(self, config: dict[str, Any]):
        cfg = PlatformConfig.model_validate(config)
        self.tokenfix = Tokenfix({m: cfg.model_dir(m) for m in cfg.models})

    async def prepare(self, model: str, req: PromptInput) -> Prompt | Failed:
        """The prompt's token ids, or the error."""
        return await self.tokenfix.prepare(model, req)


def tokenfix_deployment(cfg: PlatformConfig) -> Any:
    """TokenfixDeployment with its configured options."""
    return serve.deployment(
        TokenfixDeployment,
        name="tokenfix",
        num_replicas=cfg.tokenfix.replicas,
        ray_actor_options={"num_cpus": cfg.tokenfix.num_cpus},
    )
