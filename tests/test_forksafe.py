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
from typing import Callable

import pytest

import child_forksafe
import pynumabind
from childproc import run_in_child
from pynumabind import _forksafe


def _run(trial: Callable[..., str], *args: object) -> str:
    """Run ``trial`` in a fresh interpreter without PYNUMABIND_* or LOCAL_RANK; its verdict."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    env.pop("LOCAL_RANK", None)
    verdict, _ = run_in_child(trial, *args, env=env, timeout=90)
    return verdict


def test_a_fork_during_a_lazy_export_import_does_not_deadlock_the_child() -> None:
    # The importing thread stops inside the import of pynumabind.binding (its
    # module lock held) for up to 2 s, or until the fork is done.  Before the
    # fix the child inherited that lock held and hung on its first
    # pynumabind.bind_current_process; now the fork waits for the import.
    verdict = _run(child_forksafe.fork_during_a_lazy_export_import)
    assert verdict == "exit 0"


@pytest.mark.parametrize("delay", [0.0, 0.002, 0.01, 0.03, 0.08])
def test_a_fork_racing_the_first_bind_leaves_a_child_that_can_bind(delay: float) -> None:
    # A thread does the process's first bind (lazy exports, planner, discovery,
    # libnuma, all imported on first use) while the main thread forks after
    # `delay`; the child then binds itself and must finish.
    verdict = _run(child_forksafe.fork_racing_the_first_bind, delay)
    assert verdict == "exit 0"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1")
def test_a_fork_during_a_bind_waits_for_it_so_the_child_is_not_half_bound() -> None:
    # The binding thread stops just before it moves the threads (for up to
    # 2 s, or until the fork is done).  A fork then must wait: the child,
    # a copy of the main thread, starts on the bound CPU, not the old mask.
    verdict = _run(child_forksafe.fork_during_a_bind)
    assert verdict == "exit 0"


def test_a_fork_waits_only_so_long_for_a_lock_that_is_never_released() -> None:
    # A holder that never lets go (it cannot happen in pynumabind, but another
    # library's fork handler could arrange it) delays a fork by FORK_WAIT, not
    # for ever, and the child starts with a lock of its own.
    verdict = _run(child_forksafe.fork_while_a_lock_is_never_released)
    assert verdict == "exit 0"


def test_the_fork_lock_module_imports_nothing_of_pynumabind() -> None:
    # The package imports it eagerly, before any lazy import: it must stay a leaf.
    from test_layers import _package_imports

    assert _package_imports("_forksafe") == set()
    assert "_forksafe" in vars(pynumabind)
    assert _forksafe.lock() is _forksafe.lock()
