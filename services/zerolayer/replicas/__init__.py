"""Tier replicas: one model tier behind the engine protocol, and its Ray Serve deployment."""

from zerolayer.replicas.core import TierReplica

__all__ = ["TierReplica"]
