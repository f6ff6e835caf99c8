"""Opaque tokens the server can check: a page cursor handed to a client comes back only as the
server made it, for the caller it was made for.

A token is the payload (URL-safe base64) and an HMAC-SHA256 of the payload and its scope (a
tenant and the filters of the list it pages) under a secret that every gateway replica shares:
32 random bytes kept in Redis, made by whichever replica asks first (SET NX) and cached in each
process. A token that was altered, made up, or made for another scope is refused with a 400;
the payload is not secret (base64), only unforgeable.

A sealed token (seal/unseal) is secret too: AES-256-GCM under a key derived from the same
secret, its scope (the tenant) as the associated data, so it opens only for the scope it was
sealed for, and any change to it is refused (the compaction items of /v1/responses/compact)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

import redis.asyncio as aioredis
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from zerolayer.errors import InvalidRequest
from zerolayer.store import keyspace

__all__ = ["Signer"]

_TAG_BYTES = 16  # 128 bits of the HMAC: forging one is a 2^-128 guess
_NONCE_BYTES = 12  # AES-GCM's nonce, random per seal (2^-96 chance of a repeat per pair)
_SEALED = b"zerolayer sealed tokens v1"  # what the sealing key is derived for


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    """Makes and opens signed tokens with the platform's signing secret."""

    def __init__(self, client: aioredis.Redis):
        self.client = client
        self._secret: bytes | None = None
        self._aes: AESGCM | None = None  # the sealing cipher, from the secret once

    async def _key(self) -> bytes:
        if self._secret is None:
            name = keyspace.signing_secret()
            await self.client.set(name, secrets.token_hex(32), nx=True)
            stored = await self.client.get(name)
            if stored is None:  # deleted between the two calls: make it again
                return await self._key()
            self._secret = bytes.fromhex(keyspace.text(stored))
        return self._secret

    def _tag(self, key: bytes, scope: str, payload: bytes) -> bytes:
        mac = hmac.new(key, scope.encode() + b"\0" + payload, hashlib.sha256)
        return mac.digest()[:_TAG_BYTES]

    async def sign(self, scope: str, payload: str) -> str:
        """A token carrying `payload`, valid for `scope` only."""
        data = payload.encode()
        return f"{_b64(data)}.{_b64(self._tag(await self._key(), scope, data))}"

    async def open(self, scope: str, token: str, param: str = "cursor") -> str:
        """The payload of a token made by sign() for this scope; InvalidRequest (400 naming
        `param`) for anything else."""
        body, _, tag = token.partition(".")
        try:
            data, got = _unb64(body), _unb64(tag)
        except (binascii.Error, ValueError):
            data, got = b"", b""
        if not got or not hmac.compare_digest(got, self._tag(await self._key(), scope, data)):
            raise InvalidRequest(
                f"{param} is not one this server gave for this list: pass the next_cursor of "
                "the previous page unchanged, with the same filters",
                param=param,
            )
        return data.decode()

    async def _cipher(self) -> AESGCM:
        if self._aes is None:
            self._aes = AESGCM(hmac.new(await self._key(), _SEALED, hashlib.sha256).digest())
        return self._aes

    async def seal(self, scope: str, payload: str) -> str:
        """A secret token carrying `payload`, that opens for `scope` only."""
        nonce = secrets.token_bytes(_NONCE_BYTES)
        box = (await self._cipher()).encrypt(nonce, payload.encode(), scope.encode())
        return _b64(nonce + box)

    async def unseal(self, scope: str, token: str, param: str, what: str) -> str:
        """The payload of a token made by seal() for this scope; InvalidRequest (400 naming
        `param`, saying it is not `what`) for anything else."""
        try:
            raw = _unb64(token)
            data = (await self._cipher()).decrypt(
                raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], scope.encode()
            )
            return data.decode()
        except (binascii.Error, ValueError, InvalidTag, UnicodeDecodeError) as exc:
            raise InvalidRequest(
                f"{param} is not {what} that this platform made for this account: pass it "
                "back unchanged, with a key of the same account",
                param=param,
            ) from exc
