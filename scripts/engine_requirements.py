"""Print the requirements of an installed engine distribution, one per line, minus the ones
that must not be installed beside the CPU build of torch (torchvision, torchaudio, torchcodec).

Used by scripts/bootstrap.sh after installing the engine with --no-deps.
"""

from __future__ import annotations

import sys
from importlib.metadata import requires

from packaging.requirements import Requirement

_LEFT_OUT = {"torchvision", "torchaudio", "torchcodec", "torch"}


def main(dist: str) -> None:
    for line in requires(dist) or []:
        req = Requirement(line)
        if req.name.lower() in _LEFT_OUT:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        print(str(req))


if __name__ == "__main__":
    main(sys.argv[1])
