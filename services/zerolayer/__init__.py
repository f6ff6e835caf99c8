"""zerolayer: serve collapsed (cheaper) LLM variants as OpenAI-compatible API tiers.

The public surface is the `zerolayer` command (zerolayer.cli) and the subpackages: gateway,
tokenfix, replicas, engines, models, store and serve.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
