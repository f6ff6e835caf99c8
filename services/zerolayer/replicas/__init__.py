"""Tier replicas: one model tier behind the engine protocol, and its Ray Serve deployment."""

from zerolayer.replicas.core import TierReplica
from zerolayer.replicas.local import LocalBackend

__all__ = ["TierReplica", "LocalBackend"]
