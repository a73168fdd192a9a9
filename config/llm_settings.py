"""`[llm]` and its profiles `[llm.<name>]`: which model answers a think, and where."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from agent_model.budget import Prices
from config.placeholder_keys import is_placeholder
from config.validation import table, validated

OPENAI_COMPATIBLE_API_TYPES = (
    "openai",
    "openai-compatible",
    "ollama",
    "vllm",
    "lmstudio",
    "llamacpp",
    "localai",
    "deepseek",
    "openrouter",
    "groq",
    "together",
    "fireworks",
    "mistral",
    "xai",
    "gemini",
    "google",
    "anthropic",
    "dashscope",
    "qwen",
    "moonshot",
    "zhipu",
    "siliconflow",
    "ppio",
    "jiekou",
)
"""api_type values of servers that speak the OpenAI Chat Completions API at
base_url as given (ppio and jiekou come from OpenManus's examples);
openai-compatible stands for any other such server. A closed list, so that a
misspelt api_type is caught."""
KEYLESS_API_TYPES = ("ollama", "vllm", "lmstudio", "llamacpp", "localai", "openai-compatible")
"""Servers that often run locally without a key: api_key may be left out."""


class LLMSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "gpt-4o"
    base_url: str = "https://api.openai.com/v1"
    """For azure: `<endpoint>/openai/deployments/<deployment>` (OpenManus's form),
    `<endpoint>/openai`, or the bare `<endpoint>`; in the last two the model
    names the deployment."""
    api_key: SecretStr | None = None
    api_type: str = "openai"
    """"openai", "azure", or one of OPENAI_COMPATIBLE_API_TYPES."""
    api_version: str | None = None
    """Required for azure (or OPENAI_API_VERSION)."""
    max_tokens: int = Field(4096, gt=0)
    """Completion tokens per call (OpenManus default)."""
    temperature: float = Field(0.0, ge=0, le=2, allow_inf_nan=False)
    """0 to 2, the API's range."""
    max_input_tokens: int | None = Field(None, gt=0)
    """Largest prompt (in tokens) one request may send; None = no check."""
    request_timeout: float = Field(300.0, gt=0, allow_inf_nan=False)
    """Seconds one HTTP call may take; the activity's start_to_close is larger."""
    price_per_million_input: float | None = Field(None, ge=0, allow_inf_nan=False)
    """USD per million prompt tokens: with the output price, runs show their
    cost and --max-cost can bound it."""
    price_per_million_output: float | None = Field(None, ge=0, allow_inf_nan=False)
    """USD per million completion tokens."""
    price_per_million_cached_input: float | None = Field(None, ge=0, allow_inf_nan=False)
    """USD per million prompt tokens the provider served from its cache; default: the input price."""

    @field_validator("api_type", mode="before")
    @classmethod
    def _plain_api_type(cls, value: Any) -> Any:
        # OpenManus leaves api_type "" for OpenAI and spells it in any case.
        return value.strip().lower() or "openai" if isinstance(value, str) else value

    @model_validator(mode="after")
    def _a_key_not_a_placeholder(self) -> LLMSettings:
        """A server that needs a key gets a key; a keyless one may be given any word."""
        # The value is never quoted: a real key that looked like one would be printed.
        if self.needs_key and self.api_key is not None and is_placeholder(self.api_key.get_secret_value()):
            raise ValueError(
                "api_key is a placeholder (like the example's \"sk-...\"), not a key: put your key there, "
                "or leave api_key out and set OPENAI_API_KEY"
            )
        return self

    @model_validator(mode="after")
    def _api_type_that_can_work(self) -> LLMSettings:
        """Refused now rather than at the profile's first think."""
        if self.api_type == "aws":
            raise ValueError(
                "api_type aws (Amazon Bedrock) is not supported: durable-manus speaks only "
                "the OpenAI Chat Completions API; use an OpenAI-compatible gateway in front of Bedrock "
                '(e.g. LiteLLM or Bedrock Access Gateway) with api_type = "openai-compatible" and its base_url'
            )
        if self.api_type == "azure" and not self.api_version:
            raise ValueError(
                'api_version is missing: api_type azure needs one, e.g. api_version = '
                '"2024-08-01-preview" (or set OPENAI_API_VERSION)'
            )
        if self.api_type not in ("azure", *OPENAI_COMPATIBLE_API_TYPES):
            raise ValueError(
                f"api_type {self.api_type!r} is not known; use azure, or for a server that speaks "
                f"the OpenAI API one of: {', '.join(OPENAI_COMPATIBLE_API_TYPES)}"
            )
        return self

    @model_validator(mode="after")
    def _prices_that_go_together(self) -> LLMSettings:
        given = self.price_per_million_input is not None, self.price_per_million_output is not None
        if given[0] != given[1]:
            have, lack = ("input", "output") if given[0] else ("output", "input")
            raise ValueError(
                f"price_per_million_{have} needs price_per_million_{lack} too (USD per million tokens)"
            )
        if self.price_per_million_cached_input is not None and not given[0]:
            raise ValueError(
                "price_per_million_cached_input needs price_per_million_input and price_per_million_output too"
            )
        return self

    @property
    def prices(self) -> Prices | None:
        """The profile's prices, if the config gives them."""
        if self.price_per_million_input is None or self.price_per_million_output is None:
            return None
        return Prices(
            input=self.price_per_million_input,
            output=self.price_per_million_output,
            cached_input=self.price_per_million_cached_input,
        )

    @property
    def endpoint(self) -> str:
        """host[:port] of base_url, for messages: never a password or a path's token."""
        try:
            return urlsplit(self.base_url).netloc.rpartition("@")[2] or "(no host)"
        except ValueError:
            return "(not a URL)"

    @property
    def needs_key(self) -> bool:
        return self.api_type not in KEYLESS_API_TYPES


def llm_where(name: str) -> str:
    return "[llm]" if name == "default" else f"[llm.{name}]"


def parse_llm(source: str, raw: Any, origins: Mapping[str, str]) -> dict[str, LLMSettings]:
    """The profiles by name: "default" is `[llm]`'s own keys, each `[llm.<name>]`
    is merged over them; `origins`: [llm] keys that came from the environment."""
    raw = table(source, "[llm]", raw)
    base = {k: v for k, v in raw.items() if not isinstance(v, Mapping)}
    sections = {"default": {}, **{name: section for name, section in raw.items() if isinstance(section, Mapping)}}
    return {
        name: validated(LLMSettings, source, llm_where(name), {**base, **section}, origins)
        for name, section in sections.items()
    }
