"""The product's modules import downward only, and never in a circle.

Every import is read from the source (ast), including imports inside
functions and under TYPE_CHECKING: a lazy import still ties two modules
together, it only hides the tie from Python's import machinery.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("runtime", "workflows", "tools", "activities", "agent_model", "prompts", "config")
ENTRY_SCRIPTS = ("worker", "starter")

LAYERS: tuple[frozenset[str], ...] = (
    frozenset(ENTRY_SCRIPTS),
    frozenset({"runtime"}),
    frozenset({"workflows"}),
    frozenset({"tools"}),
    frozenset({"activities"}),
    frozenset({"agent_model", "prompts", "config"}),
)
"""Top to bottom, by a module's top-level name: a module may import its own
layer and the layers below it."""

FOUNDATION = frozenset(
    {
        "activities.safe_files",
        "activities.tools.addresses",
        "activities.tools.own_host",
        "activities.tools.control_plane",
        "activities.tools.egress_rules",
    }
)
"""Standard-library-only helpers below every layer: config validates its
files and allow lists with the same rules the activities enforce, so these
sit under config although they live in activities/."""



def product_modules() -> dict[str, Path]:
    modules = {name: REPO / f"{name}.py" for name in ENTRY_SCRIPTS}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The product module that `name` (a module, or a name in one) is in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            # `from package import module` names a module; `from module import name` a name in it.
            targets = [f"{source}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(owner for target in targets if (owner := _owner(target, modules)) is not None)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = product_modules()
    return {module: imports_of(module, path, modules) for module, path in modules.items()}


def layer_of(module: str) -> int:
    if module in FOUNDATION:
        return len(LAYERS)
    top = module.split(".")[0]
    return next(depth for depth, names in enumerate(LAYERS) if top in names)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_sees_lazy_and_type_checking_imports() -> None:
    graph = import_graph()
    assert "activities.workspace" in graph["tools.str_replace_editor"]  # under TYPE_CHECKING
    assert "activities.tools.egress_rules" in graph["config.web_settings"]  # inside a function
    assert "agent_model.messages" in graph["agent_model.memory"]


def test_no_import_circles() -> None:
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_imports_go_down_the_layers() -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if layer_of(target) < layer_of(module)
    )
    assert not upward, "imports against the layers: " + ", ".join(upward)


def test_the_foundation_imports_only_itself() -> None:
    graph = import_graph()
    assert all(graph[module] <= FOUNDATION for module in FOUNDATION), {m: graph[m] - FOUNDATION for m in FOUNDATION}
