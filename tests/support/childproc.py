"""Run a test's module-level function in a fresh interpreter.

Tests that must leave the pytest process untouched (binding, seccomp,
cgroups, fork handlers) or that measure a fresh interpreter (import cost) run
their body in a child.  The body is an ordinary function in an importable
module, where ruff, mypy and an editor see it, including any internals it
patches.  The child is started as ``python tests/support/_child.py ... ROOT
tests.folder.module:function args`` (see ``_child.py``): the module is
imported by its full dotted name from the folder that holds the ``tests``
package, so its relative imports (``from ..support import childstate``) work
there as they do under pytest, whatever the working directory.  No test
passes Python source text to a child, and package/test_child_sources.py
fails if one does again.

Arguments reach the function as strings (a child parses what it needs).  A
function returns a JSON-able value (or None); :func:`run_in_child` returns it
with the child's stderr, where its log records go.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child.py")


def target_of(func: Callable[..., Any]) -> Tuple[str, str]:
    """(import root, ``dotted.module:name``) of a module-level function; TypeError otherwise.

    The import root is the folder above the module's top package, found from
    its file and its dotted name (``/repo/tests/binding/child_binding.py``
    imported as ``tests.binding.child_binding`` -> ``/repo``).
    """
    module = sys.modules.get(getattr(func, "__module__", ""))
    name = getattr(func, "__qualname__", "")
    if module is None or not callable(func) or getattr(module, name, None) is not func:
        raise TypeError(f"{func!r} is not a module-level function a child can import")
    path = getattr(module, "__file__", None)
    if path is None:
        raise TypeError(f"{func!r} is defined in {module.__name__}, which has no file")
    path = os.path.abspath(path)
    module_name = module.__name__
    if module_name == "__main__":  # pragma: no cover - tests are imported
        module_name = os.path.splitext(os.path.basename(path))[0]
    parts = module_name.split(".")
    if os.path.basename(path) == "__init__.py":
        parts.append("__init__")
    root = path[: -len(".py")]
    for part in reversed(parts):
        head, tail = os.path.split(root)
        if tail != part:
            raise TypeError(f"{module_name} is not importable by that name from {path}")
        root = head
    return root, f"{module_name}:{name}"


def child_command(
    func: Callable[..., Any],
    *args: object,
    flags: Sequence[str] = (),
    alarm: int = 60,
) -> List[str]:
    """The argv that runs ``func(*args)`` in a fresh interpreter (``flags`` first).

    ``alarm``: seconds until the child dumps its stacks and dies; 0 for none
    (a function that execs another program: the alarm would outlive the exec).
    """
    folder, target = target_of(func)
    return [sys.executable, *flags, ENTRY, str(alarm), folder, target, *map(str, args)]


def run_in_child(
    func: Callable[..., Any],
    *args: object,
    env: Optional[Mapping[str, str]] = None,
    preexec_fn: Optional[Callable[[], None]] = None,
    stdin: Optional[str] = None,
    timeout: float = 120,
    flags: Sequence[str] = (),
) -> Tuple[Any, str]:
    """Run ``func(*args)`` in a child; return (what it returned, its stderr).

    A child that fails, or returns None, is an AssertionError with its output.
    """
    child_env: Dict[str, str] = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    proc = subprocess.run(
        child_command(func, *args, flags=flags, alarm=max(1, int(timeout) - 10)),
        input=stdin,
        capture_output=True,
        text=True,
        env=child_env,
        preexec_fn=preexec_fn,
        timeout=timeout,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise AssertionError(
            f"child failed (rc {proc.returncode})\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return json.loads(lines[-1]), proc.stderr


def bare_env() -> Dict[str, str]:
    """The environment for a child run with ``-S`` (no site: no ``.pth`` file preloads
    anything): this process's, with the package's source and the site directories
    (for cffi) on ``PYTHONPATH`` instead."""
    import site

    import pynumabind

    source = str(os.path.dirname(os.path.dirname(os.path.abspath(pynumabind.__file__))))
    paths = [source, *site.getsitepackages(), site.getusersitepackages()]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if os.path.isdir(p))}
