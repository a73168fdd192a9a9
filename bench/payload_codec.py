"""What encrypting payloads costs: microseconds and bytes per payload.

    python -m bench.payload_codec [--size 1024] [--rounds 20000]

A payload of --size bytes of JSON text (what an observation looks like), made
by the pydantic data converter, then encoded and decoded by the payload codec
(agent_model/payload_crypto.py): the time per encode and per decode, and the
bytes the encrypted payload adds to the plain one (nonce, GCM tag, the inner
payload's metadata and the key id). Also the same converter round trip with
and without the codec, as a ratio, since a run pays the codec on top of the
converter. All measured in this one run on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import time

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes

from agent_model.payload_crypto import EncryptionCodec, KeyRing


def sealed_converter() -> DataConverter:
    ring = KeyRing(current="k1", keys={"k1": os.urandom(32)})
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=EncryptionCodec(ring),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


async def per_call(call, rounds: int) -> float:
    """Microseconds per awaited call, the best of three batches."""
    best = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        for _ in range(rounds):
            await call()
        best = min(best, (time.perf_counter() - began) / rounds)
    return best * 1e6


async def measure(size: int, rounds: int) -> dict[str, float]:
    text = ("observation " * (size // 12 + 1))[: size - 2]  # a JSON string of `size` bytes with its quotes
    (plain,) = pydantic_data_converter.payload_converter.to_payloads([text])
    sealed_with = sealed_converter()
    codec = sealed_with.payload_codec
    assert isinstance(codec, EncryptionCodec)
    (sealed,) = await codec.encode([plain])
    assert (await codec.decode([sealed]))[0] == plain

    async def encode() -> None:
        await codec.encode([plain])

    async def decode() -> None:
        await codec.decode([sealed])

    async def round_trip(converter: DataConverter) -> None:
        await converter.decode(await converter.encode([text]), [str])

    plain_trip = await per_call(lambda: round_trip(pydantic_data_converter), rounds)
    sealed_trip = await per_call(lambda: round_trip(sealed_with), rounds)
    return {
        "payload_bytes": plain.ByteSize(),
        "encrypted_bytes": sealed.ByteSize(),
        "added_bytes": sealed.ByteSize() - plain.ByteSize(),
        "encode_us": await per_call(encode, rounds),
        "decode_us": await per_call(decode, rounds),
        "converter_round_trip_us": plain_trip,
        "with_codec_round_trip_us": sealed_trip,
        "round_trip_ratio": sealed_trip / plain_trip,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="bytes of the payload's JSON (default 1024)")
    parser.add_argument("--rounds", type=int, default=20000, help="calls per batch (default 20000)")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.size, args.rounds))
    print(
        f"payload {figures['payload_bytes']} B -> encrypted {figures['encrypted_bytes']} B "
        f"(+{figures['added_bytes']} B); encode {figures['encode_us']:.1f} µs, decode {figures['decode_us']:.1f} µs; "
        f"converter round trip {figures['converter_round_trip_us']:.1f} µs without the codec, "
        f"{figures['with_codec_round_trip_us']:.1f} µs with it ({figures['round_trip_ratio']:.2f}x)"
    )


if __name__ == "__main__":
    main()
