"""The standard domains: found on the machine, split into parts that share no text, with their
sources and licences; the user's files as one more domain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from zerolayer.collapse import domains as dom
from zerolayer.collapse.corpus import Corpus, domain_windows, labelled_windows, mixed_corpus
from zerolayer.collapse.domains import PARTS, split_part, standard_corpora, user_domain

OFFLINE = ("docs", "code", "legal", "zh", "fr")  # every standard domain but the model's answers


@pytest.fixture(scope="module")
def corpora(model_dir: Path, corpus_cache: Path) -> Any:
    return standard_corpora(model_dir, corpus_cache, OFFLINE)


def test_domains_cover_code_prose_and_other_languages(corpora: Any) -> None:
    assert corpora.domains() == list(OFFLINE)
    for part in PARTS:
        mix = getattr(corpora, part)
        assert [d for d, _ in mix.domains()] == list(OFFLINE)
        desc = mix.describe()
        assert desc["domains"] == list(OFFLINE)
        for entry in desc["parts"]:  # the card records where each domain came from
            assert entry["source"] and entry["licence"] and entry["chars"] > 2000, entry
    zh = dict(corpora.evaluation.domains())["zh"].text()
    assert sum("\u4e00" <= c <= "\u9fff" for c in zh) > 0.2 * len(zh)  # Chinese characters
    code = dict(corpora.evaluation.domains())["code"].text()
    assert "def " in code and "import " in code


def test_parts_share_no_document_and_no_text(corpora: Any) -> None:
    for domain in OFFLINE:
        parts = {p: dict(getattr(corpora, p).domains())[domain] for p in PARTS}
        names = [set(c.documents) for c in parts.values()]
        assert not (names[0] & names[1] or names[0] & names[2] or names[1] & names[2]), domain
        texts = [set(c.documents.values()) for c in parts.values()]
        assert not (texts[0] & texts[2] or texts[1] & texts[2]), domain


def test_the_split_is_a_fixed_hash() -> None:
    parts = [split_part("code", f"file{i}.py") for i in range(2000)]
    assert parts == [split_part("code", f"file{i}.py") for i in range(2000)]
    share = {p: parts.count(p) / len(parts) for p in PARTS}
    assert share["calibration"] == pytest.approx(0.60, abs=0.04)
    assert share["evaluation"] == pytest.approx(0.25, abs=0.04)


def test_missing_os_text_falls_back_to_installed_packages(
    model_dir: Path, corpus_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dom, "COMMON_LICENCES", tmp_path / "none")
    monkeypatch.setattr(dom, "LOCALE_DIR", tmp_path / "none")
    found = standard_corpora(model_dir, corpus_cache, ("legal", "zh"))
    assert found.domains() == ["legal", "zh"]
    legal, zh = (c for _, c in found.calibration.domains())
    assert "installed Python packages" in legal.source and "License" in legal.text()
    assert "gettext" in zh.source and any("\u4e00" <= c <= "\u9fff" for c in zh.text())


def test_unknown_domain_is_refused(model_dir: Path, corpus_cache: Path) -> None:
    with pytest.raises(ValueError, match="unknown domain 'klingon'"):
        standard_corpora(model_dir, corpus_cache, ("docs", "klingon"))


def test_user_files_are_one_more_domain(
    model_dir: Path, corpus_cache: Path, tmp_path: Path, tokenizer: Any
) -> None:
    files = []
    for i in range(12):
        f = tmp_path / f"ticket{i}.txt"
        f.write_text(f"Ticket {i}: the customer asks about refund number {i}.\n\n" * 60)
        files.append(f)
    held = tmp_path / "held.txt"
    held.write_text("A held-out ticket about shipping delays and invoices.\n\n" * 80)
    only_calib = user_domain(files, None)
    assert set(only_calib) == set(PARTS)  # split three ways
    names = [set(c.documents) for c in only_calib.values()]
    assert not (names[0] & names[1] or names[0] & names[2] or names[1] & names[2])
    both = user_domain(files, [held])
    assert both["evaluation"].documents == {str(held): held.read_text()}
    assert str(held) not in both["calibration"].documents
    mix = standard_corpora(model_dir, corpus_cache, ("docs", "code"), extra=both)
    assert mix.domains() == ["docs", "code", "user"]
    scored_only = standard_corpora(
        model_dir, corpus_cache, ("docs", "code"), extra=user_domain(None, [held])
    )
    assert [d for d, _ in scored_only.calibration.domains()] == ["docs", "code"]
    assert scored_only.domains() == ["docs", "code", "user"]
    per = domain_windows(tokenizer, mix.evaluation, 2, 64)
    assert list(per) == ["docs", "code", "user"] and all(len(w) == 2 for w in per.values())


class _Chars:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


def test_labelled_windows_name_their_domain() -> None:
    a = Corpus("a-calibration", "s", "l", {"x": "a" * 4000}, domain="a")
    b = Corpus("b-calibration", "s", "l", {"x": "b" * 4000}, domain="b")
    got = labelled_windows(_Chars(), mixed_corpus([(a, 1.0), (b, 1.0)], "mix"), 6, 10)
    assert sorted(d for d, _ in got) == ["a", "a", "a", "b", "b", "b"]
    assert all(chr(w[0]) == d for d, w in got)
    # fewer windows than parts: n in all, never more
    parts = [Corpus(f"{c}", "s", "l", {"x": c * 400}, domain=c) for c in "abcdef"]
    few = labelled_windows(_Chars(), mixed_corpus([(p, 1.0) for p in parts], "six"), 4, 10)
    assert [d for d, _ in few] == ["a", "b", "c", "d"]


def test_the_configured_domains_are_the_standard_ones_and_checked() -> None:
    from pydantic import ValidationError
    from zerolayer.config import CollapseConfig

    assert tuple(CollapseConfig().domains) == dom.STANDARD_DOMAINS  # all of them by default
    assert CollapseConfig(domains=["zh", "docs"]).domains == ["zh", "docs"]
    for wrong in ([], ["klingon"]):
        with pytest.raises(ValidationError):
            CollapseConfig(domains=wrong)
