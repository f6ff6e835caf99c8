"""Tokenizer fix-up of a model directory: make tokenizer, model config and generation config agree
on the special tokens, make sure a chat template exists, and check that text round-trips.

Writes special_tokens_map.json and a manifest (zerolayer-tokenfix.json) of what was repaired.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ROUND_TRIP_SAMPLES", "CHATML_TEMPLATE", "FixupReport", "fix_model_dir"]

MANIFEST = "zerolayer-tokenfix.json"

# Used only when a model ships no chat template at all.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

ROUND_TRIP_SAMPLES: dict[str, str] = {
    "english": "The quick brown fox jumps over the lazy dog. It's 3:45 p.m., isn't it?",
    "chinese": "人工智能正在改变世界。今天天气很好，我们去公园散步吧。",
    "code": 'def add(a: int, b: int) -> int:\n    """Sum."""\n    return a + b  # 100%\n',
    "whitespace": "  two leading spaces,\ttab, and\n\nblank lines  ",
    "symbols": "naïve café — “quotes” & <tags> {braces} [1, 2, 3] ✓ 😀",
}

# Preferred names for roles that are missing, in order.
_EOS_CANDIDATES = ["<|im_end|>", "<|eot_id|>", "<|endoftext|>", "</s>", "<eos>"]
_BOS_CANDIDATES = ["<|im_start|>", "<|begin_of_text|>", "<s>", "<bos>"]
_UNK_CANDIDATES = ["<unk>", "<|endoftext|>"]


@dataclass
class FixupReport:
    """What fix_model_dir found and changed."""

    special_tokens: dict[str, Any] = field(default_factory=dict)
    repairs: list[str] = field(default_factory=list)
    round_trip_failures: dict[str, str] = field(default_factory=dict)
    chat_template_source: str = "model"

    @property
    def ok(self) -> bool:
        return not self.round_trip_failures


def _first_in_vocab(vocab: dict[str, int], names: list[str]) -> str | None:
    return next((n for n in names if n in vocab), None)


def _template_end_token(template: str | None, vocab: dict[str, int]) -> str | None:
    """The end-of-turn token a chat template emits, if it names one from the vocabulary."""
    if not template:
        return None
    return next((n for n in _EOS_CANDIDATES if n in template and n in vocab), None)


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _fix_tokenizer(tok: Any, report: FixupReport) -> None:
    vocab = tok.get_vocab()
    template = getattr(tok, "chat_template", None)
    if not template:
        tok.chat_template = CHATML_TEMPLATE
        report.chat_template_source = "zerolayer default (ChatML)"
        report.repairs.append("chat_template: missing, installed the ChatML default")
        template = CHATML_TEMPLATE
    # A chat model must stop at the end of a turn: eos should be the template's end token.
    turn_end = _template_end_token(template, vocab)
    if turn_end and tok.eos_token != turn_end:
        report.repairs.append(
            f"eos_token: {tok.eos_token!r} -> {turn_end!r} (chat template's turn end)"
        )
        tok.eos_token = turn_end
    if tok.eos_token is None or tok.eos_token not in vocab:
        found = _first_in_vocab(vocab, _EOS_CANDIDATES)
        if found is None:
            raise ValueError("no end-of-sequence token in the vocabulary")
        report.repairs.append(f"eos_token: {tok.eos_token!r} -> {found!r}")
        tok.eos_token = found
    if tok.bos_token is None or tok.bos_token not in vocab:
        found = _first_in_vocab(vocab, _BOS_CANDIDATES)
        if found is not None:
            report.repairs.append(f"bos_token: {tok.bos_token!r} -> {found!r}")
            tok.bos_token = found
    if tok.unk_token is None or tok.unk_token not in vocab:
        found = _first_in_vocab(vocab, _UNK_CANDIDATES)
        if found is not None:
            report.repairs.append(f"unk_token: {tok.unk_token!r} -> {found!r}")
            tok.unk_token = found
    if tok.pad_token is None or tok.pad_token not in vocab:
        report.repairs.append(f"pad_token: {tok.pad_token!r} -> {tok.eos_token!r} (eos)")
        tok.pad_token = tok.eos_token


def _fix_configs(model_dir: Path, tok: Any, report: FixupReport) -> None:
    ids = {
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }
    cfg_path = model_dir / "config.json"
    cfg = _read_json(cfg_path)
    for name, value in ids.items():
        if value is not None and cfg.get(name) != value:
            report.repairs.append(f"config.json {name}: {cfg.get(name)!r} -> {value}")
            cfg[name] = value
    _write_json(cfg_path, cfg)

    gen_path = model_dir / "generation_config.json"
    gen = _read_json(gen_path)
    for name, value in ids.items():
        if value is None:
            continue
        current = gen.get(name)
        if name == "eos_token_id" and isinstance(current, list):
            if value not in current:
                report.repairs.append(f"generation_config.json eos_token_id: added {value}")
                gen[name] = [value, *current]
        elif current != value:
            report.repairs.append(f"generation_config.json {name}: {current!r} -> {value}")
            gen[name] = value
    _write_json(gen_path, gen)


def round_trip_failures(tok: Any, samples: dict[str, str]) -> dict[str, str]:
    """Samples where decode(encode(text)) != text, with what came back."""
    failures = {}
    for name, text in samples.items():
        ids = tok.encode(text, add_special_tokens=False)
        back = tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if back != text:
            failures[name] = back
    return failures


def fix_model_dir(model_dir: Path, samples: dict[str, str] | None = None) -> FixupReport:
    """Repair the special tokens and chat template of model_dir in place; write the manifest."""
    from transformers import AutoTokenizer

    model_dir = Path(model_dir)
    report = FixupReport()
    tok = AutoTokenizer.from_pretrained(model_dir)
    _fix_tokenizer(tok, report)
    tok.save_pretrained(model_dir)
    _fix_configs(model_dir, tok, report)
    report.special_tokens = {
        role: {"token": getattr(tok, role), "id": getattr(tok, role + "_id")}
        for role in ("bos_token", "eos_token", "pad_token", "unk_token")
    }
    _write_json(
        model_dir / "special_tokens_map.json",
        {role: v["token"] for role, v in report.special_tokens.items() if v["token"] is not None},
    )
    report.round_trip_failures = round_trip_failures(tok, samples or ROUND_TRIP_SAMPLES)
    _write_json(model_dir / MANIFEST, asdict(report) | {"ok": report.ok})
    return report
