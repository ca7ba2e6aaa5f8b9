"""Sphinx configuration of pynumabind's reference site.

Built against the installed package (``pip install '.[docs]'``), never a
path hack, so the reference and the doctests describe what users install:

    sphinx-build -n -W --keep-going -b html docs/site build/site
    sphinx-build -n -W --keep-going -b doctest docs/site build/doctest

``.ci/release-checks`` runs both.
"""

from __future__ import annotations

import pynumabind

project = "pynumabind"
author = "pynumabind developers"
copyright = "pynumabind developers"  # noqa: A001
release = pynumabind.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "sphinx.ext.napoleon",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# Types from the signatures go into each entry's parameter list and return type.
autodoc_typehints = "description"
autodoc_typehints_description_target = "all"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_title = f"pynumabind {release}"

# The doctests read the snapshots the package ships (load_topology("example:NAME")),
# from any directory.
doctest_global_setup = """
import pynumabind
"""

# ------------------------------------------------------------ cross-references
#
# The build is nitpicky (``sphinx-build -n -W``): every reference must resolve.
# The docstrings name things where the code defines them
# (``pynumabind.discovery.resolve_topology``, ``bind_memory`` inside
# ``pynumabind.binding.placement``), while the reference documents each public
# name once, where users import it (``pynumabind.resolve_topology``).  So a
# reference Sphinx cannot find is looked up for real -- the object it names,
# imported -- and links to the entry that documents that same object.  Two
# kinds of target are shown as text, deliberately: private ones (a dotted part
# starts with ``_``: ``pynumabind.binding._apply``), which the site does not
# document, and the standard library's (``logging``, ``enum.Enum``).  Any
# other unresolved reference stays an error: a public name the docs mention
# must have an entry.  tests/package/test_xrefs.py checks separately that each
# reference in the source names something that exists.

import importlib
import re
import sys
from typing import Any, Dict, Optional, Tuple

_MISSING = object()


def _lookup(dotted: str) -> Any:
    """The object ``dotted`` names (a module, then attributes), or ``_MISSING``."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        except Exception:  # a module that needs a framework not installed here
            return _MISSING
        for attr in parts[cut:]:
            found = getattr(found, attr, _MISSING)
            if found is _MISSING:
                return _MISSING
        return found
    return _MISSING


def _identity(dotted: str) -> Optional[Tuple[int, str]]:
    """What ``dotted`` is: a module, class or function itself, else (owner, name)."""
    found = _lookup(dotted)
    if found is _MISSING:
        return None
    if isinstance(found, type) or callable(found) or type(found).__name__ == "module":
        return (id(found), "")
    owner, _, name = dotted.rpartition(".")
    holder = _lookup(owner) if owner else _MISSING
    return None if holder is _MISSING else (id(holder), name)


_DOCUMENTED: Dict[Tuple[int, str], Tuple[str, str]] = {}


def _documented(env: Any) -> Dict[Tuple[int, str], Tuple[str, str]]:
    if not _DOCUMENTED:
        for name, entry in env.get_domain("py").objects.items():
            key = _identity(name)
            if key is not None and key not in _DOCUMENTED:
                _DOCUMENTED[key] = (name, entry.objtype)
    return _DOCUMENTED


def _candidates(target: str, module: Optional[str], klass: Optional[str]) -> list:
    target = target.lstrip(".~")
    found = [target]
    if module and klass:
        found.append(f"{module}.{klass}.{target}")
    if module:
        found.append(f"{module}.{target}")
        package = module
        while "." in package:
            package = package.rpartition(".")[0]
            found.append(f"{package}.{target}")
    found.append(f"pynumabind.{target}")
    return found


def _text_only(target: str) -> bool:
    """Targets shown as text: private names, and the standard library's."""
    if any(part.startswith("_") and not part.startswith("__") for part in target.split(".")):
        return True
    top = target.split(".")[0]
    return top in getattr(sys, "stdlib_module_names", ()) or top in ("logging", "enum")


def _resolve_alias(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"]
    module, klass = node.get("py:module"), node.get("py:class")
    # In a docstring autodoc pulled in, the name is relative to where the
    # object is defined (its source reads "docstring of pynumabind.options.Options").
    defined = re.search(r"docstring of ([\w.]+)", node.source or "")
    if defined:
        module = defined.group(1)
    elif module and klass:  # a type in a signature: where the class is defined
        owner = _lookup(f"{module}.{klass}")
        module = getattr(owner, "__module__", module)
    documented = _documented(env)
    for candidate in _candidates(target, module, klass):
        key = _identity(candidate)
        if key is None:
            continue
        if key in documented:
            name, _objtype = documented[key]
            return env.get_domain("py").resolve_xref(
                env, node["refdoc"], app.builder, "obj", name, node, contnode
            )
        if _text_only(candidate) or _text_only(target):
            return contnode
    # Not importable as named: a private name written relative to its module
    # (``_apply.Journal`` in ``pynumabind.binding``).
    if _text_only(target):
        return contnode
    return None


def _hide_private_parameters(
    app: Any, what: str, name: str, obj: Any, options: Any, signature: Any, annotation: Any
) -> Any:
    """A parameter whose name starts with ``_`` is no caller's (``Binding(..., _undo=None)``)."""
    recorded = app.env.temp_data.get("annotations", {}).get(name, {})
    for parameter in [key for key in recorded if key.startswith("_")]:
        del recorded[parameter]  # the parameter list autodoc_typehints writes
    if not signature or "_" not in signature:
        return None
    inner = signature[1:-1]
    kept = [
        part for part in _split_parameters(inner) if not part.strip().lstrip("*").startswith("_")
    ]
    return ("(" + ", ".join(part.strip() for part in kept) + ")", annotation)


def _split_parameters(inner: str) -> list:
    """Top-level commas only: ``Dict[str, int]`` and ``f(a, b)`` defaults stay whole."""
    parts, depth, current = [], 0, ""
    for char in inner:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return parts


def _property_sentence(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list
) -> None:
    """A property's first line is a sentence, not napoleon's ``type: description``.

    ``"How many CPUs the worker now runs on: the number ..."`` would render the
    prose before the colon as the property's type; the type comes from its
    annotation.  Runs before napoleon (priority 400 < 500).
    """
    if what in ("property", "attribute") and lines:
        head, colon, rest = lines[0].partition(": ")
        if colon and " " in head.strip() and "`" not in head:
            lines[0] = f"{head} -- {rest}"


#: Where the names a module imports for type checkers only come from.
_TYPING_MODULES = ("typing", "typing_extensions", "collections.abc")


def _type_checking_names(module: Any) -> None:
    """Give ``module`` the typing names it imports under ``TYPE_CHECKING`` only.

    The bind path's modules import ``typing`` for type checkers alone (a bind
    loads none of it), and autodoc evaluates an annotation in the module's
    namespace: without these names it would print the annotation's text
    (``Optional[Plan]``) instead of what it means (``Plan | None``), as it
    does for a module that imports them.  Only names from
    :data:`_TYPING_MODULES` that are installed (``typing_extensions`` may not
    be: its names then stay unresolved, as before), only where the module
    lacks them, and only in the build's own process.
    """
    import ast

    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py") or getattr(module, "_typing_names_given", False):
        return
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        test = getattr(node, "test", None)
        if not (isinstance(node, ast.If) and isinstance(test, ast.Name)):
            continue
        if test.id != "TYPE_CHECKING":
            continue
        for statement in node.body:
            if isinstance(statement, ast.ImportFrom) and statement.module in _TYPING_MODULES:
                try:
                    source = importlib.import_module(statement.module)
                except ImportError:  # typing_extensions, where it is not installed
                    continue
                for alias in statement.names:
                    if hasattr(source, alias.name):
                        value = getattr(source, alias.name)
                        vars(module).setdefault(alias.asname or alias.name, value)
    module._typing_names_given = True


def _give_typing_names(app: Any, obj: Any, bound_method: bool) -> None:
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    if module is not None and module.__name__.startswith("pynumabind"):
        _type_checking_names(module)


def setup(app: Any) -> None:
    app.connect("autodoc-before-process-signature", _give_typing_names)
    app.connect("autodoc-process-docstring", _property_sentence, priority=400)
    app.connect("missing-reference", _resolve_alias)
    # After autodoc_typehints has recorded the annotations (priority 500).
    app.connect("autodoc-process-signature", _hide_private_parameters, priority=600)
