"""Which pynumabind modules a module imports, read from its source (lazy imports too).

The layer test (``package/test_layers.py``) and the tests that check one
module's imports share this scan.  An ``import`` statement at any depth
counts, a function-level one as much as a top-level one; the bodies of
``if TYPE_CHECKING:`` do not run, so their imports do not count.  Relative
imports resolve from the importing module's package, and ``from X import
name`` counts as an import of the module ``X.name`` where that is a module,
else of ``X``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, FrozenSet, List, Mapping, Optional, Set

import pynumabind

PACKAGE = Path(pynumabind.__file__).parent

#: Modules made when the package is built (cffi's out-of-line module), absent
#: from a source tree; ``_os.libnuma`` falls back without it.
BUILT: FrozenSet[str] = frozenset({"_libnuma_ffi"})


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def all_modules() -> Dict[str, Path]:
    """Every module of the package, subpackages included (source files only)."""
    return {_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _package_of(module: str, path: Path) -> str:
    """The package ``module``'s relative imports start from ('' for the top)."""
    if path.name == "__init__.py":
        return "" if module == "__init__" else module
    return module.rpartition(".")[0]


def _resolve(dotted: str, known: Set[str]) -> Optional[str]:
    """The module ``dotted`` names: itself, else the module holding it as an attribute."""
    while dotted:
        if dotted in known:
            return dotted
        dotted = dotted.rpartition(".")[0]
    return "__init__"  # an attribute of the package itself (``from . import __version__``)


def package_imports(
    module: str, modules: Optional[Mapping[str, Path]] = None, *, lazy: bool = True
) -> Set[str]:
    """Every pynumabind module ``module``'s source imports, at any depth (TYPE_CHECKING aside).

    ``lazy=False``: only those its import runs, not those inside a function's body.
    """
    modules = all_modules() if modules is None else modules
    known = set(modules) | BUILT
    path = modules[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _package_of(module, path)
    found: Set[str] = set()
    for node in runtime_nodes(tree, functions=lazy):
        targets: List[str] = []
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".") if package else []
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            prefix = ".".join([*base, node.module] if node.module else base)
            targets = [f"{prefix}.{a.name}" if prefix else a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pynumabind."):
            prefix = (node.module or "")[len("pynumabind.") :]
            targets = [f"{prefix}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [
                a.name[len("pynumabind.") :] for a in node.names if a.name.startswith("pynumabind.")
            ]
        for target in targets:
            resolved = _resolve(target, known)
            if resolved is not None:
                found.add(resolved)
    found.discard(module)
    return found


def runtime_nodes(tree: ast.AST, *, functions: bool = True) -> List[ast.AST]:
    """Every node that can run: ``if TYPE_CHECKING:`` bodies (type-only imports) left out.

    ``functions=False`` leaves out the bodies of functions too: what runs when
    the module is imported.
    """
    out: List[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            todo.extend(node.orelse)
            continue
        if not functions and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            todo.extend(node.decorator_list)  # run when the function is made
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out
