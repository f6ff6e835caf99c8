"""zerolayer: serve collapsed (cheaper) LLM variants as OpenAI-compatible API tiers.

The public surface is the `zerolayer` command (zerolayer.cli) and the subpackages: gateway,
tokenfix, chunker, replicas, engines, models, store, serve, the collapse compiler, and the two
leaves everything builds on, artifacts (tier artifacts on disk) and protocol (what crosses a Ray
handle). docs/architecture.md draws how they fit.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
