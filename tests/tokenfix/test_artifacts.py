"""Tokenizer fix-up on a copy of the real model's tokenizer files, broken on purpose."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from zerolayer.tokenfix.artifacts import (
    MANIFEST,
    ROUND_TRIP_SAMPLES,
    fix_model_dir,
    round_trip_failures,
)

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "special_tokens_map.json",
)


@pytest.fixture
def broken_dir(model_dir: Path, tmp_path: Path) -> Path:
    for name in TOKENIZER_FILES:
        if (model_dir / name).exists():
            shutil.copy(model_dir / name, tmp_path / name)
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    (tmp_path / "special_tokens_map.json").unlink(missing_ok=True)
    tc = json.loads((tmp_path / "tokenizer_config.json").read_text())
    tc.pop("chat_template", None)
    tc["eos_token"] = "<|endoftext|>"  # the pre-training eos, wrong for a chat model
    tc.pop("pad_token", None)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tc))
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["eos_token_id"] = 7
    cfg.pop("pad_token_id", None)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    gen = json.loads((tmp_path / "generation_config.json").read_text())
    gen["eos_token_id"] = 0
    (tmp_path / "generation_config.json").write_text(json.dumps(gen))
    return tmp_path


def test_imported_model_is_consistent_and_round_trips(model_dir: Path) -> None:
    manifest = json.loads((model_dir / MANIFEST).read_text())
    assert manifest["ok"] is True and manifest["round_trip_failures"] == {}
    cfg = json.loads((model_dir / "config.json").read_text())
    assert "quantization_config" not in cfg
    eos = manifest["special_tokens"]["eos_token"]
    assert cfg["eos_token_id"] == eos["id"]
    assert (model_dir / "special_tokens_map.json").exists()


def test_fixup_repairs_template_and_special_tokens(broken_dir: Path) -> None:
    from transformers import AutoTokenizer

    report = fix_model_dir(broken_dir)
    joined = "\n".join(report.repairs)
    assert "chat_template" in joined
    assert "eos_token" in joined and "pad_token" in joined
    assert "config.json eos_token_id" in joined and "generation_config.json eos_token_id" in joined

    tok = AutoTokenizer.from_pretrained(broken_dir)
    assert tok.chat_template
    # The installed template ends turns with <|im_end|>, so eos must be that token everywhere.
    assert tok.eos_token == "<|im_end|>"
    cfg = json.loads((broken_dir / "config.json").read_text())
    gen = json.loads((broken_dir / "generation_config.json").read_text())
    assert cfg["eos_token_id"] == tok.eos_token_id
    gen_eos = gen["eos_token_id"]
    assert tok.eos_token_id in (gen_eos if isinstance(gen_eos, list) else [gen_eos])
    assert cfg["pad_token_id"] == tok.pad_token_id is not None
    stm = json.loads((broken_dir / "special_tokens_map.json").read_text())
    assert stm["eos_token"] == "<|im_end|>" and stm["pad_token"]
    manifest = json.loads((broken_dir / MANIFEST).read_text())
    assert manifest["repairs"] == report.repairs and manifest["ok"]

    again = fix_model_dir(broken_dir)
    assert again.repairs == [], "a repaired directory needs no second repair"


def test_round_trip_covers_chinese_and_code_and_reports_failures(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    assert "人工智能" in ROUND_TRIP_SAMPLES["chinese"]
    assert "def " in ROUND_TRIP_SAMPLES["code"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert round_trip_failures(tok, ROUND_TRIP_SAMPLES) == {}

    class Lossy:
        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return list(text.encode("ascii", "ignore"))

        def decode(self, ids: list[int], **_: object) -> str:
            return bytes(ids).decode()

    failures = round_trip_failures(Lossy(), ROUND_TRIP_SAMPLES)
    assert "chinese" in failures and "english" not in failures
