"""ApplicationError types are declared once (agent_model/errors.py) and every
raiser, retry policy and check names the declared constant, never the string."""

from __future__ import annotations

import ast

from agent_model import errors
from tests.test_layers import product_modules

DECLARED = {name: value for name, value in vars(errors).items() if name.endswith("_ERROR") and isinstance(value, str)}


def _is_application_error_call(node: ast.Call, classes: dict[ast.Call, str | None]) -> bool:
    func = node.func
    if isinstance(func, ast.Name) and func.id == "ApplicationError":
        return True
    # super().__init__(..., type=...) in a subclass of ApplicationError
    return isinstance(func, ast.Attribute) and func.attr == "__init__" and classes.get(node) == "ApplicationError"


def _calls_with_their_class(tree: ast.AST) -> dict[ast.Call, str | None]:
    """Each call, with the first base of the class it is in (by name)."""
    found: dict[ast.Call, str | None] = {}

    def visit(node: ast.AST, base: str | None) -> None:
        if isinstance(node, ast.ClassDef):
            first = node.bases[0] if node.bases else None
            base = first.id if isinstance(first, ast.Name) else None
        if isinstance(node, ast.Call):
            found[node] = base
        for child in ast.iter_child_nodes(node):
            visit(child, base)

    visit(tree, None)
    return found


def spelled_out_error_types() -> list[str]:
    """Where product code writes an error type as a string rather than a constant of agent_model.errors."""
    problems = []
    for module, path in product_modules().items():
        if module == "agent_model.errors":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        calls = _calls_with_their_class(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in DECLARED.values():
                problems.append(f"{module}:{node.lineno}: {node.value!r} (declared in agent_model/errors.py)")
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                values: list[ast.expr] = []
                if keyword.arg == "type" and _is_application_error_call(node, calls):
                    values = [keyword.value]
                elif keyword.arg in ("non_retryable", "non_retryable_error_types") and isinstance(
                    keyword.value, (ast.Tuple, ast.List, ast.Set)
                ):
                    values = list(keyword.value.elts)
                for value in values:
                    if isinstance(value, ast.Constant):
                        problems.append(f"{module}:{value.lineno}: {keyword.arg}={value.value!r} is not a declared constant")
                    elif isinstance(value, ast.Name) and value.id.endswith("_ERROR") and value.id not in DECLARED:
                        problems.append(f"{module}:{value.lineno}: {value.id} is not in agent_model/errors.py")
    return problems


def test_error_types_are_named_by_their_constants() -> None:
    problems = spelled_out_error_types()
    assert not problems, "\n".join(problems)


def test_each_error_type_is_declared_once_with_its_meaning() -> None:
    assert len(set(DECLARED.values())) == len(DECLARED), "two constants name the same error type"
    source = ast.parse(open(errors.__file__, encoding="utf-8").read())
    body = source.body
    documented = {
        statement.targets[0].id
        for statement, following in zip(body, body[1:])
        if isinstance(statement, ast.Assign)
        and isinstance(statement.targets[0], ast.Name)
        and isinstance(following, ast.Expr)
        and isinstance(following.value, ast.Constant)
        and "\n" not in following.value.value.strip()
    }
    assert set(DECLARED) <= documented, f"without a one-line meaning: {sorted(set(DECLARED) - documented)}"


def test_the_scan_finds_a_spelled_out_type(tmp_path, monkeypatch) -> None:
    """The scan is able to fail: a raiser with a literal type is reported."""
    module = tmp_path / "offender.py"
    module.write_text(
        "from temporalio.exceptions import ApplicationError\n"
        "def fail():\n    raise ApplicationError('x', type='SomethingNew')\n"
        "POLICY = dict(non_retryable=('AlsoNew',))\n"
    )
    import tests.test_error_types as this

    monkeypatch.setattr(this, "product_modules", lambda: {"offender": module})
    assert len(spelled_out_error_types()) == 2
