"""The one way a config table is checked: a pydantic model per table.

Limits are declared on the fields; our own checks are validators that raise
ValueError with a sentence naming the field ("memory_mb must be ..."), or,
for a check about another table, naming that table first ("[search.endpoints]
bing must be ..."). Whatever fails becomes one ConfigError line naming the
file, the table and the field, and the environment variable when the value
came from one (config/environment.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from config.config_file import ConfigError

Model = TypeVar("Model", bound=BaseModel)


def table(source: str, where: str, raw: Any) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: {where} must be a table")
    return raw


def validated(
    model: type[Model], source: str, where: str, raw: Any, origins: Mapping[str, str] | None = None
) -> Model:
    """`raw` (the table `where` of `source`) as `model`; `origins`: field -> the
    environment variable its value came from."""
    try:
        return model(**table(source, where, raw))
    except ValidationError as e:
        raise ConfigError(one_line(source, where, model, e, origins or {})) from None


def one_line(source: str, where: str, model: type[BaseModel], error: ValidationError, origins: Mapping[str, str]) -> str:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"])
    if first["type"] == "value_error":  # our own check: its sentence names the field
        said = str(first["ctx"]["error"])
        problem = said if said.startswith("[") else f"{where} {said}"
    elif first["type"] == "extra_forbidden":
        fields = sorted(model.model_fields)
        problem = (
            f"{where} {field}: {first['msg']}; {where} accepts only the field{'s' if len(fields) > 1 else ''} "
            + ", ".join(fields)
        )
    else:
        problem = f"{where} {field}: {first['msg']}"
    origin = origins.get(str(first["loc"][0])) if first["loc"] else None
    return f"{source}: {problem}" + (f" (from {origin})" if origin else "")
