"""The layers stay layers: the folders of ``src/pynumabind`` are the floors.

A module's floor is the folder it sits in, read from the tree, not from a table:

* ``values``: the modules at the top of the package -- the errors, id lists,
  the model, the options object, the cffi build script (and the module it
  builds) -- pure values every floor may pass;
* ``_os``: the operating-system boundary -- files, syscalls, libnuma, sysfs,
  /proc, threads, NVML, KFD, and the fork-safety lock;
* ``discovery``: where the machine and the settings come from (topology,
  GPU visibility, the environment);
* ``planner``: the pure planner; it may use only the values (no I/O, no
  environment: it takes Options already merged);
* ``binding``: applying a plan with its journal, verifying it, the process
  binding, and buffer placement;
* ``advisor``: measuring whether binding helps, and the rule that decides
  (``advisor.rule`` is pure: values only, see :data:`PURE`);
* ``integrations``: the framework hooks;
* ``cli``, and the package's own ``__init__``/``__main__`` (``entry``).

A module may import its own floor and the floors :data:`MAY_IMPORT` lists
for it.  Two checks, because either alone can be fooled: the source is read
for every ``import`` statement (a function-level, lazy import counts as much
as a top-level one; ``if TYPE_CHECKING:`` imports do not run and do not
count), and the bottom floors are imported in a fresh interpreter to see
which pynumabind modules really got loaded.  No import cycle exists, lazy
ones included, across all modules, subpackages too.  The README's
architecture table names exactly these folders, in this order.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, FrozenSet, List, Mapping, Optional, Set

import pytest

import child_cold
from childproc import run_in_child
from import_scan import BUILT, PACKAGE
from import_scan import all_modules as _modules
from import_scan import package_imports as _package_imports

README = Path(__file__).resolve().parents[2] / "README.md"

#: The floors, bottom up: a folder's name, or ``values``/``entry`` for the
#: modules at the top of the package.
FLOORS = (
    "values",
    "_os",
    "discovery",
    "planner",
    "binding",
    "advisor",
    "integrations",
    "cli",
    "entry",
)

#: Floor -> the floors its modules may import (their own included).
MAY_IMPORT: Dict[str, FrozenSet[str]] = {
    "values": frozenset({"values"}),
    "_os": frozenset({"values", "_os"}),
    "discovery": frozenset({"values", "_os", "discovery"}),
    "planner": frozenset({"values", "planner"}),
    "binding": frozenset({"values", "_os", "discovery", "planner", "binding"}),
    "advisor": frozenset({"values", "_os", "discovery", "planner", "binding", "advisor"}),
    "integrations": frozenset(
        {"values", "_os", "discovery", "planner", "binding", "advisor", "integrations"}
    ),
    "cli": frozenset(FLOORS) - {"entry"},
    "entry": frozenset(FLOORS),
}

#: Modules held to a lower floor than their folder's: the rule that turns
#: measurements into advice is a pure function of values, and so is the advice
#: record as a value (its JSON, the machine fingerprint, staleness).  The
#: record on disk (``advisor.record``: the path rule, reading and writing the
#: file, this machine's fingerprint, and mode ``advised`` resolved into plain
#: values) sits on the discovery floor: it reads files and the machine through
#: discovery but measures nothing, and the binding must read the record in
#: every worker that binds in mode ``advised`` -- without importing the
#: measurement (``advisor._memory``, ``advisor._copies``), which stays above it.
PURE: Dict[str, str] = {
    "advisor.rule": "values",
    "advisor.document": "values",
    "advisor.record": "discovery",
    "advisor.report": "values",  # the rule's Advice renders itself: str(advice)
    "_os.forksafe": "values",
}

#: The top-level modules that are entry points, not values.
ENTRY: FrozenSet[str] = frozenset({"__init__", "__main__"})

#: What ``import pynumabind`` itself loads: the fork-safety lock must exist
#: before the first lazy import (see pynumabind._os.forksafe).
PACKAGE_EAGER: Set[str] = {"_os", "_os.forksafe", "_version"}

#: At most this many modules of its own at the top of the package.
MAX_TOP_LEVEL = 10


def floor(module: str) -> str:
    """The floor of ``module`` (dotted under ``pynumabind``), read from where it sits."""
    if module in PURE:
        return PURE[module]
    head, dot, _ = module.partition(".")
    if dot or (PACKAGE / head).is_dir():
        return head
    return "entry" if module in ENTRY else "values"


def _graph() -> Dict[str, Set[str]]:
    modules = _modules()
    graph = {module: _package_imports(module, modules) for module in modules}
    graph.update({module: set() for module in BUILT if module not in graph})
    return graph


def violations(graph: Mapping[str, Set[str]]) -> List[str]:
    """Every import that reaches a floor its importer may not use."""
    out = []
    for module, targets in sorted(graph.items()):
        allowed = MAY_IMPORT[floor(module)]
        for target in sorted(targets):
            if floor(target) not in allowed:
                out.append(f"{module} ({floor(module)}) imports {target} ({floor(target)})")
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


# ------------------------------------------------------------ the tree itself


def test_every_folder_is_a_floor_and_the_top_stays_small() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(FLOORS) - {"values", "entry"}
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert ENTRY <= top
    assert len(top) <= MAX_TOP_LEVEL, sorted(top)
    assert set(PURE) <= set(_modules())
    assert {floor(m) for m in _modules()} <= set(FLOORS)


#: The test folders that test no single floor: the package as a whole (its
#: layers, public names, docs and site), the recipes under real launchers,
#: and the QEMU guest (which tests every floor on a multi-node kernel).
TESTS_BEYOND_FLOORS = frozenset({"package", "launchers", "vm"})


def test_the_tests_are_laid_out_like_the_code() -> None:
    """One test folder per floor, named as the package's: no test file left at the top."""
    tests = Path(__file__).resolve().parents[1]
    with_tests = {p.parent.name for p in tests.glob("*/test_*.py")}
    floors = {f for f in FLOORS if f != "entry"}
    assert with_tests - TESTS_BEYOND_FLOORS == floors, sorted(with_tests)
    assert not sorted(tests.glob("test_*.py")), "a test file at the top of tests/"
    names = [p.name for p in tests.rglob("test_*.py") if "vm" not in p.relative_to(tests).parts]
    dup = sorted({n for n in names if names.count(n) > 1})
    assert not dup, f"test files share a name (pytest imports them by name): {dup}"


def test_the_cffi_build_script_stays_beside_the_package_it_builds() -> None:
    assert (PACKAGE / "_libnuma_build.py").is_file()
    assert "_libnuma_build" in _package_imports("_os.libnuma")


def test_the_readme_architecture_table_names_the_folders_in_order() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## How it works", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)`", section, flags=re.MULTILINE)
    named = [row.rstrip("/").split(".")[0] for row in rows]
    folders = [f for f in FLOORS if f not in ("values", "entry")]
    assert [n for n in named if n in folders] == folders, rows
    top = {m for m in _modules() if "." not in m and m not in ENTRY and not (PACKAGE / m).is_dir()}
    # The built module is named whether or not this install has it (an
    # editable one has not, a wheel has).
    for module in sorted(top | BUILT):
        assert f"`{module}`" in section or f"`{module}.py`" in section, module


# ------------------------------------------------------------ the scan can fail


def test_the_ast_scan_sees_lazy_and_relative_imports_and_skips_type_only_ones() -> None:
    # _sysfs imports _kfd inside read_layout only; _verify names
    # binding.Binding only for type checkers, which is no import at run time.
    assert "_os.kfd" in _package_imports("_os.sysfs")
    assert "binding" not in _package_imports("binding.verify")
    # Relative imports inside subpackages resolve to the right module.
    assert {"options", "planner._overrides"} <= _package_imports("planner._request")
    assert {"_os.libnuma", "binding.apply"} <= _package_imports("binding")
    assert "integrations._common" in _package_imports("integrations.vllm")
    assert "integrations.vllm" in _package_imports("integrations")  # lazy, in vllm_plugin
    assert "_version" in _package_imports("cli")  # from .._version import __version__
    assert "discovery" in _package_imports("cli")  # from .. import discovery


def test_the_checks_catch_a_wrong_floor_and_a_lazy_cycle() -> None:
    # What these checks once found: the planner importing _environ, and the
    # integrations package and its vllm module importing each other.
    wrong = {"planner._request": {"discovery.environ"}, "discovery.environ": set()}
    assert violations(wrong) == ["planner._request (planner) imports discovery.environ (discovery)"]
    assert violations({"advisor.rule": {"_os.sysfs"}}) == [
        "advisor.rule (values) imports _os.sysfs (_os)"
    ]
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


BOTTOM = [
    *sorted(m for m in _modules() if floor(m) == "values" and m not in BUILT),
    "planner",
    "advisor.rule",
    "advisor.document",
]


def _parents(module: str) -> Set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


@pytest.mark.parametrize("module", BOTTOM)
def test_pure_floors_load_only_what_they_may(module: str) -> None:
    names, _ = run_in_child(child_cold.pynumabind_modules_after_importing, module)
    loaded = {name[len("pynumabind.") :] for name in names}
    graph = _graph()
    closure = {module} | _parents(module)
    todo = list(closure)
    while todo:
        for below in graph[todo.pop()] - closure:
            closure.add(below)
            todo.append(below)
    if not _parents(module):
        assert loaded == (closure - {"__init__"}) | PACKAGE_EAGER
    else:
        assert loaded <= (closure - {"__init__"}) | PACKAGE_EAGER
    floors = MAY_IMPORT[floor(module)]
    beside = _parents(module) | PACKAGE_EAGER
    assert all(floor(name) in floors for name in loaded - beside), loaded
