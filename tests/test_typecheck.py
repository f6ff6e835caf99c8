"""The type checks CI runs (`./zl typecheck`: mypy with the settings in pyproject.toml): every
`type: ignore` names its code and says why, and the settings catch what they are meant to catch
(planted errors in a strict module, a default-level module, and a bare ignore)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[1]
CHECKED = [REPO / "services" / "zerolayer", REPO / "sdk" / "src" / "zerolayer_sdk"]
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<code>\[[a-z0-9-, ]+\])?(?P<rest>.*)$")


def unexplained_ignores(files: list[Path]) -> list[str]:
    """Every `type: ignore` without an error code, or without a reason: a comment after it on
    its line, or a comment line right above its statement."""
    out = []
    for path in files:
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            m = IGNORE.search(line)
            if m is None:
                continue
            above = lines[n - 1].strip() if n else ""
            reason = m["rest"].strip().lstrip("#").strip() or above.startswith("#")
            if not m["code"] or not reason:
                out.append(f"{path.name}:{n + 1}")
    return out


def test_every_ignore_names_its_code_and_reason() -> None:
    files = [p for root in CHECKED for p in root.rglob("*.py")]
    assert len(files) > 150
    assert unexplained_ignores(files) == []


def test_the_reason_check_finds_a_bare_ignore(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text(
        "a = 1  # type: ignore\n"
        "b = 2  # type: ignore[assignment]\n"
        "# the stub is wrong\n"
        "c = 3  # type: ignore[assignment]\n"
        "d = 4  # type: ignore[assignment]  # the stub is wrong\n"
    )
    assert unexplained_ignores([f]) == ["m.py:1", "m.py:2"]


def test_strict_where_other_code_imports_the_types() -> None:
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    strict = next(o for o in cfg["overrides"] if "zerolayer.protocol" in o["module"])
    assert {"zerolayer_sdk.*", "zerolayer.artifacts.*", "zerolayer.config.*"} <= set(
        strict["module"]
    )
    # every per-module flag that --strict turns on (the global ones are set globally)
    assert {
        "disallow_any_generics",
        "disallow_subclassing_any",
        "disallow_untyped_calls",
        "disallow_untyped_defs",
        "disallow_incomplete_defs",
        "check_untyped_defs",
        "disallow_untyped_decorators",
        "warn_return_any",
        "no_implicit_reexport",
        "strict_equality",
        "extra_checks",
    } <= {k for k, v in strict.items() if v is True}
    assert cfg["warn_unused_ignores"] and cfg["warn_redundant_casts"]
    assert "ignore-without-code" in cfg["enable_error_code"]


def _mypy(api: Any, pkg: Path, tmp_path: Path) -> tuple[str, int]:
    """mypy with the project's settings over one folder: (its report, its exit status)."""
    out, _err, status = api.run(
        [
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-incremental",
            str(pkg),
        ]
    )
    return out, status


def test_mypy_with_these_settings_fails_on_planted_errors(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    pkg = tmp_path / "zerolayer"
    (pkg / "gateway").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "gateway" / "__init__.py").write_text("")
    # strict module: an unannotated function; default level: a wrong type; a bare ignore
    (pkg / "protocol.py").write_text("def value(x):\n    return x\n")
    (pkg / "gateway" / "flow.py").write_text(
        'count: int = "three"\nsize: int = "four"  # type: ignore\n'
    )
    out, status = _mypy(api, pkg, tmp_path)
    assert status == 1, out
    assert "protocol.py:1: error: Function is missing a type annotation" in out
    assert 'flow.py:1: error: Incompatible types in assignment (expression has type "str"' in out
    assert 'flow.py:2: error: "type: ignore" comment without error code' in out
    # the same function in a default-level module passes
    (pkg / "protocol.py").write_text("")
    (pkg / "gateway" / "flow.py").write_text("def value(x):\n    return x\n")
    out, status = _mypy(api, pkg, tmp_path)
    assert status == 0, out
