"""The payload key file (`[encryption] key_file`): the keys by id, and the one that encrypts.

    {"current": "k2", "keys": {"k1": "<base64 of 32 bytes>", "k2": "<base64 of 32 bytes>"}}

Whoever reads this file reads every run in the Temporal server, so it is
used only as the operator's private regular file: a symbolic link (as its last
component), a FIFO or device, or a file other accounts may open (any group or
other permission bit) is refused, as is a key that is not base64 of 32 bytes.
Every refusal is one line naming the file, never a key.

`python starter.py keygen PATH` (runtime/keygen.py) makes the file, or adds a
new current key to it; the older keys stay, so runs encrypted with them stay
readable (agent_model/payload_crypto.py).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import json
import os
import re
import secrets
import stat
from pathlib import Path

from agent_model.payload_crypto import KEY_BYTES, KEY_ID, KeyRing
from config.config_file import ConfigError

MAX_KEY_FILE_BYTES = 64 * 1024
"""A hundred keys take about 6 KiB; anything larger is not a key file."""
MAX_KEYS = 100
NEW_KEY_ID = re.compile(r"k(\d{1,9})")
"""The ids keygen gives: k1, k2, ..."""


def read_key_ring(path: Path) -> KeyRing:
    """The key ring in `path`, refused in one line unless the file is private, regular and well formed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{path}: key file not found (make one with: python starter.py keygen {path})") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ConfigError(f"{path}: the key file is a symbolic link; name the file itself") from None
        raise ConfigError(f"{path}: cannot read the key file ({e.strerror or e})") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            from activities.safe_files import kind_of

            raise ConfigError(f"{path}: the key file is not a regular file (it is {kind_of(status.st_mode)})")
        if status.st_mode & 0o077:
            raise ConfigError(
                f"{path}: the key file is open to other accounts (mode {stat.S_IMODE(status.st_mode):04o}); "
                f"chmod 600 {path}"
            )
        data = os.read(fd, MAX_KEY_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the key file ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise ConfigError(f"{path}: the key file is larger than {MAX_KEY_FILE_BYTES // 1024} KiB; it is not a key file")
    return parse_key_ring(data, path)


def parse_key_ring(data: bytes, path: Path) -> KeyRing:
    where = f"{path}: the key file"
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ConfigError(f'{where} is not JSON of the form {{"current": "k1", "keys": {{"k1": "<base64>"}}}}') from None
    if not isinstance(document, dict) or set(document) != {"current", "keys"}:
        raise ConfigError(f'{where} must be an object with exactly "current" and "keys"')
    current, encoded = document["current"], document["keys"]
    if not isinstance(encoded, dict) or not encoded:
        raise ConfigError(f'{where}: "keys" must be an object of key id -> base64 key, with at least one key')
    if len(encoded) > MAX_KEYS:
        raise ConfigError(f"{where} holds {len(encoded)} keys; at most {MAX_KEYS}")
    keys: dict[str, bytes] = {}
    for key_id, text in encoded.items():
        if not KEY_ID.fullmatch(key_id):
            raise ConfigError(f"{where}: key id {key_id[:80]!r} must be 1-64 letters, digits, '.', '_' or '-'")
        try:
            if not isinstance(text, str):
                raise ValueError
            key = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{where}: key {key_id!r} is not base64 text") from None
        if len(key) != KEY_BYTES:
            raise ConfigError(f"{where}: key {key_id!r} is {len(key)} bytes; AES-256 needs {KEY_BYTES}")
        keys[key_id] = key
    if not isinstance(current, str) or current not in keys:
        raise ConfigError(f'{where}: "current" must name one of its keys ({", ".join(sorted(keys))})')
    return KeyRing(current=current, keys=keys)


def add_new_key(path: Path) -> KeyRing:
    """Make `path` with one new key, or add a new current key to the key file
    there (the others kept); the ring as written. Refuses a symlink, a file
    that is not the operator's private key file, and one that is no key file."""
    key = secrets.token_bytes(KEY_BYTES)
    if not os.path.lexists(path):
        ring = KeyRing(current="k1", keys={"k1": key})
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            raise ConfigError(f"{path}: appeared while the key was made; run keygen again to add a key to it") from None
        except OSError as e:
            raise ConfigError(f"{path}: cannot write the key file ({e.strerror or e})") from None
        _write(fd, ring, path)
        return ring
    ring = read_key_ring(path)
    if len(ring.keys) >= MAX_KEYS:
        raise ConfigError(f"{path}: the key file holds {MAX_KEYS} keys already; remove keys no run uses")
    numbers = [int(m.group(1)) for key_id in ring.keys if (m := NEW_KEY_ID.fullmatch(key_id))]
    new_id = f"k{max(numbers, default=0) + 1}"
    ring = KeyRing(current=new_id, keys={**ring.keys, new_id: key})
    # A new file beside it, renamed over it: a reader never sees half a file,
    # and a failure leaves the old one whole.
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise ConfigError(f"{path}: cannot write the key file ({e.strerror or e})") from None
    try:
        _write(fd, ring, path)
        os.replace(draft, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(draft)
    return ring


def _write(fd: int, ring: KeyRing, path: Path) -> None:
    document = {"current": ring.current, "keys": {k: base64.b64encode(v).decode("ascii") for k, v in ring.keys.items()}}
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        with open(fd, "w", encoding="utf-8", closefd=False) as file:
            json.dump(document, file, indent=2)
            file.write("\n")
        os.fsync(fd)
    except OSError as e:
        raise ConfigError(f"{path}: cannot write the key file ({e.strerror or e})") from None
    finally:
        os.close(fd)
