"""The OS is read only under ``_os/``: no other module names an OS path or an OS file.

Every module of the package outside ``src/pynumabind/_os/`` is read, and
what counts is a string in its *code*: a literal, or an f-string taken with
each field as ``{}`` (``f"node{node}"`` is ``node{}``); consecutive literal
arguments of one call or items of one tuple also count joined by ``/``, as
``os.path.join`` or a sysfs reader would join them.  Docstrings are left
out: a docstring that says where a fact comes from (``nodeN/meminfo``)
describes a rule, it reads nothing.  Comments are not code.  A string fails
when it names:

* a ``/proc`` or ``/sys`` path: ``/proc`` or ``/sys`` starting a path,
  anywhere in the string.  A message or help text that names one (``instead
  of /sys``) takes it from :mod:`pynumabind._os` (``SYSFS_ROOT``,
  ``PROC_ROOT``), like a default ``sysfs_root``;
* a sysfs directory that a reader of ``_os`` walks: ``devices/system``,
  ``bus/pci`` or ``class/kfd``;
* a memory or CPU file: ``meminfo`` or ``cpuinfo``, as a word;
* a cache file: a path part ``cache`` or ``index<N>`` (``index{}``), or
  ``shared_cpu_list``/``shared_cpu_map``;
* an HMAT file: the directory ``access<N>/initiators`` (``access{}``), or
  ``read_bandwidth``, ``write_bandwidth``, ``read_latency`` or
  ``write_latency`` as a whole word.  (``access0`` alone is also how the
  advice report labels an access class, and ``initiators`` a key of the
  advice record's JSON and a column of its report: each counts as a file
  only joined to the other.)

The scanner is also run on a small source that breaks each rule and on one
that breaks none: a scanner that finds nothing there could not fail.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Set

import pytest

import pynumabind

PACKAGE = Path(pynumabind.__file__).parent
OS_FOLDER = PACKAGE / "_os"

#: (what it names, the pattern), checked on each string.
RULES = (
    ("a /proc or /sys path", re.compile(r"(?<![\w.~-])/(?:proc|sys)(?![\w.-])")),
    ("a sysfs directory", re.compile(r"(?<![\w.-])(?:devices/system|bus/pci|class/kfd)(?![\w.-])")),
    ("a meminfo or cpuinfo file", re.compile(r"(?<![A-Za-z0-9])(?:mem|cpu)info(?![A-Za-z0-9])")),
    ("a cache file", re.compile(r"(?:^|/)(?:cache|index(?:\d+|\{\}))(?:/|$)")),
    ("a cache file", re.compile(r"(?<!\w)shared_cpu_(?:list|map)(?!\w)")),
    ("an HMAT file", re.compile(r"(?:^|/)access(?:\d+|\{\}|N)/initiators(?:/|$)")),
    ("an HMAT file", re.compile(r"(?<!\w)(?:read|write)_(?:bandwidth|latency)(?!\w)")),
)


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


def _text(node: ast.AST) -> str:
    """A literal's text, an f-string's with ``{}`` for each field; "" for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value if isinstance(part, ast.Constant) else "{}" for part in node.values
        )
    return ""


def _strings(source: str) -> Iterator[tuple]:
    """(line, text) of every string in the code of ``source``, and of each run of them joined."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    inside_fstrings = {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
    }
    for node in ast.walk(tree):
        if id(node) in docs or id(node) in inside_fstrings:
            continue
        text = _text(node)
        if text:
            yield node.lineno, text
        items = node.args if isinstance(node, ast.Call) else getattr(node, "elts", None)
        if isinstance(node, (ast.Call, ast.Tuple, ast.List)) and items:
            run: List[str] = []
            for item in [*items, None]:
                part = _text(item) if item is not None and id(item) not in docs else ""
                if part:
                    run.append(part)
                    continue
                if len(run) > 1:
                    yield node.lineno, "/".join(run)
                run = []


def os_names(source: str) -> List[str]:
    """Each place the code of ``source`` names an OS path or file, as ``line N: what 'text'``."""
    found = []
    for line, text in _strings(source):
        for what, pattern in RULES:
            if pattern.search(text):
                found.append(f"line {line}: {what} {text!r}")
                break
    return sorted(set(found), key=lambda entry: (int(entry.split()[1].rstrip(":")), entry))


def _modules_outside_os() -> Dict[str, Path]:
    return {
        str(path.relative_to(PACKAGE)): path
        for path in sorted(PACKAGE.rglob("*.py"))
        if OS_FOLDER not in path.parents
    }


# ------------------------------------------------------ the scanner can fail


VIOLATIONS = '''
"""Reads /proc/meminfo and nodeN/access0/initiators (a docstring may say so)."""
import os

DEFAULT = "/sys"  # line 5


def f(node, cpu, root="/sys/devices"):  # line 8
    """Also cpuN/cache/index3/size here: fine."""
    with open("/proc/cpuinfo") as handle:  # line 10
        handle.read()
    os.path.join(root, "devices", "system", "node", f"node{node}", "meminfo")  # line 12
    reader.text("devices", "system", "cpu", f"cpu{cpu}", "cache", f"index{cpu}", "size")
    reader.integer(*base, f"access{cpu}", "initiators", "read_bandwidth")  # line 14
    x = ("cpu", f"cpu{cpu}", "cache")  # line 15
    y = f"{root}/shared_cpu_list"  # line 16
    z = "write_latency"  # line 17
    message = f"(per /proc)"  # line 18
    return "bus/pci/devices"  # line 19
'''

CLEAN = '''
"""Where facts come from: /proc/meminfo, /sys/devices/system/node, cpuinfo."""
from ._os import PROC_ROOT, SYSFS_ROOT

HEADS = ["memory", "class", "initiators", "read MB/s"]  # the report's columns
ROW = [f"node {HEADS}", f"access{HEADS}", ",".join(HEADS)]
KEYS = {"read_bandwidth_mbs": 1, "cache_dir": ".cache", "dev": "/dev/shm", "x": "cached"}


def g(notes, root=SYSFS_ROOT):
    # A comment may name /sys/devices/system/cpu/cpu0/cache/index3/size.
    notes.append(f"L3 cache groups unknown; the last-level cache ({root}) or {PROC_ROOT}")
    return "mysys/procfile", "a/sys_b", "accessible", "index", "readme_latency"
'''


def test_the_scanner_finds_each_kind_of_name_and_skips_docstrings() -> None:
    found = os_names(VIOLATIONS)
    lines = sorted({int(entry.split()[1].rstrip(":")) for entry in found})
    assert lines == [5, 8, 10, 12, 13, 14, 15, 16, 17, 18, 19], found
    assert not any("docstring" in entry or "here: fine" in entry for entry in found)
    whats = {entry.split(": ", 1)[1].rsplit(" '", 1)[0] for entry in found}
    assert whats == {
        "a /proc or /sys path",
        "a sysfs directory",
        "a meminfo or cpuinfo file",
        "a cache file",
        "an HMAT file",
    }, found
    assert os_names(CLEAN) == []


def test_the_scan_covers_the_package_and_leaves_out_only_os() -> None:
    modules = _modules_outside_os()
    assert {"discovery/__init__.py", "advisor/__init__.py", "cli/__init__.py"} <= set(modules)
    assert not any(name.startswith("_os/") for name in modules)
    # The readers themselves name their files, as they must: the scan sees that.
    assert os_names((OS_FOLDER / "meminfo.py").read_text(encoding="utf-8"))
    assert os_names((OS_FOLDER / "hmat.py").read_text(encoding="utf-8"))
    assert os_names((OS_FOLDER / "caches.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize("module", sorted(_modules_outside_os()))
def test_no_module_outside_os_names_an_os_path_or_file(module: str) -> None:
    source = _modules_outside_os()[module].read_text(encoding="utf-8")
    assert os_names(source) == []
