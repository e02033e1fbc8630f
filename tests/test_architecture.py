"""The package table of architecture.md ("The packages"), enforced on the source: which top-level package
may import which. Every module of `daq`, `dynamics` and `firmware_bridge` is parsed with `ast` and every
import in it is read — at module level, inside functions and methods, ``importlib.import_module("...")``
and ``__import__("...")`` with a literal name, relative imports resolved — except those under
``if TYPE_CHECKING:`` (type hints only: the controller builds typed objects, e.g. `daq.context.ProcessContext`
and its config devices, which daq uses without importing controller at run time).

- `daq` never imports `controller` (it may import `firmware_bridge` and `dynamics`);
- `dynamics` never imports `controller`, and only its services (``dynamics/service*.py``, the processes that
  apply the computation to live streams) import `daq`: the rest is computation, no I/O;
- `firmware_bridge` imports neither `daq` nor `controller` (its virtual MCU may use `dynamics` plants)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def run_time_imports(source: str, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import `source` (the text of `module`, dotted) makes at run time."""
    package = module.split(".") if module.endswith("__init__") else module.split(".")[:-1]
    package = [p for p in package if p != "__init__"]
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:  # `else:` of TYPE_CHECKING runs
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, name))
            if not node.module:  # `from . import x`: x is a module of the package
                found.extend((node.lineno, f"{name}.{a.name}") for a in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            if (isinstance(f, ast.Name) and f.id in ("__import__", "import_module")) or \
                    (isinstance(f, ast.Attribute) and f.attr == "import_module"):
                found.append((node.lineno, node.args[0].value))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def _modules(package: str) -> list[Path]:
    return sorted(p for p in (REPO / package).rglob("*.py") if "__pycache__" not in p.parts)


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def _forbidden(path: Path) -> tuple[str, ...]:
    top = path.relative_to(REPO).parts[0]
    if top == "daq":
        return ("controller",)
    if top == "dynamics":
        service = path.parent == REPO / "dynamics" and path.name.startswith("service")
        return ("controller",) if service else ("controller", "daq")
    return ("controller", "daq")  # firmware_bridge


MODULES = [p for pkg in ("daq", "dynamics", "firmware_bridge") for p in _modules(pkg)]


def test_the_scan_sees_every_run_time_import_and_no_type_checking_one():
    src = '''
from __future__ import annotations
import importlib
from typing import TYPE_CHECKING
import daq.bus, numpy as np
from . import frames
from ..dynamics import rnea
if TYPE_CHECKING:
    from controller.config import Lab
else:
    import zmq
def f():
    from controller.synergies.robot import load_robot
    class A:
        def g(self):
            return importlib.import_module("controller.loop"), __import__("controller.cli")
'''
    names = [n for _, n in run_time_imports(src, "daq.devices.x")]
    assert names == ["__future__", "importlib", "typing", "daq.bus", "numpy", "daq.devices", "daq.devices.frames",
                     "daq.dynamics", "zmq", "controller.synergies.robot", "controller.loop", "controller.cli"]
    assert len(MODULES) > 100 and REPO / "daq" / "devices" / "exo_world_sim.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=_dotted)
def test_a_module_imports_only_what_its_package_may(path):
    bad = [f"line {line}: {name}" for line, name in run_time_imports(path.read_text(), _dotted(path))
           if name.split(".")[0] in _forbidden(path)]
    assert not bad, f"{path.relative_to(REPO)} imports at run time what architecture.md forbids it: {bad}"
