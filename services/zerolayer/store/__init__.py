"""Redis: the embedded server and the API-key store."""

from zerolayer.store.connect import async_client, sync_client
from zerolayer.store.embedded import EmbeddedRedis, redis_server_binary
from zerolayer.store.keys import ApiKeyRecord, AsyncKeyStore, KeyStore, hash_key, new_key

__all__ = [
    "EmbeddedRedis",
    "async_client",
    "sync_client",
    "redis_server_binary",
    "ApiKeyRecord",
    "AsyncKeyStore",
    "KeyStore",
    "hash_key",
    "new_key",
]
