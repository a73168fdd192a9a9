"""The patch lifecycle of docs/deploying.md, checked statically.

Finds every `workflow.patched(...)` and `workflow.deprecate_patch(...)` in
product code (ast, nothing imported) and reports, one line each:

* an id that is not a string literal or a module-level string constant;
* a call that is not one of the first statements of a workflow's
  `@workflow.run` method (a plain `name = workflow.patched(ID)` or a bare
  `workflow.deprecate_patch(ID)`, before anything else in the body), or a
  reference to them that is not such a call (passed around, it is asked
  where nobody sees);
* a patched id without a committed history of each branch for each workflow
  type that asks it: one carrying its marker and one without it, listed in
  tests/histories/PATCHES.toml;
* a deprecated id without a history carrying its marker, or still listing
  one of the old branch (that code is gone);
* an id both patched and deprecated, a manifest entry no code asks, and a
  committed history with a live (not deprecated) marker no code asks: it no
  longer replays.
"""

from __future__ import annotations

import ast
import base64
import json
import tomllib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PATCH_FUNCTIONS = frozenset({"patched", "deprecate_patch"})
WORKFLOW_MODULE = "temporalio.workflow"
PATCH_MARKER = "core_patch"
"""The marker the SDK's core records for a patch; its details' "patch-data"
payload is JSON {"id": ..., "deprecated": ...}."""


@dataclass(frozen=True)
class PatchCall:
    function: str
    """"patched" or "deprecate_patch"."""
    patch_id: str | None
    """None when the argument is not a literal or a module-level constant."""
    workflow: str | None
    """The workflow type whose run asks it."""
    where: str
    """path:line, for messages."""
    at_fixed_point: bool
    reference: bool = False
    """Named without being called (passed around)."""


# ---- product code -----------------------------------------------------------------


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def string_constants(tree: ast.Module) -> dict[str, str]:
    constants = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
            constants[target.id] = value.value
    return constants


class _Module:
    """One parsed file: its constants and what its names are bound to by imports."""

    def __init__(self, path: Path, root: Path) -> None:
        self.path, self.name = path, module_name(path, root)
        self.tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        self.nodes = list(ast.walk(self.tree))
        self.constants = string_constants(self.tree)
        self.imported: dict[str, str] = {}
        """Local name -> dotted name it stands for (a module, or module.attribute)."""
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imported[alias.asname] = alias.name
                    else:
                        self.imported[alias.name.split(".")[0]] = alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def dotted(self, node: ast.expr) -> str | None:
        """What a Name or an attribute chain refers to, through this module's imports."""
        if isinstance(node, ast.Name):
            return self.imported.get(node.id, f"{self.name}.{node.id}")
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None


def patch_function(module: _Module, node: ast.expr) -> str | None:
    """"patched"/"deprecate_patch" when `node` names temporalio.workflow's."""
    target = module.dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    if target is None:
        return None
    owner, _, function = target.rpartition(".")
    return function if owner == WORKFLOW_MODULE and function in PATCH_FUNCTIONS else None


def resolve_id(module: _Module, argument: ast.expr, modules: _Modules) -> str | None:
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value
    target = module.dotted(argument) if isinstance(argument, (ast.Name, ast.Attribute)) else None
    if target is None:
        return None
    owner, _, name = target.rpartition(".")
    return modules[owner].constants.get(name) if owner in modules else None


def _is_decorated(node: ast.ClassDef | ast.AsyncFunctionDef | ast.FunctionDef, module: _Module, dotted: str) -> bool:
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call):
            decorator = decorator.func
        if module.dotted(decorator) == dotted:
            return True
    return False


def workflow_type_name(cls: ast.ClassDef, module: _Module) -> str:
    for decorator in cls.decorator_list:
        if isinstance(decorator, ast.Call) and module.dotted(decorator.func) == f"{WORKFLOW_MODULE}.defn":
            for keyword in decorator.keywords:
                if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                    return str(keyword.value.value)
    return cls.name


def fixed_point_calls(run: ast.AsyncFunctionDef | ast.FunctionDef, module: _Module) -> Iterator[ast.Call]:
    """The patch calls among the first statements of a run method: the
    allowed place, before anything else can depend on data."""
    for index, statement in enumerate(run.body):
        if index == 0 and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # the docstring
        value: ast.expr | None
        if isinstance(statement, ast.Expr):
            value = statement.value
        elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            value = statement.value
        elif isinstance(statement, ast.AnnAssign):
            value = statement.value
        else:
            return
        if not (isinstance(value, ast.Call) and patch_function(module, value.func) and len(value.args) == 1):
            return
        if isinstance(statement, ast.Expr) != (patch_function(module, value.func) == "deprecate_patch"):
            return  # patched()'s answer is kept; deprecate_patch() has none
        yield value


def _calls_in(module: _Module, modules: _Modules, root: Path) -> Iterator[PatchCall]:
    allowed: dict[int, str] = {}
    """id() of each call at a fixed point -> its workflow type."""
    for cls in module.nodes:
        if isinstance(cls, ast.ClassDef) and _is_decorated(cls, module, f"{WORKFLOW_MODULE}.defn"):
            for method in cls.body:
                if isinstance(method, (ast.AsyncFunctionDef, ast.FunctionDef)) and _is_decorated(
                    method, module, f"{WORKFLOW_MODULE}.run"
                ):
                    for call in fixed_point_calls(method, module):
                        allowed[id(call)] = workflow_type_name(cls, module)
    called = {id(node.func) for node in module.nodes if isinstance(node, ast.Call)}
    for node in module.nodes:
        where = f"{module.path.relative_to(root)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call) and (function := patch_function(module, node.func)):
            argument = node.args[0] if len(node.args) == 1 and not node.keywords else None
            patch_id = resolve_id(module, argument, modules) if argument is not None else None
            yield PatchCall(function, patch_id, allowed.get(id(node)), where, id(node) in allowed)
        elif isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in called:
            if isinstance(node.ctx, ast.Load) and (function := patch_function(module, node)):
                yield PatchCall(function, None, None, where, False, reference=True)


def product_files(root: Path, packages: Iterable[str]) -> list[Path]:
    return sorted(p for package in packages for p in (root / package).rglob("*.py"))


class _Modules(dict[str, _Module]):
    """Module name -> _Module, parsed when first needed (a constant's owner)."""

    def __init__(self, root: Path, paths: Iterable[Path]) -> None:
        super().__init__()
        self.root, self.paths = root, {module_name(p, root): p for p in paths}

    def __missing__(self, name: str) -> _Module:
        self[name] = module = _Module(self.paths[name], self.root)
        return module

    def __contains__(self, name: object) -> bool:
        return name in self.paths


MENTIONS = ("patched", "deprecate_patch", "defn")
"""A file naming none of these has no patch call and no workflow: not parsed."""


def find_calls(root: Path, packages: Iterable[str]) -> tuple[list[PatchCall], set[str]]:
    """Every patch call or reference in the packages under `root`, and the
    workflow types found (so a caller can tell the scan saw the workflows)."""
    paths = product_files(root, packages)
    modules = _Modules(root, paths)
    calls: list[PatchCall] = []
    workflows: set[str] = set()
    for path in paths:
        if not any(word in path.read_text(encoding="utf-8") for word in MENTIONS):
            continue
        module = modules[module_name(path, root)]
        calls.extend(_calls_in(module, modules, root))
        workflows.update(
            workflow_type_name(node, module)
            for node in module.nodes
            if isinstance(node, ast.ClassDef) and _is_decorated(node, module, f"{WORKFLOW_MODULE}.defn")
        )
    return calls, workflows


# ---- committed histories ---------------------------------------------------------


def history_markers(data: dict) -> dict[str, bool]:
    """Patch id -> True when every marker of it in the history is deprecated."""
    markers: dict[str, bool] = {}
    for event in data.get("events", []):
        marker = event.get("markerRecordedEventAttributes")
        if not marker or marker.get("markerName") != PATCH_MARKER:
            continue
        payload = marker["details"]["patch-data"]["payloads"][0]["data"]
        patch = json.loads(base64.b64decode(payload))
        markers[patch["id"]] = markers.get(patch["id"], True) and bool(patch.get("deprecated"))
    return markers


def history_workflow_type(data: dict) -> str | None:
    events = data.get("events") or [{}]
    started = events[0].get("workflowExecutionStartedEventAttributes", {})
    return started.get("workflowType", {}).get("name")


def _files(entry: dict, branch: str) -> list[str]:
    value = entry.get(branch, [])
    return [value] if isinstance(value, str) else list(value)


# ---- the check ------------------------------------------------------------------


def check(root: Path, packages: Iterable[str], histories: Path, manifest: Path) -> list[str]:
    """Every breach of the lifecycle, one line each; empty when it holds."""
    calls, _ = find_calls(root, packages)
    problems: list[str] = []
    asked: dict[str, dict[str, set[str]]] = {"patched": {}, "deprecate_patch": {}}
    """function -> id -> workflow types asking it."""
    for call in calls:
        if call.reference:
            problems.append(f"{call.where}: workflow.{call.function} is passed around; call it at the fixed point instead")
        elif call.patch_id is None:
            problems.append(f"{call.where}: workflow.{call.function}() needs a string literal or module-level constant id")
        elif not call.at_fixed_point:
            problems.append(
                f"{call.where}: workflow.{call.function}({call.patch_id!r}) must be one of the first statements of "
                "the workflow's @workflow.run method (docs/deploying.md)"
            )
        else:
            assert call.workflow is not None
            asked[call.function].setdefault(call.patch_id, set()).add(call.workflow)
    for both in sorted(asked["patched"].keys() & asked["deprecate_patch"].keys()):
        problems.append(f"patch {both!r} is both patched and deprecated")

    entries = tomllib.loads(manifest.read_text(encoding="utf-8")) if manifest.exists() else {}
    loaded: dict[str, dict | None] = {}

    def history(name: str) -> dict | None:
        if name not in loaded:
            path = histories / name
            loaded[name] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        return loaded[name]

    for function, branches in (("patched", ("with", "without")), ("deprecate_patch", ("with",))):
        for patch_id, workflows in sorted(asked[function].items()):
            entry = entries.get(patch_id, {})
            if function == "deprecate_patch" and _files(entry, "without"):
                problems.append(f"patch {patch_id!r} is deprecated: its old branch is gone, drop its `without` histories")
            for branch in branches:
                problems.extend(_branch_problems(patch_id, workflows, branch, _files(entry, branch), history, manifest))

    every_id = {call.patch_id for call in calls if call.patch_id is not None}
    for stale in sorted(entries.keys() - every_id):
        problems.append(f"{manifest.name}: no code asks patch {stale!r}; remove its entry")
    for path in sorted(histories.glob("*.json")):
        for patch_id, deprecated in sorted(history_markers(history(path.name) or {}).items()):
            if not deprecated and patch_id not in every_id:
                problems.append(
                    f"{path.name}: carries patch {patch_id!r}, which no code asks: it no longer replays "
                    "(deprecate_patch before removing a patch)"
                )
    return problems


def _branch_problems(
    patch_id: str,
    workflows: set[str],
    branch: str,
    names: list[str],
    history: Callable[[str], dict | None],
    manifest: Path,
) -> Iterator[str]:
    covered: set[str | None] = set()
    for name in names:
        data = history(name)
        if data is None:
            yield f"{manifest.name}: patch {patch_id!r}: {name} is not a file in the histories directory"
            continue
        carries = patch_id in history_markers(data)
        if carries != (branch == "with"):
            yield f"{name}: listed as patch {patch_id!r} {branch} its marker, but it {'carries' if carries else 'lacks'} it"
            continue
        covered.add(history_workflow_type(data))
    for workflow in sorted(workflows - covered):
        yield f"patch {patch_id!r}: no committed {workflow} history {branch} its marker (listed in {manifest.name})"
