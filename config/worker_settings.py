"""`[workspace]`, `[tools]` and `[worker]`: where runs keep their files, how
tool processes are confined, and how the worker runs workflow code."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator, model_validator

from config.web_settings import allow_entries

VERSION_PART_MAX = 255
"""The server's default limit on a build id (limit.workerBuildIdSize)."""


def _whole_number(value: Any, field: str, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{field} must be an integer of at least {least}, not {value!r}")
    return value


class WorkspaceSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    root: Any = "workspace"
    """Relative to the repo directory, or absolute."""

    @field_validator("root")
    @classmethod
    def _a_path(cls, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ValueError("root must be a non-empty string")
        return value


class ToolsSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sandbox: Any = "auto"
    network: Any = "none"
    egress_allow: Any = ()
    user: Any = 65534
    memory_mb: Any = 2048
    run_disk_mb: Any = 1024
    sandbox_per_run: Any = True
    """Each described on Settings' tool_* field."""

    @field_validator("sandbox_per_run")
    @classmethod
    def _per_run(cls, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"sandbox_per_run must be true or false, not {value!r}")
        return value

    @field_validator("sandbox")
    @classmethod
    def _sandbox(cls, value: Any) -> str:
        if value not in ("auto", "bwrap", "none"):
            raise ValueError(f'sandbox must be "auto", "bwrap" or "none", not {value!r}')
        return value

    @field_validator("network")
    @classmethod
    def _network(cls, value: Any) -> str:
        if value not in ("none", "internet"):
            raise ValueError(f'network must be "none" or "internet", not {value!r}')
        return value

    @field_validator("egress_allow")
    @classmethod
    def _egress_allow(cls, value: Any) -> tuple[str, ...]:
        return tuple(allow_entries("egress_allow", list(value) if isinstance(value, tuple) else value))

    @field_validator("user")
    @classmethod
    def _uid(cls, value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:
            raise ValueError(f"user must be a uid above 0, not {value!r}")
        return value

    @field_validator("memory_mb", "run_disk_mb")
    @classmethod
    def _megabytes(cls, value: Any, info: ValidationInfo) -> int:
        return _whole_number(value, str(info.field_name), 64 if info.field_name == "memory_mb" else 1)


class WorkerSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workflow_sandbox: Any = True
    deployment_name: Any = None
    build_id: Any = None
    """Worker Deployment Versioning: both or neither."""

    @field_validator("workflow_sandbox")
    @classmethod
    def _flag(cls, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"workflow_sandbox must be true or false, not {value!r}")
        return value

    @field_validator("deployment_name", "build_id")
    @classmethod
    def _version_part(cls, value: Any, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip() or value != value.strip():
            raise ValueError(f"{info.field_name} must be a non-empty string without surrounding spaces, not {value!r}")
        if len(value) > VERSION_PART_MAX:
            raise ValueError(f"{info.field_name} is longer than {VERSION_PART_MAX} characters")
        if info.field_name == "deployment_name" and "." in value:
            # The version's canonical form is <deployment_name>.<build_id>.
            raise ValueError(f"deployment_name must not contain '.', not {value!r}")
        return value

    @model_validator(mode="after")
    def _both_or_neither(self) -> WorkerSection:
        if (self.deployment_name is None) != (self.build_id is None):
            missing = "build_id (DURABLE_MANUS_BUILD_ID)" if self.build_id is None else "deployment_name (DURABLE_MANUS_DEPLOYMENT_NAME)"
            raise ValueError(f"{missing} is missing; worker versioning needs both deployment_name and build_id")
        return self
