"""Every tool the agents know, one file each.

A tool file declares SPEC (agent_model/tool_spec.py): its schema, how it runs
(an activity with its options, or a handler that runs in the workflow), its Web
UI summary, and the state it keeps in the run with its hooks. The registry below is every
SPEC found in this package; the workflow dispatches through it and the worker
builds its activities from it, so adding a tool is adding a file here and
naming the tool in a profile (README, "Adding a tool").

Tool files import only pure modules at their top: workflow code imports them.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from agent_model.profiles import AgentProfile
from agent_model.tool_spec import ToolSpec

TOOLS: dict[str, ToolSpec] = {}


def discover() -> dict[str, ToolSpec]:
    """(Re)reads every module of this package's path and registers its SPEC."""
    found: dict[str, ToolSpec] = {}
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        spec = getattr(importlib.import_module(f"{__name__}.{module.name}"), "SPEC", None)
        if isinstance(spec, ToolSpec):
            if spec.name in found:
                raise ValueError(f"two tool files declare the tool {spec.name!r}")
            found[spec.name] = spec
    TOOLS.clear()
    TOOLS.update(found)
    return TOOLS


def schemas(names: list[str]) -> list[dict[str, Any]]:
    return [schema for n in names if n in TOOLS and (schema := TOOLS[n].schema) is not None]


def used_by(profile: AgentProfile) -> list[ToolSpec]:
    """The tools a run with this profile uses: their hooks run in its steps."""
    return [spec for spec in TOOLS.values() if spec.used_by(spec, profile)]


def activity_summary(name: str, arguments: dict[str, Any], limit: int = 80) -> str:
    """One line for the Web UI, e.g. `python_execute: import pandas as pd`."""
    spec = TOOLS.get(name)
    detail = spec.summary(arguments) if spec is not None else ""
    text = f"{name}: {detail}" if detail else name
    return text if len(text) <= limit else text[: limit - 1] + "…"


discover()
