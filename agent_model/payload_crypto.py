"""Encrypted payloads: a Temporal PayloadCodec doing AES-256-GCM with keys by id.

Every payload leaves the process as ciphertext: the whole original Payload
(its metadata, so its encoding, and its data) serialised and sealed under the
key ring's current key, with a random 96-bit nonce in front and the key's id
as associated data. The server, its database and anyone reading them see the
encoding `binary/encrypted`, the key id and random bytes. Decoding picks the
key by the id the payload names, so after a rotation the older runs stay
readable as long as the ring keeps their key; a payload that is not encrypted
(recorded before encryption was turned on) passes through as it is.

The codec runs in the client and the worker, never inside workflow code
(the SDK applies it around each activation), so its randomness does not
touch determinism.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

ENCODING = b"binary/encrypted"
"""The metadata `encoding` of an encrypted payload."""
KEY_ID_FIELD = "encryption-key-id"
"""The metadata field naming the key that sealed the payload."""
KEY_BYTES = 32
"""AES-256."""
NONCE_BYTES = 12
"""GCM's 96-bit nonce, random per payload (2^32 payloads per key keep the
chance of a repeat negligible; rotate long before that)."""
TAG_BYTES = 16
KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A key id: it is written in every payload's metadata, so short and plain."""


class PayloadUnreadable(Exception):
    """An encrypted payload that this key ring cannot open; one line for the user."""


@dataclass(frozen=True)
class KeyRing:
    """Keys by id and the id that encrypts. The keys are never shown (repr)."""

    current: str
    keys: Mapping[str, bytes] = field(repr=False)

    def __post_init__(self) -> None:
        for key_id, key in self.keys.items():
            if not KEY_ID.fullmatch(key_id):
                raise ValueError(f"key id {key_id[:80]!r} must be 1-64 letters, digits, '.', '_' or '-'")
            if len(key) != KEY_BYTES:
                raise ValueError(f"key {key_id!r} is {len(key)} bytes; AES-256 needs {KEY_BYTES}")
        if self.current not in self.keys:
            raise ValueError(f"the current key {self.current[:80]!r} is not among the keys ({', '.join(sorted(self.keys))})")


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole payloads, with the key ring's current key."""

    def __init__(self, ring: KeyRing) -> None:
        # Here, not at the top: every command imports PayloadUnreadable; only a codec needs the cipher.
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.ring = ring
        self._ciphers = {key_id: AESGCM(key) for key_id, key in ring.keys.items()}
        self._refused = (InvalidTag, DecodeError)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(payload) for payload in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        key_id = self.ring.current
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[key_id].encrypt(nonce, payload.SerializeToString(), key_id.encode())
        return Payload(metadata={"encoding": ENCODING, KEY_ID_FIELD: key_id.encode()}, data=nonce + sealed)

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # written before encryption was on, or by a converter of its own
        key_id = payload.metadata.get(KEY_ID_FIELD, b"").decode("utf-8", "replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            known = ", ".join(sorted(self._ciphers))
            named = f"key {key_id[:80]!r}" if key_id else "a key it does not name"
            raise PayloadUnreadable(
                f"a payload is encrypted with {named}, which the key file does not hold (it holds {known}); "
                "add that key back to the key file to read it"
            )
        data = payload.data
        try:
            if len(data) < NONCE_BYTES + TAG_BYTES:
                raise DecodeError("shorter than a nonce and a tag")
            return Payload.FromString(cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], key_id.encode()))
        except self._refused:
            raise PayloadUnreadable(
                f"a payload encrypted with key {key_id!r} fails its integrity check: it was altered, "
                f"or sealed by another key that carries the same id"
            ) from None
