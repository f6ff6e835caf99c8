"""A compiled kernel for latency mode: y = x @ Wt over only the inputs whose |x| passes a threshold.

Input-dependent sparsity only pays when the weights of skipped inputs are not read at all. With
W stored transposed (in x out, each input's weights one contiguous row), the product over the
active inputs is a sum of scaled rows: the OpenMP threads share out the active rows, each adding
x[i] * Wt[i, :] into its own partial sum (whole rows, read front to back), and the partial sums
are added at the end, so the memory read is the active rows and nothing else.
torch's own ops cannot do this without copying the rows first (index_select, embedding_bag:
slower than the dense GEMV below ~80% sparsity on 2 CPU cores, benchmarks/latency_kernel.py).

The C source is compiled at first use with the machine's C compiler (-O3 -march=native, so for
this CPU; about 0.2 s) into a temporary file and loaded with ctypes. It is linked against the
OpenMP runtime that torch itself loaded, so its threads are torch's threads: no second pool
competes with torch's for the cores. Without a compiler, or with a torch that brings no GNU
OpenMP runtime, `load()` returns None and callers fall back to torch ops (the tier says so).
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

__all__ = ["SparseInputKernel", "load"]

log = logging.getLogger(__name__)

_SOURCE = r"""
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

/* out[0:n_out] = sum over i with |x[i]| >= t (and x[i] != 0) of x[i] * wt[i, :]; returns how
   many i passed. wt is n_in x n_out, row-major. The passing rows are split between the threads,
   so each reads whole rows front to back; four rows per pass over its partial sum; the partial
   sums are added at the end, each thread a slice of the outputs. */
int zl_sparse_input_gemv(const float *restrict wt, int n_in, int n_out,
                         const float *restrict x, float t, float *restrict out) {
  int *idx = malloc(sizeof(int) * (n_in > 0 ? n_in : 1));
  int stride = (n_out + 15) & ~15;
  float *part = aligned_alloc(64, sizeof(float) * (size_t)omp_get_max_threads() * stride);
  if (idx == NULL || part == NULL) {
    free(idx);
    free(part);
    return -1;
  }
  int na = 0;
  for (int i = 0; i < n_in; i++)
    if (fabsf(x[i]) >= t && x[i] != 0.0f) idx[na++] = i;
  #pragma omp parallel
  {
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
    int a = (int)((long)na * id / nt), b = (int)((long)na * (id + 1) / nt);
    float *restrict acc = part + (size_t)id * stride;
    memset(acc, 0, sizeof(float) * n_out);
    int k = a;
    for (; k + 3 < b; k += 4) {
      const float *restrict r0 = wt + (long)idx[k] * n_out;
      const float *restrict r1 = wt + (long)idx[k + 1] * n_out;
      const float *restrict r2 = wt + (long)idx[k + 2] * n_out;
      const float *restrict r3 = wt + (long)idx[k + 3] * n_out;
      float x0 = x[idx[k]], x1 = x[idx[k + 1]], x2 = x[idx[k + 2]], x3 = x[idx[k + 3]];
      for (int j = 0; j < n_out; j++)
        acc[j] += x0 * r0[j] + x1 * r1[j] + x2 * r2[j] + x3 * r3[j];
    }
    for (; k < b; k++) {
      const float *restrict r0 = wt + (long)idx[k] * n_out;
      float x0 = x[idx[k]];
      for (int j = 0; j < n_out; j++) acc[j] += x0 * r0[j];
    }
    #pragma omp barrier
    int lo = (int)((long)n_out * id / nt), hi = (int)((long)n_out * (id + 1) / nt);
    for (int j = lo; j < hi; j++) {
      float s = 0.0f;
      for (int p = 0; p < nt; p++) s += part[(size_t)p * stride + j];
      out[j] = s;
    }
  }
  free(part);
  free(idx);
  return na;
}
"""


class SparseInputKernel:
    """The loaded kernel; call it with float32 CPU tensors."""

    def __init__(self, lib: ctypes.CDLL):
        self._fn = lib.zl_sparse_input_gemv
        self._fn.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_float,
            ctypes.c_void_p,
        ]
        self._fn.restype = ctypes.c_int
        self.active = 0  # inputs that passed, over all calls
        self.total = 0

    def __call__(self, wt: torch.Tensor, x: torch.Tensor, threshold: float) -> torch.Tensor:
        """x [1, in] @ wt [in, out] over the entries of x with |x| >= threshold; [1, out]."""
        if x.dtype != torch.float32 or wt.dtype != torch.float32 or x.device.type != "cpu":
            raise ValueError("the sparse-input kernel takes float32 CPU tensors")
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
        n = self._fn(wt.data_ptr(), rows, cols, x.data_ptr(), threshold, out.data_ptr())
        if n < 0:
            raise MemoryError("the sparse-input kernel could not allocate its buffers")
        self.active += n
        self.total += rows
        return out


_lock = threading.Lock()
_loaded: dict[str, SparseInputKernel | None] = {}


def _torch_gomp() -> Path | None:
    lib = Path(torch.__file__).parent / "lib"
    found = sorted(lib.glob("libgomp*.so*"))
    return found[0] if found else None


def _compile(folder: Path) -> Path:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (cc or gcc) on PATH")
    gomp = _torch_gomp()
    if gomp is None:
        raise RuntimeError("torch brings no GNU OpenMP runtime to share threads with")
    src = folder / "kernel.c"
    src.write_text(_SOURCE)
    so = folder / "kernel.so"
    cmd = [cc, "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", str(src), "-o", str(so)]
    cmd += [f"-L{gomp.parent}", f"-l:{gomp.name}", f"-Wl,-rpath,{gomp.parent}"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise RuntimeError(f"compiling the kernel failed: {run.stderr.strip()[-400:]}")
    return so


def load() -> SparseInputKernel | None:
    """The compiled kernel, or None where it cannot be built here (logged once)."""
    with _lock:
        if "kernel" not in _loaded:
            try:
                with tempfile.TemporaryDirectory(prefix="zerolayer-kernel-") as tmp:
                    so = _compile(Path(tmp))
                    # loaded before the folder goes: the mapping outlives the file
                    _loaded["kernel"] = SparseInputKernel(ctypes.CDLL(str(so)))
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                log.warning("latency-mode kernel unavailable, torch ops instead: %s", exc)
                _loaded["kernel"] = None
        return _loaded["kernel"]
