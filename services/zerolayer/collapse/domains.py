"""The standard domains of the collapse compiler: text of different kinds found on the machine,
each split into calibration, validation and evaluation parts that share no document.

A tier card is only worth what its evaluation text covers: cuts chosen on documentation and
the model's own chat answers lost far more on text of other kinds (a second language most of
all). So the compiler calibrates on, and answers for, several domains:

  docs   pydoc's plain text of standard-library modules            (PSF licence)
  code   the standard library's own Python source                  (PSF licence)
  chat   the dense model's greedy answers to prompts written here  (generated)
  legal  licence texts: the OS's common licences, else the licence files of installed
         Python packages                                           (verbatim copying allowed)
  zh, fr the translated messages of installed programs (gettext catalogs), Chinese and French
                                                                   (each program's licence)

Nothing is copied into this repository: every domain is read (or generated) on the user's
machine. A domain whose source is absent is left out, and the card lists the domains it was
measured on. Documents go to a part by a hash of their name (60% calibration, 15% validation,
25% evaluation) unless the source already has disjoint sets (pydoc's module lists, chat's
fillers); each part is capped in characters so corpora stay quick to tokenize.
"""

from __future__ import annotations

import gettext
import hashlib
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from zerolayer.collapse.corpus import (
    CALIBRATION_MODULES,
    EVALUATION_MODULES,
    Corpus,
    files_corpus,
    pydoc_corpus,
)
from zerolayer.config.models import StandardDomain

__all__ = [
    "PARTS",
    "STANDARD_DOMAINS",
    "Corpora",
    "split_part",
    "standard_corpora",
    "user_domain",
]

PARTS = ("calibration", "validation", "evaluation")
# the names and their order are the config's (collapse.domains in models.yaml)
STANDARD_DOMAINS: tuple[str, ...] = get_args(StandardDomain)
# Cumulative shares of calibration and validation in a hash split; evaluation the rest.
_SPLIT = (0.60, 0.75)
PART_CHARS = 240_000  # each part of a domain at most (about 60k tokens of English)
# where the operating system keeps licence texts and gettext catalogs (Debian and most others)
COMMON_LICENCES = Path("/usr/share/common-licenses")
LOCALE_DIR = Path("/usr/share/locale")


@dataclass(frozen=True)
class Corpora:
    """One mixture per part, with the same domains (a domain may lack a calibration part: it is
    then only scored, as an unseen domain would be)."""

    calibration: Corpus
    validation: Corpus
    evaluation: Corpus

    def domains(self) -> list[str]:
        return [d for d, _ in self.evaluation.domains()]


def _unit(domain: str, name: str) -> float:
    digest = hashlib.sha256(f"{domain}\0{name}".encode()).hexdigest()
    return int(digest[:8], 16) / 2**32


def split_part(domain: str, name: str) -> str:
    """The part a document of the domain belongs to (a fixed hash of its name)."""
    u = _unit(domain, name)
    return "calibration" if u < _SPLIT[0] else "validation" if u < _SPLIT[1] else "evaluation"


def _capped(domain: str, docs: dict[str, str], chars: int = PART_CHARS) -> dict[str, str]:
    """Documents in hash order until the character cap (at least one)."""
    out: dict[str, str] = {}
    total = 0
    for name in sorted(docs, key=lambda n: _unit(domain, n)):
        if out and total + len(docs[name]) > chars:
            continue
        out[name] = docs[name]
        total += len(docs[name])
    return out


def _parts(domain: str, docs: dict[str, str]) -> dict[str, dict[str, str]]:
    """A hash split of the documents into the three parts; a text found under several names
    (the same catalog installed twice) is kept once."""
    parts: dict[str, dict[str, str]] = {p: {} for p in PARTS}
    seen: set[str] = set()
    for name in sorted(docs):
        text = docs[name]
        digest = hashlib.sha256(text.encode()).hexdigest()
        if text.strip() and digest not in seen:
            seen.add(digest)
            parts[split_part(domain, name)][name] = text
    return parts


def _chunks(name: str, text: str, size: int = 3000) -> dict[str, str]:
    """A long document cut at blank lines into pieces of about `size` characters."""
    out: dict[str, str] = {}
    piece: list[str] = []
    length = 0
    for para in text.split("\n\n"):
        piece.append(para)
        length += len(para) + 2
        if length >= size:
            out[f"{name}#{len(out)}"] = "\n\n".join(piece)
            piece, length = [], 0
    if piece:
        out[f"{name}#{len(out)}"] = "\n\n".join(piece)
    return out


# -- sources ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Found:
    """A domain's text as found: documents per part, where from, under what licence."""

    parts: dict[str, dict[str, str]]
    source: str
    licence: str


def _docs(cache_dir: Path | None, _model_dir: Path) -> _Found:
    calib = pydoc_corpus("calibration", cache_dir)
    evaluation = pydoc_corpus("evaluation", cache_dir)
    split = _parts("docs", calib.documents)
    parts = {
        "calibration": {**split["calibration"], **split["evaluation"]},
        "validation": split["validation"],
        "evaluation": evaluation.documents,
    }
    modules = len(calib.documents) + len(evaluation.documents)
    version = calib.source.rsplit("(Python ", 1)[-1].rstrip(")")
    return _Found(
        parts,
        f"pydoc plain text of {modules} standard-library modules (Python {version}); the "
        "evaluation modules apart from the rest",
        calib.licence,
    )


# packages of the standard library that are tests, demos, GUIs or vendored installers
_NOT_CODE = {
    "test",
    "tests",
    "idlelib",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "tkinter",
    "site-packages",
    "dist-packages",
    "__pycache__",
    "config-3",
}


def _code(_cache: Path | None, _model_dir: Path) -> _Found:
    root = Path(sysconfig.get_paths()["stdlib"])
    documented = set(CALIBRATION_MODULES) | set(EVALUATION_MODULES)  # their docstrings are docs
    docs = {}
    for path in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in _NOT_CODE or rel.parts[0].startswith("config-"):
            continue
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        if module in documented or module.startswith("_"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if 500 < len(text) < 120_000:
            docs[str(rel)] = text
    import sys

    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return _Found(
        _parts("code", docs),
        f"Python {version} standard-library source files ({len(docs)} modules, those pydoc "
        "renders for docs left out)",
        "PSF License Agreement (the Python standard library)",
    )


def _chat(cache_dir: Path | None, model_dir: Path, limit: int | None, tokens: int) -> _Found:
    from zerolayer.collapse.chat import chat_corpus

    calib = chat_corpus("calibration", model_dir, cache_dir, max_tokens=tokens, limit=limit)
    evaluation = chat_corpus("evaluation", model_dir, cache_dir, max_tokens=tokens, limit=limit)
    split = _parts("chat", calib.documents)
    parts = {
        "calibration": {**split["calibration"], **split["evaluation"]},
        "validation": split["validation"],
        "evaluation": evaluation.documents,
    }
    if not parts["validation"]:  # a handful of prompts (tests): the last one validates
        last = sorted(parts["calibration"])[-1]
        parts["validation"] = {last: parts["calibration"].pop(last)}
    return _Found(parts, calib.source + "; disjoint prompt fillers for evaluation", calib.licence)


def _legal(_cache: Path | None, _model_dir: Path) -> _Found:
    common = COMMON_LICENCES
    files = sorted(p for p in common.glob("*") if p.is_file() and not p.is_symlink())
    source = f"the operating system's common licence texts ({common}, {len(files)} texts)"
    if not files:  # no OS copy: the licence files of installed Python packages
        site = Path(sysconfig.get_paths()["purelib"])
        found = [*site.glob("*.dist-info/LICEN[CS]E*"), *site.glob("*.dist-info/licenses/*")]
        files = sorted({p.resolve() for p in found if p.is_file()})
        source = f"licence files of {len(files)} installed Python packages"
    seen: set[str] = set()
    docs: dict[str, str] = {}
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        docs.update(_chunks(path.name, text))
    return _Found(
        _parts("legal", docs),
        source + ", cut into sections",
        "each licence text's own terms (verbatim copies may be distributed)",
    )


def _catalog_text(path: Path) -> tuple[str, str]:
    """A gettext catalog's translated messages (sorted by message id) and its project."""
    with open(path, "rb") as fh:
        t = gettext.GNUTranslations(fh)
    # the parsed catalog (private, and so not in typeshed); the public API translates one id
    cat = t._catalog  # type: ignore[attr-defined]
    lines = [str(v).strip() for k, v in sorted(cat.items(), key=lambda kv: str(kv[0])) if k]
    project = (t.info().get("project-id-version") or "").split()
    return "\n".join(x for x in lines if x), project[0] if project else path.stem


def _language(lang: str, locales: Sequence[str]) -> Callable[[Path | None, Path], _Found]:
    def found(_cache: Path | None, _model_dir: Path) -> _Found:
        site = Path(sysconfig.get_paths()["purelib"])
        docs: dict[str, str] = {}
        projects: list[str] = []
        for loc in locales:
            paths = sorted(LOCALE_DIR.glob(f"{loc}/LC_MESSAGES/*.mo"))
            if not paths:  # no OS catalogs: those shipped inside installed Python packages
                paths = sorted(site.glob(f"**/{loc}/LC_MESSAGES/*.mo"))
            for path in paths:
                try:
                    text, project = _catalog_text(path)
                except (OSError, ValueError, UnicodeDecodeError):
                    continue
                if len(text) > 400:
                    docs[f"{loc}/{path.stem}"] = text
                    projects.append(project)
        return _Found(
            _parts(lang, docs),
            f"translated messages ({'/'.join(locales)}) of {len(docs)} gettext catalogs of "
            f"installed programs ({', '.join(sorted(set(projects))[:12])}"
            f"{', ...' if len(set(projects)) > 12 else ''})",
            "each catalog under its program's licence (mostly GPL/LGPL)",
        )

    return found


_LANGUAGES = {"zh": ("zh_CN", "zh_TW"), "fr": ("fr",)}


def _find(
    domain: str, cache_dir: Path | None, model_dir: Path, chat_limit: int | None, chat_tokens: int
) -> _Found:
    if domain == "docs":
        return _docs(cache_dir, model_dir)
    if domain == "code":
        return _code(cache_dir, model_dir)
    if domain == "chat":
        return _chat(cache_dir, model_dir, chat_limit, chat_tokens)
    if domain == "legal":
        return _legal(cache_dir, model_dir)
    if domain in _LANGUAGES:
        return _language(domain, _LANGUAGES[domain])(cache_dir, model_dir)
    raise ValueError(f"unknown domain {domain!r}; known: {', '.join(STANDARD_DOMAINS)}")


def _domain_corpus(domain: str, part: str, found: _Found) -> Corpus:
    docs = _capped(domain, found.parts[part])
    return Corpus(
        name=f"{domain}-{part}",
        source=found.source,
        licence=found.licence,
        documents=docs,
        domain=domain,
    )


def _mixture(part: str, corpora: list[Corpus]) -> Corpus:
    from zerolayer.collapse.corpus import mixed_corpus

    return mixed_corpus([(c, 1.0) for c in corpora], name=f"domains-{part}")


def user_domain(
    corpus: Sequence[Path] | None, eval_corpus: Sequence[Path] | None, name: str = "user"
) -> dict[str, Corpus]:
    """The user's own text files as one more domain: --corpus files are split by hash into the
    three parts (calibration and validation only when --eval-corpus files are given, which are
    then the evaluation part); --eval-corpus alone is a domain that is only scored."""
    parts: dict[str, Corpus] = {}
    if corpus:
        given = files_corpus([Path(p) for p in corpus], name=name)
        docs: dict[str, str] = {}
        for path, text in given.documents.items():
            docs.update(_chunks(path, text))
        split = _parts(name, docs)
        if eval_corpus:
            split["calibration"].update(split.pop("evaluation"))
        if not split["calibration"]:  # one short file: it calibrates, the rest is scored
            split["calibration"] = dict(docs)
        for part, d in split.items():
            if d:
                parts[part] = Corpus(
                    name=f"{name}-{part}",
                    source=given.source,
                    licence=given.licence,
                    documents=d,
                    domain=name,
                )
    if eval_corpus:
        held = files_corpus([Path(p) for p in eval_corpus], name=f"{name}-evaluation")
        parts["evaluation"] = Corpus(
            name=held.name,
            source=held.source,
            licence=held.licence,
            documents=held.documents,
            domain=name,
        )
    return parts


def standard_corpora(
    model_dir: Path,
    cache_dir: Path | None,
    domains: Sequence[str] = STANDARD_DOMAINS,
    extra: dict[str, Corpus] | Sequence[dict[str, Corpus]] | None = None,
    chat_limit: int | None = None,
    chat_tokens: int = 160,
) -> Corpora:
    """The calibration, validation and evaluation mixtures of the named standard domains (those
    whose source is present on this machine) plus `extra` (the parts of one more domain, as
    user_domain makes them, or a list of such domains), in equal
    shares per part."""
    per_part: dict[str, list[Corpus]] = {p: [] for p in PARTS}
    for domain in domains:
        found = _find(domain, cache_dir, Path(model_dir), chat_limit, chat_tokens)
        if not all(found.parts[p] for p in PARTS):
            print(f"collapse: domain {domain!r} left out: no text found ({found.source})")
            continue
        for part in PARTS:
            per_part[part].append(_domain_corpus(domain, part, found))
    for more in [extra] if isinstance(extra, dict) else list(extra or []):
        for part, corpus in more.items():
            per_part[part].append(corpus)
    if not per_part["evaluation"] or not per_part["calibration"]:
        raise ValueError("no domain has calibration and evaluation text")
    if not per_part["validation"]:
        raise ValueError("no domain has validation text")
    return Corpora(*(_mixture(p, per_part[p]) for p in PARTS))
