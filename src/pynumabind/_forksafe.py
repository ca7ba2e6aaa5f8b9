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
* The handler that waits is registered after ``logging`` is imported, so
  it runs before logging's (before-fork handlers run in reverse order of
  registration): a bind that logs while the fork waits must not find
  logging's lock taken by the forking thread.  So that ``import
  pynumabind`` need not load ``logging`` (issue 14: the bare import's
  cost), that registration happens on the first :func:`lock` call, holding
  the lock while it imports ``logging``.  A second handler, registered at
  import, covers the time before: it waits for the same lock, so a fork
  never copies a half-done first registration, and once the first handler
  holds the lock it takes it again at once (the lock is reentrant).  Each
  handler counts what it took and the parent releases exactly that.
* Lazy imports outside both (``discovery`` and ``_sysfs`` importing their
  helpers on the first direct ``detect_topology()`` call) are not covered.
"""

from __future__ import annotations

import os
import threading

__all__ = ["FORK_WAIT", "lock"]

#: Longest a fork waits for a bind or import in another thread, in seconds.
FORK_WAIT = 10.0

_lock = threading.RLock()
_held = threading.local()  # per forking thread: how many times its before-fork handlers took it
_registered = False  # the logging-ordered handler (see the module docstring)


def lock() -> threading.RLock:
    """The lock every lazy import and every bind holds (see the module docstring)."""
    if not _registered:
        _register()
    return _lock


def _register() -> None:
    """Import logging, then register the handler that runs before logging's: once."""
    global _registered  # noqa: PLW0603 - set once, here
    with _lock:  # a fork now waits (the import-time handler) until this is done
        if _registered:
            return
        import logging  # noqa: F401 - before the handler is registered; see the docstring

        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent)
        _registered = True


def _before_fork() -> None:
    if _lock.acquire(timeout=FORK_WAIT):
        _held.count = getattr(_held, "count", 0) + 1


def _after_fork_in_parent() -> None:
    if getattr(_held, "count", 0):
        _held.count -= 1
        _lock.release()


def _after_fork_in_child() -> None:
    global _lock, _held  # noqa: PLW0603 - reset in a fork child, nowhere else
    _lock = threading.RLock()
    _held = threading.local()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
