"""Run a function in a forked child that dropped root: uid and gid ``nobody``, no capability.

What an unprivileged process may read of its own pages differs from what root
may (``/proc/self/pagemap`` hides frame numbers without ``CAP_SYS_ADMIN``), so
the tests of those reads run both ways.  A fresh interpreter cannot be the
child here: the test interpreter may sit where ``nobody`` cannot read it (a
pyenv under ``/root``), so the child is a fork of the test process, which
then gives up root (``setgroups``, ``setgid``, ``setuid``: every capability
goes with uid 0) and marks itself dumpable again, as a process that started
unprivileged is, so that its ``/proc/self`` files are its own to read
(``prctl(PR_SET_DUMPABLE, 1)``; a process that changed its ids is not
dumpable).  Used by ``tests/_os``, ``tests/binding`` and the QEMU guest.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import time
import traceback
from typing import Any, Callable

NOBODY = 65534
PR_SET_DUMPABLE = 4


def can_drop_root() -> bool:
    """Whether this process can start an unprivileged child (it is root)."""
    return os.geteuid() == 0


def drop_root(*, dumpable: bool = True) -> None:
    """In a child: become ``nobody``, with no capability (``dumpable``: as a process started so)."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    if dumpable:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 1)")


def as_nobody(function: Callable[[], Any], *, dumpable: bool = True, timeout: float = 120) -> Any:
    """``function()``'s value (JSON-able), computed in a forked child running as ``nobody``.

    An exception in the child is an AssertionError here, with its traceback.
    """
    if not can_drop_root():
        raise RuntimeError("only root can start a child that drops root")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        try:
            drop_root(dumpable=dumpable)
            answer = {"value": function()}
        except BaseException as exc:  # reported to the parent
            answer = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        data = json.dumps(answer).encode()
        while data:
            data = data[os.write(write_end, data) :]
        os._exit(0)
    os.close(write_end)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                os.kill(pid, 9)
                raise AssertionError(f"the unprivileged child ran past {timeout} s")
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    answer = json.loads(b"".join(chunks) or b"{}")
    if "error" in answer:
        raise AssertionError(f"the unprivileged child failed: {answer['error']}\n{answer['trace']}")
    if "value" not in answer:
        raise AssertionError("the unprivileged child reported nothing")
    return answer["value"]
