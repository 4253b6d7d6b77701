"""The house's rules, checked on every run so that the next change keeps them (CONTRIBUTING.md,
"The house rules"): imports point down, from `providers` to `runtime` to `builder` to `contract`,
and inside `runtime` from the top floor down; no two modules import each other, however far round
(function-level and TYPE_CHECKING imports count: they tie the modules as much); no module is over
400 lines and no function over 60."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("contract", "builder", "runtime", "providers")
"""The layers, from the ground floor up: each may import only itself and those before it."""

RUNTIME_FLOORS = (
    ("recording", "observability"),
    ("transports", "storage"),
    ("security",),
    ("http",),
    ("apis", "console"),
    ("stack",),
    ("app",),
    ("server", "library_client"),
    ("cli", "testing"),
)
"""runtime's sub-packages (and top-level modules), from the ground floor up; those on one floor do
not import each other."""

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(name: str) -> Iterator[tuple[int, str]]:
    """(line, module) of every import of the four packages that `name` makes, wherever it stands."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], *([base] if base else [])])
            # `from runtime import fastjson` imports the module runtime.fastjson when there is one.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield node.lineno, target


def _layer(name: str) -> int:
    return PACKAGES.index(name.split(".")[0])


def _runtime_floor(name: str) -> int | None:
    parts = name.split(".")
    if parts[0] != "runtime" or len(parts) < 2:
        return None
    for floor, rooms in enumerate(RUNTIME_FLOORS):
        if parts[1] in rooms:
            return floor
    raise AssertionError(f"{name}: runtime.{parts[1]} is on no floor of RUNTIME_FLOORS (tests/unit/test_layout.py): give it one")


def test_the_checks_see_the_whole_house_and_its_imports() -> None:
    assert len(MODULES) > 150
    assert {"contract.spec", "runtime.http.middleware", "providers.responses.engine"} <= MODULES.keys()
    assert "contract.caller" in {target for _, target in _imports("runtime.security.access")}
    assert "contract.fastjson" in {target for _, target in _imports("runtime.http.middleware")}  # `from contract import fastjson`


def test_imports_point_down_between_the_packages() -> None:
    upward = [f"{MODULES[name].relative_to(ROOT)}:{line} imports {target}"
              for name in MODULES for line, target in _imports(name) if _layer(target) > _layer(name)]
    assert not upward, "imports that run back up a layer (contract < builder < runtime < providers):\n" + "\n".join(upward)


def test_imports_point_down_inside_runtime() -> None:
    wrong = []
    for name in MODULES:
        floor = _runtime_floor(name)
        if floor is None:
            continue
        for line, target in _imports(name):
            other = _runtime_floor(target)
            if other is not None and name.split(".")[1] != target.split(".")[1] and other >= floor:
                wrong.append(f"{MODULES[name].relative_to(ROOT)}:{line} imports {target} (floor {other} from floor {floor})")
    assert not wrong, "imports inside runtime that do not point down (RUNTIME_FLOORS):\n" + "\n".join(wrong)


def test_no_modules_import_each_other_however_far_round() -> None:
    graph = {name: sorted({target for _, target in _imports(name)}) for name in MODULES}
    # Tarjan's strongly connected components: a component of more than one module is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in graph:
        if name not in index:
            visit(name)
    assert not circles, "modules that import each other: " + "; ".join(" <-> ".join(circle) for circle in circles)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_module_is_small_and_so_are_its_functions(name: str) -> None:
    path = MODULES[name]
    text = path.read_text()
    assert text.count("\n") <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {text.count(chr(10))} lines: split it by job"
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{path.relative_to(ROOT)}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"
