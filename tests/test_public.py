"""The public surface: one table (``_EXPORTS``) makes ``__all__``, the lazy exports
and, through this test, the ``TYPE_CHECKING`` imports type checkers see."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Dict, Tuple

import pytest

import child_cold
import pynumabind
from childproc import run_in_child

SOURCE = Path(pynumabind.__file__)


def _type_checking_imports() -> Dict[str, Tuple[str, str]]:
    """name -> (module, attribute) imported under ``if TYPE_CHECKING:``."""
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )
    found: Dict[str, Tuple[str, str]] = {}
    for node in block.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "typing":
            continue  # the annotations' names, imported only for type checkers
        assert isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        for alias in node.names:
            found[alias.asname or alias.name] = (node.module, alias.name)
    return found


def test_all_is_the_export_table() -> None:
    assert sorted(pynumabind.__all__) == sorted(["__version__", *pynumabind._EXPORTS])
    assert len(set(pynumabind.__all__)) == len(pynumabind.__all__)


def test_type_checking_imports_match_the_export_table() -> None:
    assert _type_checking_imports() == pynumabind._EXPORTS


@pytest.mark.parametrize("name", sorted(pynumabind._EXPORTS))
def test_every_export_resolves_to_its_module_attribute(name: str) -> None:
    module, attribute = pynumabind._EXPORTS[name]
    expected = getattr(importlib.import_module(f"pynumabind.{module}"), attribute)
    assert getattr(pynumabind, name) is expected


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        pynumabind.no_such_name  # noqa: B018


def test_star_import_gives_exactly_all() -> None:
    names, _ = run_in_child(child_cold.star_import_names)
    assert names == sorted(pynumabind.__all__)
