"""The public surface: one table (``_EXPORTS``) makes ``__all__``, the lazy exports
and, through this test, the ``TYPE_CHECKING`` imports type checkers see."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import pynumabind

from ..support import child_cold
from ..support.childproc import run_in_child

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

    for name in (
        "plan",
        "plan_all",
        "plan_each",
        "bind_current_process",
        "bind_memory",
        "memory_on",
        "advise",
    ):
        parameters = inspect.signature(getattr(pynumabind, name)).parameters
        assert "memory" not in parameters and "device" not in parameters, name
        assert "devices" not in parameters, name
    assert "copies" in inspect.signature(pynumabind.advise).parameters
    fields = {f for f in pynumabind.Options.__dataclass_fields__}
    assert "policy" in fields and "memory" not in fields


# Types a user meets in a public signature or result without having asked for
# them by name.  OptionKeywords and ArgumentKeywords are the TypedDicts behind
# ``**keywords``: their keys are Options' fields (documented there), and
# nobody builds one.
NOT_EXPORTED = {"OptionKeywords", "ArgumentKeywords"}
REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "site" / "reference.rst"


def _annotations_of(obj: object) -> List[Tuple[str, str]]:
    """(where, annotation text) for every public parameter, return, field and property."""
    import dataclasses
    import inspect

    found: List[Tuple[str, str]] = []

    def signature(where: str, func: object) -> None:
        sig = inspect.signature(func)  # type: ignore[arg-type]
        for parameter in sig.parameters.values():
            if not parameter.name.startswith("_"):
                found.append((f"{where}({parameter.name})", str(parameter.annotation)))
        found.append((f"{where} ->", str(sig.return_annotation)))

    name = getattr(obj, "__name__", "?")
    if not inspect.isclass(obj):
        signature(name, obj)
        return found
    if dataclasses.is_dataclass(obj):
        for field in dataclasses.fields(obj):
            if not field.name.startswith("_"):
                found.append((f"{name}.{field.name}", str(field.type)))
    for attribute, value in vars(obj).items():
        if attribute.startswith("_") and attribute != "__enter__":
            continue
        if isinstance(value, property) and value.fget is not None:
            returned = value.fget.__annotations__.get("return", "")
            found.append((f"{name}.{attribute}", str(returned)))
        elif inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod)):
            signature(f"{name}.{attribute}", getattr(obj, attribute))
    return found


def _pynumabind_classes() -> Dict[str, type]:
    """Every class defined in a loaded pynumabind module, by name."""
    import sys

    classes: Dict[str, type] = {}
    for module_name, module in list(sys.modules.items()):
        if module_name.split(".")[0] != "pynumabind" or module is None:
            continue
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__.split(".")[0] == "pynumabind":
                classes.setdefault(value.__name__, value)
    return classes


def _public_home(cls: type) -> str:
    """``pynumabind.NAME``, or ``pynumabind.MODULE.NAME`` for a public module whose
    ``__all__`` lists it; "" when no public module exports it."""
    import sys

    name = cls.__name__
    if getattr(pynumabind, name, None) is cls and name in pynumabind.__all__:
        return f"pynumabind.{name}"
    for module_name, module in sorted(sys.modules.items()):
        parts = module_name.split(".")
        if parts[0] != "pynumabind" or any(part.startswith("_") for part in parts):
            continue
        if name in getattr(module, "__all__", ()) and getattr(module, name, None) is cls:
            return f"{module_name}.{name}"
    return ""


def _types_reached() -> Dict[str, List[str]]:
    """Each pynumabind class named in the public surface, transitively: where it is named."""
    import re

    # Looking the exports up imports their modules: then the classes are found.
    pending = [getattr(pynumabind, name) for name in pynumabind.__all__ if name != "__version__"]
    classes = _pynumabind_classes()
    seen = {id(surface) for surface in pending}
    reached: Dict[str, List[str]] = {}
    while pending:
        for where, text in _annotations_of(pending.pop()):
            for ident in re.findall(r"\b[A-Z]\w*", text):
                cls = classes.get(ident)
                if cls is None or ident in NOT_EXPORTED:
                    continue
                reached.setdefault(ident, []).append(where)
                if id(cls) not in seen:
                    seen.add(id(cls))
                    pending.append(cls)
    return reached


def test_every_type_in_a_public_signature_or_result_is_exported_and_documented() -> None:
    # A result holding a type no public module exports (Advice.copies, a
    # Binding's policy_read_back, what memory_on returns) leaves a user
    # nothing to annotate with and the reference nothing to link to.  The
    # walk follows results into results (Advice -> GpuCopies -> CopyCell).
    reached = _types_reached()
    assert {"KernelPolicy", "MemoryOn", "Detail", "CopyCell", "Spread"} <= set(reached), reached
    classes = _pynumabind_classes()
    homes = {name: _public_home(classes[name]) for name in reached}
    unexported = sorted(
        f"{name} (in {reached[name][0]})" for name, home in homes.items() if not home
    )
    assert unexported == [], unexported
    reference = REFERENCE.read_text(encoding="utf-8")
    undocumented = sorted(
        home
        for home in homes.values()
        if not re.search(rf"^\.\. auto(?:class|exception):: {re.escape(home)}\s*$", reference, re.M)
    )
    assert undocumented == [], f"docs/site/reference.rst lacks {undocumented}"


# ------------------------------------------------------------ every public module

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "site" / "reference.rst"
_ENTRY = re.compile(
    r"^\.\. (?:auto(?:function|class|exception|data|module)|py:(?:data|class|function|module))"
    r":: (pynumabind[\w.]*)\s*$",
    re.M,
)
# Modules that import a framework (vLLM, SGLang) and cannot be imported without it.
_NEEDS_A_FRAMEWORK = ("pynumabind.integrations.vllm", "pynumabind.integrations.sglang")


def _public_modules() -> List[str]:
    import pkgutil

    names = ["pynumabind"]
    for info in pkgutil.walk_packages(pynumabind.__path__, "pynumabind."):
        private = any(part.startswith("_") for part in info.name.split("."))
        if not private and info.name not in _NEEDS_A_FRAMEWORK:
            names.append(info.name)
    return names


_AUTOMODULE_MEMBERS = re.compile(
    r"^\.\. automodule:: (pynumabind[\w.]*)\n((?:   :[\w-]+:.*\n)+)", re.M
)


def _reference_entries() -> List[str]:
    """The reference's entries, but those in a module that needs a framework to import.

    An ``automodule`` with ``:members:`` documents its module's ``__all__``
    (autodoc's rule), but for ``:exclude-members:``.
    """
    text = REFERENCE.read_text(encoding="utf-8")
    entries = _ENTRY.findall(text)
    for module_name, options in _AUTOMODULE_MEMBERS.findall(text):
        if ":members:" not in options:
            continue
        excluded = re.search(r":exclude-members: (.*)", options)
        skip = {n.strip() for n in excluded.group(1).split(",")} if excluded else set()
        module = importlib.import_module(module_name)
        entries += [f"{module_name}.{n}" for n in module.__all__ if n not in skip]
    framework = tuple(module + "." for module in _NEEDS_A_FRAMEWORK)
    return [entry for entry in entries if not (entry + ".").startswith(framework)]


def _lookup(dotted: str) -> object:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise AssertionError(dotted)


def _is_value(found: object) -> bool:
    """A constant, compared by name: an int or a string is no one object."""
    return not (callable(found) or isinstance(found, type) or type(found).__name__ == "module")


def test_the_reference_entries_name_real_objects() -> None:
    entries = _reference_entries()
    assert len(entries) > len(pynumabind._EXPORTS), entries
    for entry in entries:
        _lookup(entry)


@pytest.mark.parametrize("module_name", _public_modules())
def test_every_public_modules_all_holds_only_documented_names(module_name: str) -> None:
    """``__all__`` of a public module is its public API: each name has a reference entry.

    A name counts as documented when the reference has an entry for the same
    object (a class or function re-exported elsewhere: ``pynumabind.Plan`` is
    ``pynumabind.model.Plan``) or, for a constant, for that module's name.
    Private modules (a part of the name starts with ``_``) are private whole.
    """
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        return
    entries = _reference_entries()
    objects = {id(_lookup(entry)) for entry in entries if not _is_value(_lookup(entry))}
    # A constant is documented under its own name, the same object (a re-export).
    values = {
        (entry.rpartition(".")[2], id(_lookup(entry)))
        for entry in entries
        if _is_value(_lookup(entry))
    }
    undocumented = []
    for name in names:
        found = getattr(module, name)
        if name == "__version__":
            continue
        documented = (
            (name, id(found)) in values
            if _is_value(found)
            else id(found) in objects or f"{module_name}.{name}" in entries
        )
        if not documented:
            undocumented.append(name)
    assert not undocumented, f"{module_name}.__all__ holds undocumented names: {undocumented}"
