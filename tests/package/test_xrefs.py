"""Every cross-reference in the package's docstrings and comments names something that exists.

The site renders the public modules only, so a ``:mod:`` or ``:func:`` in a
private module, or one naming a private module, is checked by nothing else:
a module moved or renamed leaves it pointing nowhere.  Here each Python-domain
role (``:mod:``, ``:func:``, ``:class:``, ``:meth:``, ``:attr:``, ``:data:``,
``:exc:``, ``:obj:``, ``:const:``; ``:py:func:`` alike) in a docstring, an
attribute's docstring or a comment under ``src/pynumabind`` is resolved for
real: the modules imported, attributes looked up on them, a class's members
on the class (its annotated fields, and what its methods set on ``self``,
as Sphinx's analyzer finds instance attributes).  A role outside the Python
domain and reST's own (``:ref:``, ``:envvar:`` ...) fails as unknown: a
misspelt one would otherwise be passed over.

Resolution is Sphinx's Python domain, read strictly:

* the title goes: ``~x.y`` and ``text <x.y>`` name ``x.y``; ``f()`` names
  ``f``; ``!x`` is no link and is not checked;
* ``x.y`` (no leading dot): the full name ``x.y`` (where it is an importable
  one), then ``x.y`` in the module the text sits in, then in the class it sits
  in; a lone name may be a built-in (``RuntimeWarning``).  ``:mod:`` takes full
  names only, as Sphinx does;
* ``.x``: in the class the text sits in, then the module, then the module's
  package; each further dot one package up, as a relative import reads
  (``..x`` in ``pynumabind.binding._apply`` is ``pynumabind.x``).  Sphinx would
  then search every name ending in ``.x``; that is how a stale one hid, so
  this does not;
* a module on the way must be reached by its own name: ``._threads`` in a
  module that did ``from .._os import threads as _threads`` names that module
  under a name that is no module's, and fails;
* the object must suit the role: ``:mod:`` a module and only it, ``:exc:`` an
  exception class, ``:class:`` a class, ``:func:`` and ``:meth:`` something
  callable.

A module that cannot be imported here because a framework it hooks is not
installed (``integrations.vllm`` without vLLM) is read from its source
instead: the names it defines or imports at the top, and its classes'
members.  References to other modules from its text are still resolved for
real.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import io
import re
import sys
import sysconfig
import textwrap
import tokenize
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Dict, FrozenSet, Iterator, List, Optional, Tuple

import pytest

import pynumabind
from pynumabind.errors import ConfigError

PACKAGE = Path(pynumabind.__file__).parent

#: The Python domain's roles: these are resolved.
PYTHON_ROLES = frozenset(
    {"mod", "func", "class", "meth", "attr", "data", "exc", "obj", "const", "type"}
)

#: Roles of other domains or of reST itself: not Python names, not checked.
OTHER_ROLES = frozenset(
    {"ref", "doc", "term", "envvar", "rfc", "pep", "manpage", "option", "program", "file",
     "samp", "kbd", "math", "abbr", "command", "download", "numref", "sub", "sup"}
)  # fmt: skip

_ROLE = re.compile(r":(?:py:)?([a-z]+):`([^`]+)`")
_TITLED = re.compile(r"^(.*?)\s*<([^<>]+)>$", re.S)


@dataclass(frozen=True)
class Reference:
    """One role in the text of ``module`` (dotted, ``pynumabind.x``)."""

    module: str
    scope: Tuple[str, ...]  # the classes the text sits in, outermost first
    role: str
    text: str  # between the backticks, as written
    line: int

    def where(self) -> str:
        return f"{self.module}:{self.line}: :{self.role}:`{self.text}`"


# ------------------------------------------------------------ reading the text


@cache
def all_modules() -> Dict[str, Path]:
    """Every module of the package by its dotted name under it (``__init__`` for the top)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        out[".".join(parts)] = path
    return out


def _class_scopes(tree: ast.AST) -> Iterator[Tuple[ast.AST, Tuple[str, ...]]]:
    """Every node with the classes it sits in (a class's own docstring is in the class)."""
    todo: List[Tuple[ast.AST, Tuple[str, ...]]] = [(tree, ())]
    while todo:
        node, scope = todo.pop()
        yield node, scope
        inner = (*scope, node.name) if isinstance(node, ast.ClassDef) else scope
        todo.extend((child, inner) for child in ast.iter_child_nodes(node))


def _scope_at(classes: List[Tuple[int, int, Tuple[str, ...]]], line: int) -> Tuple[str, ...]:
    inside = [scope for first, last, scope in classes if first <= line <= last]
    return max(inside, key=len, default=())


def _texts(source: str) -> Iterator[Tuple[int, Tuple[str, ...], str]]:
    """(first line, class scope, text) of every string statement and comment block."""
    tree = ast.parse(source)
    classes = []
    for node, scope in _class_scopes(tree):
        if isinstance(node, ast.ClassDef):
            classes.append((node.lineno, node.end_lineno or node.lineno, (*scope, node.name)))
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):  # docstrings, attribute docstrings
            yield node.lineno, scope, node.value.value
    block: List[str] = []
    start = last = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        if block and line != last + 1:
            yield start, _scope_at(classes, start), "\n".join(block)
            block = []
        if not block:
            start = line
        block.append(token.string.lstrip("#").lstrip(":"))
        last = line
    if block:
        yield start, _scope_at(classes, start), "\n".join(block)


def references(module: str, source: str) -> List[Reference]:
    """Every role in ``source``, the text of ``module``."""
    found = []
    for first, scope, text in _texts(source):
        for match in _ROLE.finditer(text):
            line = first + text.count("\n", 0, match.start())
            found.append(Reference(module, scope, match.group(1), match.group(2), line))
    return sorted(found, key=lambda ref: ref.line)


def target_of(ref: Reference) -> Optional[str]:
    """The name a role links to, as Sphinx reads its text; None for no link (``!x``)."""
    text = " ".join(ref.text.split())
    titled = _TITLED.match(text)
    target = titled.group(2) if titled else text.lstrip("~")
    if target.startswith("!"):
        return None
    return target[:-2] if target.endswith("()") else target


# ------------------------------------------------------------ resolving a name


class _Static:
    """A name read from the source of a module that cannot be imported here."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "class", "function" or "name"


class _Field:
    """A class's field known from its annotations only, or an attribute set on ``self``."""


_FIELD = _Field()

#: What :func:`lookup` finds where there is nothing (None is a value a name may hold).
NOTHING = object()
_UNIMPORTABLE: Dict[str, str] = {}  # module of the package -> why it cannot be imported


def _static_names(module: str) -> Dict[str, object]:
    """A module's top-level names and its classes' members, read from its source."""
    path = all_modules()[module[len("pynumabind.") :] or "__init__"]
    tree = ast.parse(path.read_text(encoding="utf-8"))

    def names(body: List[ast.stmt], prefix: str) -> Dict[str, object]:
        out: Dict[str, object] = {}
        for node in body:
            if isinstance(node, ast.ClassDef):
                out[prefix + node.name] = _Static("class")
                out.update(names(node.body, f"{prefix}{node.name}."))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[prefix + node.name] = _Static("function")
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        out[prefix + target.id] = _Static("name")
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and not prefix:
                for alias in node.names:
                    out[alias.asname or alias.name.split(".")[0]] = _Static("name")
        return out

    return names(tree.body, "")


def _import(name: str) -> Optional[ModuleType]:
    """The module ``name``; None if there is none.

    LookupError for a module of the package that cannot be imported here
    because a framework it hooks is not installed (it raises ConfigError
    naming it, or ModuleNotFoundError for the framework's module).
    """
    ours = name.startswith("pynumabind.") and name.partition(".")[2] in all_modules()
    if name in _UNIMPORTABLE:
        raise LookupError(_UNIMPORTABLE[name])
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if name == missing or name.startswith(missing + "."):
            return None  # no such module
        if missing.startswith("pynumabind") or not name.startswith("pynumabind."):
            raise  # a broken import, not an absent framework
        why = str(exc)
    except ConfigError as exc:
        if not name.startswith("pynumabind."):
            raise
        why = str(exc)
    if not ours:
        return None  # a name inside a module that failed: a shorter cut reaches it
    _UNIMPORTABLE[name] = why
    raise LookupError(why)


def _instance_attributes(klass: type) -> FrozenSet[str]:
    """What a class's own methods assign to ``self.NAME``: its instances' attributes.

    Read from the class's source, as Sphinx's analyzer reads them; a class
    with no source here (a built-in) has none.
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError):
        return frozenset()
    found = set()
    for method in ast.walk(tree):
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or not method.args.args:
            continue
        self_name = method.args.args[0].arg
        for node in ast.walk(method):
            targets: List[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == self_name
                ):
                    found.add(target.attr)
    return frozenset(found)


def _member(owner: object, name: str) -> object:
    """``owner.name``: an attribute, or a class's field or instance attribute.

    A field known from the class's annotations only (a dataclass field with no
    default), or an attribute its methods set on ``self``, is :data:`_FIELD`.
    AttributeError if there is none.
    """
    try:
        return getattr(owner, name)
    except AttributeError:
        if isinstance(owner, type):
            for klass in owner.__mro__:
                if name in vars(klass).get("__annotations__", {}):
                    return _FIELD
                if name in _instance_attributes(klass):
                    return _FIELD
        raise


def _standard(top: str) -> bool:
    """Whether ``top`` is a module of the standard library."""
    names = getattr(sys, "stdlib_module_names", None)  # Python 3.10+
    if names is not None:
        return top in names
    if top in sys.builtin_module_names:
        return True
    spec = importlib.util.find_spec(top)
    stdlib = sysconfig.get_paths()["stdlib"]
    return bool(spec and spec.origin and spec.origin.startswith(stdlib))


def lookup(path: str) -> Tuple[object, str]:
    """The object at the full name ``path``, or :data:`NOTHING` and why not.

    Only the package's names and the standard library's: a name elsewhere
    (a test folder on ``sys.path`` is a namespace package) is not a link.
    """
    parts = path.split(".")
    if parts[0] not in ("pynumabind", "builtins") and not _standard(parts[0]):
        return NOTHING, f"{parts[0]} is neither pynumabind nor the standard library"
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        try:
            obj: object = _import(head)
        except LookupError:  # a module whose framework is not installed: its source
            static = _static_names(head)
            rest = ".".join(parts[cut:])
            if not rest:
                return _Static("module"), ""
            return (static[rest], "") if rest in static else (NOTHING, f"{head} has no {rest}")
        if obj is None:
            continue
        for at in range(cut, len(parts)):
            try:
                obj = _member(obj, parts[at])
            except AttributeError:
                return NOTHING, f"{'.'.join(parts[:at])} has no {parts[at]}"
            walked = ".".join(parts[: at + 1])
            if inspect.ismodule(obj) and obj.__name__ != walked:
                return NOTHING, f"{walked} is {obj.__name__} under another name"
        return obj, ""
    return NOTHING, f"no module {parts[0]}"


def _package(module: str) -> str:
    """The package ``module``'s relative names start from (itself, for a package)."""
    path = all_modules()[module[len("pynumabind.") :] or "__init__"]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def candidates(ref: Reference, target: str) -> List[str]:
    """The full names ``target`` may mean where ``ref`` sits, in the order they are tried."""
    name = target.lstrip(".")
    dots = len(target) - len(name)
    here = ref.module
    in_class = [f"{here}.{'.'.join(ref.scope[:n])}.{name}" for n in range(len(ref.scope), 0, -1)]
    if dots == 0:
        if ref.role == "mod":
            return [name]
        lone = [] if "." in name else [f"builtins.{name}"]
        return [name, f"{here}.{name}", *in_class, *lone]
    package = _package(here)
    for _ in range(dots - 1):
        package = package.rpartition(".")[0]
    if dots == 1:
        return list(dict.fromkeys([*in_class, f"{here}.{name}", f"{package}.{name}"]))
    return [f"{package}.{name}"] if package else []


def _suits(role: str, obj: object) -> bool:
    """Whether ``obj`` is what ``role`` links to."""
    if isinstance(obj, _Static):
        kind = {"mod": "module", "class": "class", "exc": "class"}.get(role)
        return obj.kind == kind if kind == "module" else kind is None or obj.kind in (kind, "name")
    if role == "mod":
        return inspect.ismodule(obj)
    if inspect.ismodule(obj):
        return False
    if role == "exc":
        return isinstance(obj, type) and issubclass(obj, BaseException)
    if role == "class":
        return isinstance(obj, type)
    if role in ("func", "meth"):
        return callable(obj) and obj is not _FIELD
    return True


def problem(ref: Reference) -> Optional[str]:
    """What is wrong with ``ref``, or None when it resolves."""
    if ref.role in OTHER_ROLES:
        return None
    if ref.role not in PYTHON_ROLES:
        return f"{ref.where()}: a role this check does not know"
    target = target_of(ref)
    if target is None:
        return None
    tried = []
    for full in candidates(ref, target):
        obj, why = lookup(full)
        if obj is NOTHING:
            tried.append(why)
            continue
        if _suits(ref.role, obj):
            return None
        tried.append(f"{full} is no {ref.role} ({type(obj).__name__})")
    return f"{ref.where()}: nothing of that name ({'; '.join(dict.fromkeys(tried))})"


def _package_references() -> List[Reference]:
    out = []
    for name, path in all_modules().items():
        module = "pynumabind" if name == "__init__" else f"pynumabind.{name}"
        out += references(module, path.read_text(encoding="utf-8"))
    return out


# ------------------------------------------------------------ the package


def test_every_cross_reference_in_the_package_resolves() -> None:
    refs = _package_references()
    assert len(refs) > 500  # the scan reads the docstrings at all
    stale = [found for found in map(problem, refs) if found]
    assert not stale, "\n".join(stale)


def test_a_module_that_needs_an_absent_framework_is_read_from_its_source() -> None:
    # vLLM is installed only in CI's framework lanes: elsewhere its module
    # cannot be imported, and its own names are read from its source.
    obj, why = lookup("pynumabind.integrations.vllm.Worker")
    assert obj is not NOTHING, why
    assert lookup("pynumabind.integrations.vllm.NoSuchWorker")[0] is NOTHING


# ------------------------------------------------------------ the check can fail

_PLANTED = '''"""A module's docstring.

Fine: :mod:`.._os.threads`, :func:`~pynumabind._os.threads.bind_threads`,
:class:`the plan <pynumabind.model.Plan>`, :func:`format_ids`, :exc:`ValueError`,
:meth:`Binding.verify() <pynumabind.binding.Binding.verify>`, :attr:`.Plan.cpus`.

Stale: :mod:`._proc`, :func:`._threads.bind_threads`, :mod:`.._options`,
:class:`NoSuchThing`, :func:`pynumabind.binding.Skipped.nothing`, :mod:`binding`,
:attr:`ThreadMasks.ends`; :fnuc:`format_ids` is no role.  Fine: :attr:`ThreadMasks.starts`.
"""


class Journal:
    """Wrong kinds: :mod:`pynumabind.errors.format_ids`, :exc:`pynumabind.model.Plan`,
    :func:`pynumabind.model.Plan.cpus`.  Fine: :meth:`.rollback`, :class:`!Anything`."""

    def rollback(self) -> None:
        pass

    # :data:`._forksafe` in a comment: stale too.
'''


def test_a_planted_stale_reference_fails_and_the_good_ones_pass() -> None:
    # Read as if it sat in binding._apply: the names resolve against the real
    # module (its Journal, its imports), not against this text.
    refs = references("pynumabind.binding._apply", _PLANTED)
    found = {f":{ref.role}:`{ref.text}`": problem(ref) for ref in refs}
    fine = {
        ":mod:`.._os.threads`",
        ":func:`~pynumabind._os.threads.bind_threads`",
        ":class:`the plan <pynumabind.model.Plan>`",
        ":func:`format_ids`",
        ":exc:`ValueError`",
        ":meth:`Binding.verify() <pynumabind.binding.Binding.verify>`",
        ":attr:`.Plan.cpus`",
        ":attr:`ThreadMasks.starts`",  # set in __init__
        ":meth:`.rollback`",
        ":class:`!Anything`",
    }
    stale = {
        ":mod:`._proc`",
        ":func:`._threads.bind_threads`",
        ":mod:`.._options`",
        ":class:`NoSuchThing`",
        ":func:`pynumabind.binding.Skipped.nothing`",
        ":mod:`binding`",  # :mod: takes full names only
        ":attr:`ThreadMasks.ends`",
        ":fnuc:`format_ids`",
        ":mod:`pynumabind.errors.format_ids`",
        ":exc:`pynumabind.model.Plan`",
        ":func:`pynumabind.model.Plan.cpus`",
        ":data:`._forksafe`",
    }
    assert set(found) == fine | stale
    assert {text: found[text] for text in fine} == dict.fromkeys(fine)
    assert all(found[text] for text in stale), found
    assert "under another name" in str(found[":func:`._threads.bind_threads`"])
    assert "a role this check does not know" in str(found[":fnuc:`format_ids`"])
    # The line is the line of the role, in docstrings and comments alike.
    lines = _PLANTED.splitlines()
    expected = [n + 1 for n, line in enumerate(lines) if "._proc" in line or "._forksafe" in line]
    assert [ref.line for ref in refs if ref.text in ("._proc", "._forksafe")] == expected
    # ``.rollback`` in the class's docstring is the class's own.
    assert next(ref.scope for ref in refs if ref.text == ".rollback") == ("Journal",)


def test_the_package_s_stale_references_would_be_caught_if_planted() -> None:
    # The real text of a real module, one reference made stale.
    source = all_modules()["binding._apply"].read_text(encoding="utf-8")
    assert not [p for p in map(problem, references("pynumabind.binding._apply", source)) if p]
    planted = source.replace('"""', '""":mod:`._no_such_module`. ', 1)
    stale = [p for p in map(problem, references("pynumabind.binding._apply", planted)) if p]
    assert len(stale) == 1 and "_no_such_module" in stale[0], stale


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("~pynumabind.model.Plan", "pynumabind.model.Plan"),
        ("the plan <pynumabind.model.Plan>", "pynumabind.model.Plan"),
        ("a title that\n   runs on <pynumabind.model.Plan>", "pynumabind.model.Plan"),
        ("f()", "f"),
        ("!x", None),
    ],
)
def test_the_title_is_read_as_sphinx_reads_it(text: str, target: Optional[str]) -> None:
    assert target_of(Reference("pynumabind", (), "func", text, 1)) == target
