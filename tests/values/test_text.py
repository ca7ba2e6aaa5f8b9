"""The text helpers every layer shares: one rule each, in one module that imports nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, FrozenSet, List, Set

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pynumabind
from pynumabind import _text
from pynumabind._text import (
    EMPTY_IDS,
    clipped,
    counted,
    escaped,
    format_ids,
    human_bytes,
    named,
    shown,
    table,
)

PACKAGE = Path(pynumabind.__file__).parent


def test_ids_runs_and_the_empty_forms() -> None:
    assert format_ids({8, 0, 1, 2, 3}) == "0-3,8"
    assert format_ids([5]) == "5"
    assert format_ids({1, 3, 5}) == "1,3,5"
    assert format_ids(frozenset()) == EMPTY_IDS == "-"
    assert format_ids(set(), empty="") == ""
    assert format_ids(None) == "none"


@given(st.frozensets(st.integers(0, 300), max_size=40))
def test_ids_read_back_as_the_same_set(ids: FrozenSet[int]) -> None:
    out: Set[int] = set()
    for part in filter(None, format_ids(ids, empty="").split(",")):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    assert out == ids


def test_a_noun_in_the_right_number() -> None:
    assert counted(1, "rank") == "1 rank"
    assert counted(0, "rank") == "0 ranks"
    assert counted(2, "local rank") == "2 local ranks"
    assert named("node", frozenset({0})) == "node 0"
    assert named("node", frozenset({0, 1, 3})) == "nodes 0-1,3"
    assert named("CPU", frozenset({4})) == "CPU 4"


def test_a_table_aligns_its_columns_and_ends_no_line_in_blanks() -> None:
    assert table(["rank", "cpus", ""], [["0", "0-3", ""], ["10", "4", "x"]]) == (
        "rank  cpus\n0     0-3\n10    4     x"
    )
    assert table(["a"], []) == "a"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (3 << 29, "1.5 GiB"),
        (5 << 40, "5.0 TiB"),
        (3 << 50, "3072.0 TiB"),
    ],
)
def test_sizes(value: int, text: str) -> None:
    assert human_bytes(value) == text


def test_hostile_values_are_cut_short_before_a_message_quotes_them() -> None:
    assert clipped("abc", 3) == "abc"
    assert clipped("abcdef", 5) == "ab..."
    assert len(clipped("x" * 1000, 80)) == 80
    assert shown("1") == "'1'"
    long = "y" * 61
    assert shown(long) == repr("y" * 57) + "..."
    assert shown("y" * 60) == repr("y" * 60)


def _runtime_imports(tree: ast.Module) -> List[str]:
    """The imports that run: at any depth, bodies of ``if TYPE_CHECKING:`` aside."""
    found = []
    todo: List[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append("." * node.level + (node.module or ""))
        todo.extend(ast.iter_child_nodes(node))
    return found


def test_escaped_shows_what_a_terminal_would_act_on() -> None:
    assert escaped("bind: yes (node 0)") == "bind: yes (node 0)"
    forged = "verdict\n\x1b[2Jall 4 workers bound as planned\r\u2028\u202e\ud800\t"
    assert escaped(forged) == (
        "verdict\\n\\x1b[2Jall 4 workers bound as planned\\r\\u2028\\u202e\\ud800\\t"
    )
    assert escaped("a\\nb") == "a\\nb"  # a backslash stays: nothing to act on
    assert escaped("caf\u00e9 \u6771\u4eac") == "caf\u00e9 \u6771\u4eac"  # printable letters stay


@given(st.text())
def test_escaped_text_is_one_printable_line_and_escaping_again_changes_nothing(text: str) -> None:
    out = escaped(text)
    assert out.isprintable() and len(out.splitlines()) <= 1
    out.encode("utf-8")  # no lone surrogate left to fail an encoder
    assert escaped(out) == out
    if text.isprintable():
        assert out == text


def test_the_text_module_imports_nothing() -> None:
    # The bind path, the errors and the parsers all load it: it costs nothing.
    tree = ast.parse(Path(_text.__file__).read_text(encoding="utf-8"))
    assert _runtime_imports(tree) == ["__future__"]


def test_the_scan_sees_an_import_and_skips_a_type_only_one() -> None:
    source = (
        "from __future__ import annotations\n"
        "TYPE_CHECKING = False\n"
        "if TYPE_CHECKING:\n"
        "    import typing\n"
        "def f():\n"
        "    import re\n"
    )
    assert sorted(_runtime_imports(ast.parse(source))) == ["__future__", "re"]


def test_each_helper_is_defined_once_in_the_package() -> None:
    helpers = set(_text.__all__) - {"EMPTY_IDS"}
    where: Dict[str, List[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in helpers:
                where.setdefault(node.name, []).append(str(path.relative_to(PACKAGE)))
    assert where == {name: ["_text.py"] for name in helpers}


def test_a_pattern_compiles_once_on_first_use_and_acts_as_the_compiled_one() -> None:
    compiled: List[str] = []

    def compile(source: str, flags: int) -> re.Pattern[str]:
        compiled.append(source)
        return re.compile(source, flags)

    pattern = _text.Pattern(compile, r"[0-9]+", re.IGNORECASE)
    assert compiled == []  # nothing compiled until used
    match = pattern.match("12ab")
    assert match is not None and match.group(0) == "12"
    assert pattern.fullmatch("x") is None
    assert pattern.compiled() is pattern.compiled()
    assert compiled == [r"[0-9]+"]
    assert pattern.compiled().flags & re.IGNORECASE
