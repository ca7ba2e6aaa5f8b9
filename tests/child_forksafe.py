"""Child bodies of test_forksafe.py: fork while another thread is inside pynumabind.

Each runs in a fresh interpreter (only the *first* use imports), so nothing
of pynumabind is imported at module level here.  Each forks from the main
thread and returns :func:`await_child`'s verdict on the forked child.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any, Optional


def await_child(pid: int, limit: float = 10.0) -> str:
    """``exit N`` for a child that finished within ``limit`` s; else kill it: ``DEADLOCK``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return f"exit {os.waitstatus_to_exitcode(status)}"
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "DEADLOCK"


class _PauseImport:
    """A meta-path finder that stops the import of pynumabind.binding in ``parent``."""

    def __init__(self, parent: int, paused: threading.Event, forked: threading.Event) -> None:
        self.parent, self.paused, self.forked = parent, paused, forked

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pynumabind.binding" and os.getpid() == self.parent and not self.paused.is_set():
            self.paused.set()
            self.forked.wait(2.0)


def fork_during_a_lazy_export_import() -> str:
    import pynumabind

    parent = os.getpid()
    paused, forked = threading.Event(), threading.Event()
    sys.meta_path.insert(0, _PauseImport(parent, paused, forked))
    thread = threading.Thread(target=lambda: pynumabind.bind_current_process)
    thread.start()
    paused.wait()
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            assert callable(pynumabind.bind_current_process)
            module = sys.modules["pynumabind.binding"]
            code = 0 if hasattr(module, "apply_plan") else 4  # imported whole, or not begun
        finally:
            os._exit(code)
    forked.set()
    thread.join()
    return await_child(pid)


def fork_racing_the_first_bind(delay: str) -> str:
    import pynumabind

    def bind() -> Optional[object]:
        return pynumabind.bind_current_process(0, nprocs=1, environ={}).plan

    thread = threading.Thread(target=bind)
    thread.start()
    time.sleep(float(delay))
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            code = 0 if bind() is not None else 4
        finally:
            os._exit(code)
    thread.join()
    return await_child(pid)


def fork_during_a_bind() -> str:
    import pynumabind
    from pynumabind import _apply

    assert callable(pynumabind.bind_current_process)  # imports done: only the bind itself is racing
    inside, forked = threading.Event(), threading.Event()
    original = _apply.bind_cpus

    def paused_bind_cpus(*args: Any, **kwargs: Any) -> Any:
        inside.set()
        forked.wait(2.0)
        return original(*args, **kwargs)

    _apply.bind_cpus = paused_bind_cpus
    thread = threading.Thread(
        target=lambda: pynumabind.bind_current_process(0, nprocs=1, cpus="1", environ={})
    )
    thread.start()
    inside.wait()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if os.sched_getaffinity(0) == {1} else 5)
    forked.set()
    thread.join()
    return await_child(pid)


def fork_while_a_lock_is_never_released() -> str:
    from pynumabind import _forksafe

    _forksafe.FORK_WAIT = 0.3
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with _forksafe.lock():
            taken.set()
            done.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    taken.wait()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        got = _forksafe.lock().acquire(timeout=5)
        os._exit(0 if got else 6)
    waited = time.monotonic() - started
    verdict = await_child(pid)
    done.set()
    thread.join()
    return verdict if 0.25 <= waited < 5 else f"fork waited {waited:.2f} s"
