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

__all__ = ["LayerC", "SparseInputKernel", "load"]

log = logging.getLogger(__name__)

_SOURCE = r"""
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

/* out[0:n_out] = sum over i with |x[i]| > t of x[i] * wt[i, :]; returns how
   many i passed. wt is n_in x n_out, row-major. The passing rows are split between the threads,
   so each reads whole rows front to back; four rows per pass over its partial sum; the partial
   sums are added at the end, each thread a slice of the outputs. idx holds n_in ints, part
   omp_get_max_threads() * stride floats (stride >= n_out, a multiple of 16). */
static int gemv_t(const float *restrict wt, int n_in, int n_out, const float *restrict x,
                  float t, float *restrict out, int *restrict idx, float *restrict part,
                  int stride) {
  int na = 0;
  for (int i = 0; i < n_in; i++)
    if (fabsf(x[i]) > t) idx[na++] = i;
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
  return na;
}

static int stride_of(int n) { return (n + 15) & ~15; }

int zl_sparse_input_gemv(const float *restrict wt, int n_in, int n_out,
                         const float *restrict x, float t, float *restrict out) {
  int stride = stride_of(n_out);
  int *idx = malloc(sizeof(int) * (n_in > 0 ? n_in : 1));
  float *part = aligned_alloc(64, sizeof(float) * (size_t)omp_get_max_threads() * stride);
  if (idx == NULL || part == NULL) {
    free(idx);
    free(part);
    return -1;
  }
  int na = gemv_t(wt, n_in, n_out, x, t, out, idx, part, stride);
  free(part);
  free(idx);
  return na;
}

/* One decoder layer's weights for zl_decode_one: projections transposed (in x out; q/k/v fused
   as q|k|v, gate/up fused as gate|up), the input threshold of each (0: every nonzero input),
   the MLP width, and the keys and values of the sequence's cache slot ([kv_heads, capacity,
   head_dim] each, rows `capacity` apart per head). */
typedef struct {
  const float *in_norm, *post_norm, *qkv, *o, *gate_up, *down;
  float t_qkv, t_o, t_gate_up, t_down;
  int width;
  float *k, *v;
} zl_layer;

static void rms(const float *restrict x, const float *restrict w, int n, float eps,
                float *restrict out) {
  float ss = 0.0f;
  for (int i = 0; i < n; i++) ss += x[i] * x[i];
  float r = 1.0f / sqrtf(ss / n + eps);
  for (int i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

/* latency mode's counters: only thresholded inputs count */
static void count(int passed, int n_in, float t, long *all_passed, long *all_seen) {
  if (t > 0.0f) {
    *all_passed += passed;
    *all_seen += n_in;
  }
}

static void rotate(float *restrict x, const float *restrict c, const float *restrict s, int d) {
  int half = d / 2;
  for (int i = 0; i < half; i++) {
    float a = x[i], b = x[i + half];
    x[i] = a * c[i] - b * s[i];
    x[i + half] = b * c[i + half] + a * s[i + half];
  }
}

/* One token of one sequence through every layer (the engine's single-stream decode step):
   x [hidden] is the token's embedding on entry and the last layer's output on exit; the token's
   keys and values are written at `pos` of each layer's cache slot; cos and sin are the rotary
   tables' row for `pos`. counts[0] += thresholded inputs that passed, counts[1] += thresholded
   inputs seen.
   Returns 0, or -1 when a buffer could not be allocated. */
int zl_decode_one(const zl_layer *layers, int n_layers, int hidden, int heads, int kv_heads,
                  int head_dim, int capacity, int pos, float eps, const float *cos,
                  const float *sin, float *x, long *counts) {
  int qkv_out = (heads + 2 * kv_heads) * head_dim, q_size = heads * head_dim;
  int wmax = 1;
  for (int l = 0; l < n_layers; l++) wmax = layers[l].width > wmax ? layers[l].width : wmax;
  int nmax = qkv_out > 2 * wmax ? qkv_out : 2 * wmax;
  nmax = nmax > hidden ? nmax : hidden;
  int stride = stride_of(nmax);
  int inmax = wmax > hidden ? wmax : hidden;
  inmax = inmax > q_size ? inmax : q_size;
  int *idx = malloc(sizeof(int) * inmax);
  float *part = aligned_alloc(64, sizeof(float) * (size_t)omp_get_max_threads() * stride);
  float *buf = malloc(sizeof(float) * ((size_t)hidden * 2 + qkv_out + q_size + 3 * wmax
                                       + (size_t)heads * (pos + 1)));
  if (idx == NULL || part == NULL || buf == NULL) {
    free(idx);
    free(part);
    free(buf);
    return -1;
  }
  float *h = buf, *tmp = h + hidden, *qkv = tmp + hidden, *att = qkv + qkv_out;
  float *gu = att + q_size, *act = gu + 2 * wmax, *scores = act + wmax;
  int group = heads / kv_heads;
  float scale = 1.0f / sqrtf((float)head_dim);
  long passed = 0, seen = 0;
  for (int l = 0; l < n_layers; l++) {
    const zl_layer *L = layers + l;
    rms(x, L->in_norm, hidden, eps, h);
    count(gemv_t(L->qkv, hidden, qkv_out, h, L->t_qkv, qkv, idx, part, stride), hidden,
          L->t_qkv, &passed, &seen);
    for (int hd = 0; hd < heads + kv_heads; hd++) rotate(qkv + hd * head_dim, cos, sin, head_dim);
    const float *kq = qkv + q_size, *vq = kq + kv_heads * head_dim;
    for (int g = 0; g < kv_heads; g++) {
      memcpy(L->k + ((size_t)g * capacity + pos) * head_dim, kq + g * head_dim,
             sizeof(float) * head_dim);
      memcpy(L->v + ((size_t)g * capacity + pos) * head_dim, vq + g * head_dim,
             sizeof(float) * head_dim);
    }
    #pragma omp parallel for schedule(static)
    for (int hd = 0; hd < heads; hd++) {
      const float *q = qkv + hd * head_dim;
      const float *kb = L->k + (size_t)(hd / group) * capacity * head_dim;
      const float *vb = L->v + (size_t)(hd / group) * capacity * head_dim;
      float *sc = scores + (size_t)hd * (pos + 1), *o = att + hd * head_dim;
      float m = -INFINITY;
      for (int t = 0; t <= pos; t++) {
        const float *kr = kb + (size_t)t * head_dim;
        float d = 0.0f;
        for (int j = 0; j < head_dim; j++) d += q[j] * kr[j];
        sc[t] = d * scale;
        m = sc[t] > m ? sc[t] : m;
      }
      float z = 0.0f;
      for (int t = 0; t <= pos; t++) {
        sc[t] = expf(sc[t] - m);
        z += sc[t];
      }
      for (int j = 0; j < head_dim; j++) o[j] = 0.0f;
      for (int t = 0; t <= pos; t++) {
        const float *vr = vb + (size_t)t * head_dim;
        float p = sc[t] / z;
        for (int j = 0; j < head_dim; j++) o[j] += p * vr[j];
      }
    }
    count(gemv_t(L->o, q_size, hidden, att, L->t_o, tmp, idx, part, stride), q_size, L->t_o,
          &passed, &seen);
    for (int i = 0; i < hidden; i++) x[i] += tmp[i];
    rms(x, L->post_norm, hidden, eps, h);
    int w = L->width;
    count(gemv_t(L->gate_up, hidden, 2 * w, h, L->t_gate_up, gu, idx, part, stride), hidden,
          L->t_gate_up, &passed, &seen);
    for (int i = 0; i < w; i++) {
      float g = gu[i];
      act[i] = g / (1.0f + expf(-g)) * gu[w + i];
    }
    count(gemv_t(L->down, w, hidden, act, L->t_down, tmp, idx, part, stride), w, L->t_down,
          &passed, &seen);
    for (int i = 0; i < hidden; i++) x[i] += tmp[i];
  }
  counts[0] += passed;
  counts[1] += seen;
  free(buf);
  free(part);
  free(idx);
  return 0;
}
"""


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
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
    ]


class SparseInputKernel:
    """The loaded kernels; call them with float32 CPU tensors."""

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
            ctypes.c_void_p,
            ctypes.c_float,
            ctypes.c_void_p,
        ]
        self._fn.restype = ctypes.c_int
        self.active = 0  # thresholded inputs that passed, over all calls
        self.total = 0

    def __call__(self, wt: torch.Tensor, x: torch.Tensor, threshold: float) -> torch.Tensor:
        """x [1, in] @ wt [in, out] over the entries of x with |x| > threshold; [1, out]."""
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
