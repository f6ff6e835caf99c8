"""The gateway's HTTP routes: one module-level router per endpoint family. Each route is a thin
adapter: its dependencies (zerolayer.gateway.deps) authenticate the caller and hand it the
replica's parts; the work is done by the request path and the stores."""

from zerolayer.gateway.routes import (
    account,
    admin,
    batches,
    chunks,
    completions,
    console,
    conversations,
    files,
    health,
    keys,
    models,
    operations,
    responses,
    silence,
    usage,
)

__all__ = [
    "account",
    "admin",
    "batches",
    "chunks",
    "completions",
    "console",
    "conversations",
    "files",
    "health",
    "keys",
    "models",
    "operations",
    "responses",
    "silence",
    "usage",
]
