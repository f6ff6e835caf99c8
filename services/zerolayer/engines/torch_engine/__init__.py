"""zerolayer's torch engine: a compact Llama in plain torch that serves every tier artifact
(thresholds in latency mode, 2:4 weights, CPU offload) behind the engine protocol.

  checkpoint.py  a checkpoint's shape and tensors, with a tier's artifact applied
  weights.py     projections, decoder layers, and where they live (device or offloaded)
  cache.py       the key/value slot cache
  kernels.py     the compiled CPU kernels (kernel.c) and how they are built
  model.py       LlamaModel: prefill and decode
  engine.py      TorchEngine: the continuous-batching loop behind the engine protocol
"""

from zerolayer.engines.torch_engine.cache import SlotCache
from zerolayer.engines.torch_engine.checkpoint import Shape, TierWeights, read_tier
from zerolayer.engines.torch_engine.engine import TorchEngine
from zerolayer.engines.torch_engine.kernels import Compiler
from zerolayer.engines.torch_engine.model import LlamaModel, LoadReport, load_llama
from zerolayer.engines.torch_engine.weights import sparse_hw_available

__all__ = [
    "Compiler",
    "LlamaModel",
    "LoadReport",
    "Shape",
    "SlotCache",
    "TierWeights",
    "TorchEngine",
    "load_llama",
    "read_tier",
    "sparse_hw_available",
]
