"""The layers stay layers: the folders of ``src/pynumabind`` are the floors.

A module's floor is the folder it sits in, read from the tree, not from a
table, with no exceptions:

* ``values``: the modules at the top of the package -- the errors, id lists,
  the model, the options object, the cffi build script (and the module it
  builds) -- pure values every floor may pass;
* ``_os``: the operating-system boundary -- files, syscalls, libnuma, sysfs,
  /proc, threads, NVML, KFD, and the fork-safety lock;
* ``discovery``: where the machine and the settings come from (topology,
  GPU visibility, the environment);
* ``planner``: the pure planner; it may use only the values (no I/O, no
  environment: it takes Options already merged);
* ``records``: the advice record -- the values an advice holds, its report,
  its JSON, the machine fingerprint and staleness, and the store (the path
  rule, the atomic save, loading, and mode ``advised`` resolved into plain
  values).  It reads files and the machine through discovery but measures
  nothing and plans nothing, so the binding reads the record in every worker
  without importing the advisor;
* ``binding``: applying a plan with its journal, verifying it, the process
  binding, and buffer placement;
* ``advisor``: measuring whether binding helps, and the rule that decides;
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

Purity is a stricter rule on top, not an exception to the floors: the
modules of :func:`pure_modules` (every planner module, the decision rule,
and the records' values, machine fingerprint, JSON and report) keep their
floor and may in addition import nothing but the values floor (the cffi
build script and its module aside: :data:`BUILD`) and each other, lazily or
not, and no module of the standard library that does I/O
(:data:`PURE_STDLIB` is all they may import from outside the package), nor
call ``open``, ``print`` or the other built-ins of :data:`IO_BUILTINS`.  In a
fresh interpreter, what importing one of them loads beyond what its packages
load is pure or values too.

``_os.forksafe`` needs no rule of its own: it is an ``_os`` module that
nothing below ``_os`` imports.  The package's ``__init__`` (the entry floor)
imports it, so that the fork-safety lock exists before the first lazy
import; every import of any pynumabind module therefore loads it and the
``_os`` package (:data:`PACKAGE_EAGER`), which the fresh-interpreter check
counts as the package's own, not as a floor the module under test imports.
(It sat at the top with the values before the layers were folders, and kept
that floor through a table after the move, which nothing needed.)

The tests are laid out the same way: one folder per floor (and ``package``,
``launchers`` and ``vm`` beyond them), each a package, no test file at the top
and no two test files of one name.  A helper that several test folders use
sits in ``tests/support/`` (a package holding no test: each of its modules
serves two folders or more, directly or through another support module); a
helper that one folder uses sits beside that folder's tests and is used from
nowhere else; helpers are imported relatively, never as ``tests.*``; at most
:data:`MAX_LOOSE_TEST_MODULES` modules stay at the top of ``tests/``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Collection, Dict, FrozenSet, List, Mapping, Optional, Set, Tuple

import pytest

from ..support import child_cold
from ..support.childproc import run_in_child
from ..support.import_scan import BUILT, PACKAGE, runtime_nodes
from ..support.import_scan import all_modules as _modules
from ..support.import_scan import package_imports as _package_imports

README = Path(__file__).resolve().parents[2] / "README.md"
TESTS = Path(__file__).resolve().parents[1]

#: The floors, bottom up: a folder's name, or ``values``/``entry`` for the
#: modules at the top of the package.
FLOORS = (
    "values",
    "_os",
    "discovery",
    "planner",
    "records",
    "binding",
    "advisor",
    "integrations",
    "cli",
    "entry",
)

_BELOW_BINDING = frozenset({"values", "_os", "discovery", "planner", "records"})

#: Floor -> the floors its modules may import (their own included).
MAY_IMPORT: Dict[str, FrozenSet[str]] = {
    "values": frozenset({"values"}),
    "_os": frozenset({"values", "_os"}),
    "discovery": frozenset({"values", "_os", "discovery"}),
    "planner": frozenset({"values", "planner"}),
    # The store reads the record's file and this machine (through discovery);
    # it neither plans nor binds: mode advised hands the planner plain values.
    "records": frozenset({"values", "_os", "discovery", "records"}),
    "binding": _BELOW_BINDING | {"binding"},
    "advisor": _BELOW_BINDING | {"binding", "advisor"},
    "integrations": _BELOW_BINDING | {"binding", "advisor", "integrations"},
    "cli": frozenset(FLOORS) - {"entry"},
    "entry": frozenset(FLOORS),
}

#: The pure modules beyond the planner's: the rule that turns measurements
#: into advice, and the advice record as values -- the values an advice holds,
#: the machine fingerprint and staleness, the record's JSON, the rules a record
#: must keep, and the text report ``str(advice)`` renders -- and ``pynumabind
#: report``'s own: its document, its cross-checks, its redaction and its text.
#: Not :mod:`pynumabind.records.advice`: ``Advice.save`` writes the record.
PURE_NAMED: FrozenSet[str] = frozenset(
    {
        "advisor.rule",
        "records.values",
        "records._machine",
        "records._json",
        "records._validate",
        "records.report",
        # The report's values, cross-checks, redaction and text (pynumabind report).
        "cli._report._document",
        "cli._report._checks",
        "cli._report._redact",
        "cli._report._text",
    }
)

#: On the values floor by where they sit, but no pure module's business: the
#: cffi build script (it compiles) and the module it builds (libnuma's ABI).
BUILD: FrozenSet[str] = frozenset({"_libnuma_build"}) | BUILT

#: All a pure module may import from outside the package: none does I/O (``hashlib``
#: digests bytes in memory: the records' machine type names its file by one).
PURE_STDLIB: FrozenSet[str] = frozenset(
    {
        "__future__",
        "collections",  # collections.abc: the abstract base classes isinstance checks against
        "typing",
        "typing_extensions",
        "dataclasses",
        "math",
        "json",
        "re",
        "functools",
        "hashlib",
    }
)

#: Built-ins that read, write or run code: a pure module calls none.
IO_BUILTINS: FrozenSet[str] = frozenset(
    {"open", "print", "input", "exec", "eval", "compile", "__import__", "breakpoint"}
)

#: The top-level modules that are entry points, not values.
ENTRY: FrozenSet[str] = frozenset({"__init__", "__main__"})

#: What ``import pynumabind`` itself loads: the fork-safety lock must exist
#: before the first lazy import (see pynumabind._os.forksafe).
PACKAGE_EAGER: Set[str] = {"_os", "_os.forksafe", "_version"}

#: At most this many modules of its own at the top of the package, the built
#: cffi module aside (:data:`BUILT`: written beside the sources by the build and
#: git-ignored; an editable install has it, a fresh clone before ``pip install``
#: does not).  The eleventh and twelfth: ``_weights``, weighted interleave's
#: values, which the options, the environment's reader, the planner and the
#: binding all read; and ``_record``, the value classes' decorator, which every
#: floor's values use.  The thirteenth: ``_keywords``, the public fronts' keyword
#: TypedDicts, which ``options`` hands out on first use: a TypedDict needs
#: ``typing`` at run time, and a bind loads none of it.
MAX_TOP_LEVEL = 13


def floor(module: str) -> str:
    """The floor of ``module`` (dotted under ``pynumabind``), read from where it sits."""
    head, dot, _ = module.partition(".")
    if dot or (PACKAGE / head).is_dir():
        return head
    return "entry" if module in ENTRY else "values"


def pure_modules() -> FrozenSet[str]:
    """Every planner module, and :data:`PURE_NAMED`."""
    return frozenset(m for m in _modules() if floor(m) == "planner") | PURE_NAMED


def pure_may_import(target: str, pure: FrozenSet[str]) -> bool:
    """Whether a pure module may import ``target``: a value (not :data:`BUILD`), or a pure one."""
    return (floor(target) == "values" and target not in BUILD) or target in pure


def _graph(lazy: bool = True) -> Dict[str, Set[str]]:
    """Module -> the package's modules it imports (``lazy=False``: when it is imported)."""
    modules = _modules()
    graph = {module: _package_imports(module, modules, lazy=lazy) for module in modules}
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


def impurities(graph: Mapping[str, Set[str]], pure: FrozenSet[str]) -> List[str]:
    """Every import of a pure module that reaches beyond the values and the pure modules."""
    out = []
    for module in sorted(pure & set(graph)):
        for target in sorted(graph[module]):
            if not pure_may_import(target, pure):
                out.append(f"{module} (pure) imports {target} ({floor(target)})")
    return out


def io_uses(source: str) -> List[str]:
    """Each place ``source`` imports I/O from outside the package or calls an I/O built-in."""
    found: List[Tuple[int, str]] = []
    for node in runtime_nodes(ast.parse(source)):
        names: List[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        for name in names:
            top = name.split(".")[0]
            if top != "pynumabind" and top not in PURE_STDLIB:
                found.append((node.lineno, f"imports {name}"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in IO_BUILTINS:
                found.append((node.lineno, f"calls {node.func.id}()"))
    return [f"line {line}: {what}" for line, what in sorted(found)]


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
    top = {p.stem for p in PACKAGE.glob("*.py")} - BUILT  # an installed package has them
    assert ENTRY <= top
    assert len(top) <= MAX_TOP_LEVEL, sorted(top)
    assert PURE_NAMED <= set(_modules())
    assert {floor(m) for m in _modules()} <= set(FLOORS)


#: The test folders that test no single floor: the package as a whole (its
#: layers, public names, docs and site), the recipes under real launchers,
#: and the QEMU guest (which tests every floor on a multi-node kernel).
TESTS_BEYOND_FLOORS = frozenset({"package", "launchers", "vm"})


def test_the_tests_are_laid_out_like_the_code() -> None:
    """One test folder per floor, named as the package's: no test file left at the top."""
    with_tests = {p.parent.name for p in TESTS.glob("*/test_*.py")}
    floors = {f for f in FLOORS if f != "entry"}
    assert with_tests - TESTS_BEYOND_FLOORS == floors, sorted(with_tests)
    assert not sorted(TESTS.glob("test_*.py")), "a test file at the top of tests/"
    names = [p.name for p in TESTS.rglob("test_*.py") if "vm" not in p.relative_to(TESTS).parts]
    dup = sorted({n for n in names if names.count(n) > 1})
    assert not dup, f"test files share a name (a file name alone should find one): {dup}"


# ------------------------------------------------------------ the tests' helpers

#: The package of the helpers that several test folders use.
SUPPORT = "support"

#: At most this many modules at the top of tests/, ``__init__`` and ``conftest`` included.
MAX_LOOSE_TEST_MODULES = 6


def modules_of_tests() -> Dict[str, Path]:
    """Every module under tests/, by its dotted name below ``tests`` (``binding.child_binding``;
    a package's own file as ``binding.__init__``)."""
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        parts = path.relative_to(TESTS).with_suffix("").parts
        if not any(part.startswith(".") or part == "__pycache__" for part in parts):
            found[".".join(parts)] = path
    return found


def folder_of(module: str) -> str:
    """The folder of tests/ that ``module`` sits in, at any depth; ``""`` at the top."""
    head, dot, _ = module.partition(".")
    return head if dot else ""


def uses_of(module: str, source: str, modules: Collection[str]) -> Set[str]:
    """The modules of tests/ that ``module`` imports, relatively (lazy imports too), or
    names by file beside it (``"_child.py"``: a script it runs by path).

    An absolute import of ``tests`` is returned as ``"tests (absolute)"``: the
    helpers are imported relatively.
    """
    package = module.split(".")[:-1]
    used: Set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level and node.level - 1 <= len(package):
            base = package[: len(package) - (node.level - 1)]
            target = base + (node.module.split(".") if node.module else [])
            for alias in node.names:  # a module of the package, or the package's name
                named = [*target, alias.name]
                for parts in (named, [*named, "__init__"], target, [*target, "__init__"]):
                    if ".".join(parts) in modules:
                        used.add(".".join(parts))
                        break
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            if any((name or "").split(".")[0] == "tests" for name in names):
                used.add("tests (absolute)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.endswith(".py") and "/" not in node.value:
                sibling = ".".join([*package, node.value[: -len(".py")]])
                if sibling in modules:
                    used.add(sibling)
    return used - {module}


def layout_problems(uses: Mapping[str, Set[str]]) -> List[str]:
    """What breaks the tests' layout, given each module of tests/ and what it uses.

    A module of :data:`SUPPORT` must serve two test folders or more (through
    other support modules too, or the top ``conftest``, whose hooks serve
    them all) and hold no test; any other module may be
    used only from its own folder; no module imports ``tests`` absolutely.
    """
    problems = [f"{m} imports tests absolutely" for m in uses if "tests (absolute)" in uses[m]]
    users: Dict[str, Set[str]] = {m: set() for m in uses}
    for module, used in uses.items():
        for target in used & set(users):
            users[target].add(module)
    support = sorted(m for m in uses if folder_of(m) == SUPPORT)
    served = {m: {folder_of(u) for u in users[m]} - {SUPPORT, ""} for m in support}
    every = {folder_of(m) for m in uses} - {SUPPORT, ""}
    for module in support:  # the top conftest's hooks act on every folder's tests
        if "conftest" in users[module]:
            served[module] |= every
    changed = True
    while changed:  # a support module serves whatever its support importers serve
        changed = False
        for module in support:
            more = set().union(*(served[u] for u in users[module] if u in served))
            if not more <= served[module]:
                served[module] |= more
                changed = True
    for module in support:
        if module.rpartition(".")[2].startswith("test_"):
            problems.append(f"{module}: a test file in {SUPPORT}/")
        elif not module.endswith(".__init__") and len(served[module]) < 2:
            problems.append(
                f"{module} serves {sorted(served[module]) or 'no folder'}: "
                f"only what several test folders use goes in {SUPPORT}/"
            )
    for module in sorted(set(uses) - set(support)):
        others = sorted({folder_of(u) or "the top" for u in users[module]} - {folder_of(module)})
        if others:
            where = folder_of(module) or "the top of tests/"
            problems.append(
                f"{module} ({where}) is used from {others}: a helper that several folders "
                f"use goes in {SUPPORT}/, one that a single folder uses beside its tests"
            )
    return problems


def test_the_tests_share_helpers_through_support_and_keep_the_rest_beside_them() -> None:
    modules = modules_of_tests()
    uses = {m: uses_of(m, path.read_text(encoding="utf-8"), modules) for m, path in modules.items()}
    assert f"{SUPPORT}.__init__" in modules, f"tests/{SUPPORT}/ is no package"
    assert len([m for m in modules if folder_of(m) == SUPPORT]) > 5  # the scan found it
    assert layout_problems(uses) == []


def test_every_test_folder_is_a_package_and_the_top_stays_small() -> None:
    folders = {path.parent for path in modules_of_tests().values()}
    not_packages = [f.relative_to(TESTS) for f in folders if not (f / "__init__.py").is_file()]
    assert not_packages == []  # relative imports need every folder a package
    loose = sorted(path.name for path in TESTS.glob("*.py"))
    assert len(loose) <= MAX_LOOSE_TEST_MODULES, loose


def test_the_layout_checks_catch_a_misplaced_helper() -> None:
    modules = {
        "support.childproc",
        "support._child",
        "support.lonely",
        "support.test_x",
        "binding.test_bind",
        "binding.child_binding",
        "cli.test_cli",
        "cli.child_cli",
        "planner.test_plans",
    }
    source = (
        "from ..support.childproc import run_in_child\n"
        "from . import child_binding\n"
        "from ..cli import child_cli\n"
        "def f():\n"
        "    from tests.support import lonely\n"
    )
    assert uses_of("binding.test_bind", source, modules) == {
        "support.childproc",
        "binding.child_binding",
        "cli.child_cli",
        "tests (absolute)",
    }
    assert uses_of("support.childproc", 'ENTRY = "_child.py"', modules) == {"support._child"}
    uses = {
        "binding.test_bind": {"support.childproc", "binding.child_binding", "cli.child_cli"},
        "cli.test_cli": {"support.childproc", "cli.child_cli"},
        "planner.test_plans": {"support.lonely", "tests (absolute)"},
        "support.childproc": {"support._child"},
        "support._child": set(),
        "support.lonely": set(),
        "support.test_x": set(),
        "binding.child_binding": set(),
        "cli.child_cli": set(),
        "conftest": {"support.hooks"},
        "support.hooks": set(),  # the top conftest serves all
    }
    assert layout_problems(uses) == [
        "planner.test_plans imports tests absolutely",
        "support.lonely serves ['planner']: only what several test folders use goes in support/",
        "support.test_x: a test file in support/",
        "cli.child_cli (cli) is used from ['binding']: a helper that several folders use goes "
        "in support/, one that a single folder uses beside its tests",
    ]


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
    assert "binding" not in _package_imports("binding._verify")
    # Relative imports inside subpackages resolve to the right module.
    assert {"options", "planner._overrides"} <= _package_imports("planner._request")
    assert {"_os.libnuma", "binding._apply"} <= _package_imports("binding")
    assert "integrations._common" in _package_imports("integrations.vllm")
    assert "integrations.vllm" in _package_imports("integrations")  # lazy, in vllm_plugin
    assert "_version" in _package_imports("cli._parser")  # from .._version import __version__
    assert "discovery" in _package_imports("cli")  # from .. import discovery
    assert "records._file" in _package_imports("records.advice")  # lazy, in Advice.save


def test_the_checks_catch_a_wrong_floor_and_a_lazy_cycle() -> None:
    # What these checks once found: the planner importing _environ, the
    # binding importing the advisor for the advice record, and the
    # integrations package and its vllm module importing each other.
    wrong = {"planner._request": {"discovery._environ"}, "discovery._environ": set()}
    assert violations(wrong) == [
        "planner._request (planner) imports discovery._environ (discovery)"
    ]
    assert violations({"binding": {"advisor.record"}}) == [
        "binding (binding) imports advisor.record (advisor)"
    ]
    assert violations({"records.store": {"planner", "discovery"}}) == [
        "records.store (records) imports planner (planner)"
    ]
    looped = {"integrations": {"integrations.vllm"}, "integrations.vllm": {"integrations"}}
    assert cycle(looped) == ["integrations", "integrations.vllm", "integrations"]


def test_the_purity_checks_catch_an_impure_import_and_io() -> None:
    graph = {"advisor.rule": {"_os.sysfs", "records.values", "model"}}
    assert impurities(graph, PURE_NAMED) == ["advisor.rule (pure) imports _os.sysfs (_os)"]
    # The advice itself is not pure (Advice.save writes the record): the
    # record's JSON reads its fields without importing it.
    assert impurities({"records._json": {"records.advice"}}, PURE_NAMED) == [
        "records._json (pure) imports records.advice (records)"
    ]
    assert impurities({"records.values": {"_libnuma_build", "errors"}}, PURE_NAMED) == [
        "records.values (pure) imports _libnuma_build (values)"
    ]
    source = (
        "import os\n"
        "import json\n"
        "from subprocess import run\n"
        "from typing import TYPE_CHECKING\n"
        "from . import values\n"
        "if TYPE_CHECKING:\n"
        "    import io\n"
        "def f():\n"
        "    return open('x'), print(1), values.Spread\n"
    )
    assert io_uses(source) == [
        "line 1: imports os",
        "line 3: imports subprocess",
        "line 9: calls open()",
        "line 9: calls print()",
    ]


# ------------------------------------------------------------ the package


def test_no_module_imports_a_floor_above_it() -> None:
    assert violations(_graph()) == []


def test_the_binding_reads_the_advice_record_from_below_it() -> None:
    # Mode advised, resolved in every worker that binds: the store, not the advisor.
    assert "records.store" in _package_imports("binding")  # lazy, in bind_current_process
    assert not {m for m in _package_imports("binding") if floor(m) == "advisor"}


def test_pure_modules_import_only_values_and_each_other() -> None:
    assert impurities(_graph(), pure_modules()) == []


@pytest.mark.parametrize("module", sorted(pure_modules()))
def test_pure_modules_do_no_io(module: str) -> None:
    assert io_uses(_modules()[module].read_text(encoding="utf-8")) == []


def test_no_import_cycle_lazy_imports_included() -> None:
    graph = _graph()
    # A module imports its package's __init__ implicitly; only statements count.
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found or [])


#: Imported each in a fresh interpreter: the values, and the pure modules (the
#: planner's through its package, which imports every one of them).
BOTTOM = [
    *sorted(m for m in _modules() if floor(m) == "values" and m not in BUILT),
    "planner",
    *sorted(PURE_NAMED),
]


def _parents(module: str) -> Set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _closure(module: str, graph: Mapping[str, Set[str]]) -> Set[str]:
    """``module``, what it imports in ``graph`` at any depth, and the packages that hold them."""
    closure = {module} | _parents(module)
    todo = list(closure)
    while todo:
        for below in graph[todo.pop()]:
            for name in {below} | _parents(below):
                if name not in closure:
                    closure.add(name)
                    todo.append(name)
    return closure


def _names(found: List[str]) -> Set[str]:
    return {name[len("pynumabind.") :] for name in found}


@pytest.mark.parametrize("module", BOTTOM)
def test_bottom_floors_and_pure_modules_load_only_what_they_may(module: str) -> None:
    found, _ = run_in_child(child_cold.pynumabind_modules_loaded_by, module)
    packages, loaded = _names(found["packages"]), _names(found["module"])
    # What its import runs, at any depth, and the packages that hold them: a
    # lazy import (inside a function) is loaded on first use, not here.
    closure = _closure(module, _graph(lazy=False))
    if not _parents(module):
        assert loaded == (closure - {"__init__"}) | PACKAGE_EAGER
    else:
        assert loaded <= (closure - {"__init__"}) | PACKAGE_EAGER
    # What the module itself loads, beyond its packages (their own imports are
    # their floor's business): it must be loaded here, not by a package.
    added = loaded - packages
    assert module in added or module in PACKAGE_EAGER, sorted(packages)
    pure = pure_modules()
    if module in pure:
        wrong = {name for name in added if not pure_may_import(name, pure)}
    else:
        wrong = {name for name in added if floor(name) not in MAY_IMPORT[floor(module)]}
    assert not wrong, sorted(added)
