"""The payload codec without a server: AES-256-GCM over whole payloads, keys by
id (a rotated ring still opens what older keys sealed), altered or foreign
ciphertext refused in one line, payloads from before encryption passed
through, and failures' messages sealed too."""

from __future__ import annotations

import dataclasses
import os

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DefaultFailureConverterWithEncodedAttributes
from temporalio.exceptions import ApplicationError

from agent_model.payload_crypto import (
    ENCODING,
    KEY_ID_FIELD,
    NONCE_BYTES,
    TAG_BYTES,
    EncryptionCodec,
    KeyRing,
    PayloadUnreadable,
)
from agent_model.run import AgentRunInput

SECRET_TASK = "Summarise the merger memo for ACME-7731"


def ring(current: str = "k1", *ids: str) -> KeyRing:
    return KeyRing(current=current, keys={key_id: KEYS[key_id] for key_id in {current, *ids}})


KEYS = {key_id: os.urandom(32) for key_id in ("k1", "k2", "k3")}


def plain_payload() -> Payload:
    (payload,) = pydantic_data_converter.payload_converter.to_payloads([AgentRunInput(task=SECRET_TASK)])
    return payload


async def test_a_payload_comes_back_whole_and_travels_as_ciphertext():
    codec = EncryptionCodec(ring("k1"))
    original = plain_payload()
    (sealed,) = await codec.encode([original])
    assert sealed.metadata["encoding"] == ENCODING and sealed.metadata[KEY_ID_FIELD] == b"k1"
    assert set(sealed.metadata) == {"encoding", KEY_ID_FIELD}  # the original encoding is inside
    assert SECRET_TASK.encode() not in sealed.SerializeToString()
    assert b"json/plain" not in sealed.SerializeToString()
    assert len(sealed.data) == NONCE_BYTES + len(original.SerializeToString()) + TAG_BYTES
    (opened,) = await codec.decode([sealed])
    assert opened == original
    (again,) = await codec.encode([original])
    assert again.data[:NONCE_BYTES] != sealed.data[:NONCE_BYTES] and again.data != sealed.data  # a fresh nonce


async def test_after_a_rotation_old_payloads_open_and_new_ones_use_the_new_key():
    (old,) = await EncryptionCodec(ring("k1")).encode([plain_payload()])
    rotated = EncryptionCodec(ring("k2", "k1"))
    assert (await rotated.decode([old]))[0] == plain_payload()
    (new,) = await rotated.encode([plain_payload()])
    assert new.metadata[KEY_ID_FIELD] == b"k2"
    with pytest.raises(PayloadUnreadable) as refused:
        await EncryptionCodec(ring("k1")).decode([new])  # a client that has not got the new key yet
    assert "'k2'" in str(refused.value) and "\n" not in str(refused.value)


async def test_a_key_dropped_from_the_ring_is_named_when_its_payload_is_read():
    (old,) = await EncryptionCodec(ring("k1")).encode([plain_payload()])
    with pytest.raises(PayloadUnreadable, match=r"key 'k1', which the key file does not hold \(it holds k2\)"):
        await EncryptionCodec(ring("k2")).decode([old])


@pytest.mark.parametrize("change", ["a flipped bit", "another key under its id", "the id of another key", "cut short"])
async def test_altered_ciphertext_is_refused_not_returned(change):
    codec = EncryptionCodec(ring("k1", "k2"))
    (sealed,) = await codec.encode([plain_payload()])
    if change == "a flipped bit":
        data = bytearray(sealed.data)
        data[NONCE_BYTES + 5] ^= 1
        sealed.data = bytes(data)
    elif change == "another key under its id":
        codec = EncryptionCodec(KeyRing(current="k1", keys={"k1": KEYS["k3"]}))
    elif change == "the id of another key":
        sealed.metadata[KEY_ID_FIELD] = b"k2"  # the id is the associated data: k2's check fails too
    else:
        sealed.data = sealed.data[: NONCE_BYTES + TAG_BYTES - 1]
    with pytest.raises(PayloadUnreadable, match="fails its integrity check") as refused:
        await codec.decode([sealed])
    assert "\n" not in str(refused.value)


async def test_payloads_written_before_encryption_pass_through():
    codec = EncryptionCodec(ring("k1"))
    plain = plain_payload()
    assert (await codec.decode([plain]))[0] is plain
    empty = Payload(metadata={"encoding": b"binary/null"})
    assert (await codec.decode([empty]))[0] is empty


def test_a_ring_is_refused_with_a_short_key_or_a_current_it_lacks():
    with pytest.raises(ValueError, match="AES-256 needs 32"):
        KeyRing(current="k1", keys={"k1": b"short"})
    with pytest.raises(ValueError, match="not among the keys"):
        KeyRing(current="k9", keys={"k1": KEYS["k1"]})
    with pytest.raises(ValueError, match="key id"):
        KeyRing(current="k 1", keys={"k 1": KEYS["k1"]})
    shown = repr(ring("k1"))
    assert repr(KEYS["k1"]) not in shown and KEYS["k1"].hex() not in shown


async def test_a_failure_s_message_and_stack_trace_travel_encrypted():
    converter = dataclasses.replace(
        pydantic_data_converter,
        payload_codec=EncryptionCodec(ring("k1")),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )
    try:
        raise ApplicationError(f"the page said: {SECRET_TASK}", type="ToolFailed")
    except ApplicationError as e:
        error = e
    failure = Failure()
    await converter.encode_failure(error, failure)
    assert SECRET_TASK.encode() not in failure.SerializeToString()
    assert failure.message == "Encoded failure" and failure.application_failure_info.type == "ToolFailed"
    decoded = await converter.decode_failure(failure)
    assert isinstance(decoded, ApplicationError) and decoded.message == f"the page said: {SECRET_TASK}"
