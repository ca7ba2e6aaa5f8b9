"""The layers stay layers, for every module: the floors are written down once, below.

Floors, bottom up (issue 24 item 6):

* ``model``: pure values and leaves -- the errors, id lists, the model, the
  options object, GPU visibility over a mapping, and the fork-safety lock;
* ``shell``: the operating-system boundary -- files, syscalls, libnuma,
  sysfs, NVML, KFD, threads (``_proc`` joins it when branch s-os merges);
* ``discovery``: where the machine and the settings come from --
  :mod:`pynumabind.discovery` and the environment (``_environ``);
* ``planning``: the pure planner package; it may use only the model floor
  (no I/O, no environment: it takes Options already merged);
* ``applying``: the bind steps, the rules of verification, the binding;
* ``entry``: what a user or a framework calls -- the package itself, the
  CLI and its helpers, the framework integrations.

A module may import its own floor and the floors :data:`MAY_IMPORT` lists
for it.  Two checks, because either alone can be fooled: the source is read
for every ``import`` statement (a function-level, lazy import counts as much
as a top-level one; ``if TYPE_CHECKING:`` imports do not run and do not
count), and the bottom floors are imported in a fresh interpreter to see
which pynumabind modules really got loaded.  No import cycle exists, lazy
ones included, across all modules, subpackages too.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, FrozenSet, List, Mapping, Optional, Set

import pytest

import pynumabind

PACKAGE = Path(pynumabind.__file__).parent

#: The one table: floor -> its modules (dotted below ``pynumabind``; the
#: package itself is ``__init__``, a subpackage is its own name).
LAYERS: Dict[str, FrozenSet[str]] = {
    "model": frozenset({"errors", "cpulist", "model", "_options", "_visible", "_forksafe"}),
    "shell": frozenset(
        {
            "_textfile",
            "_proc",
            "_libnuma",
            "_libnuma_build",
            "_libnuma_ffi",
            "_threads",
            "_kfd",
            "_nvml",
            "_sysfs",
        }
    ),
    "discovery": frozenset({"discovery", "_environ"}),
    "planning": frozenset(
        {
            "planner",
            "planner._overrides",
            "planner._request",
            "planner._place",
            "planner._cpus",
            "planner._sets",
            "planner._memory",
        }
    ),
    "applying": frozenset({"_apply", "_verify", "binding"}),
    "entry": frozenset(
        {
            "__init__",
            "__main__",
            "cli",
            "_cli_check",
            "_cli_tables",
            "integrations",
            "integrations._common",
            "integrations.vllm",
            "integrations.sglang",
        }
    ),
}

#: Floor -> the floors its modules may import (their own included).
MAY_IMPORT: Dict[str, FrozenSet[str]] = {
    "model": frozenset({"model"}),
    "shell": frozenset({"model", "shell"}),
    "discovery": frozenset({"model", "shell", "discovery"}),
    "planning": frozenset({"model", "planning"}),
    "applying": frozenset({"model", "shell", "discovery", "planning", "applying"}),
    "entry": frozenset(LAYERS),
}

#: Table entries whose module does not exist yet (they arrive with another
#: branch); the lead removes a name here when its branch merges.
PENDING: FrozenSet[str] = frozenset()

#: Modules made when the package is built (cffi's out-of-line module), absent
#: from a source tree; ``_libnuma`` falls back without it.
BUILT: FrozenSet[str] = frozenset({"_libnuma_ffi"})

#: What ``import pynumabind`` itself loads: the fork-safety lock must exist
#: before the first lazy import (see pynumabind._forksafe).
PACKAGE_EAGER: Set[str] = {"_forksafe"}


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _modules() -> Dict[str, Path]:
    """Every module of the package, subpackages included (source files only)."""
    return {_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _floor_of() -> Dict[str, str]:
    return {module: floor for floor, modules in LAYERS.items() for module in modules}


def _package_of(module: str, path: Path) -> str:
    """The package ``module``'s relative imports start from ('' for the top)."""
    if path.name == "__init__.py":
        return "" if module == "__init__" else module
    return module.rpartition(".")[0]


def _resolve(dotted: str, known: Set[str]) -> Optional[str]:
    """The module ``dotted`` names: itself, else the module holding it as an attribute."""
    while dotted:
        if dotted in known:
            return dotted
        dotted = dotted.rpartition(".")[0]
    return "__init__"  # an attribute of the package itself (``from . import __version__``)


def _package_imports(module: str, modules: Optional[Mapping[str, Path]] = None) -> Set[str]:
    """Every pynumabind module ``module``'s source imports, at any depth (TYPE_CHECKING aside)."""
    modules = _modules() if modules is None else modules
    known = set(modules) | BUILT
    path = modules[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _package_of(module, path)
    found: Set[str] = set()
    for node in _runtime_nodes(tree):
        targets: List[str] = []
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".") if package else []
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            prefix = ".".join([*base, node.module] if node.module else base)
            targets = [f"{prefix}.{a.name}" if prefix else a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pynumabind."):
            prefix = (node.module or "")[len("pynumabind.") :]
            targets = [f"{prefix}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [
                a.name[len("pynumabind.") :] for a in node.names if a.name.startswith("pynumabind.")
            ]
        for target in targets:
            resolved = _resolve(target, known)
            if resolved is not None:
                found.add(resolved)
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


def _graph() -> Dict[str, Set[str]]:
    modules = _modules()
    graph = {module: _package_imports(module, modules) for module in modules}
    graph.update({module: set() for module in BUILT if module not in graph})
    return graph


def violations(graph: Mapping[str, Set[str]]) -> List[str]:
    """Every import that reaches a floor its importer may not use."""
    floor_of = _floor_of()
    out = []
    for module, targets in sorted(graph.items()):
        allowed = MAY_IMPORT[floor_of[module]]
        for target in sorted(targets):
            if floor_of[target] not in allowed:
                out.append(f"{module} ({floor_of[module]}) imports {target} ({floor_of[target]})")
    return out


def cycle(graph: Mapping[str, Set[str]]) -> Optional[List[str]]:
    """An import cycle in ``graph`` (lazy imports included), or None."""
    done: Set[str] = set()

    def visit(module: str, path: List[str]) -> Optional[List[str]]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for target in sorted(graph.get(module, ())):
            found = visit(target, [*path, module])
            if found:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module, [])
        if found:
            return found
    return None


# ------------------------------------------------------------ the table itself


def test_every_module_sits_on_exactly_one_floor() -> None:
    listed = [module for modules in LAYERS.values() for module in modules]
    assert len(listed) == len(set(listed)), "a module is on two floors"
    existing = set(_modules())
    assert existing - set(listed) == set(), "a module the table does not place"
    missing = set(listed) - existing
    absent = missing - PENDING - BUILT
    assert not absent, f"table entries with no module (not pending): {absent}"
    assert set(MAY_IMPORT) == set(LAYERS)


def test_pending_entries_are_really_pending() -> None:
    """Once a pending module exists, the lead removes it from PENDING (this fails until then)."""
    assert not PENDING & set(_modules()), f"remove from PENDING: {PENDING & set(_modules())}"


# ------------------------------------------------------------ the scan can fail


def test_the_ast_scan_sees_lazy_and_relative_imports_and_skips_type_only_ones() -> None:
    # _sysfs imports _kfd inside read_layout only; _verify names
    # binding.Binding only for type checkers, which is no import at run time.
    assert "_kfd" in _package_imports("_sysfs")
    assert "binding" not in _package_imports("_verify")
    # Relative imports inside subpackages resolve to the right module.
    assert {"_options", "planner._overrides"} <= _package_imports("planner._request")
    assert "integrations._common" in _package_imports("integrations.vllm")
    assert "integrations.vllm" in _package_imports("integrations")  # lazy, in vllm_plugin
    assert "__init__" in _package_imports("cli")  # from . import __version__


def test_the_checks_catch_a_wrong_floor_and_a_lazy_cycle() -> None:
    # What issue 24 found: the planner importing _environ, and the
    # integrations package and its vllm module importing each other.
    wrong = {"planner._request": {"_environ"}, "_environ": set()}
    assert violations(wrong) == ["planner._request (planning) imports _environ (discovery)"]
    looped = {"integrations": {"integrations.vllm"}, "integrations.vllm": {"integrations"}}
    assert cycle(looped) == ["integrations", "integrations.vllm", "integrations"]


# ------------------------------------------------------------ the package


def test_no_module_imports_a_floor_above_it() -> None:
    assert violations(_graph()) == []


def test_no_import_cycle_lazy_imports_included() -> None:
    graph = _graph()
    # A module imports its package's __init__ implicitly; only statements count.
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found or [])


BOTTOM = [*sorted(LAYERS["model"] - PENDING), "planner"]


@pytest.mark.parametrize("module", BOTTOM)
def test_pure_floors_load_only_what_they_may(module: str) -> None:
    code = (
        f"import sys, json, pynumabind.{module}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pynumabind.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = {name[len("pynumabind.") :] for name in json.loads(out.stdout)}
    graph = _graph()
    closure = {module}
    todo = [module]
    while todo:
        for below in graph[todo.pop()] - closure:
            closure.add(below)
            todo.append(below)
    assert loaded == (closure - {"__init__"}) | PACKAGE_EAGER
    floors = MAY_IMPORT[_floor_of()[module]]
    assert all(_floor_of()[name] in floors for name in loaded)
