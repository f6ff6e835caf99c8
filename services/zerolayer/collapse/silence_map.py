"""The silence map's data (zerolayer.artifacts.silence_map): the compiler measures it, the
gateway serves it to the console, so it lives with the other artifact formats."""

from zerolayer.artifacts.silence_map import BIN_EDGES, KINDS, KindStats, SilenceMap

__all__ = ["KINDS", "BIN_EDGES", "KindStats", "SilenceMap"]
