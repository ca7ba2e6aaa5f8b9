"""Fork safety: a child forked during another thread's first bind or lazy import finishes.

Each trial runs in a fresh interpreter (only the *first* use imports), forks
from the main thread while another thread is inside pynumabind, and gives
the child a hard deadline: a child still running after it is a deadlock.
Two trials pause the other thread at a known point (an import hook, a bind
step) so they do not depend on timing; the others race for real at a few
fixed delays.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pynumabind
from pynumabind import _forksafe

TESTS_DIR = str(Path(__file__).parent)

# The parent forks, then waits for the child with a hard deadline; prints one verdict.
HARNESS = """
import os, signal, sys, threading, time
signal.alarm(60)  # this process itself never hangs the suite
sys.path.insert(0, {tests!r})

def await_child(pid, limit=10.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "exit %d" % os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "DEADLOCK"
"""


def _run(code: str) -> str:
    source = HARNESS.format(tests=TESTS_DIR) + textwrap.dedent(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    env.pop("LOCAL_RANK", None)
    result = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, env=env, timeout=90
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_a_fork_during_a_lazy_export_import_does_not_deadlock_the_child() -> None:
    # The importing thread stops inside the import of pynumabind.binding (its
    # module lock held) for up to 2 s, or until the fork is done.  Before the
    # fix the child inherited that lock held and hung on its first
    # pynumabind.bind_current_process; now the fork waits for the import.
    verdict = _run(
        """
        import pynumabind
        parent = os.getpid()
        paused, forked = threading.Event(), threading.Event()

        class Pause:
            def find_spec(self, name, path=None, target=None):
                if name == "pynumabind.binding" and os.getpid() == parent and not paused.is_set():
                    paused.set()
                    forked.wait(2.0)
                return None

        sys.meta_path.insert(0, Pause())
        thread = threading.Thread(target=lambda: pynumabind.bind_current_process)
        thread.start()
        paused.wait()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                pynumabind.bind_current_process
                module = sys.modules["pynumabind.binding"]
                code = 0 if hasattr(module, "apply_plan") else 4  # imported whole, or not begun
            finally:
                os._exit(code)
        forked.set()
        thread.join()
        print(await_child(pid))
        """
    )
    assert verdict == "exit 0"


@pytest.mark.parametrize("delay", [0.0, 0.002, 0.01, 0.03, 0.08])
def test_a_fork_racing_the_first_bind_leaves_a_child_that_can_bind(delay: float) -> None:
    # A thread does the process's first bind (lazy exports, planner, discovery,
    # libnuma, all imported on first use) while the main thread forks after
    # `delay`; the child then binds itself and must finish.
    verdict = _run(
        f"""
        import pynumabind
        bind = lambda: pynumabind.bind_current_process(0, nprocs=1, environ={{}})
        thread = threading.Thread(target=bind)
        thread.start()
        time.sleep({delay!r})
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                code = 0 if bind().plan is not None else 4
            finally:
                os._exit(code)
        thread.join()
        print(await_child(pid))
        """
    )
    assert verdict == "exit 0"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1")
def test_a_fork_during_a_bind_waits_for_it_so_the_child_is_not_half_bound() -> None:
    # The binding thread stops just before it moves the threads (for up to
    # 2 s, or until the fork is done).  A fork then must wait: the child,
    # a copy of the main thread, starts on the bound CPU, not the old mask.
    verdict = _run(
        """
        from pynumabind import _apply
        import pynumabind
        pynumabind.bind_current_process  # imports done: only the bind itself is racing
        inside, forked = threading.Event(), threading.Event()
        original = _apply.bind_cpus

        def paused_bind_cpus(*args, **kwargs):
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
        print(await_child(pid))
        """
    )
    assert verdict == "exit 0"


def test_a_fork_waits_only_so_long_for_a_lock_that_is_never_released() -> None:
    # A holder that never lets go (it cannot happen in pynumabind, but another
    # library's fork handler could arrange it) delays a fork by FORK_WAIT, not
    # for ever, and the child starts with a lock of its own.
    verdict = _run(
        """
        from pynumabind import _forksafe
        _forksafe.FORK_WAIT = 0.3
        taken, done = threading.Event(), threading.Event()

        def hold():
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
        print(verdict if 0.25 <= waited < 5 else "fork waited %.2f s" % waited)
        """
    )
    assert verdict == "exit 0"


def test_the_fork_lock_module_imports_nothing_of_pynumabind() -> None:
    # The package imports it eagerly, before any lazy import: it must stay a leaf.
    from test_layers import _package_imports

    assert _package_imports("_forksafe") == set()
    assert "_forksafe" in vars(pynumabind)
    assert _forksafe.lock() is _forksafe.lock()
