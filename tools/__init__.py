"""Every tool the agents know, one file each.

A tool file declares SPEC (agent_model/tool_spec.py): its schema, how it runs
(an activity with its options, or a handler that runs in the workflow), its Web
UI summary, and the state it keeps in the run with its hooks. The registry below is every
SPEC found in this package; the workflow dispatches through it and the worker
builds its activities from it, so adding a tool is adding a file here and
naming the tool in a profile (docs/architecture.md, "Adding a tool").

Tool files import only pure modules at their top: workflow code imports them.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from temporalio import workflow

from agent_model.activity_specs import THINK_CONFIG
from agent_model.profiles import AgentProfile
from agent_model.tool_spec import ToolSpec
from agent_model.tool_terms import ActivityTerms, ToolTerms

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


def with_tool_terms(profile: AgentProfile) -> AgentProfile:
    """The profile with each of its tools, and its thinks, as this code defines
    them, for a new run's input: a later deploy of other tool files reaches new
    runs only.
    Raises ValueError for options a tool does not take."""
    names = dict.fromkeys([*profile.tools, *(spec.name for spec in used_by(profile))])
    terms = {name: _terms(spec, profile.tool_options.get(name, {})) for name in names if (spec := TOOLS.get(name)) is not None}
    return profile.model_copy(update={"tool_terms": terms, "think_terms": ActivityTerms.of(THINK_CONFIG)})


def _terms(spec: ToolSpec, raw_options: dict[str, Any]) -> ToolTerms:
    definition = spec.schema
    options: dict[str, Any] = {}
    if raw_options:
        if spec.options is None:
            raise ValueError(f"tool {spec.name} takes no options (got {', '.join(sorted(raw_options))})")
        checked = spec.options.model_validate(raw_options)
        options = checked.model_dump(exclude_defaults=True)
        if spec.schema_for is not None:
            definition = spec.schema_for(checked)
    return ToolTerms(
        definition=definition,
        activity=ActivityTerms.of(spec.activity) if spec.activity is not None else None,
        own_activities={key: ActivityTerms.of(config) for key, config in spec.own_activities.items()},
        options=options,
        concurrent=spec.concurrent,
        local_reads={name: list(values) for name, values in spec.read_calls.items()},
    )


def offered_definitions(profile: AgentProfile) -> list[dict[str, Any]]:
    """The function definitions of the profile's tools, as its run started."""
    definitions = []
    for name in profile.tools:
        terms, spec = profile.tool_terms.get(name), TOOLS.get(name)
        definition = terms.definition if terms is not None else spec.schema if spec is not None else None
        if definition is not None:
            definitions.append(definition)
    return definitions


def activity_options(profile: AgentProfile, spec: ToolSpec) -> workflow.ActivityConfig:
    """How a call of an activity tool is scheduled: as the run started, or (an
    older input) as this code says."""
    assert spec.activity is not None
    terms = profile.tool_terms.get(spec.name)
    return terms.activity.config() if terms is not None and terms.activity is not None else spec.activity


def own_activity_options(profile: AgentProfile, tool: str, key: str) -> workflow.ActivityConfig:
    """How one of a workflow tool's own activities is scheduled: as the run
    started, or (an older input) as this code says."""
    terms = profile.tool_terms.get(tool)
    if terms is not None and key in terms.own_activities:
        return terms.own_activities[key].config()
    return TOOLS[tool].own_activities[key]


def activity_summary(name: str, arguments: dict[str, Any], limit: int = 80) -> str:
    """One line for the Web UI, e.g. `python_execute: import pandas as pd`."""
    spec = TOOLS.get(name)
    detail = spec.summary(arguments) if spec is not None else ""
    text = f"{name}: {detail}" if detail else name
    return text if len(text) <= limit else text[: limit - 1] + "…"


discover()
