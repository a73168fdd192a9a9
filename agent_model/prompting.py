"""Filling prompt templates."""

from __future__ import annotations

import string
from typing import Any


class _KeepUnknown(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def fill(template: str, **values: Any) -> str:
    """`template` with `{name}` placeholders replaced by `values`.

    A placeholder with no value is left as it is rather than raising, so a prompt
    that mentions `{directory}` literally does not break a profile without one.
    """
    return string.Formatter().vformat(template, (), _KeepUnknown(values))
