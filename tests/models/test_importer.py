from __future__ import annotations

import json
from pathlib import Path

import pytest
from zerolayer.config import ModelConfig, ModelSource, VllmTier
from zerolayer.errors import ArtifactError
from zerolayer.models.importer import IMPORT_MANIFEST, import_model, is_imported, smollm2_gguf_path


def test_gguf_import_produced_a_loadable_hf_directory(model_dir: Path) -> None:
    assert is_imported(model_dir)
    for name in (
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ):
        assert (model_dir / name).exists(), name
    cfg = json.loads((model_dir / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["architectures"] == ["LlamaForCausalLM"]
    manifest = json.loads((model_dir / IMPORT_MANIFEST).read_text())
    assert manifest["gguf_file"] == smollm2_gguf_path().name


def test_second_import_is_a_no_op(model_dir: Path, base_config) -> None:  # type: ignore[no-untyped-def]
    before = (model_dir / "model.safetensors").stat().st_mtime_ns
    out = import_model("smollm2-135m", base_config.models["smollm2-135m"], model_dir)
    assert out == model_dir
    assert (model_dir / "model.safetensors").stat().st_mtime_ns == before


def _local(path: Path) -> ModelConfig:
    return ModelConfig(
        source=ModelSource(kind="hf-dir", path=str(path)), tiers={"baseline": VllmTier()}
    )


def test_local_hf_directory_is_used_in_place(model_dir: Path, tmp_path: Path) -> None:
    assert import_model("local", _local(model_dir), tmp_path / "unused") == model_dir


def test_local_directory_without_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="not a Hugging Face directory"):
        import_model("local", _local(tmp_path), tmp_path / "unused")
