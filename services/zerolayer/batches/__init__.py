"""The Batch API's store: batches (OpenAI's batch object) and each request's result line, in
Redis, per tenant; the queue the gateways' batch workers take batches from."""

from zerolayer.batches.store import (
    ACTIVE,
    BatchStore,
    NotCancellable,
    new_batch_id,
)

__all__ = ["ACTIVE", "BatchStore", "NotCancellable", "new_batch_id"]
