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
* The handler is registered after ``logging`` is imported, so it runs
  before logging's (before-fork handlers run in reverse order of
  registration): a bind that logs while the fork waits must not find
  logging's lock taken by the forking thread.
* Lazy imports outside both (``discovery`` and ``_sysfs`` importing their
  helpers on the first direct ``detect_topology()`` call) are not covered.
"""

from __future__ import annotations

import logging  # noqa: F401 - imported before the fork handler is registered; see above
import os
import threading

__all__ = ["FORK_WAIT", "lock"]

#: Longest a fork waits for a bind or import in another thread, in seconds.
FORK_WAIT = 10.0

_lock = threading.RLock()
_held = threading.local()  # per forking thread: whether its before-fork handler got the lock


def lock() -> threading.RLock:
    """The lock every lazy import and every bind holds (see the module docstring)."""
    return _lock


def _before_fork() -> None:
    _held.value = _lock.acquire(timeout=FORK_WAIT)


def _after_fork_in_parent() -> None:
    if getattr(_held, "value", False):
        _held.value = False
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
