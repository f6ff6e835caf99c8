"""Compiled kernels for the torch engine on a CPU: latency mode's sparse-input product, and the
whole single-stream decode step built on it.

Input-dependent sparsity only pays when the weights of skipped inputs are not read at all. With
W stored transposed (in x out, each input's weights one contiguous row), the product over the
active inputs is a sum of scaled rows: the OpenMP threads share out the active rows, each adding
x[i] * Wt[i, :] into its own partial sum (whole rows, read front to back), and the partial sums
are added at the end, so the memory read is the active rows and nothing else.
torch's own ops cannot do this without copying the rows first (index_select, embedding_bag:
slower than the dense GEMV below ~80% sparsity on 2 CPU cores, benchmarks/latency_kernel.py).

zl_decode_one runs one token of one sequence through every decoder layer in one call (RMSNorm,
q/k/v, rotary, the cache write, attention, o_proj, gate/up, SiLU product, down_proj, residuals),
every product through the kernel above with its layer's threshold (0: a dense weight). As torch
ops the same step is about 1,000 small calls a token, whose dispatch and thread wake-ups cost
about as much as the weights' reads on these cores.

The C source (kernel.c beside this module, shipped as package data) is compiled at first use
with the configured C compiler and flags (KernelConfig: by default cc or gcc from PATH with -O3
-march=native, so for this CPU; about 0.2 s) into a temporary file and loaded with ctypes. It is
linked against the OpenMP runtime that torch itself loaded, so its threads are torch's threads:
no second pool competes with torch's for the cores. The ctypes mirror of the C layer struct is
checked against the layout the compiled code reports. Without a compiler, or with a torch that
brings no GNU OpenMP runtime, `load()` returns None and callers fall back to torch ops (the tier
card says so).
"""

from __future__ import annotations

import ctypes
import logging
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["Compiler", "LayerC", "SparseInputKernel", "WEIGHT_DTYPES", "load"]

log = logging.getLogger(__name__)

# what the kernels read weights in: bfloat16 rows are widened to float32 as they are read, so a
# product reads half the bytes of a float32 one and adds up in float32 all the same
WEIGHT_DTYPES = (torch.float32, torch.bfloat16)


class LayerC(ctypes.Structure):
    """One decoder layer as zl_decode_one reads it (the C struct zl_layer)."""

    _fields_ = [
        ("in_norm", ctypes.c_void_p),
        ("post_norm", ctypes.c_void_p),
        ("qkv", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("gate_up", ctypes.c_void_p),
        ("down", ctypes.c_void_p),
        ("t_qkv", ctypes.c_float),
        ("t_o", ctypes.c_float),
        ("t_gate_up", ctypes.c_float),
        ("t_down", ctypes.c_float),
        ("width", ctypes.c_int),
        ("bf16", ctypes.c_int),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
    ]


class SparseInputKernel:
    """The loaded kernels; call them with float32 CPU tensors (weights float32 or bfloat16)."""

    def __init__(self, lib: ctypes.CDLL):
        self._step = lib.zl_decode_one
        self._step.argtypes = [ctypes.c_void_p] + [ctypes.c_int] * 7 + [ctypes.c_float]
        self._step.argtypes += [ctypes.c_void_p] * 4
        self._step.restype = ctypes.c_int
        self._counts = (ctypes.c_long * 2)()
        self._fn = lib.zl_sparse_input_gemv
        self._fn.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_float,
            ctypes.c_void_p,
        ]
        self._fn.restype = ctypes.c_int
        self.active = 0  # thresholded inputs that passed, over all calls
        self.total = 0

    def __call__(self, wt: torch.Tensor, x: torch.Tensor, threshold: float) -> torch.Tensor:
        """x [1, in] @ wt [in, out] over the entries of x with |x| > threshold; [1, out]
        (float32; wt float32 or bfloat16)."""
        if x.dtype != torch.float32 or wt.dtype not in WEIGHT_DTYPES or x.device.type != "cpu":
            raise ValueError(
                "the sparse-input kernel takes float32 CPU inputs and float32 or bfloat16 weights"
            )
        if x.dim() != 2 or x.shape[0] != 1 or wt.dim() != 2 or x.shape[1] != wt.shape[0]:
            raise ValueError(f"shapes {tuple(x.shape)} and {tuple(wt.shape)} do not fit")
        if not wt.is_contiguous():
            raise ValueError("the weight must be contiguous")
        return self.run(wt, x.contiguous(), threshold)

    def run(self, wt: torch.Tensor, x: torch.Tensor, threshold: float) -> torch.Tensor:
        """The same without the checks, for callers that made wt and x right at load (the
        engine's hot path: a few microseconds a call matter at 60 calls a token)."""
        rows, cols = wt.shape
        out = torch.empty(1, cols)
        bf16 = int(wt.dtype == torch.bfloat16)
        n = self._fn(wt.data_ptr(), bf16, rows, cols, x.data_ptr(), threshold, out.data_ptr())
        if n < 0:
            raise MemoryError("the sparse-input kernel could not allocate its buffers")
        if threshold > 0:  # latency mode's counters: thresholded inputs only
            self.active += n
            self.total += rows
        return out

    def decode_one(
        self,
        layers: ctypes.Array[LayerC],
        dims: tuple[int, int, int, int, int],
        capacity: int,
        pos: int,
        eps: float,
        cos: torch.Tensor,
        sin: torch.Tensor,
        x: torch.Tensor,
    ) -> None:
        """One token of one sequence through every layer, in place on x [hidden] (contiguous
        float32); dims = (layers, hidden, heads, kv_heads, head_dim); the layers' k and v point
        at the sequence's cache slot, `capacity` positions per head; cos and sin: the rotary
        row of `pos`. Called by the engine with everything made right at load, so unchecked."""
        n_layers, hidden, heads, kv_heads, head_dim = dims
        counts = self._counts
        counts[0] = counts[1] = 0
        rc = self._step(
            ctypes.addressof(layers),
            n_layers,
            hidden,
            heads,
            kv_heads,
            head_dim,
            capacity,
            pos,
            eps,
            cos.data_ptr(),
            sin.data_ptr(),
            x.data_ptr(),
            ctypes.addressof(counts),
        )
        if rc < 0:
            raise MemoryError("the decode kernel could not allocate its buffers")
        self.active += counts[0]
        self.total += counts[1]


@dataclass(frozen=True)
class Compiler:
    """How the kernels are built: the C compiler (None: cc or gcc from PATH) and its
    optimisation flags; `enabled` False serves through torch ops without trying."""

    cc: str | None = None
    flags: tuple[str, ...] = ("-O3", "-march=native")
    enabled: bool = True

    def command(self, src: Path, out: Path) -> list[str]:
        """The compile command for src into the shared library out; RuntimeError when there
        is no compiler or no OpenMP runtime of torch's to link against."""
        cc = self.cc or shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise RuntimeError("no C compiler (cc or gcc) on PATH")
        gomp = _torch_gomp()
        if gomp is None:
            raise RuntimeError("torch brings no GNU OpenMP runtime to share threads with")
        cmd = [cc, *self.flags, "-fopenmp", "-fPIC", "-shared", str(src), "-o", str(out)]
        return cmd + [f"-L{gomp.parent}", f"-l:{gomp.name}", f"-Wl,-rpath,{gomp.parent}"]


SOURCE = Path(__file__).with_name("kernel.c")

_lock = threading.Lock()
_loaded: dict[Compiler, SparseInputKernel | None] = {}


def _torch_gomp() -> Path | None:
    lib = Path(torch.__file__).parent / "lib"
    found = sorted(lib.glob("libgomp*.so*"))
    return found[0] if found else None


def _compile(compiler: Compiler, folder: Path) -> Path:
    so = folder / "kernel.so"
    cmd = compiler.command(SOURCE, so)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise RuntimeError(f"compiling the kernel failed: {run.stderr.strip()[-400:]}")
    return so


def _check_layout(lib: ctypes.CDLL) -> None:
    """RuntimeError unless LayerC matches the compiled zl_layer field by field."""
    fn = lib.zl_layer_layout
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int]
    fn.restype = ctypes.c_int
    n = len(LayerC._fields_) + 1
    got = (ctypes.c_long * n)()
    count = fn(ctypes.addressof(got), n)
    want = [ctypes.sizeof(LayerC)] + [getattr(LayerC, f[0]).offset for f in LayerC._fields_]
    if count != n or list(got) != want:
        raise RuntimeError(f"LayerC does not match kernel.c's zl_layer: {list(got)} vs {want}")


def load(compiler: Compiler | None = None) -> SparseInputKernel | None:
    """The compiled kernels, or None where they cannot be built here (logged once per
    compiler setting)."""
    compiler = compiler or Compiler()
    with _lock:
        if compiler not in _loaded:
            _loaded[compiler] = None
            if not compiler.enabled:
                log.info("latency-mode kernel disabled by config: torch ops instead")
                return None
            try:
                with tempfile.TemporaryDirectory(prefix="zerolayer-kernel-") as tmp:
                    lib = ctypes.CDLL(str(_compile(compiler, Path(tmp))))
                    # loaded before the folder goes: the mapping outlives the file
                _check_layout(lib)
                _loaded[compiler] = SparseInputKernel(lib)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                log.warning("latency-mode kernel unavailable, torch ops instead: %s", exc)
        return _loaded[compiler]
