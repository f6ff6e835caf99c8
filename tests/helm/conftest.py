"""The chart rendered by Helm's own template engine (helm-python-sdk: Helm's Go library, no helm
binary), as the objects it produces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.gateway.conftest import make_gateway  # noqa: F401  (the fixture, for test_monitoring)

CHART = Path(__file__).resolve().parents[2] / "helm" / "zerolayer"
VALUES = {
    "default": None,
    "production": CHART / "ci" / "production-values.yaml",
    "cpu-only": CHART / "ci" / "cpu-only-values.yaml",
}


def values_of(name: str) -> dict[str, Any]:
    """The values of one of the chart's values files (default: none)."""
    path = VALUES[name]
    return yaml.safe_load(path.read_text()) if path else {}


@pytest.fixture(scope="session")
def chart() -> Any:
    import helm_python as helm

    return helm.Chart.load(str(CHART))


@pytest.fixture(scope="session")
def render(chart: Any) -> Any:
    """render(values) -> (objects, NOTES text), as a first install of release `zl` in `ml`."""

    def run(values: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], str]:
        out = chart.render(values or {}, name="zl", namespace="ml", is_install=True)
        objects, notes = [], ""
        for path, text in sorted(out.items()):
            if path.endswith("NOTES.txt"):
                notes = text
                continue
            objects += [d for d in yaml.safe_load_all(text) if d]
        return objects, notes

    return run


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The only object of this kind (and name)."""
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in found])
    return found[0]
