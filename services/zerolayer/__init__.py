"""zerolayer: serve collapsed LLM variants as API tiers."""
