"""The chart's rendering, shared with tests/helm (the CLI works on the RayService it makes)."""

from tests.helm.conftest import chart, render

__all__ = ["chart", "render"]
