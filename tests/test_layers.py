"""The layers stay layers: the model is a leaf, and no import cycle exists, lazy ones included.

Two checks, because either alone can be fooled: the source is read for every
``import`` statement (a function-level, lazy import counts as much as a
top-level one), and each pure module is imported in a fresh interpreter to
see which pynumabind modules really got loaded.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

import pytest

import pynumabind

PACKAGE = Path(pynumabind.__file__).parent

#: The pure floor: each may import only the modules listed (and the stdlib).
PURE: Dict[str, Set[str]] = {
    "errors": set(),
    "cpulist": {"errors"},
    "model": {"errors", "cpulist"},
    "_visible": {"errors", "model"},
    "_advice": set(),  # the advise rule: values in, values out
}


def _package_imports(module: str) -> Set[str]:
    """Every pynumabind module ``module``'s source imports, at any depth."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    found: Set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0 and (node.module or "").split(".")[0] != "pynumabind":
                continue
            base = (node.module or "") if node.level else (node.module or "")[len("pynumabind.") :]
            if base:
                found.add(base.split(".")[0])
            else:  # from . import a, b
                found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "pynumabind" and len(parts) > 1:
                    found.add(parts[1])
    found.discard(module)
    return found


def _runtime_nodes(tree: ast.AST) -> List[ast.AST]:
    """Every node that can run: ``if TYPE_CHECKING:`` bodies (type-only imports) left out."""
    out: List[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


#: What ``import pynumabind`` itself loads: the fork-safety lock must exist
#: before the first lazy import (see pynumabind._forksafe).
PACKAGE_EAGER: Set[str] = {"_forksafe"}


def _closure(module: str) -> Set[str]:
    """``module`` and every pure module below it, transitively."""
    out = {module}
    for below in PURE[module]:
        out |= _closure(below)
    return out


def _modules() -> List[str]:
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))


def test_the_ast_scan_sees_lazy_imports_and_skips_type_only_ones() -> None:
    # _sysfs imports _kfd inside read_topology only: the scan must find it,
    # or the checks below could not fail.  _verify names binder.Binding only
    # for type checkers, which is no import at run time.
    assert "_kfd" in _package_imports("_sysfs")
    assert "binder" not in _package_imports("_verify")


@pytest.mark.parametrize("module", sorted(PURE))
def test_pure_modules_import_only_the_floor_below(module: str) -> None:
    assert _package_imports(module) <= PURE[module]


@pytest.mark.parametrize("module", sorted(PURE))
def test_pure_modules_load_only_the_floor_below(module: str) -> None:
    code = (
        f"import sys, json, pynumabind.{module}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pynumabind.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = {name[len("pynumabind.") :] for name in json.loads(out.stdout)}
    assert loaded == _closure(module) | PACKAGE_EAGER


def test_no_import_cycle_lazy_imports_included() -> None:
    graph = {module: _package_imports(module) & set(_modules()) for module in _modules()}
    done: Set[str] = set()

    def visit(module: str, path: List[str]) -> None:
        if module in path:
            cycle = [*path[path.index(module) :], module]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
