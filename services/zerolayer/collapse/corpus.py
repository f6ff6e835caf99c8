"""Calibration and evaluation text.

The default corpora are built on the user's machine from the standard library's own documentation
(pydoc's plain-text rendering of the modules below), which ships with every Python under the PSF
licence; nothing is copied into this repository. Modules are split into two disjoint sets, so the
evaluation text is never seen by calibration. A user can pass their own text files instead.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CALIBRATION_MODULES",
    "EVALUATION_MODULES",
    "Corpus",
    "pydoc_corpus",
    "files_corpus",
    "mixed_corpus",
    "token_windows",
    "labelled_windows",
    "domain_windows",
]

# Disjoint by construction; chosen for plain prose plus signatures, no side effects on import.
CALIBRATION_MODULES = (
    "argparse",
    "collections",
    "functools",
    "itertools",
    "pathlib",
    "re",
    "string",
    "textwrap",
    "datetime",
    "json",
    "csv",
    "logging",
    "typing",
    "dataclasses",
    "enum",
    "heapq",
    "bisect",
    "shutil",
    "tempfile",
    "subprocess",
    "threading",
    "queue",
    "socket",
    "email.message",
    "http.client",
    "urllib.parse",
    "zipfile",
    "tarfile",
    "gzip",
    "hashlib",
    "hmac",
    "secrets",
    "random",
    "statistics",
    "fractions",
    "decimal",
    "math",
    "operator",
    "contextlib",
    "abc",
)
EVALUATION_MODULES = (
    "inspect",
    "difflib",
    "configparser",
    "sqlite3",
    "unittest.mock",
    "pprint",
    "calendar",
    "copy",
    "uuid",
    "base64",
    "struct",
    "codecs",
    "io",
    "os.path",
    "glob",
    "fnmatch",
    "shlex",
    "sched",
    "selectors",
    "weakref",
)


@dataclass(frozen=True)
class Corpus:
    """Named documents and where they came from."""

    name: str
    source: str
    licence: str
    documents: dict[str, str]
    # a mixture (mixed_corpus): token_windows takes each part's share of windows
    parts: tuple[tuple[Corpus, float], ...] = ()
    # the kind of text (collapse.domains): a mixture's parts are scored domain by domain
    domain: str = ""

    def domains(self) -> list[tuple[str, Corpus]]:
        """(domain, corpus) per part of a mixture; a plain corpus is one domain."""
        if self.parts:
            return [(c.domain or c.name, c) for c, _ in self.parts]
        return [(self.domain or self.name, self)]

    def text(self) -> str:
        """All documents, in name order, separated by blank lines."""
        return "\n\n".join(self.documents[k] for k in sorted(self.documents))

    def describe(self) -> dict[str, Any]:
        """What a tier card records about the corpus."""
        digest = hashlib.sha256(self.text().encode()).hexdigest()[:16]
        if self.parts:
            return {
                "name": self.name,
                "source": self.source,
                "domains": [d for d, _ in self.domains()],
                "parts": [{**c.describe(), "share": round(s, 4)} for c, s in self.parts],
                "sha256_16": digest,
            }
        return {
            "name": self.name,
            **({"domain": self.domain} if self.domain else {}),
            "source": self.source,
            "licence": self.licence,
            "documents": len(self.documents),
            "chars": len(self.text()),
            "sha256_16": digest,
        }


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _pydoc_text(module: str) -> str:
    """pydoc's plain text of a module, without the memory addresses it prints for some default
    values (they change every run and would make the corpus differ between runs)."""
    import importlib
    import pydoc

    mod = importlib.import_module(module)
    # pydoc.plaintext (TextDoc without overstruck bold) exists at run time; typeshed omits it
    plain = pydoc.plaintext  # type: ignore[attr-defined]
    return _ADDRESS.sub("", pydoc.render_doc(mod, title="%s", renderer=plain))


def pydoc_corpus(split: str, cache_dir: Path | None = None) -> Corpus:
    """The default corpus: 'calibration' or 'evaluation' (disjoint module sets)."""
    import sys

    modules = {"calibration": CALIBRATION_MODULES, "evaluation": EVALUATION_MODULES}[split]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    cached = cache_dir / f"pydoc-{split}-py{version}.json" if cache_dir else None
    if cached and cached.exists():
        docs = json.loads(cached.read_text())
    else:
        docs = {m: _pydoc_text(m) for m in modules}
        if cached:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(docs))
    return Corpus(
        name=f"pydoc-{split}",
        source=f"pydoc plain text of {len(modules)} standard-library modules (Python {version})",
        licence="PSF License Agreement (Python's documentation strings)",
        documents=docs,
    )


def files_corpus(paths: Sequence[Path], name: str = "user-files") -> Corpus:
    """A corpus of the user's own text files ("calibrate on production data")."""
    docs = {}
    for p in paths:
        p = Path(p)
        docs[str(p)] = p.read_text(encoding="utf-8", errors="replace")
    if not any(t.strip() for t in docs.values()):
        raise ValueError("the given files hold no text")
    return Corpus(
        name=name, source=f"{len(docs)} user file(s)", licence="the user's", documents=docs
    )


def mixed_corpus(parts: list[tuple[Corpus, float]], name: str) -> Corpus:
    """Several corpora that token_windows samples in the given shares."""
    docs = {f"{c.name}/{k}": v for c, _ in parts for k, v in c.documents.items()}
    total = sum(s for _, s in parts)
    return Corpus(
        name=name,
        source=" + ".join(f"{s / total:.0%} {c.name}" for c, s in parts),
        licence="; ".join(sorted({c.licence for c, _ in parts})),
        documents=docs,
        parts=tuple((c, s / total) for c, s in parts),
    )


def token_windows(
    tokenizer: Any, corpus: Corpus, n: int, length: int, seed: int = 0
) -> list[list[int]]:
    """n windows of exactly `length` tokens, cut from the corpus text without overlap and chosen
    with a seeded shuffle; fewer when the corpus is short. A mixture takes round(n x share)
    windows from each part while any are left (the last part the rest), interleaved."""
    return [w for _, w in labelled_windows(tokenizer, corpus, n, length, seed)]


def labelled_windows(
    tokenizer: Any, corpus: Corpus, n: int, length: int, seed: int = 0
) -> list[tuple[str, list[int]]]:
    """token_windows, each with the domain it was cut from."""
    if corpus.parts:
        keyed: list[tuple[float, int, tuple[str, list[int]]]] = []
        taken = 0
        for j, (part, share) in enumerate(corpus.parts):
            k = n - taken if j == len(corpus.parts) - 1 else min(n - taken, round(n * share))
            got = labelled_windows(tokenizer, part, k, length, seed)
            taken += len(got)
            # interleaved by relative position, so every prefix keeps the shares
            keyed += [((i + 0.5) / len(got), j, w) for i, w in enumerate(got)]
        return [w for _, _, w in sorted(keyed, key=lambda t: (t[0], t[1]))]
    ids = tokenizer.encode(corpus.text(), add_special_tokens=False)
    starts = list(range(0, len(ids) - length + 1, length))
    random.Random(seed).shuffle(starts)
    label = corpus.domain or corpus.name
    return [(label, ids[s : s + length]) for s in sorted(starts[:n])]


def domain_windows(
    tokenizer: Any, corpus: Corpus, n: int, length: int, seed: int = 0
) -> dict[str, list[list[int]]]:
    """Per domain of the corpus, n windows of `length` tokens (token_windows of each part)."""
    return {d: token_windows(tokenizer, c, n, length, seed) for d, c in corpus.domains()}
