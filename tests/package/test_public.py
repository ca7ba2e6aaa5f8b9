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


def test_dir_shows_only_the_public_names() -> None:
    shown = dir(pynumabind)
    assert shown == sorted(pynumabind.__all__)
    for leaked in ("TYPE_CHECKING", "annotations", "importlib", "_forksafe", "_os"):
        assert leaked not in shown


@pytest.mark.parametrize("name", sorted(pynumabind._EXPORTS))
def test_every_export_comes_from_a_public_module(name: str) -> None:
    module, _ = pynumabind._EXPORTS[name]
    assert not any(part.startswith("_") for part in module.split(".")), module


def test_the_placement_errors_are_exported_and_typed() -> None:
    assert issubclass(pynumabind.NotABufferError, pynumabind.ConfigError)
    assert issubclass(pynumabind.NotABufferError, TypeError)
    assert issubclass(pynumabind.ReadOnlyBufferError, pynumabind.ConfigError)
    assert issubclass(pynumabind.PlacementSyscallError, pynumabind.NumaSyscallError)
    from pynumabind.binding import placement

    assert placement.NotABufferError is pynumabind.NotABufferError


def test_plan_all_is_a_plain_function_with_its_own_signature() -> None:
    import inspect

    signature = inspect.signature(pynumabind.plan_all)
    assert signature.return_annotation in ("List[Plan]", "list[Plan]")
    assert list(signature.parameters)[:4] == ["topology", "nprocs", "mode", "policy"]
    assert not hasattr(pynumabind.plan_all, "__wrapped__")
    assert pynumabind.plan_all.__name__ == "plan_all"


def test_one_word_per_concept_in_the_public_signatures() -> None:
    import inspect

    for name in ("plan", "plan_all", "plan_each", "bind_current_process", "bind_memory",
                 "memory_on", "advise"):
        parameters = inspect.signature(getattr(pynumabind, name)).parameters
        assert "memory" not in parameters and "device" not in parameters, name
        assert "devices" not in parameters, name
    assert "copies" in inspect.signature(pynumabind.advise).parameters
    fields = {f for f in pynumabind.Options.__dataclass_fields__}
    assert "policy" in fields and "memory" not in fields
