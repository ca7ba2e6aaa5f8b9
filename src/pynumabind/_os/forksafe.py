"""Fork safety: a child forked while another thread binds or imports never hangs.

The danger: pynumabind imports most of itself on first use (the lazy
exports, the planner and discovery inside a bind, ``pynvml``).  A thread
importing a module holds that module's import lock; a child forked at that
moment inherits the lock held by a thread that does not exist there, and
the child's own first use of the same module waits for ever.  A child forked
in the middle of a bind would also inherit half-applied state.

The rules:

* One process-wide reentrant lock, :func:`lock`, is held by every lazy
  export import (``pynumabind.X`` the first time), by every bind (detect,
  plan, apply: binds in one process are serialised by it) and by the import
  of ``pynvml``.  Nothing done under it forks or starts a process.
* A fork waits until no other thread holds it (an ``os.register_at_fork``
  *before* handler), so the child sees every import finished or not begun
  and every bind done or not begun.  The child starts with a fresh lock.
* The wait is bounded by :data:`FORK_WAIT` seconds.  If the holder itself
  waits for something the forking thread holds (only another library's own
  fork handler could arrange that), the fork goes ahead after it, as it
  would have without pynumabind.  The handler logs nothing: logging's own
  locks are taken around the fork.
* ``import pynumabind``, and a bind that has nothing to say, load no
  ``logging`` (it and what it loads are several milliseconds of a bare
  interpreter's first bind): the bind path logs through :class:`Logger`,
  which drops a DEBUG or INFO record while nothing has loaded ``logging``
  (nothing can have configured it then) and imports ``logging``, holding the
  lock, to say a warning.
* The one *before* handler is registered at import, so it runs *after*
  logging's whenever logging was loaded later (before-fork handlers run in
  reverse order of registration): the forking thread may already hold
  logging's lock when it comes to wait.  The thread holding this lock may
  need logging's to go on (logging's own import takes it, and so does a
  bind that logs), so the handler lets logging's lock go while it waits and
  takes it back before the fork goes on.  Without that, a fork that began
  while a warning was importing logging under the lock (after logging had
  registered its handlers) waited out :data:`FORK_WAIT`, and the child then
  hung on the half-done import.  The handler counts what it took and the
  parent releases exactly that.
* A module imported while a fork waits must not register fork handlers of
  its own: the fork took its list of *before* handlers when it began, and
  the *after* ones when the child exists, so a pair registered in between
  runs only its *after* half -- ``logging``'s releases a lock it never took
  and prints ``RuntimeError: cannot release un-acquired lock`` in the
  parent.  ``logging``, the one module imported under the lock
  that registers such a pair, gets its *before* half run here: when a
  warning imported ``logging`` while this fork waited (``logging``
  was not loaded when this module was, is loaded now, and the forking
  thread does not hold its lock), the waiting handler takes logging's lock
  for it, which logging's own *after* handlers then release.  Nothing else
  imported under the lock (pynumabind's own modules, the standard library
  modules they load, ``cffi`` and ``pynvml``) registers a *before* or
  *after-in-parent* handler; ``tests/_os/test_forksafe.py`` records every
  registration made through the public entry points and fails on a new one.
  A framework's own modules (vLLM, SGLang, torch) are never imported under
  the lock: they may register such handlers, and making their imports
  fork-safe is theirs.
* **Every public entry point that imports or loads holds the lock** for
  its whole call (:func:`guarded`, or a ``with lock():``): the lazy exports,
  ``bind_current_process``, ``apply_plan``, ``Binding.verify`` and
  ``restore``, the topology sources (``detect_topology``,
  ``topology_from_sysfs``, ``load_topology``, ``resolve_topology``) and the
  framework helpers (``integrations.bind_gpu``/``bind_gpus``/
  ``bind_visible_gpus``, ``gate``).  So a fork racing any of them, from any
  thread, waits for its imports, its libnuma/NVML loading and its changes to
  the process.  An ``import pynumabind.x`` statement is the caller's own
  import and, as for any module, is not covered.
"""

from __future__ import annotations

import os
import sys

# _thread, not threading: a bare ``import pynumabind`` loads this module, and
# threading (with functools, collections and more) would be most of its cost.
# threading.RLock and threading.local are these very types.
from _thread import RLock as _RLock
from _thread import _local

# Not ``from typing import TYPE_CHECKING``: a bare ``import pynumabind``
# loads this module and must not load typing (several milliseconds).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    import logging
    import threading
    from typing import Any, Callable, List, Optional, Tuple, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["DEBUG", "FORK_WAIT", "INFO", "WARNING", "Logger", "guarded", "lock"]

#: Longest a fork waits for a bind or import in another thread, in seconds.
FORK_WAIT = 10.0

_lock = _RLock()
_held = _local()  # per forking thread: how many times its before-fork handlers took it
#: Whether ``logging`` was loaded after this module, so that its fork
#: handlers run before the one registered below (see :func:`_before_fork`).
_LOGGING_AFTER_US = "logging" not in sys.modules


def lock() -> threading.RLock:
    """The lock every lazy import and every bind holds (see the module docstring)."""
    return _lock


def guarded(func: F) -> F:
    """``func``, called holding :func:`lock`: for a public entry point that imports or loads."""

    def call(*args: Any, **kwargs: Any) -> Any:
        with lock():
            return func(*args, **kwargs)

    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(call, name, getattr(func, name, None))
    call.__dict__.update(getattr(func, "__dict__", {}))
    call.__wrapped__ = func  # type: ignore[attr-defined]  # inspect.signature follows it
    return call  # type: ignore[return-value]


#: logging's levels (``logging.DEBUG``...), for :class:`Logger`'s callers, without logging.
DEBUG, INFO, WARNING = 10, 20, 30


class Logger:
    """A logger of the bind path that imports ``logging`` only when it must say something.

    ``logging`` and what it loads (``traceback``, ``string``, ``re`` and more)
    are several milliseconds of a bare interpreter's first bind.  While
    nothing has imported ``logging``, nothing can have configured it: no
    handler, the root logger at WARNING, so a DEBUG or INFO record would be
    dropped, and this logger drops it without the import.  A WARNING or
    above is said as ``logging`` says it (its last-resort handler, on
    stderr), so ``logging`` is imported for it -- under :func:`lock`, the one
    import of ``logging`` the fork handlers here expect to meet.  Once
    ``logging`` is loaded, by anyone, every call goes to
    ``logging.getLogger(name)``, the caller's file and line in the record.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def _logger(self, level: int) -> Optional[logging.Logger]:
        if "logging" not in sys.modules:
            if level < WARNING:
                return None
            with lock():
                import logging
        else:
            import logging  # loaded: a dictionary lookup (or a wait for an import under way)
        if _when_loaded:
            _run_when_loaded()
        return logging.getLogger(self.name)

    def isEnabledFor(self, level: int) -> bool:
        logger = self._logger(level)
        return logger is not None and logger.isEnabledFor(level)

    def _say(self, level: int, message: str, args: Tuple[Any, ...]) -> None:
        logger = self._logger(level)
        if logger is not None and logger.isEnabledFor(level):
            # the caller's frame: past this method and the public one below
            logger.log(level, message, *args, stacklevel=3)

    def debug(self, message: str, *args: Any) -> None:
        self._say(DEBUG, message, args)

    def info(self, message: str, *args: Any) -> None:
        self._say(INFO, message, args)

    def warning(self, message: str, *args: Any) -> None:
        self._say(WARNING, message, args)


#: What :func:`when_logging_loads` was given, until a :class:`Logger` runs it.
_when_loaded: List[Callable[[], None]] = []


def when_logging_loads(configure: Optional[Callable[[], None]]) -> None:
    """Run ``configure`` once, before a :class:`Logger` here first hands a record to ``logging``.

    For the command line, whose quiet ``exec`` sets up its stderr handler
    only when there is something to say (``pynumabind.cli._configure_logging``).
    It runs in the thread about to log, once ``logging`` is loaded, holding
    :func:`lock` where that thread holds it (a warning during a bind), as any
    logging call there does; ``None`` forgets what was given.  One at a time:
    a second call replaces the first.
    """
    _when_loaded[:] = [] if configure is None else [configure]


def _run_when_loaded() -> None:
    try:
        configure = _when_loaded.pop()
    except IndexError:  # another thread ran it
        return
    configure()


def _take(timeout: float) -> bool:
    """Take the lock for this fork within ``timeout`` s (0: only if free); count it."""
    if _lock.acquire(timeout=timeout):
        _held.count = getattr(_held, "count", 0) + 1
        return True
    return False


def _before_fork() -> None:
    """The before-fork handler: take the lock, holding no lock of logging's while it waits."""
    if not _take(0):
        _wait_without_logging_lock()
    if _LOGGING_AFTER_US:
        _take_logging_lock()


def _logging_lock() -> Tuple[Any, Optional[bool]]:
    """logging's module lock (``None`` before logging is loaded) and whether this
    thread holds it (``None``: cannot tell).  Never raises: an at-fork handler's
    exception is printed, not raised."""
    module = sys.modules.get("logging")
    lock = getattr(module, "_lock", None)
    owned = getattr(lock, "_is_owned", None)
    try:
        return lock, None if owned is None else bool(owned())
    except Exception:
        return lock, None


def _wait_without_logging_lock() -> None:
    """Take the lock for this fork (:data:`FORK_WAIT` at most), holding no lock of logging's.

    When logging's fork handlers were registered after this module's (its
    import finished, or got that far, after ``import pynumabind``), its
    *before* handler has run by now and this thread holds logging's lock.
    The thread that holds :func:`lock` may need that lock to go on: to
    finish importing logging (the module makes its last-resort handler,
    which takes the lock) or to log from a bind.  Waiting while holding it
    would stall both for :data:`FORK_WAIT`, and the fork would then copy a
    half-done import.  So logging's lock is let go for the wait and taken
    back, as many times as it was held, before the fork goes on.
    """
    lock, held = _logging_lock()
    saved = None
    if held:
        try:
            saved = lock._release_save()
        except Exception:  # an at-fork handler must not raise: wait holding it
            held = False
    try:
        _take(FORK_WAIT)
    finally:
        if held:
            lock._acquire_restore(saved)


def _take_logging_lock() -> None:
    """Run logging's own *before* half when it was registered while this fork waited.

    logging's handlers were registered after this one (``_LOGGING_AFTER_US``),
    so had this fork seen them, logging's *before* handler would already
    have run, and this thread would hold logging's lock.  If it does not,
    they came too late for the *before* list but will be in the *after*
    ones, which release the lock: take it, as logging's *before* does.
    Never raises (an at-fork handler's exception is printed, not raised);
    when in doubt it takes nothing.
    """
    lock, held = _logging_lock()
    try:
        if held is False:
            lock.acquire(timeout=FORK_WAIT)
    except Exception:  # noqa: S110 - an at-fork handler must not print
        pass


def _after_fork_in_parent() -> None:
    if getattr(_held, "count", 0):
        _held.count -= 1
        _lock.release()


def _after_fork_in_child() -> None:
    global _lock, _held  # noqa: PLW0603 - reset in a fork child, nowhere else
    _lock = _RLock()
    _held = _local()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
