"""One boundary for this process's own state: ``pynumabind._os.proc`` (see its docstring).

The rules, checked on the source of every module of the package (subpackages
included), so that they fail the day someone writes a reader of their own:

1. **Only ``_proc`` reads the process's state.**  No other module has a
   string naming ``/proc/self``, ``/proc/thread-self`` or ``/sys/fs/cgroup``
   (docstrings aside: they may say where things come from), or calls
   ``os.sched_getaffinity``/``os.sched_setaffinity``, or asks libnuma for
   the allowed memory nodes (``get_mems_allowed``) except through ``_proc``.
2. **Nobody else translates ``OSError``.**  An ``except`` clause naming
   ``OSError`` or any built-in subclass of it (``FileNotFoundError``,
   ``ProcessLookupError`` ...) appears only in ``_proc`` and in the modules
   of :data:`MAY_CATCH_OSERROR`, each for files or calls that are *not* this
   process's state.  Everywhere else a failure from ``_proc`` is caught as
   the typed error it is.
3. **Discovery depends on ``_proc`` only**: the discovery-side modules import
   neither the apply layer nor libnuma.

The checkers are also run on small sources that break each rule: a checker
that finds nothing there could not fail.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path
from typing import Dict, List, Set

import pytest

import pynumabind

PACKAGE = Path(pynumabind.__file__).parent

#: Modules that may catch OSError, and why: none of these reads this
#: process's own state (rule 1 makes sure).
MAY_CATCH_OSERROR: Dict[str, str] = {
    "_os.proc": "the boundary itself: translates every failure once",
    "_os.textfile": "files of a sysfs tree a user may name (SysfsReader: the one policy)",
    "_os.pci": "/proc/bus/pci/devices, which describes the machine (optional)",
    "_os.meminfo": "/proc/meminfo, which describes the machine (optional)",
    "_os.cpuinfo": "/proc/cpuinfo, which describes the machine (optional)",
    "_os.kfd": "files of a sysfs tree a user may name (the KFD topology)",
    "_os.libnuma": "dlopen of libnuma.so.1 (LibnumaUnavailableError)",
    "_os.weights": "writing the kernel's weighted-interleave weights, asked for explicitly",
    "_os.pages": (
        "/proc/kpageflags, the NUMA balancing switch and the memory blocks in sysfs, which "
        "describe the machine (optional: unreadable means the node stays unknown)"
    ),
    "discovery": "the topology snapshot file a user names",
    "cli": "the CLI's own files (--output), stdout, and execvp",
    "cli._report": "the report's --output file (checked before the report runs, then written)",
    "cli._parser": "the terminal's width for help text (os.get_terminal_size: none is 80 columns)",
    "_os.kernel": "/proc/sys and /sys/kernel settings, which describe the machine (optional)",
    "_os.nvidia_smi": "starting nvidia-smi and reading its pipes (the report only)",
    # The CLI's check command starts worker processes over pipes.
    "cli._check": "starting the check command's workers and reading their pipes",
    # advise's measurement
    "advisor._copies": "dlopen of the CUDA runtime library (libcudart)",
    "_os.cudart": "dlopen of the CUDA runtime library (libcudart), for pinning host buffers",
    "binding.host": "mmap of a new host buffer (MemoryError naming the size)",
    "cli._advise": "the --plot file the user names",
    "records._file": "the advice record file (read, and written atomically) and its directory",
}

#: Where the process's own state lives.
STATE_PATHS = ("/proc/self", "/proc/thread-self", "/sys/fs/cgroup")
STATE_CALLS = {("os", "sched_getaffinity"), ("os", "sched_setaffinity")}

#: OSError and every built-in subclass, by name (IOError is OSError).
OSERROR_NAMES: Set[str] = {
    name
    for name in dir(builtins)
    if isinstance(getattr(builtins, name), type) and issubclass(getattr(builtins, name), OSError)
}

#: Discovery-side modules, and what they must not import.
DISCOVERY = (
    "_os.sysfs",
    "_os.pci",
    "_os.meminfo",
    "_os.caches",
    "_os.cpuinfo",
    "_os.hmat",
    "_os.kfd",
    "_os.nvml",
    "_os.textfile",
    "_os.proc",
    "discovery",
    "discovery._visible",
    "discovery._environ",
)
APPLY_SIDE = {"_os.threads", "binding._apply", "binding._verify", "_os.libnuma", "binding"}


def _modules() -> Dict[str, Path]:
    """Every module of the package by dotted name under it (``planner._cpus``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _docstrings(tree: ast.AST) -> Set[int]:
    """ids of the string nodes that are docstrings."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                found.add(id(body[0].value))
    return found


def state_reads(source: str) -> List[str]:
    """Rule 1: each place ``source`` reads this process's state itself."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if any(path in node.value for path in STATE_PATHS):
                found.append(f"line {node.lineno}: names {node.value!r}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in STATE_CALLS:
                found.append(f"line {node.lineno}: calls {node.value.id}.{node.attr}")
        if isinstance(node, ast.Attribute) and node.attr == "get_mems_allowed":
            found.append(f"line {node.lineno}: asks libnuma for get_mems_allowed")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            names = {alias.name for alias in node.names}
            if names & {attr for _, attr in STATE_CALLS}:
                found.append(f"line {node.lineno}: imports {sorted(names)} from os")
    return found


def oserror_handlers(source: str) -> List[str]:
    """Rule 2: each ``except`` clause of ``source`` that catches OSError or a subclass."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ExceptHandler) or node.type is None:
            continue
        kinds = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        for kind in kinds:
            name = kind.attr if isinstance(kind, ast.Attribute) else getattr(kind, "id", None)
            if name in OSERROR_NAMES:
                found.append(f"line {node.lineno}: except {name}")
    return found


# ------------------------------------------------------ the checkers can fail


def test_the_checkers_find_each_kind_of_violation() -> None:
    source = '''
"""Reads /proc/self/status (a docstring may say so)."""
import os
from os import sched_getaffinity
from . import _libnuma, _threads

def f():
    """Also /sys/fs/cgroup here: fine."""
    try:
        with open("/proc/self/status") as handle:
            return handle.read()
    except OSError:
        return os.sched_getaffinity(0)

def g(tid):
    try:
        return open(f"/proc/thread-self/comm").read() + str(_libnuma.get_mems_allowed())
    except (ValueError, ProcessLookupError):
        return "/sys/fs/cgroup" + "x"
    except IOError:
        pass
    except KeyError:
        pass
'''
    reads = state_reads(source)
    assert len(reads) == 6, reads  # import, open, sched_getaffinity, thread-self, libnuma, cgroup
    assert not any("docstring" in read or "here: fine" in read for read in reads)
    assert oserror_handlers(source) == [
        "line 12: except OSError",
        "line 18: except ProcessLookupError",
        "line 20: except IOError",
    ]
    clean = (
        "from .errors import PynumabindError\ntry:\n    pass\nexcept PynumabindError:\n    pass\n"
    )
    assert state_reads(clean) == [] and oserror_handlers(clean) == []


def test_the_scan_sees_every_module_subpackages_included() -> None:
    modules = _modules()
    assert {"_os.proc", "_os.sysfs", "_os.threads", "planner", "planner._cpus"} <= set(modules)
    assert any(name.startswith("integrations") for name in modules)
    # _proc itself breaks rule 1 on purpose: the scan must see that.
    assert state_reads(modules["_os.proc"].read_text(encoding="utf-8"))


def test_the_tables_name_modules_that_exist() -> None:
    # A module renamed or moved must not leave its old name here, where it would
    # excuse nothing and check nothing.
    stale = (set(MAY_CATCH_OSERROR) | set(DISCOVERY) | APPLY_SIDE) - set(_modules())
    assert not stale, sorted(stale)


# ------------------------------------------------------------------ the rules


@pytest.mark.parametrize("module", sorted(set(_modules()) - {"_os.proc"}))
def test_only_proc_reads_the_process_state(module: str) -> None:
    assert state_reads(_modules()[module].read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("module", sorted(set(_modules()) - set(MAY_CATCH_OSERROR)))
def test_no_other_module_translates_oserror(module: str) -> None:
    assert oserror_handlers(_modules()[module].read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("module", sorted(MAY_CATCH_OSERROR))
def test_each_module_that_may_catch_oserror_exists_and_does(module: str) -> None:
    """The table names no module that is gone, nor one that no longer needs the leave."""
    assert module in _modules()
    assert oserror_handlers(_modules()[module].read_text(encoding="utf-8"))


@pytest.mark.parametrize("module", DISCOVERY)
def test_discovery_depends_on_proc_not_on_the_apply_layer(module: str) -> None:
    from ..support.import_scan import (
        package_imports as _package_imports,  # resolves relative imports in subpackages
    )

    imports = _package_imports(module)
    allowed_libnuma = {"_os.libnuma"} if module == "_os.proc" else set()  # get_mempolicy, lazily
    assert imports & APPLY_SIDE <= allowed_libnuma
