"""`[encryption]`: encrypted payloads, opt-in (agent_model/payload_crypto.py).

    [encryption]
    key_file = ".data/keys.json"      # made by: python starter.py keygen .data/keys.json
    codec_port = 8238                 # where `python starter.py codec-server` listens
    web_ui_origins = ["https://temporal.example.com"]   # Web UIs besides the embedded one

With a key file, every client and worker of this configuration (starter,
worker, MCP server) encrypts every payload it sends to Temporal and decrypts
what it reads; without one, nothing is encrypted. The file is read when a
command connects to Temporal (config/key_file.py), never kept in the settings.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_model.payload_crypto import KeyRing
from config.config_file import REPO_DIR

DEFAULT_CODEC_PORT = 8238
"""The codec server's port: beside the embedded server's 7233 and Web UI's 8233."""
CODEC_PATH = "/codec"
"""The codec server's endpoint path (runtime/codec_server.py): its sign-in
cookie is scoped to it, so a browser sends the cookie to no other path of the host."""


class EncryptionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key_file: str | None = None
    """The JSON key file; relative to the repository (as [workspace] root). None: payloads are not encrypted."""
    codec_port: int = Field(DEFAULT_CODEC_PORT, ge=1, le=65535)
    """The codec server's port on 127.0.0.1, and the embedded Web UI's codec endpoint."""
    web_ui_origins: list[str] = Field(default_factory=list, max_length=20)
    """Origins (scheme://host[:port]) of Web UIs whose pages may call the
    codec server, besides the embedded server's own."""

    @field_validator("key_file")
    @classmethod
    def _a_path(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or any(ord(c) < 32 for c in value)):
            raise ValueError("key_file must be a path (not empty, no control characters)")
        return value

    @field_validator("web_ui_origins")
    @classmethod
    def _origins(cls, values: list[str]) -> list[str]:
        for value in values:
            scheme, sep, rest = value.partition("://")
            if scheme not in ("http", "https") or not sep or not rest or "/" in rest or any(c in rest for c in " \t\n?#@"):
                raise ValueError(f"web_ui_origins entry {value[:100]!r} must be an origin, e.g. https://temporal.example.com")
        return [value.lower() for value in values]

    @property
    def enabled(self) -> bool:
        return self.key_file is not None

    @property
    def key_path(self) -> Path | None:
        if self.key_file is None:
            return None
        path = Path(self.key_file).expanduser()
        return path if path.is_absolute() else REPO_DIR / path

    def key_ring(self) -> KeyRing | None:
        """The keys, read from the key file now; None when encryption is off.
        ConfigError (one line) for a file that cannot be used."""
        from config.key_file import read_key_ring

        path = self.key_path
        return None if path is None else read_key_ring(path)

    @property
    def codec_endpoint(self) -> str:
        """What the Web UI and `temporal --codec-endpoint` are pointed at (runtime/codec_server.py)."""
        return f"http://127.0.0.1:{self.codec_port}{CODEC_PATH}"

    @property
    def ui_codec_endpoint(self) -> str | None:
        """The codec endpoint the embedded server's Web UI is started with: none when encryption is off."""
        return self.codec_endpoint if self.enabled else None
